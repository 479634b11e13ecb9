"""Cut hypercorn 0.18's per-request cost on its trio worker (HTTP/1.1): the pieces of the fast path.

Upstream spends most of a request on task steps and spawns (an idle-timer task per request, a task
per ASGI call, one socket write per h11 event); what it costs and what each change saves is in
docs/performance.md ("The HTTP servers").

Used by the subclasses of ``hypercorn_server`` (the servers mcp_trio starts, never hypercorn's own
classes); ``serve(..., hypercorn_fast_path=False)`` / ``--no-hypercorn-fast-path`` leave hypercorn's
request path as shipped.  Each change could go upstream on its own:

1. **Idle timer without a task per request** (:class:`IdleTimer`, the connection's ``idle_task``).
   Upstream cancels the idle task at every request (``stop``: a Lock and a cancel) and spawns a new one
   after every response (``restart``: a Lock, ``nursery.start``, a CancelScope and ``move_on_after``),
   about 7 scheduler steps and a task spawn per request.  Here each connection has one watchdog task
   sleeping in a CancelScope whose *deadline* moves: ``now + keep_alive_timeout`` when the connection
   turns idle, ``inf`` when a request starts.  Same behaviour: an idle connection is closed after
   ``keep_alive_timeout``, or at once on graceful shutdown; a busy one never by the timer.  Once the
   CLOSE_WAIT fix marks the read loop as ended, ``stop()`` ends the watchdog, so closed connections are
   still released at once.

2. **One socket write per ASGI send** (:func:`queue_write`, :func:`before_stream_send`,
   :func:`one_write_per_send`).  Upstream writes the head, the body and h11's (empty) EndOfMessage in
   three ``send_all`` calls, each behind ``send_lock``.  Here the bytes one ASGI ``send()`` produces are
   written once, before that call returns, and the head of a response that has a ``content-length``
   waits for the app's first non-empty ``http.response.body`` or the end of the body (ASGI allows a
   server to do so).  A response without ``content-length`` (SSE, chunked streaming) still gets its
   head written at ``http.response.start``, and every body message of a stream is on the wire before
   the app's ``send()`` returns.  Empty writes are skipped.

3. **No scheduling round trip on the app's queue when none is needed** (:func:`spawn_app`): the read
   task hands messages over with ``send_nowait`` and the app's ``receive()`` takes a queued one with
   ``receive_nowait``; both fall back to the blocking call (queue full / empty).
"""

from __future__ import annotations

from math import inf
from typing import Any

import trio
from hypercorn.events import RawData
from hypercorn.protocol.events import Body, EndBody, Response, StreamClosed
from hypercorn.trio.task_group import _handle

__all__ = ["IdleTimer", "before_stream_send", "one_write_per_send", "queue_write", "spawn_app"]


# --------------------------------------------------------------------------------------------------
# 1. Idle timer: one watchdog per connection, re-armed by moving a deadline
# --------------------------------------------------------------------------------------------------


class IdleTimer:
    """``TCPServer.idle_task`` with TrioSingleTask's API (restart/stop), without a task per request."""

    __slots__ = ("_closed", "_deadline", "_life", "_nursery", "_server", "_timer")

    def __init__(self) -> None:
        self._deadline = inf
        self._timer: trio.CancelScope | None = None  # the scope the watchdog sleeps in
        self._life: trio.CancelScope | None = None  # the watchdog's whole life
        self._server: Any = None
        self._nursery: trio.Nursery | None = None
        self._closed = False

    async def restart(self, task_group: Any, action: Any) -> None:
        # Called with (the connection's TaskGroup, TCPServer._idle_timeout): at connection start and
        # whenever the connection turns idle.  No checkpoint, like a plain attribute update.
        if self._server is None:
            self._server = action.__self__
            self._nursery = task_group._nursery
        if self._closed:
            return
        self._deadline = trio.current_time() + self._server.config.keep_alive_timeout
        if self._life is None:
            self._life = trio.CancelScope()
            assert self._nursery is not None
            self._nursery.start_soon(self._watch)
        elif self._timer is not None:
            self._timer.deadline = self._deadline

    async def stop(self) -> None:
        if self._server is not None and getattr(self._server, "_read_ended", False):
            # mcp_trio's CLOSE_WAIT fix: the read loop is over, nothing left to time out.
            self._closed = True
            if self._life is not None:
                self._life.cancel()
            return
        self._deadline = inf  # a request is being served: never close it for idleness
        if self._timer is not None:
            self._timer.deadline = inf

    async def _watch(self) -> None:
        server = self._server
        terminated = server.context.terminated
        assert self._life is not None
        with self._life:
            while True:
                with trio.CancelScope(deadline=self._deadline) as self._timer:
                    await terminated.wait()
                self._timer = None
                if self._deadline == inf:  # busy (the deadline may have expired just as it was disarmed)
                    if terminated.is_set():
                        break  # H11Protocol closes the connection once the response is done
                    continue
                if terminated.is_set() or trio.current_time() >= self._deadline:
                    # What TCPServer._idle_timeout does once its move_on_after expires.
                    with trio.CancelScope(shield=True):
                        await server._initiate_server_close()
                    break
                # re-armed later than the deadline we slept on: sleep again
        self._life = None


