"""The client side of the WebSocket transport, on wsproto over a Trio stream: subprotocol ``mcp``, one
JSON-RPC message per text frame, on the message transport that stdio shares.

The connection is owned here, from the TCP (or TLS) stream up: the handshake (a refusal is a
:class:`TransportError` naming the HTTP status, and the socket is closed), the reader (pings answered,
a message longer than ``max_message_size`` ends the connection with 1009 before it is buffered whole),
and the close handshake at the end, bounded in time.  No extension (permessage-deflate) is offered.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .._observe.telemetry import Carrier
from ..errors import TransportError
from .messages import MessageTransport
from .wire import OnMessage

__all__ = ["SUBPROTOCOL", "WebSocketTransport"]

logger = logging.getLogger(__name__)

SUBPROTOCOL = "mcp"
_RECEIVE_SIZE = 64 * 1024
_REFUSAL_BODY = 4096
"""How much of a refusal's body is kept for the error message."""

_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class WebSocketTransport(MessageTransport):
    """One WebSocket connection to an MCP server (made by :meth:`connect`)."""

    gone_message = "the WebSocket connection has closed"

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection, max_message_size: int) -> None:
        super().__init__()
        self._stream = stream
        self._ws = ws
        self.max_message_size = max_message_size
        self._frame_lock = trio.Lock()  # the writer of messages and the reader's pongs
        self._server_closed = False
        self._reader_done: trio.Event | None = None
        self._shut = False
        self.close_code: int | None = None
        """The code of the server's close frame, once it sent one."""

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_message_size: int,
    ) -> WebSocketTransport:
        """Open the connection and do the handshake (bound it with ``trio.fail_after``)."""
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise TransportError(f"not a ws:// or wss:// URL: {url!r}")
        secure = parts.scheme == "wss"
        host = parts.hostname
        port = parts.port or (443 if secure else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        name = f"[{host}]" if ":" in host else host
        host_header = name if port == (443 if secure else 80) else f"{name}:{port}"
        try:
            stream: trio.abc.Stream
            if secure:
                context = ssl_context or ssl.create_default_context()
                stream = await trio.open_ssl_over_tcp_stream(
                    host, port, ssl_context=context, https_compatible=True
                )
            else:
                stream = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise TransportError(f"could not open a WebSocket connection to {url}: {exc}") from exc
        ws = WSConnection(ConnectionType.CLIENT)
        try:
            extra = [(key.encode(), value.encode()) for key, value in (headers or {}).items()]
            request = Request(
                host=host_header, target=target, subprotocols=[SUBPROTOCOL], extra_headers=extra
            )
            await stream.send_all(ws.send(request))
            accepted = await _handshake(stream, ws, url)
            if accepted.subprotocol != SUBPROTOCOL:
                raise TransportError(f"the server at {url} did not accept the {SUBPROTOCOL!r} subprotocol")
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            if isinstance(exc, (*_STREAM_ERRORS, RemoteProtocolError)):
                raise TransportError(f"the WebSocket handshake with {url} failed: {_reason(exc)}") from exc
            raise
        transport = cls(stream, ws, max_message_size)
        transport.carrier = Carrier("tcp", "websocket", host, port)
        return transport

    async def _send_raw(self, data: bytes) -> None:
        if self._ws.state is not ConnectionState.OPEN:
            raise TransportError(self.gone_message)
        await self._frame(TextMessage(data=data.decode()))

    async def _frame(self, event: object) -> None:
        async with self._frame_lock:
            try:
                data = self._ws.send(event)  # type: ignore[arg-type]
            except LocalProtocolError as exc:  # closing already
                raise TransportError(self.gone_message) from exc
            try:
                await self._stream.send_all(data)
            except _STREAM_ERRORS as exc:
                raise TransportError(f"{self.gone_message} ({exc!r})") from exc

    async def read_loop(self, on_message: OnMessage, *, task_status: trio.TaskStatus[None]) -> None:
        """Read messages until the connection closes; then every waiting request fails promptly."""
        done = self._reader_done = trio.Event()
        task_status.started()
        try:
            await self._read(on_message)
        except TransportError as exc:
            logger.info("the WebSocket connection failed: %s", exc)
        finally:
            self._end()
            done.set()

    async def _read(self, on_message: OnMessage | None) -> None:
        """Frames in until the server's close frame or the end of the stream; with ``on_message`` None
        (closing), messages are dropped."""
        parts: list[str | bytes] = []
        size = 0
        while True:
            for event in self._ws.events():
                if isinstance(event, Message):
                    size += len(event.data)
                    if size > self.max_message_size:
                        logger.warning("a message over %d bytes from the server", self.max_message_size)
                        await self._close(1009, "message too big")
                        return
                    parts.append(event.data)
                    if event.message_finished:
                        whole, parts, size = parts, [], 0
                        if isinstance(event, BytesMessage):
                            logger.info("the server sent a binary message; ignored")
                        elif on_message is not None:
                            await self.route("".join(whole), on_message)  # type: ignore[arg-type]
                elif isinstance(event, Ping):
                    if self._ws.state is ConnectionState.OPEN:
                        await self._frame(event.response())
                elif isinstance(event, CloseConnection):
                    self.close_code = event.code
                    self._server_closed = True
                    if self._ws.state is ConnectionState.REMOTE_CLOSING:
                        await self._frame(event.response())
                    elif self._ws.state is ConnectionState.OPEN:  # a frame wsproto refused (1002, 1007)
                        await self._close(event.code, "invalid frame")
                    logger.info("the server closed the WebSocket (%s %s)", event.code, event.reason)
                    return
            try:
                data = await self._stream.receive_some(_RECEIVE_SIZE)
            except _STREAM_ERRORS:
                data = b""
            if not data:
                return
            self._ws.receive_data(bytes(data))

    async def _close(self, code: int, reason: str) -> None:
        if self._ws.state is ConnectionState.OPEN:
            await self._frame(CloseConnection(code=code, reason=reason))

    async def aclose(self, grace: float) -> None:
        """The close handshake (our close frame, the server's in answer), within ``grace`` seconds;
        then the socket is closed.  Once only: later calls return at once."""
        if self._shut:
            return
        self._shut = True
        with trio.CancelScope(shield=True):
            with trio.move_on_after(grace):
                if self._reader_done is not None:  # cancelled with the session: it ends at once
                    await self._reader_done.wait()
                try:
                    await self._close(1000, "")
                    if not self._server_closed:
                        await self._read(None)
                except TransportError:
                    pass
            await trio.aclose_forcefully(self._stream)
            self._end()


async def _handshake(stream: trio.abc.Stream, ws: WSConnection, url: str) -> AcceptConnection:
    refusal: RejectConnection | None = None
    body = b""
    while True:
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                return event
            if isinstance(event, RejectConnection):
                refusal = event
                if not event.has_body:
                    raise _refused(url, refusal, body)
            elif isinstance(event, RejectData) and refusal is not None:
                body = (body + event.data)[:_REFUSAL_BODY]
                if event.body_finished:
                    raise _refused(url, refusal, body)
        data = await stream.receive_some(_RECEIVE_SIZE)
        if not data:
            if refusal is not None:
                raise _refused(url, refusal, body)
            raise TransportError(f"the server at {url} closed the connection during the WebSocket handshake")
        ws.receive_data(bytes(data))


def _reason(exc: BaseException) -> str:
    """What went wrong, where trio's error has no text of its own (a TLS failure is its cause)."""
    return str(exc) or str(exc.__cause__ or "") or repr(exc)


def _refused(url: str, refusal: RejectConnection, body: bytes) -> TransportError:
    text = body[:200].decode("utf-8", "replace")
    message = f"the server refused the WebSocket upgrade: HTTP {refusal.status_code} {text}"
    return TransportError(message.rstrip())
