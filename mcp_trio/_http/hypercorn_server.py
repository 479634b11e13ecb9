"""hypercorn's trio worker as mcp_trio runs it: the same code, with our fixes, and only where we start it.

:func:`serve_hypercorn` serves any ASGI app with hypercorn 0.18's own ``worker_serve`` and
``TCPServer.run``, run with their global names rebound to subclasses of ours (``TCPServer``,
``ProtocolWrapper``, ``TaskGroup``, ``H11Protocol``).  Nothing in hypercorn's modules changes: another
hypercorn app in the same process is served exactly as shipped.  What the subclasses change:

- **No request can kill the server** (upstream pgjones/hypercorn #203, docs/hypercorn.md): every socket
  write and the end-of-file go through the connection's send lock (upstream sends EOF outside it, so a
  request with ``Connection: close`` followed by stray bytes makes two tasks send at once and the
  ``BusyResourceError`` escapes the worker); a write that fails, is cancelled or takes longer than
  ``write_timeout`` closes that connection; an h11 ``LocalProtocolError`` (an app answering after its
  response was cut, a 500 head into a started response) closes that connection; any other failure of
  a connection is logged and ends that connection only.
- **Closed idle connections are released at once** (the CLOSE_WAIT fix, ``hypercorn_patch``).
- **Lingering close** (HTTP/1.1, docs/hypercorn.md section 5): after an answer sent before the request
  body was all read, EOF, then what the client still sends is read and dropped (``LINGER_TIME``,
  ``LINGER_BYTES``) before closing, so that the close does not reset the connection under the answer.
- **The fast path** (``hypercorn_fast_path``, on unless ``fast_path=False``): an idle timer without a
  task per request, one socket write per ASGI send, no needless round trips on the app's queue.
- **HTTP/2** (negotiated by ALPN under TLS, or h2c; docs/hypercorn.md section 4): our ``H2Protocol``
  subclass.  A send that leaves 32 KiB or more of its response queued waits until that is written out
  (upstream queues without bound when the client's flow-control window is shut), within
  ``write_timeout``; a send cut by cancellation or that times out resets that stream (``RST_STREAM``)
  and nothing else, so the app may cut sends here too; a connection that closes wakes every send still
  waiting (upstream leaves them, and the connection, hanging forever); request data for a stream whose
  response is complete is dropped (upstream raises ``KeyError``, which ends the connection and, on
  hypercorn as shipped, the whole server: pgjones/hypercorn#329); socket writes are never cut half-way
  by the writer's cancellation (one connection carries every stream), only by ``write_timeout``.
- **WebSocket pings** (``websocket_ping_interval``) end with the app's WebSocket call: upstream's pinger
  sleeps out its whole interval after the connection closed, holding the connection's tasks and the
  server's shutdown that long.
- **A misbehaving peer is one log line, rate-limited** (:data:`peer_log`): an HTTP/2 connection that
  overflows the priority tree (rapid reset; the tree takes twice ``h2_max_concurrent_streams``, not
  1 000) gets ``GOAWAY`` ``ENHANCE_YOUR_CALM``; a WebSocket handshake with a header hypercorn decodes as
  ASCII but is not gets 400 (upstream: a traceback per connection for both).  Other failures of a
  connection keep their traceback, rate-limited too (:data:`failure_log`).

Every hypercorn module whose code these connections run or whose names the subclasses use is checked
to be, in its code (comments, docstrings and formatting aside), hypercorn 0.18.0 (:mod:`.hypercorn_guard`).
Where one differs, :func:`serve_hypercorn` refuses to start and says what differs, unless told to serve
with hypercorn as shipped (``allow_stock=True``, ``serve(..., allow_stock_hypercorn=True)``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import types
import weakref
from collections.abc import Awaitable, Callable
from math import inf
from typing import Any, ClassVar

import h2.errors
import h2.exceptions
import h11
import hypercorn.config
import hypercorn.trio
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Body, EndBody, Request, Response, Trailers
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.h2 import BUFFER_HIGH_WATER, H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import ASGIHTTPState
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio import run as _run_module
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.utils import wrap_app
from priority.priority import PriorityError, PriorityTree
from wsproto.events import Ping

from .._runtime.containment import contained
from .._runtime.contract import CANCELLABLE_SEND, DISCONNECT_CALLBACK, DisconnectHook
from .._runtime.peerlog import RateLimitedLog
from . import hypercorn_fast_path as fast
from . import hypercorn_guard
from . import hypercorn_patch as close_wait

__all__ = [
    "hypercorn_fixes_available",
    "serve_hypercorn",
]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)
"""What peers do wrong (a malformed WebSocket handshake, an HTTP/2 stream flood): one line each, at most
ten a minute, no traceback."""
failure_log = RateLimitedLog(logger, burst=5)
"""A connection that failed otherwise (a bug, ours or hypercorn's): a traceback, at most five a minute."""

LINGER_TIME = 2.0
"""Lingering close (HTTP/1.1): after an answer sent before its request body was all read (413, 4xx
from the headers, 408), the connection is half-closed (no half-close under TLS) and what the client
still sends is read and dropped for at most this long (seconds), so that closing with unread data does
not reset the connection (RST) before the client, or a proxy still sending the body, read the answer."""
LINGER_BYTES = 16 * 1024 * 1024
"""...and at most this many bytes, whichever comes first; then the connection is closed anyway."""

def _watching_disconnect(put: Callable[[Any], Awaitable[None]], hook: DisconnectHook, stream: object) -> Any:
    """The app queue's ``put`` that also tells ``hook`` when it queues ``http.disconnect``: fired if
    the client went before the response was whole, completed if the stream ended after it.

    The stream is held by a weak reference: the stream holds this ``put``, and a strong one would make
    every request's stream a reference cycle, left for the garbage collector to free."""
    stream_ref = weakref.ref(stream)

    async def put_watching(message: Any) -> None:
        if message.get("type") == "http.disconnect":
            if getattr(stream_ref(), "state", None) is ASGIHTTPState.CLOSED:
                hook.complete()
            else:
                hook.fire()
        await put(message)

    return put_watching


def hypercorn_fixes_available() -> str | None:
    """None when the installed hypercorn is the 0.18.0 code our subclasses were written against;
    otherwise what differs (then :func:`serve_hypercorn` refuses to start, unless told to serve
    hypercorn as shipped).  See :mod:`.hypercorn_guard`."""
    return hypercorn_guard.check()


FIXES_LOST = (
    "a request with Connection: close and stray bytes, an h11 protocol error or HTTP/2 request data "
    "after its response kills the whole server; a write to a client that stops reading never ends "
    "(no write_timeout); closed idle connections are held in CLOSE_WAIT for keep_alive_timeout; "
    "HTTP/2 sends wait forever after their connection closed and queue without bound on a stream "
    "nobody reads; an answer sent before the request body is lost to a reset (no lingering close); "
    "WebSocket pingers outlive their connections and refused upgrades stay open; a peer's "
    "misbehaviour logs an ERROR traceback per connection; no fast path; no "
    "mcp_trio.cancellable_send or mcp_trio.disconnect_callback scope extensions"
)
"""What serving with hypercorn as shipped gives up (docs/hypercorn.md)."""


def refusal(reason: str) -> str:
    """The error message of a refusal to serve: what differs (``reason``) and what to do."""
    return (
        f"mcp_trio refuses to serve with the installed hypercorn: it is not the hypercorn "
        f"{hypercorn_guard.HYPERCORN_VERSION} code mcp_trio's fixes were written for, so they could be "
        f"silently undone.  What differs:\n  " + reason.replace("\n", "\n  ") + "\n"
        f"Install hypercorn=={hypercorn_guard.HYPERCORN_VERSION} (pip install "
        f"'hypercorn=={hypercorn_guard.HYPERCORN_VERSION}'), or serve with hypercorn as shipped, without "
        f"mcp_trio's fixes: serve(..., allow_stock_hypercorn=True) or mcp-trio serve|demo "
        f"--allow-stock-hypercorn (see the hypercorn page of the docs for what that gives up)."
    )


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _rebind(function: Any, **names: Any) -> Any:
    """``function`` with some of its global names bound to other objects (its module is untouched).
    Each name must be one the function (or a function nested in it) looks up: a rebinding that
    would change nothing is an error, not a fix silently off."""
    unused = sorted(set(names) - _global_names(function.__code__))
    if unused:
        raise hypercorn_guard.HypercornGuardError(
            f"{function.__qualname__} does not use {', '.join(unused)}: mcp_trio's fixes do not fit it"
        )
    namespace = {**function.__globals__, **names}
    rebound = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__qualname__ = function.__qualname__
    return rebound


# -- WebSocket ------------------------------------------------------------------------------------

_ASCII_HEADERS = frozenset({b"connection", b"sec-websocket-extensions", b"sec-websocket-protocol"})
"""The handshake headers hypercorn's ``Handshake`` decodes as ASCII (wsproto's ``split_comma_header``)."""


class _WSStream(WSStream):
    """hypercorn's WebSocket stream (HTTP/1.1 upgrade or HTTP/2 extended CONNECT), whose handshake with a
    header hypercorn decodes as ASCII but is not (a non-ASCII subprotocol) is refused like any malformed
    handshake, 400 (upstream raises ``UnicodeDecodeError``: a traceback per connection)."""

    async def handle(self, event: StreamEvent) -> None:
        if type(event) is Request and not self.closed:
            bad = {n.lower() for n, v in event.headers if n.lower() in _ASCII_HEADERS and not v.isascii()}
            if bad:
                peer_log.log(
                    logging.INFO,
                    "refused a WebSocket handshake from %s: non-ASCII %s",
                    _peer(self.client),
                    b", ".join(sorted(bad)).decode(),
                )
                # hypercorn answers a handshake with a wrong version 400 itself (and mcp_trio's HTTP/1.1
                # protocol then closes the connection): made one, without the headers it cannot decode.
                kept = [(n, v) for n, v in event.headers if n.lower() not in bad | {b"sec-websocket-version"}]
                event = dataclasses.replace(event, headers=[*kept, (b"sec-websocket-version", b"")])
        await super().handle(event)


def _peer(client: Any) -> str:
    if isinstance(client, tuple) and len(client) >= 2:
        return f"{client[0]}:{client[1]}"
    return str(client)


# -- HTTP/1.1 protocol ------------------------------------------------------------------------------


class _SafeH11Protocol(H11Protocol):
    """h11 as hypercorn drives it, but a ``LocalProtocolError`` closes the connection instead of
    escaping the worker (upstream re-raises it unless the client was at fault)."""

    async def _send_h11_event(self, event: Any) -> None:
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError as exc:
            if self.connection.their_state != h11.ERROR:
                # Mostly a peer's doing (a WebSocket upgrade with a body, frames before the 101): one
                # rate-limited line, not one per connection.
                peer_log.log(logging.INFO, "closing a connection after an HTTP/1.1 protocol error: %s", exc)
                await self._abandon()
            return
        await self._write(data)

    async def _write(self, data: bytes) -> None:
        await self.send(RawData(data=data))

    async def _abandon(self) -> None:
        await self.send(Closed())

    async def stream_send(self, event: Any) -> None:
        if (
            type(event) is Response
            and event.status_code >= 200
            and self.connection.their_state is h11.SEND_BODY
        ):
            # An answer that starts before the request body is all in (a 401 or 413 sent without
            # reading it): the connection cannot serve another request after it, so say so, or a
            # keep-alive client would send its next request on a connection about to close.
            event = dataclasses.replace(event, headers=[*event.headers, (b"connection", b"close")])
        await super().stream_send(event)
        if type(event) is EndBody and isinstance(self.stream, WSStream) and self.stream.app_put is None:
            # hypercorn refused a WebSocket upgrade itself (a malformed handshake: 400): no app runs, so
            # nothing would ever end the stream, and upstream leaves the connection open for good.
            await self._maybe_recycle()


class _FastH11Protocol(_SafeH11Protocol):
    """The fast path's writes: what one ASGI send produces goes out in one socket write."""

    _fp_pending = b""
    _fp_batch = 0
    _fp_hold_head = False

    async def _write(self, data: bytes) -> None:
        await fast.queue_write(self, data)

    async def _abandon(self) -> None:
        self._fp_pending = b""
        await super()._abandon()

    async def stream_send(self, event: Any) -> None:
        await fast.before_stream_send(self, event)
        await super().stream_send(event)


# -- HTTP/2 protocol --------------------------------------------------------------------------------


class _GoneStream:
    """What ``H2Protocol.streams[id]`` gives for a stream whose response is complete: request data that
    still arrives for it is dropped (the connection's flow-control window is still acknowledged)."""

    async def handle(self, event: Any) -> None:
        return None


_GONE = _GoneStream()


class _Streams(dict[int, Any]):
    def __missing__(self, stream_id: int) -> Any:
        return _GONE


class _H2Protocol(H2Protocol):
    """h2 as hypercorn drives it, with the fixes of the module docstring (HTTP/2 item)."""

    write_timeout: float = inf

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # upstream's _handle_events looks up self.streams[id] for DATA of a stream whose response is
        # already complete (and popped): KeyError ended the connection (pgjones/hypercorn#329).
        self.streams = _Streams()
        # Upstream's tree takes 1 000 streams, and removing one costs time in proportion to how many it
        # holds: a client that opens and resets streams faster than they are cleaned up ("rapid reset")
        # had one connection cost seconds of CPU before it was refused.  Twice the streams a client
        # may have open at once leaves room for streams finishing and for PRIORITY frames.
        self.priority = PriorityTree(maximum_streams=2 * self.config.h2_max_concurrent_streams)

    async def handle(self, event: Event) -> None:
        if isinstance(event, Closed):
            # Upstream stops its send task and leaves a send waiting on a full buffer (flow control)
            # or on drain (the end of a response) waiting forever, and its connection with it.
            for buffer in list(self.stream_buffers.values()):
                await buffer.close()
        try:
            await super().handle(event)
        except PriorityError as exc:
            # The client's streams or priorities overflow hypercorn's priority tree: more than 1 000
            # streams at once (streams opened and reset faster than they are cleaned up: "rapid
            # reset"), or priorities it refuses.  Upstream raises out of the connection (a traceback
            # per connection); here the client is told to calm down (GOAWAY) and the connection closed.
            await self._refuse_connection(exc)

    _upstream_create_stream: ClassVar[Callable[[H2Protocol, Any], Awaitable[None]]]
    """Upstream's ``_create_stream`` whose WebSocket streams are :class:`_WSStream` (set by ``_worker``)."""

    async def _create_stream(self, request: Any) -> None:
        try:
            await self._upstream_create_stream(request)
        except PriorityError:
            # Upstream made the stream, then the priority tree refused it: no request was given to it,
            # so it must not be closed like one (its close would raise); it is forgotten.
            self.streams.pop(request.stream_id, None)
            self.stream_buffers.pop(request.stream_id, None)
            raise

    async def _refuse_connection(self, exc: Exception) -> None:
        peer_log.log(
            logging.WARNING,
            "closed an HTTP/2 connection from %s: %s (%s)",
            _peer(self.client),
            type(exc).__name__,
            exc,
        )
        if self.closed:
            return
        try:
            self.connection.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        except h2.exceptions.ProtocolError:  # pragma: no cover - already closing
            pass
        await self._flush()
        await self.send(Closed())

    async def _flush(self) -> None:
        # One connection carries every stream: a frame cut half-way would break them all.  The write
        # is bounded by write_timeout (_TCPServer._write), which closes the connection.
        with trio.CancelScope(shield=True):
            await super()._flush()

    async def stream_send(self, event: Any) -> None:
        if not isinstance(event, (Body, EndBody, Trailers)):
            await super().stream_send(event)
            return
        stream_id = event.stream_id
        sent = False
        try:
            with trio.move_on_after(self.write_timeout):
                await super().stream_send(event)
                if isinstance(event, Body):
                    # Upstream's push() returns at once when the client's window is shut: wait here
                    # until what is queued went out, once two frames (32 KiB) or more of it wait.
                    buffer = self.stream_buffers.get(stream_id)
                    if buffer is not None and len(buffer.buffer) >= BUFFER_HIGH_WATER:
                        await buffer.drain()
                sent = True
            if not sent:
                peer_log.log(
                    logging.INFO,
                    "a response on an HTTP/2 stream did not get out within %s s; resetting the stream",
                    self.write_timeout,
                )
        finally:
            if not sent:  # timed out or cancelled: this stream is in an unknown state, the others are fine
                with trio.CancelScope(shield=True):
                    await self._cut_stream(stream_id)

    async def _cut_stream(self, stream_id: int) -> None:
        """End one stream from our side, as a client's RST_STREAM would: its queued data is dropped,
        the client is told (RST_STREAM CANCEL), the app gets ``http.disconnect``."""
        buffer = self.stream_buffers.get(stream_id)
        if buffer is not None:
            await buffer.close()  # the send task drops it (the reset stream refuses data)
        if self.closed:
            return
        try:
            self.connection.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.CANCEL)
        except h2.exceptions.ProtocolError:  # already closed
            pass
        await self._window_updated(stream_id)
        await self._flush()
        # Not here: telling the app may wait on its queue, and this runs in the app's own send.
        self.task_group.spawn(self._forget_stream, stream_id)

    async def _forget_stream(self, stream_id: int) -> None:
        if stream_id not in self.streams:
            return  # the app finished the stream meanwhile
        await self._close_stream(stream_id)
        if not self.closed:
            await self.send(Updated(idle=self.idle))


