"""WebSocket on the embedded HTTP/1.1 server (serve_h11): the upgrade handshake on h11, then frames with
wsproto's sans-IO connection, offered to the app as an ASGI ``websocket`` scope.

One :class:`H11WebSocket` serves one upgraded request.  It owns the socket from the handshake on: a
reader task (frames in, pings answered, a message longer than the app's ``max_body_size`` closed with
1009 before it is buffered whole), a pinger (a ping every ``keepalive_interval``, so idle connections
stay open through proxies), and the app's sends; every write goes through one lock and the connection's
``write_timeout``, and a write that fails or times out ends the connection (the app then receives
``websocket.disconnect``).  Messages read wait in a small queue: while the app does not take them, the
socket is not read.  No extension (permessage-deflate) is negotiated.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import h11
import trio
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, TextMessage
from wsproto.utilities import LocalProtocolError, generate_accept_token

from .._runtime.peerlog import RateLimitedLog

__all__ = ["H11WebSocket", "is_websocket_upgrade"]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)

_RECEIVE_SIZE = 64 * 1024
_QUEUED = 8
"""Whole messages read ahead of the app; then the socket is left unread (the client's sends block)."""
CLOSE_WAIT = 2.0
"""After the server's close frame, how long the client gets to answer it before the socket closes."""


def is_websocket_upgrade(request: h11.Request) -> bool:
    if request.method != b"GET":
        return False
    return any(name == b"upgrade" and b"websocket" in value.lower() for name, value in request.headers)


class H11WebSocket:
    """One WebSocket upgrade on an h11 connection, run as an ASGI ``websocket`` call of ``app``."""

    def __init__(
        self,
        conn: h11.Connection,
        stream: trio.SocketStream,
        write: Callable[[bytes], Awaitable[None]],
        gone: type[Exception],
        *,
        max_message: float,
        ping_interval: float,
    ) -> None:
        self.conn = conn
        self.stream = stream
        self._write_raw = write
        self._gone_error = gone
        self.max_message = max_message
        self.ping_interval = ping_interval
        self._ws: Connection | None = None
        self._lock = trio.Lock()
        self._in_send, self._in_receive = trio.open_memory_channel[dict[str, Any]](_QUEUED)
        self._connected = False
        self._gone = False
        self._close_sent = False
        self._peer_closed = trio.Event()
        self._pending_response: dict[str, Any] | None = None
        self._answered = False
        self._io = trio.CancelScope()
        """The reader's and the pinger's scope: cancelled when the socket fails."""
        self._app_done = False

    # -- the call ---------------------------------------------------------------------------------

    async def serve(
        self,
        app: Callable[[dict[str, Any], Any, Any], Awaitable[None]],
        request: h11.Request,
        client: Any,
        server: Any,
    ) -> None:
        headers = list(request.headers)
        problem = self._check_handshake(headers)
        if problem is not None:
            await self._plain_response(400, problem.encode())
            return
        target = request.target
        path, _, query = target.partition(b"?")
        scope = {
            "type": "websocket",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode(),
            "scheme": "ws",
            "path": unquote(path.decode("latin-1")),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": client,
            "server": server,
            "subprotocols": _subprotocols(headers),
            "extensions": {"websocket.http.response": {}},
        }
        self._key = _header(headers, b"sec-websocket-key")
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await app(scope, self._receive, self._send)
                self._app_done = True
                self._in_receive.close()  # what the client still sends is dropped
                if self._ws is not None and not self._gone:
                    if not self._close_sent:  # the app ended without closing
                        await self._emit(CloseConnection(code=1011, reason="the server ended the connection"))
                    with trio.move_on_after(CLOSE_WAIT):  # the client's close frame, then the socket closes
                        await self._peer_closed.wait()
            finally:
                nursery.cancel_scope.cancel()
        if self._ws is None and not self._answered:  # the app ended without answering the upgrade
            await self._plain_response(500, b"")

    def _check_handshake(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        if _header(headers, b"sec-websocket-version") != b"13":
            return "Bad Request: WebSocket version 13 is required"
        key = _header(headers, b"sec-websocket-key")
        try:
            if key is None or len(base64.b64decode(key, validate=True)) != 16:
                return "Bad Request: a Sec-WebSocket-Key of 16 bytes in base64 is required"
        except binascii.Error:
            return "Bad Request: a Sec-WebSocket-Key of 16 bytes in base64 is required"
        tokens = (_header(headers, b"connection") or b"").lower().split(b",")
        if not any(token.strip() == b"upgrade" for token in tokens):
            return "Bad Request: Connection: Upgrade is required"
        while True:  # the request must end here: an upgrade carries no body
            event = self.conn.next_event()
            if isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                break
            if not isinstance(event, h11.Data) or event.data:
                return "Bad Request: a WebSocket upgrade has no body"
        if self.conn.their_state is not h11.MIGHT_SWITCH_PROTOCOL:  # type: ignore[attr-defined]
            return "Bad Request: not an upgrade request"
        return None

    async def _receive(self) -> dict[str, Any]:
        if not self._connected:
            self._connected = True
            return {"type": "websocket.connect"}
        if self._ws is None:
            await trio.sleep_forever()  # nothing is read before the upgrade is accepted
        try:
            return await self._in_receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return {"type": "websocket.disconnect", "code": 1006}

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "websocket.accept":
            await self._accept(message)
        elif kind == "websocket.send":
            if self._ws is None:
                raise RuntimeError("ASGI: websocket.send before websocket.accept")
            data = message.get("bytes")
            event: Any = BytesMessage(data=bytes(data)) if data is not None else TextMessage(message["text"])
            await self._emit(event)
        elif kind == "websocket.close":
            if self._ws is None:
                await self._plain_response(403, b"")
            else:
                code = int(message.get("code") or 1000)
                await self._emit(CloseConnection(code=code, reason=message.get("reason") or ""))
        elif kind == "websocket.http.response.start":
            if self._ws is not None or self._answered:
                raise RuntimeError("ASGI: websocket.http.response.start after the handshake")
            self._pending_response = message
        elif kind == "websocket.http.response.body":
            start = self._pending_response
            if start is None:
                raise RuntimeError("ASGI: websocket.http.response.body before its start")
            self._pending_response = None
            headers = list(start.get("headers", ()))
            await self._http_response(start["status"], headers, message.get("body", b""))
        else:
            raise RuntimeError(f"ASGI: unexpected message {kind!r}")

    # -- handshake ---------------------------------------------------------------------------------

    async def _accept(self, message: dict[str, Any]) -> None:
        if self._ws is not None or self._answered:
            raise RuntimeError("ASGI: websocket.accept twice")
        assert self._key is not None
        headers = [
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-accept", generate_accept_token(self._key)),
        ]
        subprotocol = message.get("subprotocol")
        if subprotocol:
            headers.append((b"sec-websocket-protocol", subprotocol.encode()))
        headers.extend((bytes(n), bytes(v)) for n, v in message.get("headers", ()))
        self._answered = True
        switch = h11.InformationalResponse(status_code=101, headers=headers, reason=b"Switching Protocols")
        data = self.conn.send(switch)
        trailing, _ = self.conn.trailing_data
        self._ws = Connection(ConnectionType.SERVER, trailing_data=bytes(trailing))
        await self._write(data or b"")
        if self._gone:
            return
        self._nursery.start_soon(self._io_tasks)

    async def _io_tasks(self) -> None:
        with self._io:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read)
                if self.ping_interval > 0:
                    nursery.start_soon(self._ping)

    async def _http_response(self, status: int, headers: list[Any], body: bytes) -> None:
        self._answered = True
        headers = [(bytes(n), bytes(v)) for n, v in headers if bytes(n).lower() != b"connection"]
        headers.append((b"connection", b"close"))
        try:
            data = self.conn.send(h11.Response(status_code=status, headers=headers))
            data = (data or b"") + (self.conn.send(h11.Data(data=body)) or b"") if body else (data or b"")
            data += self.conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            logger.error("ASGI app broke HTTP/1.1 refusing a WebSocket (%s)", exc)
            return
        await self._write(data)

    async def _plain_response(self, status: int, body: bytes) -> None:
        headers = [(b"content-length", str(len(body)).encode())]
        if body:
            headers.append((b"content-type", b"text/plain"))
        await self._http_response(status, headers, body)

    # -- frames ------------------------------------------------------------------------------------

    async def _read(self) -> None:
        """Frames in: whole messages to the app (bounded), pings answered, the close handshake."""
        ws = self._ws
        assert ws is not None
        parts: list[Any] = []
        size = 0
        discarding = False  # after a message too big: the rest is dropped until the client's close
        while True:
            for event in ws.events():
                if isinstance(event, Message):
                    if discarding:
                        continue
                    data = event.data
                    size += len(data.encode()) if isinstance(data, str) else len(data)  # bytes, as the app
                    if size > self.max_message:
                        peer_log.log(
                            logging.INFO, "closing a WebSocket sending over %d bytes", self.max_message
                        )
                        discarding = True
                        await self._emit(CloseConnection(code=1009, reason="message too big"))
                        self._end(1009)
                        continue
                    parts.append(event.data)
                    if event.message_finished:
                        message: dict[str, Any] = {"type": "websocket.receive"}
                        if isinstance(event, TextMessage):
                            message["text"] = "".join(parts)
                        else:
                            message["bytes"] = b"".join(parts)
                        parts, size = [], 0
                        try:
                            await self._in_send.send(message)
                        except (trio.ClosedResourceError, trio.BrokenResourceError):
                            discarding = True  # the app is done with the connection
                elif isinstance(event, Ping):
                    await self._emit(event.response())
                elif isinstance(event, CloseConnection):
                    if ws.state is ConnectionState.REMOTE_CLOSING:
                        await self._emit(event.response())
                    elif ws.state is ConnectionState.OPEN:  # a frame wsproto refused (1002, 1007)
                        await self._emit(CloseConnection(code=event.code, reason="invalid frame"))
                    self._peer_closed.set()
                    self._end(event.code)
                    return
            try:
                data = await self.stream.receive_some(_RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                self._gone = True
                self._peer_closed.set()
                self._end(1006)
                return
            ws.receive_data(data)

    def _end(self, code: int) -> None:
        """No more messages: the app receives ``websocket.disconnect`` after those queued."""
        try:
            self._in_send.send_nowait({"type": "websocket.disconnect", "code": code})
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        self._in_send.close()

    async def _ping(self) -> None:
        while not self._close_sent and not self._gone:
            await trio.sleep(self.ping_interval)
            await self._emit(Ping())

    async def _emit(self, event: Any) -> None:
        """One frame out, under the write lock; nothing after the close frame or once the socket failed."""
        ws = self._ws
        if ws is None or self._gone or self._close_sent:
            return
        async with self._lock:
            if self._gone or self._close_sent:
                return
            try:
                data = ws.send(event)
            except LocalProtocolError:
                return
            if isinstance(event, CloseConnection):
                self._close_sent = True
            await self._write(data)

    async def _write(self, data: bytes) -> None:
        try:
            await self._write_raw(data)
        except self._gone_error:
            self._gone = True
            self._io.cancel()
            self._end(1006)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value.strip()
    return None


def _subprotocols(headers: list[tuple[bytes, bytes]]) -> list[str]:
    found: list[str] = []
    for key, value in headers:
        if key == b"sec-websocket-protocol":
            found.extend(p.strip().decode("latin-1") for p in value.split(b",") if p.strip())
    return found
