"""Cut hypercorn 0.18's per-request cost on its trio worker (HTTP/1.1): the pieces of the fast path.

Upstream spends most of a request on task steps and spawns (an idle-timer task per request, a task
per ASGI call, one socket write per h11 event); what it costs and what each change saves is in
docs/performance.md ("The HTTP servers").

Used by the subclasses of ``hypercorn_server`` (the servers mcp_trio starts, never hypercorn's own
classes); ``serve(..., hypercorn_fast_path=False)`` / ``--no-hypercorn-fast-path`` leave hypercorn's
request path as shipped.  Each change could go upstream on its own:

1. **Idle timer without a task** (:class:`IdleTimer`, the connection's ``idle_task``).  Upstream
   cancels the idle task at every request (``stop``: a Lock and a cancel) and spawns a new one after
   every response (``restart``: a Lock, ``nursery.start``, a CancelScope and ``move_on_after``), about
   7 scheduler steps and a task spawn per request.  Here the timer is the *deadline* of the cancel scope
   the connection's read loop runs in (``_TCPServer._read_data``; an idle connection's read task waits
   for bytes there anyway): ``now + keep_alive_timeout`` when the connection turns idle, ``inf`` when a
   request starts.  Same behaviour: an idle connection is closed after ``keep_alive_timeout``, or at once
   on graceful shutdown (:class:`Terminated`, this server's ``WorkerContext.terminated``, expires the
   timers of the idle connections); a busy one never by the timer.  No task per connection either: an
   open connection costs 3.8 KB less than with one watchdog task each (docs/performance.md).

2. **One socket write per ASGI send** (:func:`queue_write`, :func:`before_stream_send`,
   :func:`one_write_per_send`).  Upstream writes the head, the body and h11's (empty) EndOfMessage in
   three ``send_all`` calls, each behind ``send_lock``.  Here the bytes one ASGI ``send()`` produces are
   written once, before that call returns, and the head of a response that has a ``content-length``
   waits for the app's first non-empty ``http.response.body`` or the end of the body (ASGI allows a
   server to do so).  A response without ``content-length`` (SSE, chunked streaming) still gets its
   head written at ``http.response.start``, and every body message of a stream is on the wire before
   the app's ``send()`` returns.  Empty writes are skipped.

3. **No scheduling round trip on the app's queue when none is needed** (:func:`spawn_app`,
   :class:`AppQueue`): the read task's ``put`` and the app's ``receive()`` neither wait nor checkpoint
   when they need not; the queue is a small slotted object, not a trio memory channel (1.6 KB less per
   request in progress, an open stream's included).

4. **Lean waits on an open connection** (:func:`socket_reader`, :class:`LazyEvent`, :class:`SendLock`):
   a plain TCP connection on POSIX is read in one coroutine frame (six in ``receive_some``), and the
   connection's events and send lock make their ``trio.Event`` / parking lot only when a task waits.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from math import inf
from typing import Any

import trio
from hypercorn.events import RawData
from hypercorn.protocol.events import Body, EndBody, Response, StreamClosed
from hypercorn.trio.task_group import _handle
from hypercorn.trio.tcp_server import MAX_RECV
from hypercorn.trio.worker_context import EventWrapper, WorkerContext

__all__ = [
    "AppQueue",
    "FastWorkerContext",
    "IdleTimer",
    "LazyEvent",
    "SendLock",
    "Terminated",
    "before_stream_send",
    "one_write_per_send",
    "queue_write",
    "socket_reader",
    "spawn_app",
]


# --------------------------------------------------------------------------------------------------
# 1. Idle timer: the deadline of the connection's read loop
# --------------------------------------------------------------------------------------------------


class IdleTimer:
    """``TCPServer.idle_task`` with TrioSingleTask's API (restart/stop), without a task: the deadline
    of the connection's read loop (``_TCPServer._read_data`` wraps it in one cancel scope; while the
    connection is idle the read task sleeps in ``receive_some`` anyway).  ``restart`` (the connection
    turned idle) sets it to ``now + keep_alive_timeout``, ``stop`` (a request started) to ``inf``;
    when it expires, the read loop ends and the connection is closed, as hypercorn's idle task does.
    Graceful shutdown ends it at once for an idle connection (:class:`Terminated`); a busy one is
    closed by the protocol once its response is done, or when it next turns idle."""

    __slots__ = ("_server", "deadline", "reading")

    def __init__(self, server: Any) -> None:
        self._server = server
        self.deadline = inf
        self.reading: trio.CancelScope | None = None  # the read loop's scope, while it runs

    async def restart(self, task_group: Any, action: Any) -> None:
        # Called with (the connection's TaskGroup, TCPServer._idle_timeout): at connection start and
        # whenever the connection turns idle.  No checkpoint, like a plain attribute update.
        server = self._server
        if server.context.terminated.is_set():
            self.set_deadline(-inf)  # shutting down: an idle connection closes at once
        else:
            self.set_deadline(trio.current_time() + server.config.keep_alive_timeout)

    async def stop(self) -> None:
        self.set_deadline(inf)  # a request is being served (or the read loop ended): never for idleness

    def set_deadline(self, deadline: float) -> None:
        self.deadline = deadline
        if self.reading is not None:
            self.reading.deadline = deadline

    def shut_down(self) -> None:
        """Graceful shutdown: close now if idle."""
        if self.deadline != inf:
            self.set_deadline(-inf)


class Terminated(EventWrapper):
    """hypercorn's ``WorkerContext.terminated`` (set on graceful shutdown) that also expires the idle
    timers of the connections reading (:attr:`timers`, this server's alone): what each connection's
    idle task waiting on it did upstream."""

    def __init__(self) -> None:
        super().__init__()
        self.timers: set[IdleTimer] = set()

    async def set(self) -> None:
        await super().set()
        for timer in list(self.timers):
            timer.shut_down()


class LazyEvent:
    """hypercorn's ``EventWrapper`` (``clear``/``wait``/``set``/``is_set``) whose ``trio.Event`` is made
    only when a task waits: every HTTP/1.1 connection has one (``H11Protocol.can_read``), which is only
    waited on when a client pipelines a request behind one in progress.  Same behaviour: ``clear``
    replaces the event (a task already waiting keeps waiting on the old one, as upstream), ``wait`` on
    a set event is a checkpoint."""

    __slots__ = ("_event", "_flag")

    def __init__(self) -> None:
        self._event: trio.Event | None = None
        self._flag = False

    async def clear(self) -> None:
        self._event = None
        self._flag = False

    async def wait(self) -> None:
        if self._flag:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    async def set(self) -> None:
        self._flag = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._flag


class SendLock:
    """The connection's send lock (``TCPServer.send_lock``) as ``async with`` uses a ``trio.Lock``: entering
    is a checkpoint, a task that finds it held waits and gets it handed over in turn (first come,
    first served), a cancelled wait leaves no trace; without the lock's parking lot (0.06 KB instead of
    0.34 per connection)."""

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: list[trio.lowlevel.Task] | None = None

    async def __aenter__(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._held:  # (never held with tasks waiting: the release hands it over)
            self._held = True
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        if self._waiters is None:
            self._waiters = []
        await _wait_in(self._waiters)  # returns once the holder has handed it over

    async def __aexit__(self, *exc_info: object) -> None:
        if self._waiters:
            trio.lowlevel.reschedule(self._waiters.pop(0))  # the next one holds it now
        else:
            self._held = False

    def locked(self) -> bool:
        return self._held


class FastWorkerContext(WorkerContext):
    """The server's ``WorkerContext`` whose ``terminated`` is a :class:`Terminated` and whose events are
    :class:`LazyEvent`."""

    event_class = LazyEvent

    def __init__(self, max_requests: int | None) -> None:
        super().__init__(max_requests)
        self.terminated = Terminated()


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


class _OneWritePerSend:
    """The stream's ``app_send``, batching what one ASGI ``send()`` produces into one write (a slotted
    object rather than a closure: smaller, and held by every request in progress)."""

    __slots__ = ("_app_send", "_protocol")

    def __init__(self, protocol: Any, app_send: Any) -> None:
        self._protocol = protocol
        self._app_send = app_send

    async def __call__(self, message: Any) -> None:
        protocol = self._protocol
        protocol._fp_batch += 1
        try:
            await self._app_send(message)
        finally:
            protocol._fp_batch -= 1
        if not protocol._fp_batch and not protocol._fp_hold_head:
            await _flush(protocol)  # what this send() produced is written before it returns


def one_write_per_send(protocol: Any, app_send: Any) -> Any:
    """The stream's ``app_send``, batching what one ASGI ``send()`` produces into one write."""
    return _OneWritePerSend(protocol, app_send)