class _TaskGroup(TaskGroup):
    """The connection's task group: the app's queue without needless round trips (fast path), the
    fast path's one write per ASGI send, and the scope extensions that say sends may be cancelled and
    call the app back when its client disconnects."""

    fast_path = True

    def __init__(self) -> None:
        super().__init__()
        self._apps_done: dict[WSStream, trio.Event] = {}
        """Per WebSocket stream of this connection: set when its app has ended (ends its pinger)."""

    def spawn(self, func: Callable[..., Any], *args: Any) -> None:
        stream = getattr(func, "__self__", None)
        if isinstance(stream, WSStream) and getattr(func, "__func__", None) is WSStream._send_pings:
            done = self._apps_done.get(stream)
            if done is not None:
                func = functools.partial(_ping_until_done, stream, done)
        super().spawn(func, *args)

    def _websocket_send(self, send: Any) -> Any:
        """A WebSocket app's send that, when the app has ended, ends its connection's pinger."""
        stream = getattr(send, "__self__", None)
        if not isinstance(stream, WSStream):
            return send
        done = self._apps_done[stream] = trio.Event()

        async def send_then_stop_pings(message: Any) -> None:
            if message is None:  # the app has ended
                done.set()
                self._apps_done.pop(stream, None)
            await send(message)

        return send_then_stop_pings

    async def spawn_app(self, app: Any, config: Any, scope: Any, send: Any) -> Any:
        stream = getattr(send, "__self__", None)  # the HTTPStream (or WSStream) whose app_send this is
        protocol = getattr(getattr(stream, "send", None), "__self__", None)
        if scope.get("type") == "websocket":
            send = self._websocket_send(send)
        extensions = scope.get("extensions")
        hook = None
        if isinstance(protocol, (_SafeH11Protocol, _H2Protocol)) and isinstance(extensions, dict):
            extensions[CANCELLABLE_SEND] = {}
            if scope.get("type") == "http":
                hook = extensions[DISCONNECT_CALLBACK] = DisconnectHook()
        if isinstance(protocol, _FastH11Protocol):
            send = fast.one_write_per_send(protocol, send)
        if not self.fast_path:
            put = await super().spawn_app(app, config, scope, send)
        else:
            assert self._nursery is not None
            put = fast.spawn_app(self._nursery, app, config, scope, send)
        return put if hook is None else _watching_disconnect(put, hook, stream)


