"""The client side of the stdio transport: start a server as a child process and talk to it over its
stdin and stdout (newline-delimited JSON-RPC)."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from .http import OnMessage, TransportError

__all__ = ["StdioTransport"]

logger = logging.getLogger(__name__)
MAX_LINE = 4 * 1024 * 1024


class StdioTransport:
    """One child process.  ``post`` writes a line; a reader task (in the session's nursery) routes each
    line read: responses to the request waiting for them, everything else to the session."""

    session_id: str | None = None

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.protocol_version: str | None = None
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._waiting: dict[Any, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._on_message: OnMessage | None = None
        self._write_lock = trio.Lock()
        self._closed = False

    async def post(
        self,
        message: dict[str, Any],
        on_message: OnMessage,
        *,
        extra_headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | None:
        if self._closed:
            raise TransportError("the server process has exited")
        expect = message.get("id") if "method" in message else None
        if expect is None:
            await self._write(message)
            return None
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[expect] = send
        try:
            await self._write(message)
            try:
                return await receive.receive()
            except trio.EndOfChannel:
                raise TransportError("the server process exited before answering") from None
        finally:
            self._waiting.pop(expect, None)

    async def _write(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._write_lock:
            try:
                await self._stdin.send_all(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise TransportError("the server process closed its stdin") from exc

    async def read_loop(self, on_message: OnMessage, *, task_status: trio.TaskStatus[None]) -> None:
        """Read the child's stdout until EOF; then every waiting request fails promptly."""
        task_status.started()
        buffer = b""
        try:
            while True:
                chunk = await self._stdout.receive_some(65536)
                if not chunk:
                    return
                buffer += chunk
                if len(buffer) > MAX_LINE and b"\n" not in buffer:
                    raise TransportError("the server sent a line over 4 MiB")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    await self._route(line, on_message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            self._closed = True
            for waiter in self._waiting.values():
                waiter.close()

    async def _route(self, line: bytes, on_message: OnMessage) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            logger.info("the server wrote a line that is not JSON: %.100r", line)
            return
        if not isinstance(message, dict):
            return
        waiter = self._waiting.get(message.get("id")) if "method" not in message else None
        if waiter is not None:
            waiter.send_nowait(message)
        else:
            await on_message(message)

    async def listen_get(self, on_message: OnMessage, *, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()  # stdio has no standalone stream: the read loop carries everything

    async def delete(self) -> None:
        """Ending a stdio session is ending the process (see ``aclose``)."""

    async def aclose(self, grace: float) -> None:
        """Close the child's stdin (the stdio way to say goodbye), wait ``grace`` seconds, then terminate,
        then kill."""
        with trio.CancelScope(shield=True):
            await self._stdin.aclose()
            with trio.move_on_after(grace):
                await self.process.wait()
                return
            self.process.terminate()
            with trio.move_on_after(grace):
                await self.process.wait()
                return
            self.process.kill()
            await self.process.wait()


async def start_process(command: Sequence[str], env: Mapping[str, str] | None) -> trio.Process:
    return await trio.lowlevel.open_process(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(env) if env is not None else None,
    )