# --------------------------------------------------------------------------------------------------
# 3. The app's queue without needless scheduling round trips
# --------------------------------------------------------------------------------------------------


class AppQueue:
    """The app's queue of one request: what ``trio.open_memory_channel(max_app_queue_size)`` gives
    hypercorn's ``spawn_app``, in about a tenth of the memory (a list and two lazily made waiter lists
    instead of a channel state, two channel ends, two ordered dicts and sets: 1.8 KB per request, held
    as long as a stream is open).  Bounded the same way: ``put`` waits while ``size`` messages are
    queued; ``receive`` waits while none is.  Neither checkpoints when it need not wait (the fast
    path's handover); a wait is cancellable like a channel's and leaves the queue as it was."""

    __slots__ = ("_getters", "_items", "_putters", "_size")

    def __init__(self, size: int) -> None:
        self._items: list[Any] = []
        self._size = size
        self._getters: list[trio.lowlevel.Task] | None = None  # receivers waiting for a message
        self._putters: list[trio.lowlevel.Task] | None = None  # senders waiting for room

    async def put(self, message: Any) -> None:
        items = self._items
        while len(items) >= self._size:
            if self._putters is None:
                self._putters = []
            await _wait_in(self._putters)
        items.append(message)
        if self._getters:
            trio.lowlevel.reschedule(self._getters.pop(0))

    async def receive(self) -> Any:
        items = self._items
        while not items:  # (the wait is inline: a waiting receive is one frame less)
            if self._getters is None:
                self._getters = []
            waiters = self._getters
            task = trio.lowlevel.current_task()
            waiters.append(task)
            await trio.lowlevel.wait_task_rescheduled(functools.partial(_abort_wait, waiters, task))
        message = items.pop(0)
        if self._putters:
            trio.lowlevel.reschedule(self._putters.pop(0))
        elif items and self._getters:  # another receiver waits and there is more: pass the turn on
            trio.lowlevel.reschedule(self._getters.pop(0))
        return message