async def _ping_until_done(stream: WSStream, done: trio.Event) -> None:
    """hypercorn's WebSocket pinger (a ping every ``websocket_ping_interval``), ended as soon as the app
    has: upstream's sleeps the whole interval before it sees the connection closed, holding the
    connection's task group (and the server's shutdown) that long after every close."""
    interval = stream.config.websocket_ping_interval
    assert interval is not None  # upstream spawns the pinger only with an interval
    while not stream.closed:
        with trio.move_on_after(interval):
            await done.wait()
        if done.is_set() or stream.closed:
            return
        await stream._send_wsproto_event(Ping())


# -- the connection ---------------------------------------------------------------------------------


class _TCPServer(TCPServer):
    """One client connection (see the module docstring); subclassed per :func:`serve_hypercorn` call."""

    write_timeout: float = inf
    fast_path = True
    _read_ended = False
    _aborted = False
    _read_scope: trio.CancelScope | None = None
    _linger_wanted = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.fast_path:
            self.idle_task = fast.IdleTimer()  # type: ignore[assignment]

    async def run(self) -> None:
        try:
            # Any failure (an exception group of BaseExceptions included) ends this connection only.
            with contained("hypercorn connection", failure_log):
                await self._upstream_run()
        finally:
            # Upstream returns without closing the stream when the TLS handshake fails (plain HTTP on
            # the TLS port, a client that gives up): close it here rather than when it is collected.
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    _upstream_run: ClassVar[Callable[[TCPServer], Awaitable[None]]]

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            await self._write(event.data)
        elif isinstance(event, Closed):
            await self._close()
            await self.protocol.handle(Closed())
        elif isinstance(event, Updated):
            if not event.idle:
                await self.idle_task.stop()
            elif self._read_ended:  # CLOSE_WAIT fix, second door: nothing can be read any more
                await self.idle_task.stop()
                with trio.CancelScope(shield=True):
                    await self._initiate_server_close()
            else:
                await self.idle_task.restart(self._task_group, self._idle_timeout)

    async def _write(self, data: bytes) -> None:
        """Write under the send lock within ``write_timeout``; a write that fails, times out or is
        cancelled leaves the stream unusable, so the connection is closed."""
        if not data:
            return
        written = False
        try:
            async with self.send_lock:
                # fail_after, not a scope with a deadline computed here: measured, that held about
                # 1.3 KiB more RSS per idle session (bench_memory.py), for a few microseconds a write.
                with trio.fail_after(self.write_timeout):
                    await self.stream.send_all(data)
                written = True
        except trio.TooSlowError:
            peer_log.log(
                logging.INFO, "a write took longer than %s s; closing the connection", self.write_timeout
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            pass
        finally:
            if not written:
                with trio.CancelScope(shield=True):
                    await self._abort()

    async def _abort(self) -> None:
        if self._aborted:
            return
        self._aborted = True
        await self.stream.aclose()
        await self.protocol.handle(Closed())

    async def _close(self) -> None:
        """Upstream's ``_close`` (EOF, then close) under the send lock, so that it never overlaps a
        write (the overlap is what raised ``BusyResourceError`` out of the worker).  After an answer
        sent before the request body was all read, the read task closes the stream instead, once it
        has lingered (:meth:`_read_data`)."""
        with trio.CancelScope(shield=True):
            async with self.send_lock:
                try:
                    await self.stream.send_eof()
                except (trio.BrokenResourceError, AttributeError, trio.ClosedResourceError, OSError):
                    pass
                if self._read_scope is not None and not self._aborted and self._body_unread():
                    self._linger_wanted = True
                    self._read_scope.cancel()  # the read task stops feeding h11, lingers, closes
                    return
                await self.stream.aclose()

    def _body_unread(self) -> bool:
        """HTTP/1.1 (not h2, not a WebSocket) with a request whose body has not all arrived."""
        protocol = getattr(self.protocol, "protocol", None)
        connection = getattr(protocol, "connection", None)
        return (
            isinstance(protocol, H11Protocol)
            and type(connection) is h11.Connection
            and connection.their_state is h11.SEND_BODY
        )

    async def _read_data(self) -> None:
        with trio.CancelScope() as scope:
            self._read_scope = scope
            await close_wait.read_until_closed(self)
        self._read_scope = None
        if self._linger_wanted:
            await self._linger()
        self._read_ended = True
        await self.idle_task.stop()

    async def _linger(self) -> None:
        """Lingering close: ``_close`` has sent our EOF (a plain socket; ``trio.SSLStream`` has no
        half-close); read and drop what the client still sends, until it closes, for at most
        :data:`LINGER_TIME` seconds and :data:`LINGER_BYTES` bytes, then close the stream.  Only this
        connection's read task waits; a client that keeps sending is cut at the bound."""
        try:
            with trio.move_on_after(LINGER_TIME):
                dropped = 0
                while dropped < LINGER_BYTES:
                    data = await self.stream.receive_some(MAX_RECV)
                    if not data:
                        break
                    dropped += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            pass
        finally:
            with trio.CancelScope(shield=True):
                await self.stream.aclose()


def _worker(fast_path: bool, write_timeout: float | None) -> Callable[..., Awaitable[None]]:
    """hypercorn's ``worker_serve`` whose connections are our ``_TCPServer``."""
    h11_base = _FastH11Protocol if fast_path else _SafeH11Protocol
    h11_class = type(
        h11_base.__name__,
        (h11_base,),
        {"_create_stream": _rebind(H11Protocol._create_stream, WSStream=_WSStream)},
    )
    timeout = inf if write_timeout is None else write_timeout
    h2_class = type(
        "_H2Protocol",
        (_H2Protocol,),
        {
            "write_timeout": timeout,
            "_upstream_create_stream": _rebind(H2Protocol._create_stream, WSStream=_WSStream),
        },
    )
    wrapper = type(
        "_ProtocolWrapper",
        (ProtocolWrapper,),
        {
            "__init__": _rebind(ProtocolWrapper.__init__, H11Protocol=h11_class, H2Protocol=h2_class),
            # h2c: an HTTP/1.1 connection that turns into HTTP/2 (prior knowledge or Upgrade)
            "handle": _rebind(ProtocolWrapper.handle, H2Protocol=h2_class),
        },
    )
    task_group = type("_TaskGroup", (_TaskGroup,), {"fast_path": fast_path})
    server = type(
        "_TCPServer",
        (_TCPServer,),
        {
            "fast_path": fast_path,
            "write_timeout": timeout,
            "_upstream_run": _rebind(TCPServer.run, ProtocolWrapper=wrapper, TaskGroup=task_group),
        },
    )
    worker: Callable[..., Awaitable[None]] = _rebind(_run_module.worker_serve, TCPServer=server)
    return worker


async def serve_hypercorn(
    app: Any,
    config: hypercorn.config.Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    fast_path: bool = True,
    write_timeout: float | None = None,
    allow_stock: bool = False,
) -> None:
    """Serve any ASGI ``app`` like ``hypercorn.trio.serve(app, config, ...)``, with mcp_trio's fixes
    applied to this server only (see the module docstring).  ``fast_path=False`` keeps hypercorn's
    request path as shipped (the fixes still apply); ``write_timeout`` bounds each socket write.

    Raises :class:`~.hypercorn_guard.HypercornGuardError` (a ``RuntimeError``), before binding
    anything, when the installed hypercorn is not the code the fixes were written for; with
    ``allow_stock=True`` it serves with hypercorn as shipped instead (without the fixes, said loudly
    in the log)."""
    reason = hypercorn_fixes_available()
    if reason is not None:
        if not allow_stock:
            raise hypercorn_guard.HypercornGuardError(refusal(reason))
        logger.warning(
            "SERVING WITH HYPERCORN AS SHIPPED, WITHOUT MCP_TRIO'S FIXES (allowed by allow_stock_hypercorn)."
            "\nWhat differs from hypercorn %s:\n  %s\nGiven up: %s.",
            hypercorn_guard.HYPERCORN_VERSION,
            reason.replace("\n", "\n  "),
            FIXES_LOST,
        )
        await hypercorn.trio.serve(app, config, shutdown_trigger=shutdown_trigger, task_status=task_status)
        return
    worker = _worker(fast_path, write_timeout)
    await worker(
        wrap_app(app, config.wsgi_max_body_size, None),
        config,
        shutdown_trigger=shutdown_trigger,
        task_status=task_status,
    )
