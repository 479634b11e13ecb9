"""The client side of a message transport: one connection that carries whole JSON-RPC messages (a stdio
line, a WebSocket text frame), shared by the stdio and WebSocket transports.

``post`` writes a message; a reader task (in the session's nursery) hands each message read to
:meth:`MessageTransport.route`: a response to the request waiting for it, anything else to the session.
When the reader ends (end of file, a closed connection), every request still waiting fails at once.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import trio

from .._observe.telemetry import PIPE, Carrier
from ..errors import TransportError
from .wire import OnMessage, peer_log, read_message

__all__ = ["MessageTransport"]

logger = logging.getLogger(__name__)


class MessageTransport:
    """One message connection to a server.  A subclass writes (:meth:`_send_raw`) and reads (its
    ``read_loop`` calls :meth:`route` for each message and :meth:`_end` when the input ends)."""

    session_id: str | None = None
    gone_message = "the server has gone"
    carrier: Carrier = PIPE
    """How the messages travel (the telemetry's ``network.*`` and ``server.*`` attributes)."""

    def __init__(self) -> None:
        self.protocol_version: str | None = None
        self.modern = False
        self._waiting: dict[Any, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._write_lock = trio.Lock()
        self._closed = False

    async def post(self, message: dict[str, Any], on_message: OnMessage) -> dict[str, Any] | None:
        """Send ``message``; for a request, wait for its response (what else arrives goes to the session)."""
        if self._closed:
            raise TransportError(self.gone_message)
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
                raise TransportError(f"{self.gone_message} before answering") from None
        finally:
            self._waiting.pop(expect, None)

    async def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        async with self._write_lock:
            await self._send_raw(data)

    async def _send_raw(self, data: bytes) -> None:
        """Write one encoded message (raise :class:`TransportError` when the connection is gone)."""
        raise NotImplementedError

    async def read_loop(self, on_message: OnMessage, *, task_status: trio.TaskStatus[None]) -> None:
        """Read messages until the input ends, :meth:`route` each, then :meth:`_end`; run in the
        session's nursery."""
        raise NotImplementedError

    async def route(self, data: bytes | str, on_message: OnMessage) -> None:
        """One message read: a response to its waiting request, anything else to ``on_message``."""
        message = read_message(data, None, "a message")  # its size is bounded by the transport
        if message is None:
            return
        waiter = self._waiting.get(message.get("id")) if "method" not in message else None
        if waiter is not None:
            try:
                waiter.send_nowait(message)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                # a second response to the same request (the first one won)
                peer_log(logging.INFO, "message-dup", "the server answered request %r twice", message["id"])
        else:
            await on_message(message)

    def _end(self) -> None:
        """The input has ended: nothing more will be answered."""
        self._closed = True
        for waiter in self._waiting.values():
            waiter.close()

    async def listen_get(self, on_message: OnMessage, ready: trio.Event) -> None:
        ready.set()  # no standalone stream: the read loop carries everything

    async def delete(self) -> None:
        """Ending such a session is ending the connection (the transport's ``aclose``)."""