# --------------------------------------------------------------------------------------------------
# 2. One socket write per response
# --------------------------------------------------------------------------------------------------

# Per-connection state lives on the protocol (class-level defaults on ``_FastH11Protocol``): _fp_pending
# (bytes not written yet), _fp_batch (> 0 while an ASGI send() call runs), _fp_hold_head (the head of a
# content-length response waits for its body).


async def queue_write(protocol: Any, data: bytes) -> None:
    """What ``_send_h11_event`` does with the bytes h11 produced: write them now, or keep them for the
    end of the ASGI send under way (or for the body of a held content-length head)."""
    if protocol._fp_pending:
        data = protocol._fp_pending + data
    if protocol._fp_batch or protocol._fp_hold_head:
        protocol._fp_pending = data
    else:
        protocol._fp_pending = b""
        if data:  # h11's EndOfMessage of a content-length body is b"": nothing to write
            await protocol.send(RawData(data=data))


async def _flush(protocol: Any) -> None:
    data = protocol._fp_pending
    if data:
        protocol._fp_pending = b""
        await protocol.send(RawData(data=data))


async def before_stream_send(protocol: Any, event: Any) -> None:
    """Called by ``stream_send`` before upstream's: decides whether a head waits for its body."""
    if isinstance(event, Response):
        if event.status_code >= 200:
            protocol._fp_hold_head = any(name.lower() == b"content-length" for name, _ in event.headers)
    elif isinstance(event, (Body, EndBody)):
        protocol._fp_hold_head = False
    elif isinstance(event, StreamClosed):
        protocol._fp_hold_head = False
        await _flush(protocol)  # the response is on the wire before the connection is recycled or closed


def one_write_per_send(protocol: Any, app_send: Any) -> Any:
    """The stream's ``app_send``, batching what one ASGI ``send()`` produces into one write."""

    async def send(message: Any) -> None:
        protocol._fp_batch += 1
        try:
            await app_send(message)
        finally:
            protocol._fp_batch -= 1
        if not protocol._fp_batch and not protocol._fp_hold_head:
            await _flush(protocol)  # what this send() produced is written before it returns

    return send


# --------------------------------------------------------------------------------------------------
# 3. The app's queue without needless scheduling round trips
# --------------------------------------------------------------------------------------------------


def spawn_app(nursery: trio.Nursery, app: Any, config: Any, scope: Any, send: Any) -> Any:
    """``TaskGroup.spawn_app`` whose queue skips scheduling round trips (returns the app's ``put``)."""
    channels: tuple[trio.MemorySendChannel[Any], trio.MemoryReceiveChannel[Any]]
    channels = trio.open_memory_channel(config.max_app_queue_size)  # no [Any]: a subscription per call
    send_channel, receive_channel = channels
    receive_nowait, receive_wait = receive_channel.receive_nowait, receive_channel.receive
    send_nowait, send_wait = send_channel.send_nowait, send_channel.send

    async def receive() -> Any:
        try:
            return receive_nowait()
        except trio.WouldBlock:
            return await receive_wait()

    async def put(message: Any) -> None:
        try:
            send_nowait(message)
        except trio.WouldBlock:
            await send_wait(message)

    nursery.start_soon(
        _handle, app, config, scope, receive, send, trio.to_thread.run_sync, trio.from_thread.run
    )
    return put
