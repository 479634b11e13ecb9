"""The client side of the stdio transport: start a server as a child process and talk to it over its
stdin and stdout (newline-delimited JSON-RPC), on the message transport that WebSocket shares."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence

import trio

from ..errors import TransportError
from .messages import MessageTransport
from .wire import OnMessage

__all__ = ["StdioTransport"]

logger = logging.getLogger(__name__)
MAX_LINE = 4 * 1024 * 1024


class StdioTransport(MessageTransport):
    """One child process: a message is a line on its stdin / stdout."""

    gone_message = "the server process has exited"

    def __init__(self, process: trio.Process) -> None:
        super().__init__()
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout

    async def _send_raw(self, data: bytes) -> None:
        try:
            await self._stdin.send_all(data + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise TransportError("the server process closed its stdin") from exc

    async def read_loop(self, on_message: OnMessage, *, task_status: trio.TaskStatus[None]) -> None:
        """Read the child's stdout until EOF (or a line over 4 MiB); then every waiting request fails
        promptly."""
        task_status.started()
        buffer = b""
        try:
            while True:
                chunk = await self._stdout.receive_some(65536)
                if not chunk:
                    return
                buffer += chunk
                if len(buffer) > MAX_LINE and b"\n" not in buffer:
                    # as over WebSocket: the connection ends (waiting requests fail), not the session block
                    logger.warning("the server sent a line over %d bytes: the connection is closed", MAX_LINE)
                    self.gone_message = "the server process sent a line over 4 MiB; its output is closed"
                    return
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    await self.route(line, on_message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            self._end()

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
