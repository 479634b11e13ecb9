"""The protocol classes of mcp_trio's hypercorn server: hypercorn 0.18's, subclassed with our fixes.

:mod:`.hypercorn_server` runs hypercorn's worker with these in place of hypercorn's own classes (for
the servers mcp_trio starts only; see its docstring for the fixes): the WebSocket stream that refuses a
handshake it cannot decode, the HTTP/1.1 protocol that closes a connection on an h11 protocol error
(and, on the fast path, writes each ASGI send at once), the HTTP/2 protocol with bounded, cancellable
sends, and the connection's task group that sets the server-to-app scope extensions
(:mod:`mcp_trio._runtime.contract`) and ends WebSocket pingers with their app.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable
from math import inf
from typing import Any, ClassVar

import h2.errors
import h2.exceptions
import h11
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.events import Body, EndBody, Request, Response, Trailers
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.h2 import BUFFER_HIGH_WATER, H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import ASGIHTTPState
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio.task_group import TaskGroup
from priority.priority import PriorityError, PriorityTree
from wsproto.events import Ping

from .._runtime.contract import CANCELLABLE_SEND, DISCONNECT_CALLBACK, DisconnectHook
from .._runtime.peerlog import RateLimitedLog
from . import hypercorn_fast_path as fast

__all__ = [
    "ConnectionTaskGroup",
    "FastH11Protocol",
    "SafeH2Protocol",
    "SafeH11Protocol",
    "SafeWSStream",
    "peer_log",
]

logger = logging.getLogger("mcp_trio._http.hypercorn_server")  # one logger for the whole server
peer_log = RateLimitedLog(logger)
"""What peers do wrong (a malformed WebSocket handshake, an HTTP/2 stream flood): one line each, at most
ten a minute, no traceback."""


class _WatchingDisconnect:
    """The app queue's ``put`` that also tells ``hook`` when it queues ``http.disconnect``: fired if
    the client went before the response was whole, completed if the stream ended after it.

    The stream is held by a weak reference: the stream holds this ``put``, and a strong one would make
    every request's stream a reference cycle, left for the garbage collector to free.  (A slotted
    object rather than a closure: smaller, and held by every request in progress.)"""

    __slots__ = ("_hook", "_put", "_stream_ref")

    def __init__(self, put: Callable[[Any], Awaitable[None]], hook: DisconnectHook, stream: object) -> None:
        self._put = put
        self._hook = hook
        self._stream_ref = weakref.ref(stream)

    async def __call__(self, message: Any) -> None:
        if message.get("type") == "http.disconnect":
            if getattr(self._stream_ref(), "state", None) is ASGIHTTPState.CLOSED:
                self._hook.complete()
            else:
                self._hook.fire()
        await self._put(message)


# -- WebSocket ------------------------------------------------------------------------------------

_ASCII_HEADERS = frozenset({b"connection", b"sec-websocket-extensions", b"sec-websocket-protocol"})
"""The handshake headers hypercorn's ``Handshake`` decodes as ASCII (wsproto's ``split_comma_header``)."""


class SafeWSStream(WSStream):
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


class SafeH11Protocol(H11Protocol):
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


class FastH11Protocol(SafeH11Protocol):
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


class SafeH2Protocol(H2Protocol):
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
    """Upstream's ``_create_stream`` whose WebSocket streams are :class:`SafeWSStream` (set by the
    server's ``_worker``)."""

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


class ConnectionTaskGroup(TaskGroup):
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
        if isinstance(protocol, (SafeH11Protocol, SafeH2Protocol)) and isinstance(extensions, dict):
            extensions[CANCELLABLE_SEND] = {}
            if scope.get("type") == "http":
                hook = extensions[DISCONNECT_CALLBACK] = DisconnectHook()
        if isinstance(protocol, FastH11Protocol):
            send = fast.one_write_per_send(protocol, send)
        if not self.fast_path:
            put = await super().spawn_app(app, config, scope, send)
        else:
            assert self._nursery is not None
            put = fast.spawn_app(self._nursery, app, config, scope, send)
        return put if hook is None else _WatchingDisconnect(put, hook, stream)


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
