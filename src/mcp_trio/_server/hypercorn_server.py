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

Every upstream function that is rebound or whose behaviour the subclasses rely on is checked against
the sha256 of its hypercorn 0.18.0 source.  Where one differs, or sources are not shipped (a
``.pyc``-only install), :func:`serve_hypercorn` logs a warning and serves with hypercorn as shipped.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import inspect
import logging
import textwrap
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
from hypercorn.protocol.events import Body, EndBody, Response, Trailers
from hypercorn.protocol.h2 import BUFFER_HIGH_WATER, H2Protocol, StreamBuffer
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import ASGIHTTPState, HTTPStream
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio import run as _run_module
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import TrioSingleTask
from hypercorn.utils import wrap_app
from wsproto.events import Ping

from . import hypercorn_fast_path as fast
from . import hypercorn_patch as close_wait
from .containment import contained
from .peerlog import PeerLog

__all__ = [
    "CANCELLABLE_SEND",
    "DISCONNECT_CALLBACK",
    "DisconnectHook",
    "hypercorn_fixes_available",
    "serve_hypercorn",
]

logger = logging.getLogger(__name__)
peer_log = PeerLog(logger)
"""What clients do wrong: one line per kind and interval (see :mod:`.peerlog`)."""

LINGER_TIME = 2.0
"""Lingering close (HTTP/1.1): after an answer sent before its request body was all read (413, 4xx
from the headers, 408), the connection is half-closed (no half-close under TLS) and what the client
still sends is read and dropped for at most this long (seconds), so that closing with unread data does
not reset the connection (RST) before the client, or a proxy still sending the body, read the answer."""
LINGER_BYTES = 16 * 1024 * 1024
"""...and at most this many bytes, whichever comes first; then the connection is closed anyway."""

CANCELLABLE_SEND = "mcp_trio.cancellable_send"
"""ASGI scope extension set by mcp_trio's servers where cancelling the app's ``send()`` is safe: an
interrupted send ends that response and nothing else (HTTP/1.1: it closes that connection; HTTP/2 on
mcp_trio's hypercorn server: it resets that stream, the connection's other streams go on)."""

DISCONNECT_CALLBACK = "mcp_trio.disconnect_callback"
"""ASGI scope extension set by mcp_trio's servers that know when a client disconnects without the app
reading ``receive()``: its value is a :class:`DisconnectHook`.  The app calls ``hook.set(callback)``
and the server calls ``callback()`` (synchronously, from the server's own task) when the client goes,
the moment it puts ``http.disconnect`` on the request's queue; at once if it already went; never
after ``hook.set(None)``.  An app that uses it needs no task watching ``receive()`` for the disconnect."""