def _abort_wait(waiters: list[trio.lowlevel.Task], task: trio.lowlevel.Task, _: Any) -> trio.lowlevel.Abort:
    waiters.remove(task)
    return trio.lowlevel.Abort.SUCCEEDED


async def _wait_in(waiters: list[trio.lowlevel.Task]) -> None:
    task = trio.lowlevel.current_task()
    waiters.append(task)
    await trio.lowlevel.wait_task_rescheduled(functools.partial(_abort_wait, waiters, task))


def spawn_app(nursery: trio.Nursery, app: Any, config: Any, scope: Any, send: Any) -> Any:
    """``TaskGroup.spawn_app`` whose queue skips scheduling round trips (returns the app's ``put``)."""
    if config.max_app_queue_size >= 1:
        queue = AppQueue(config.max_app_queue_size)
        nursery.start_soon(
            _handle, app, config, scope, queue.receive, send, trio.to_thread.run_sync, trio.from_thread.run
        )
        return queue.put
    # An unbuffered queue (each put waits for its receive): a trio channel, as upstream.
    channels: tuple[trio.MemorySendChannel[Any], trio.MemoryReceiveChannel[Any]]
    channels = trio.open_memory_channel(config.max_app_queue_size)  # no [Any]: a subscription per call
    send_channel, receive_channel = channels
    receive_nowait, receive_wait = receive_channel.receive_nowait, receive_channel.receive
    send_nowait, send_wait = send_channel.send_nowait, send_channel.send

    async def receive() -> Any:
        try:
            return receive_nowait()
        except trio.WouldBlock:
            pass  # waited for below, not in this handler: it would keep the error alive
        return await receive_wait()

    async def put(message: Any) -> None:
        try:
            send_nowait(message)
            return
        except trio.WouldBlock:
            pass
        await send_wait(message)

    nursery.start_soon(
        _handle, app, config, scope, receive, send, trio.to_thread.run_sync, trio.from_thread.run
    )
    return put


# --------------------------------------------------------------------------------------------------
# 4. The read loop's receive, in one frame
# --------------------------------------------------------------------------------------------------


def socket_reader(stream: Any) -> Callable[[], Awaitable[bytes]] | None:
    """What ``stream.receive_some(MAX_RECV)`` does for a plain TCP stream on POSIX, in one coroutine
    frame instead of six (``receive_some``, its error-translating context manager, the socket's
    ``recv`` and its non-blocking helper): the read task of every open connection waits in it, so that
    is about 1.7 KB per connection.  The same steps: a cancellation point first, a non-blocking read,
    a schedule point when it had data at once, else wait until readable and read again; a closed
    stream raises ``ClosedResourceError``, a socket error ``BrokenResourceError``.  None for any other
    stream (TLS) or platform: then the read loop calls ``receive_some``."""
    if os.name != "posix" or type(stream) is not trio.SocketStream:
        return None
    sock = stream.socket
    read = os.read

    async def receive() -> bytes:
        await trio.lowlevel.checkpoint_if_cancelled()
        waited = False
        while True:
            fd = sock.fileno()  # -1 once closed (asked each time: a closed number may be reused)
            if fd < 0:
                raise trio.ClosedResourceError("this socket was already closed")
            try:
                data = read(fd, MAX_RECV)
            except BlockingIOError:
                data = None  # waited for below, not in this handler: it would keep the error alive
            except OSError as exc:
                raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
            if data is None:
                await trio.lowlevel.wait_readable(sock)  # ClosedResourceError if closed meanwhile
                waited = True
                continue
            if not waited:  # read at once: still a schedule point, which no cancellation cuts
                await trio.lowlevel.cancel_shielded_checkpoint()
            return data

    return receive
