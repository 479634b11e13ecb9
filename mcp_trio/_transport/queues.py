"""What a 2025 session's SSE writers wait on: the queue of one live connection, and the one clock that
tells the silent ones to send a keep-alive comment.

A writer (a task of its session) sends what its connection's :class:`StreamQueue` holds and waits for
more.  It waits without a timer of its own: the session manager's :class:`KeepAliveClock` wakes it
when its connection has been silent for ``keepalive_interval``, and it sends a comment.  Before, each
wait was a cancel scope with a deadline and each queue a Trio memory channel: about 2.5 KiB more per
open GET stream, and a scope entered and left for every event sent.
"""

from __future__ import annotations

import trio

from .._protocol.session import END, Outgoing
from .clocks import UniformClock

__all__ = ["KeepAliveClock", "StreamQueue"]


class StreamQueue:
    """The messages a session queued for one live SSE connection, until its writer (one task) takes
    them.  :meth:`put_nowait` never blocks: past ``limit`` messages not taken it raises
    :class:`trio.WouldBlock` (the connection has fallen behind).  Once closed, the writer takes
    :data:`END` (what was still queued is dropped: the client resumes from the event store)."""

    __slots__ = ("_items", "_limit", "_waiter", "closed")

    def __init__(self, limit: int) -> None:
        self._items: list[Outgoing] = []
        self._limit = limit
        self._waiter: trio.lowlevel.Task | None = None
        self.closed = False

    def put_nowait(self, item: Outgoing) -> None:
        if self.closed:
            raise trio.ClosedResourceError("the connection's queue is closed")
        items = self._items
        if len(items) >= self._limit and self._waiter is None:
            raise trio.WouldBlock
        items.append(item)
        self._wake()

    def get_nowait(self) -> Outgoing | None:
        """The next message, :data:`END` once closed, None when nothing is queued."""
        if self.closed:
            return END
        items = self._items
        return items.pop(0) if items else None

    async def get(self) -> Outgoing | None:
        """Wait for the next message (:data:`END` once closed); None: the keep-alive clock says the
        connection has been silent for its interval (:meth:`nudge`)."""
        if self.closed or self._items:
            await trio.lowlevel.checkpoint()
        else:
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        return self.get_nowait()

    def nudge(self) -> None:
        """Wake a waiting writer with nothing queued: it sends a keep-alive comment."""
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._items.clear()
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED


class KeepAliveClock(UniformClock[StreamQueue]):
    """One task (:meth:`run`, in the session manager's nursery) for every SSE writer of every session:
    a connection silent for ``interval`` seconds has its writer nudged (:meth:`StreamQueue.nudge`) to
    send a comment, so that a proxy's read timeout does not cut it, and again every ``interval`` while
    it stays silent.  ``interval`` infinite: never."""

    __slots__ = ()

    def __init__(self, interval: float) -> None:
        super().__init__(interval, StreamQueue.nudge, repeat=True)

    def rearm(self, queue: StreamQueue) -> None:
        """``queue``'s connection was written to now: its comment is due in ``interval``."""
        self.watch(queue)