class DisconnectHook:
    """The value of the :data:`DISCONNECT_CALLBACK` extension: one request's disconnect callback."""

    __slots__ = ("_callback", "gone")

    def __init__(self) -> None:
        self._callback: Callable[[], object] | None = None
        self.gone = False
        """The client went away (or the server ended the request's stream)."""

    def set(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback()`` when the client goes (at once if it went already); None: no more."""
        self._callback = callback
        if callback is not None and self.gone:
            self.fire()

    def fire(self) -> None:
        """The server saw the client go: call the callback once (it is forgotten first)."""
        self.gone = True
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()

    def complete(self) -> None:
        """The response was sent whole and its stream ended: the callback is forgotten, not called
        (there is nothing left to cancel: cancelling a handler at its very end costs a cancellation
        per request for nothing)."""
        self.gone = True
        self._callback = None


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


# sha256[:16] of the dedented hypercorn 0.18.0 source of each function we rebind, replace or rely on.
_EXPECTED = {
    "worker_serve": "8dc8347a9fc357ca",
    "TCPServer.run": "30e3a0c602fd1a3e",
    "TCPServer.protocol_send": "22b51ba714d07580",
    "TCPServer._read_data": "73588ef2e57091d4",
    "TCPServer._close": "544a46e0eb9f7c16",
    "ProtocolWrapper.__init__": "e978b0c0e9e8d22c",
    "TrioSingleTask": "aa59316c028b876a",
    "H11Protocol._send_h11_event": "fdb5e069793a1d99",
    "H11Protocol.stream_send": "c7ef437818f28b28",
    "HTTPStream.app_send": "6371d58b7f58ae8d",
    "HTTPStream.handle": "5cc61571acaf1005",
    "HTTPStream._send_closed": "3635c376b563e26c",
    "TaskGroup.spawn_app": "487c35772c8bd89c",
    "ProtocolWrapper.handle": "4cb5ff14d1842513",
    "H2Protocol.__init__": "d825081b68a7675d",
    "H2Protocol.handle": "75993cf65b07b50d",
    "H2Protocol.stream_send": "31d81e8715df7515",
    "H2Protocol._handle_events": "0f6b5be5f509736b",
    "H2Protocol._flush": "7e61e45fa8573c94",
    "H2Protocol._send_data": "2f481da0f200a799",
    "H2Protocol._close_stream": "eb79e74b22b8e53b",
    "H2Protocol._window_updated": "668e50364a02c9e3",
    "StreamBuffer": "bc347b7c78068613",
    "H11Protocol._maybe_recycle": "dba7c077157520be",
    "WSStream._send_pings": "bcb105b24c0006d4",
    "WSStream._accept": "ed78854514254af9",
    "WSStream.app_send": "05aef97d75f5d0c6",
    "WSStream.handle": "45882777c6cf0444",
}


def _targets() -> dict[str, Any]:
    return {
        "worker_serve": _run_module.worker_serve,
        "TCPServer.run": TCPServer.run,
        "TCPServer.protocol_send": TCPServer.protocol_send,
        "TCPServer._read_data": TCPServer._read_data,
        "TCPServer._close": TCPServer._close,
        "ProtocolWrapper.__init__": ProtocolWrapper.__init__,
        "TrioSingleTask": TrioSingleTask,
        "H11Protocol._send_h11_event": H11Protocol._send_h11_event,
        "H11Protocol.stream_send": H11Protocol.stream_send,
        "HTTPStream.app_send": HTTPStream.app_send,
        "HTTPStream.handle": HTTPStream.handle,  # http.disconnect after the stream closed, ...
        "HTTPStream._send_closed": HTTPStream._send_closed,  # ... in state CLOSED if the response was whole
        "TaskGroup.spawn_app": TaskGroup.spawn_app,
        "ProtocolWrapper.handle": ProtocolWrapper.handle,
        "H2Protocol.__init__": H2Protocol.__init__,
        "H2Protocol.handle": H2Protocol.handle,
        "H2Protocol.stream_send": H2Protocol.stream_send,
        "H2Protocol._handle_events": H2Protocol._handle_events,
        "H2Protocol._flush": H2Protocol._flush,
        "H2Protocol._send_data": H2Protocol._send_data,
        "H2Protocol._close_stream": H2Protocol._close_stream,
        "H2Protocol._window_updated": H2Protocol._window_updated,
        "StreamBuffer": StreamBuffer,
        "H11Protocol._maybe_recycle": H11Protocol._maybe_recycle,
        "WSStream._send_pings": WSStream._send_pings,
        "WSStream._accept": WSStream._accept,
        "WSStream.app_send": WSStream.app_send,
        "WSStream.handle": WSStream.handle,
    }


def _source_hash(obj: Any) -> str | None:
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@functools.cache
def hypercorn_fixes_available() -> str | None:
    """None when the installed hypercorn is the 0.18.0 code our subclasses were written against;
    otherwise why not (then :func:`serve_hypercorn` serves with hypercorn as shipped)."""
    try:
        version = importlib.metadata.version("hypercorn")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - it is a dependency
        return "hypercorn's version is unknown"
    if not version.startswith("0.18."):
        return f"hypercorn {version} is not 0.18"
    for name, obj in _targets().items():
        found = _source_hash(obj)
        if found is None:
            return f"the source of hypercorn's {name} is not available"
        if found != _EXPECTED[name]:
            return f"hypercorn's {name} is not the 0.18.0 code (sha256 {found})"
    return None


def _rebind(function: Any, **names: Any) -> Any:
    """``function`` with some of its global names bound to other objects (its module is untouched)."""
    namespace = {**function.__globals__, **names}
    rebound = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__qualname__ = function.__qualname__
    return rebound


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
                peer_log("protocol-error", "closing a connection after an HTTP/1.1 protocol error: %s", exc)
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

    async def handle(self, event: Event) -> None:
        if isinstance(event, Closed):
            # Upstream stops its send task and leaves a send waiting on a full buffer (flow control)
            # or on drain (the end of a response) waiting forever, and its connection with it.
            for buffer in list(self.stream_buffers.values()):
                await buffer.close()
        await super().handle(event)

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
                logger.info(
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
            with contained("hypercorn connection"):
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
            logger.info("a write took longer than %s s; closing the connection", self.write_timeout)
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
    h11_class = _FastH11Protocol if fast_path else _SafeH11Protocol
    timeout = inf if write_timeout is None else write_timeout
    h2_class = type("_H2Protocol", (_H2Protocol,), {"write_timeout": timeout})
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
) -> None:
    """Serve any ASGI ``app`` like ``hypercorn.trio.serve(app, config, ...)``, with mcp_trio's fixes
    applied to this server only (see the module docstring).  ``fast_path=False`` keeps hypercorn's
    request path as shipped (the fixes still apply); ``write_timeout`` bounds each socket write."""
    reason = hypercorn_fixes_available()
    if reason is not None:
        logger.warning("serving with hypercorn as shipped (no mcp_trio fixes): %s", reason)
        await hypercorn.trio.serve(app, config, shutdown_trigger=shutdown_trigger, task_status=task_status)
        return
    worker = _worker(fast_path, write_timeout)
    await worker(
        wrap_app(app, config.wsgi_max_body_size, None),
        config,
        shutdown_trigger=shutdown_trigger,
        task_status=task_status,
    )
