"""A POST's body: read whole, within the app's size limit and its ``body_timeout``.

The time the body may take is kept by one clock for every request (:class:`BodyDeadlines`, a task of
:meth:`MCPApp.run`): the request's cancel scope is put on it while the body is read, and the clock
cancels the scope if the body has not arrived ``body_timeout`` after the request began.  Every deadline
is ``body_timeout`` from when it was set, so the order they were set in is the order they fall due: an
ordered dict is the whole schedule.  Before, each POST gave its scope a deadline of its own, which costs
Trio about as much again as the scope (and keeps an entry in its deadline heap until that deadline
passes, long after the body came).
"""

from __future__ import annotations

from math import inf

import trio

from .._protocol import http
from .wire import Receive

__all__ = ["BodyDeadlines", "ClientGone", "read_body"]


class ClientGone(Exception):
    """The client went away while its request body was being read: there is no one to answer."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body: 413 past ``limit`` bytes (the caller bounds the time it takes)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            http.body_too_large(limit)
        if not message.get("more_body", False):  # usually the only message: its body as it is
            return b"".join((*chunks, chunk)) if chunks else bytes(chunk)
        chunks.append(chunk)


class BodyDeadlines:
    """One clock (:meth:`run`) for the arrival of every request body: :meth:`watch` a request's scope
    while its body is read, :meth:`unwatch` it once read; a scope still watched ``interval`` seconds
    after it was put on the clock is cancelled.  Only while :attr:`running` (an app that is not running
    gives its scopes deadlines of their own)."""

    __slots__ = ("_due", "_parked", "interval", "running")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.running = False
        self._due: dict[trio.CancelScope, float] = {}
        self._parked: trio.lowlevel.Task | None = None

    def __len__(self) -> int:
        return len(self._due)

    def watch(self, scope: trio.CancelScope) -> None:
        self._due[scope] = trio.current_time() + self.interval
        parked, self._parked = self._parked, None
        if parked is not None:
            trio.lowlevel.reschedule(parked)

    def unwatch(self, scope: trio.CancelScope) -> None:
        self._due.pop(scope, None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Cancel the scopes whose body is late, until cancelled (with the app)."""
        due = self._due
        self.running = self.interval < inf
        task_status.started()
        try:
            while True:
                if not due:
                    self._parked = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(self._abort)
                    continue
                scope, when = next(iter(due.items()))
                if when > trio.current_time():
                    await trio.sleep_until(when)
                    continue
                del due[scope]
                scope.cancel()
        finally:
            self.running = False
            self._parked = None
            for scope in due:  # the app is ending: no body read now waits on a clock that is gone
                scope.cancel()
            due.clear()

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED
