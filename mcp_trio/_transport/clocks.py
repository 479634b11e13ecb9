"""One task for many deadlines that are all the same interval from when they were set.

Every due time is ``now + interval`` when set, so the order they were set in is the order they fall
due: an ordered dict is the whole schedule (setting one again is a pop and an insert), and the task
sleeps only until the first.  A timer of each watched thing's own (a cancel scope with a deadline)
costs Trio about 70 000 instructions entered and left, and its deadline heap keeps an entry until the
deadline passes; here it is a dict insert and a pop.  Used for the SSE writers' keep-alive comments
(:class:`~.queues.KeepAliveClock`) and the arrival of request bodies (:class:`~.bodies.BodyDeadlines`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from math import inf
from typing import Generic, TypeVar

import trio

__all__ = ["UniformClock"]

K = TypeVar("K", bound=Hashable)


class UniformClock(Generic[K]):
    """:meth:`watch` a key: ``fire(key)`` is called ``interval`` seconds later by :meth:`run` (one task),
    unless :meth:`unwatch` came first or the key was watched again meanwhile.  ``repeat``: a fired key is
    watched again at once (it fires every ``interval`` until unwatched); otherwise it is dropped, and the
    keys still watched when the clock ends are fired then (their owners would otherwise wait on a clock
    that is gone).  ``interval`` infinite: nothing is ever watched, and :attr:`running` stays False."""

    __slots__ = ("_due", "_fire", "_parked", "_repeat", "interval", "running")

    def __init__(self, interval: float, fire: Callable[[K], object], *, repeat: bool) -> None:
        self.interval = interval
        self._fire = fire
        self._repeat = repeat
        self.running = False
        """Whether :meth:`run` runs (and ``interval`` is finite): what is watched will fire."""
        self._due: dict[K, float] = {}
        self._parked: trio.lowlevel.Task | None = None

    def __len__(self) -> int:
        return len(self._due)

    def watch(self, key: K) -> None:
        """``key`` fires in ``interval`` from now (a key watched already: from now, not from before)."""
        if self.interval == inf:
            return
        due = self._due
        due.pop(key, None)
        due[key] = trio.current_time() + self.interval
        parked, self._parked = self._parked, None
        if parked is not None:
            trio.lowlevel.reschedule(parked)

    def unwatch(self, key: K) -> None:
        self._due.pop(key, None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fire the keys that are due, until cancelled (with its owner)."""
        due = self._due
        self.running = self.interval < inf
        task_status.started()
        try:
            while True:
                if not due:
                    self._parked = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(self._abort)
                    continue
                key, when = next(iter(due.items()))
                now = trio.current_time()
                if when > now:
                    await trio.sleep_until(when)
                    continue
                del due[key]
                if self._repeat:
                    due[key] = now + self.interval
                self._fire(key)
        finally:
            self.running = False
            self._parked = None
            left = list(due)
            due.clear()
            if not self._repeat:
                for key in left:
                    self._fire(key)

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED
