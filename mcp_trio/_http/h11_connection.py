"""One client connection of the embedded HTTP/1.1 server (:mod:`.h11_server`): one serving task, and
its socket reader.

- h11 parses requests; the app is called in the connection's task (no task per request);
- one reader task per connection (:mod:`.h11_reader`) alone reads the socket and feeds h11; bytes a
  client pipelines are kept for h11's next cycle;
- ``receive()`` hands out the request body, then waits for the client to go: end of file (or a reset)
  is ``http.disconnect``;
- the ``mcp_trio.disconnect_callback`` extension: when the client goes after its request body was read
  and before the response is whole, the reader calls the app's callback (the app then needs no task
  watching ``receive()``) and nothing more is sent;
- ``send()`` writes each ASGI message as it comes (so SSE events flush at once), except that the head
  waits for the first body message and goes out with it in one write; a response whose whole body is
  in its first message gets a ``content-length`` instead of chunked framing;
- a send to a client that has gone is dropped (as hypercorn does); the app sees the disconnect through
  ``receive()``;
- after an answer sent before the request body was all read (413, 4xx, 408) or a parse error, the
  close lingers (:mod:`.linger`), so that the close does not reset the connection under the answer;
- an idle connection closes after ``keep_alive_timeout``, a head not whole ``read_timeout`` after its
  first byte (until then it may be shed: :mod:`.h11_limits`); heads are limited to ``max_head_size``;
- a WebSocket upgrade is handed to :mod:`.h11_websocket` (wsproto); the connection ends with it.

What clients do wrong is logged through :data:`peer_log` (one line each, at most ten a minute, no
traceback); a failure of the app ends its request (a 500 if nothing was sent yet) and the connection.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from http import HTTPStatus
from math import inf
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import h11
import trio

from .._runtime.containment import contained
from .._runtime.contract import CANCELLABLE_SEND, DISCONNECT_CALLBACK, DisconnectHook
from .._runtime.peerlog import RateLimitedLog
from .h11_reader import RAW_FD_IO, SocketReader
from .h11_websocket import H11WebSocket, is_websocket_upgrade
from .linger import half_close, linger_and_close

if TYPE_CHECKING:
    from .h11_limits import ConnectionLimits
    from .h11_server import H11Config

__all__ = ["H11Connection", "peer_log"]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)
"""What clients do wrong (malformed requests, slow reading): one line per kind and interval."""

_DISCONNECT = {"type": "http.disconnect"}
_VERSIONS = {b"1.1": "1.1", b"1.0": "1.0"}
_METHODS = {m.encode(): m for m in ("GET", "POST", "DELETE", "HEAD", "OPTIONS", "PUT", "PATCH")}


class _Gone(Exception):
    """The client has gone (end of file, reset, or a broken write)."""


class H11Connection:
    """One HTTP/1.1 client connection: h11 state, the socket, and the ASGI calls of its requests in turn."""

    __slots__ = (
        "_body_done",
        "_broken",
        "_disconnected",
        "_fd",
        "_hook",
        "_pending_start",
        "_reader",
        "_request",
        "_response_done",
        "_started",
        "app",
        "client",
        "config",
        "conn",
        "is_shed",
        "limits",
        "server_addr",
        "stream",
        "write_timeout",
    )

    def __init__(
        self,
        stream: trio.SocketStream,
        app: Callable[..., Any],
        config: H11Config,
        server_addr: Any,
        client: Any,
        limits: ConnectionLimits,
    ) -> None:
        self.stream = stream
        self.app = app
        self.config = config
        self.server_addr = server_addr
        self.client = client
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=config.max_head_size)
        self.limits = limits
        self.is_shed = False
        self._request: h11.Request | None = None
        self._body_done = False
        self._disconnected = False
        self._pending_start: dict[str, Any] | None = None
        self._started = False
        self._response_done = False
        self._broken = False
        """A write failed, timed out or was cancelled: the connection can only be closed."""
        self.write_timeout = inf if config.write_timeout is None else config.write_timeout
        self._hook: DisconnectHook | None = None
        """The request's disconnect callback hook (the ``mcp_trio.disconnect_callback`` extension)."""
        self._reader = SocketReader(stream, self.conn, config.max_pipelined, self._client_gone)
        self._fd = stream.socket.fileno()

    # -- connection loop -----------------------------------------------------------------------

    async def serve(self, shutting_down: Callable[[], bool], nursery: trio.Nursery) -> None:
        """Serve requests in turn until the client goes, an answer ends the connection or the server
        shuts down; the caller contains failures and closes the socket.  The socket reader runs in
        ``nursery`` (the server's, which this connection's task is in: no nursery of its own, about
        1.4 KiB a connection) and has ended when this returns."""
        nursery.start_soon(self._reader.run)
        try:
            await self._serve_requests(shutting_down)
        finally:
            with trio.CancelScope(shield=True):
                await self._reader.stop()

    async def _serve_requests(self, shutting_down: Callable[[], bool]) -> None:
        try:
            while not shutting_down():
                self.limits.idle(self)  # sheddable until its next request head is whole
                try:
                    event = await self._next_event(idle=True)
                except h11.RemoteProtocolError as exc:
                    await self._refuse(exc)
                    return
                finally:
                    self.limits.busy(self)
                if not isinstance(event, h11.Request):
                    return  # end of file, a timeout, shed (shutdown sheds idle connections too)
                ok = await self._serve(event)
                if not ok or self.conn.our_state is not h11.DONE or self.conn.their_state is not h11.DONE:
                    if self._answered_early():
                        await self._linger()
                    return
                self.conn.start_next_cycle()
        except _Gone:
            return

    def shed(self) -> None:
        """Close now: idle, or its request head is not whole (:mod:`.h11_limits`; shutdown too)."""
        self.is_shed = True
        self._reader.interrupt()

    def _client_gone(self) -> None:
        """The reader saw the end of file (or a reset): a response under way whose request was all read
        is abandoned (nothing more is sent) and the app's disconnect callback runs."""
        if self._body_done and not self._response_done:
            self._disconnected = True
            hook = self._hook
            if hook is not None:
                hook.fire()

    async def _next_event(self, *, idle: bool = False) -> Any:
        """The next h11 event; ``None`` on end of file, timeout or shedding.  ``idle``: between requests
        (the keep-alive timeout until a head's first byte, then the read timeout for the whole head)."""
        conn = self.conn
        reader = self._reader
        head_deadline = inf
        while not self.is_shed:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                if isinstance(event, h11.ConnectionClosed):
                    return None
                return event
            if idle and not conn.trailing_data[0]:
                if reader.eof:
                    return None
                came = await reader.wait(self.config.keep_alive_timeout)
            elif reader.eof:
                conn.receive_data(b"")
                continue
            elif idle:  # a head has begun: the whole of it within read_timeout of its first byte
                if head_deadline == inf:
                    head_deadline = trio.current_time() + self.config.read_timeout
                came = await reader.wait(head_deadline - trio.current_time())
            else:
                came = await reader.wait(self.config.read_timeout)
            if not came:  # timed out (or an idle connection closed by shutdown, or shed)
                return None
        return None

    async def _refuse(self, exc: h11.RemoteProtocolError) -> None:
        """A request h11 cannot parse: answer with its status (400, 431...) if we still can, then close."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        status = exc.error_status_hint
        peer_log.log(logging.INFO, "refused a malformed HTTP/1.1 request (%d)", status)
        body = f"{status} {exc}".encode()
        headers = [(b"content-type", b"text/plain"), _content_length(body)]
        headers.append((b"connection", b"close"))
        try:
            data = self.conn.send(h11.Response(status_code=status, headers=headers))
            data = (data or b"") + (self.conn.send(h11.Data(data=body)) or b"")
            data += self.conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # pragma: no cover - nothing sensible left to send
            return
        await self._write(data)
        await self._linger()

    def _answered_early(self) -> bool:
        """A complete answer went out while the request body is still coming: the connection closes,
        and closing at once could reset it under the client's feet (see :mod:`.linger`)."""
        if not self._response_done or self._broken or self._disconnected:
            return False
        if self.conn.their_state is not h11.SEND_BODY:
            return False
        return not self._skip_buffered_body()  # a body already all here (a GET) needs no linger

    async def _linger(self) -> None:
        """Lingering close (:mod:`.linger`): end our side at once, then read and drop what the client
        is still sending, within the bounds, and close."""
        await self._reader.stop()
        half_close(self.stream)
        await linger_and_close(self.stream)

    # -- one request ------------------------------------------------------------------------------

    async def _serve(self, request: h11.Request) -> bool:
        """Run the app for ``request``; True if the connection can serve another request."""
        if is_websocket_upgrade(request):
            return await self._websocket(request)
        self._request = request
        self._body_done = False
        self._disconnected = False
        self._pending_start = None
        self._started = False
        self._response_done = False
        hook = self._hook = DisconnectHook()
        target = request.target
        path, _, query = target.partition(b"?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": _VERSIONS.get(request.http_version) or request.http_version.decode(),
            "method": _METHODS.get(request.method) or request.method.decode(),
            "scheme": "http",
            "path": unquote(path.decode("latin-1")),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            # (lowercased name, value), as ASGI wants (h11's own list of them is a Sequence whose
            # iteration makes a Python call per header)
            "headers": [(name.lower(), value) for name, value in request.headers.raw_items()],
            "client": self.client,
            "server": self.server_addr,
            "extensions": {CANCELLABLE_SEND: {}, DISCONNECT_CALLBACK: hook},
        }
        # Containment: the app's failure ends this request (and its connection) only.
        with contained(f"ASGI app on {scope['method']} {scope['path']}") as failure:
            try:
                await self.app(scope, self._asgi_receive, self._asgi_send)
            except _Gone:
                return False
        if failure.caught is not None:
            if not self._started and not self._disconnected and not self._broken:
                await self._simple_response(500)
            return False
        if self._disconnected or self._broken:
            return False
        if self._pending_start is not None:  # a head and no body message: an empty body
            await self._asgi_send({"type": "http.response.body", "body": b"", "more_body": False})
        elif not self._started:  # the app returned without answering
            await self._simple_response(500)
            return False
        if not self._response_done:  # it returned in the middle of a response: the only end left is close
            return False
        return self._body_done or self._skip_buffered_body()

    async def _websocket(self, request: h11.Request) -> bool:
        """A WebSocket upgrade: the app's ``websocket`` call, on wsproto; the connection ends with it."""
        await self._reader.stop()  # the WebSocket reads the socket itself (h11 holds what was read)
        config = self.config
        socket = H11WebSocket(
            self.conn,
            self.stream,
            self._write,
            _Gone,
            max_message=inf if config.websocket_max_message is None else config.websocket_max_message,
            ping_interval=config.websocket_ping_interval or 0.0,
        )
        with contained("ASGI app on a WebSocket"):  # its failure ends this connection only
            try:
                await socket.serve(self.app, request, self.client, self.server_addr)
            except _Gone:
                pass
        self._broken = True  # nothing more on this connection (no lingering: the socket closes)
        return False

    def _early_answer(self) -> bool:
        """A complete answer is about to go out while part of the request body has not arrived."""
        if self._body_done or self.conn.their_state is not h11.SEND_BODY:
            return False
        return not self._skip_buffered_body()

    def _skip_buffered_body(self) -> bool:
        """A request body the app did not read (a GET, a DELETE): passed over if h11 already holds
        all of it; otherwise (or if what is there is malformed) the connection closes rather than wait
        for it."""
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError:  # a bad chunk, say: h11 is in its ERROR state for good
                return False
            if isinstance(event, h11.EndOfMessage):
                self._body_done = True
                return True
            if not isinstance(event, h11.Data):
                return False

    async def _simple_response(self, status: int) -> None:
        """An answer of the server's own (the app failed, or answered nothing); the connection closes
        after it, and says so (a keep-alive client would otherwise send its next request into the close)."""
        try:
            headers = [(b"connection", b"close")]
            await self._asgi_send({"type": "http.response.start", "status": status, "headers": headers})
            await self._asgi_send({"type": "http.response.body", "body": b"", "more_body": False})
        except (h11.LocalProtocolError, _Gone):  # pragma: no cover - the client is gone or confused
            pass

    async def _asgi_receive(self) -> dict[str, Any]:
        if self._disconnected:
            return _DISCONNECT
        if not self._body_done:
            if self.conn.they_are_waiting_for_100_continue:
                await self._write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            try:
                event = await self._next_event()
            except h11.RemoteProtocolError:
                event = None
            if isinstance(event, h11.Data):
                return self._body_message(event)
            if isinstance(event, h11.EndOfMessage):
                self._end_of_body()
                return {"type": "http.request", "body": b"", "more_body": False}
            self._disconnected = True
            if self._hook is not None:
                self._hook.fire()
            return _DISCONNECT
        # The body is all read: wait for the client to go away.  Bytes it sends meanwhile (a pipelined
        # next request) are kept for h11 by the reader, up to max_pipelined.
        reader = self._reader
        while not reader.eof:
            await reader.wait(for_data=False)
        self._disconnected = True
        return _DISCONNECT

    def _body_message(self, first: h11.Data) -> dict[str, Any]:
        """A body message: ``first`` and the rest of what h11 already holds of the body, with its end
        when that is there too (a body that came whole is one ``receive()``, not two).  A malformed rest
        (a bad chunk) is left for the next ``receive()``, where h11 raises it again."""
        parts = [first.data]
        more = True
        try:
            while True:
                event = self.conn.next_event()
                if type(event) is h11.Data:
                    parts.append(event.data)
                    continue
                if type(event) is h11.EndOfMessage:
                    self._end_of_body()
                    more = False
                break  # NEED_DATA (in the body's state h11 has nothing else to give)
        except h11.RemoteProtocolError:
            pass
        body = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
        return {"type": "http.request", "body": body, "more_body": more}

    def _end_of_body(self) -> None:
        self._body_done = True
        if self._reader.eof:  # gone already (after sending it all): as if it went now
            self._client_gone()

    async def _asgi_send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self._started or self._pending_start is not None:
                raise RuntimeError("ASGI: http.response.start sent twice")
            self._pending_start = message
            return
        if kind != "http.response.body":
            raise RuntimeError(f"ASGI: unexpected message {kind!r}")
        if self._response_done:
            raise RuntimeError("ASGI: http.response.body after the response ended")
        if self._disconnected:
            return  # the client is gone: dropped (the app learns of it from receive())
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self._request is not None and self._request.method == b"HEAD":
            body = b""  # a HEAD response has a head only
        conn = self.conn
        data = b""
        start = self._pending_start
        if start is not None:
            self._pending_start = None
            self._started = True
            headers = list(start.get("headers", ()))
            if not more:
                for name, _ in headers:
                    if name.lower() == b"content-length":
                        break
                else:
                    headers.append(_content_length(body))
                if self._early_answer() and (b"connection", b"close") not in headers:
                    # The whole answer goes out before the request body is in (a 401 or 413 sent
                    # without reading it): the connection will close after it, so say so, or a
                    # keep-alive client would send its next request on a connection about to close.
                    headers.append((b"connection", b"close"))
            status = start["status"]
            try:
                data = conn.send(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
            except h11.LocalProtocolError as exc:
                self._protocol_error(exc)
                return
            data = data or b""
        elif not self._started:
            raise RuntimeError("ASGI: http.response.body before http.response.start")
        try:
            if body:
                data += conn.send(h11.Data(data=body)) or b""
            if not more:
                data += conn.send(h11.EndOfMessage()) or b""
                self._response_done = True
                if self._hook is not None:
                    self._hook.complete()
        except h11.LocalProtocolError as exc:  # more body than its content-length, and the like
            self._protocol_error(exc)
            return
        if data:
            try:
                await self._write(data)
            except _Gone:
                self._disconnected = True

    def _protocol_error(self, exc: h11.LocalProtocolError) -> None:
        """The app broke HTTP/1.1 mid-response: nothing more is sent, the connection will close."""
        logger.error("ASGI app broke HTTP/1.1 (%s); closing the connection", exc)
        self._broken = True
        self._disconnected = True

    async def _write(self, data: bytes | None) -> None:
        """Write within ``write_timeout``; a write that fails, times out or is cancelled leaves the
        stream unusable (part of the bytes may be out), so nothing more is written and it closes."""
        if not data:
            return
        if self._broken:
            raise _Gone
        written = False
        try:
            # Written at once when the socket takes it all (the usual case: no wait, no scope); the rest,
            # if any, within write_timeout.
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                sent = os.write(self._fd, data) if RAW_FD_IO else 0
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                with trio.fail_after(self.write_timeout):
                    await self.stream.send_all(memoryview(data)[sent:])
            written = True
        except trio.TooSlowError as exc:
            timeout = self.write_timeout
            peer_log.log(logging.INFO, "a write took longer than %s s; closing the connection", timeout)
            raise _Gone from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise _Gone from exc
        finally:
            if not written:
                self._broken = True


@functools.cache
def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _content_length(body: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", str(len(body)).encode())
