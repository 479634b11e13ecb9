"""The WebSocket transport (server side): an ASGI ``websocket`` scope on the MCP endpoint, subprotocol
``mcp``, one JSON-RPC message per text frame.

A connection is a :class:`~mcp_trio._transport.connection.MessageConnection` (the transport-neutral core
that stdio uses) whose frames come from ASGI ``websocket.receive`` events and go out as
``websocket.send`` events.  It owns one Trio nursery: its writer and every handler.  The end of the
connection (the client's close frame, a dropped TCP connection, a protocol violation, the server's
shutdown) cancels that nursery, so no handler or server-to-client request outlives it; nothing more is
written for a request once the connection is gone.

Refusals happen before the upgrade is accepted, with an HTTP answer (ASGI's ``websocket.http.response``
extension; a server without it gets a plain ``websocket.close``, which it answers 403): 404 off the
endpoint, the ``Host``/``Origin`` checks (421/403), the bearer check (401/403), 400 without the ``mcp``
subprotocol, 503 past ``max_sessions`` connections or while shutting down.  After it, a binary frame
closes the connection with 1003, a message longer than ``max_body_size`` with 1009, and a connection
that carries nothing (see :meth:`WebSocketConnection._watch_quiet`) with 1000.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from .._observe.telemetry import WEBSOCKET
from .._runtime.peerlog import RateLimitedLog
from .config import ServerConfig
from .connection import MessageConnection
from .core import ServerCore
from .modern import ModernEndpoint
from .wire import Receive, Send

__all__ = ["SUBPROTOCOL", "WebSocketConnection", "http_response_send"]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)
"""What peers do wrong (or too slowly): one line each, at most ten a minute."""

SUBPROTOCOL = "mcp"
"""The subprotocol every MCP WebSocket client asks for (``Sec-WebSocket-Protocol: mcp``)."""

NORMAL = 1000
GOING_AWAY = 1001
UNSUPPORTED_DATA = 1003
MESSAGE_TOO_BIG = 1009


class WebSocketConnection(MessageConnection):
    """One accepted MCP WebSocket connection, served over its ASGI ``receive``/``send``."""

    carrier = WEBSOCKET

    def __init__(
        self,
        server: ServerCore,
        config: ServerConfig,
        endpoint: ModernEndpoint | None,
        receive: Receive,
        send: Send,
    ) -> None:
        super().__init__(server, config, endpoint)
        self._receive = receive
        self._send = send
        self.close_code: int | None = None
        """Why the connection ends: None while it runs (or when the client went away: nothing to send),
        else the close code to send once everything of it has ended."""
        self.close_reason = ""
        self._peer_gone = False
        self._reading = trio.CancelScope()
        self._heard = False
        self._last_heard = trio.current_time()
        self.ended = trio.Event()
        """Set once the connection has ended (its close frame sent, if the client was there)."""

    def stop(self, code: int = GOING_AWAY, reason: str = "server shutting down") -> None:
        """End the connection gracefully (the server's shutdown, or a connection that carries nothing):
        a new request is answered -32000 ``Server shutting down`` at once; the requests in flight get
        ``shutdown_grace`` to finish (the client's notifications and answers are still read), then
        those still running are cancelled and each is answered -32000; then reading stops, what is
        queued is flushed within ``shutdown_grace``, and the close frame goes out."""
        self._close(code, reason)
        if self.stopping:
            return
        self.stopping = True
        if self._nursery is None or self.closing:  # not serving yet, or ending already
            self._reading.cancel()
        else:
            self._nursery.start_soon(self._wind_down, name="mcp websocket shutdown")

    async def _wind_down(self) -> None:
        await self.settle(self.config.shutdown_grace)
        self._reading.cancel()

    async def _watch_quiet(self) -> None:
        """Close a connection that carries nothing: no message within ``init_timeout`` of opening, or,
        once it has spoken, neither a 2025 session (initialized: it waits for the server's
        notifications, like a standalone GET stream) nor a request in flight for ``idle_timeout``."""
        while True:
            limit = self.config.idle_timeout if self._heard else self.config.init_timeout
            deadline = self._last_heard + limit  # both may have moved while this task slept
            if trio.current_time() < deadline:
                await trio.sleep_until(deadline)
            elif self.initialized or self._running:
                self._last_heard = trio.current_time()  # busy: look again one period later
            else:
                peer_log.log(logging.INFO, "closing a WebSocket connection quiet for %s s", limit)
                self.stop(NORMAL, "idle")
                return

    async def _read_loop(self) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(self._watch_quiet, name="mcp websocket quiet watch")
        with self._reading:
            while True:
                message = await self._receive()
                self._heard = True
                self._last_heard = trio.current_time()
                kind = message.get("type")
                if kind == "websocket.disconnect":
                    self._peer_gone = True
                    return
                if kind != "websocket.receive":
                    continue
                text = message.get("text")
                if text is None:
                    self._close(UNSUPPORTED_DATA, "MCP messages are text frames")
                    return
                data = text.encode()
                if len(data) > self.max_message:
                    peer_log.log(
                        logging.WARNING,
                        "closing a WebSocket that sent a message over %d bytes",
                        self.max_message,
                    )
                    self._close(MESSAGE_TOO_BIG, f"message longer than {self.max_message} bytes")
                    return
                await self.receive_message(data)

    def _close(self, code: int, reason: str) -> None:
        """The close code to send at the end (the first reason given wins)."""
        if self.close_code is None:
            self.close_code, self.close_reason = code, reason

    async def _shutdown(self) -> None:
        """The connection ends: every request of it is cancelled at once (nobody is left to answer, or
        the server is going away); what is already queued is flushed within ``shutdown_grace`` unless the
        client has gone."""
        self.closing = True
        for call in list(self._inflight.values()):
            call.cancel()
        if self._peer_gone:
            return  # run() cancels the writer with the nursery
        self._queue_send.close()
        with trio.move_on_after(self.config.shutdown_grace):
            await self._writer_done.wait()

    async def _transmit(self, messages: list[bytes]) -> None:
        for message in messages:
            await self._send({"type": "websocket.send", "text": message.decode()})

    async def serve(self) -> None:
        """Run the accepted connection to its end, then send the close frame (if the client is there)."""
        try:
            await self.run()
        finally:
            if not self._peer_gone:
                code = self.close_code if self.close_code is not None else NORMAL
                with trio.CancelScope(shield=True), trio.move_on_after(self.config.shutdown_grace):
                    try:
                        close = {"type": "websocket.close", "code": code, "reason": self.close_reason}
                        await self._send(close)
                    except Exception as exc:  # the server has dropped the connection already
                        logger.debug("WebSocket close not sent: %r", exc)
            self.ended.set()


def http_response_send(scope: dict[str, Any], send: Send) -> Send | None:
    """A send taking ``http.response.*`` messages and writing them as the ``websocket.http.response``
    extension's (an HTTP answer instead of the upgrade), or None when the server does not offer it."""
    extensions = scope.get("extensions") or {}
    if "websocket.http.response" not in extensions:
        return None

    async def send_http(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":  # the connection ends with the refusal: say so
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send({**message, "type": "websocket." + message["type"]})

    return send_http
