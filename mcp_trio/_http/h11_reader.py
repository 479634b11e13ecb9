"""The one socket reader of an embedded HTTP/1.1 connection (:mod:`.h11_connection`).

Each connection has one task that serves its requests (the app runs in it) and this reader, a second
task for the connection's whole life, which alone reads the socket: it feeds what arrives to h11 and
wakes the serving task when that task waits for bytes.  So the end of file (or a reset) is seen at
once whatever the serving task is doing, which is what the ``mcp_trio.disconnect_callback`` extension
needs, without a task per request: a request's handler runs in the serving task and the reader calls
its disconnect callback when the client goes while the response is under way.

Bytes a client sends ahead (pipelining) are kept in h11 for its next cycle; once more than
``max_pipelined`` bytes have arrived since the serving task last asked for data, the reader stops
reading until it asks again (a client cannot make the server buffer without bound).

The serving task's waits are bounded (the keep-alive timeout between requests, the read timeout within
one) without a cancel scope per wait: the reader's own wait for the socket runs under an alarm (a cancel
scope's deadline) that is only ever moved earlier; when it goes off, the serving task is woken if its
wait's deadline has passed, and otherwise the alarm is set again for that deadline.  Under steady load
that is one alarm per keep-alive timeout, not a scope per request.

The reader waits for the socket to be readable and then reads it (without the attempt before the wait
that ``receive_some`` makes, which fails with ``EAGAIN`` on every request of a keep-alive connection).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from math import inf

import h11
import trio

from .._runtime.containment import contained

__all__ = ["RAW_FD_IO", "SocketReader"]

_RECEIVE_SIZE = 65536
RAW_FD_IO = sys.platform != "win32"
"""A socket's descriptor can be read and written with ``os.read``/``os.write`` (not on Windows, where
the reader uses ``receive_some`` and writes go through ``send_all``)."""


class SocketReader:
    """The socket reader of one connection: :meth:`run` in a task of the server's connection nursery
    beside the serving task, :meth:`wait` in the serving task, :meth:`stop` before anything else reads
    the socket (a lingering close, WebSocket) and, at the latest, when the serving task ends."""

    __slots__ = (
        "_alarm",
        "_done",
        "_fed",
        "_limit",
        "_paused",
        "_scope",
        "_stopped",
        "_timed_out",
        "_wait_deadline",
        "_waiter",
        "conn",
        "eof",
        "on_eof",
        "stream",
    )

    def __init__(
        self, stream: trio.SocketStream, conn: h11.Connection, limit: int, on_eof: Callable[[], None]
    ) -> None:
        self.stream = stream
        self.conn = conn
        self.eof = False
        """The client has gone (end of file or reset); everything it sent before is in h11."""
        self.on_eof = on_eof
        """Called (from the reader task) when :attr:`eof` becomes true."""
        self._limit = limit
        self._fed = 0
        """Bytes given to h11 since the serving task last asked for data."""
        self._waiter: trio.lowlevel.Task | None = None
        """The serving task in :meth:`wait`."""
        self._paused: trio.lowlevel.Task | None = None
        """The reader task, when it waits for the serving task to take what it has read."""
        self._scope: trio.CancelScope | None = None
        self._stopped: trio.Event | None = None
        """Set once :meth:`run` has returned, if :meth:`stop` waits for it."""
        self._done = False
        """:meth:`run` has returned, or :meth:`stop` came before it started (then it does not read)."""
        self._wait_deadline = inf
        """When the serving task's wait ends, if nothing comes (its timeout)."""
        self._alarm = inf
        """When the reader next looks at the serving task's deadline (never later than it)."""
        self._timed_out = False

    async def run(self) -> None:
        """Read until the end of file, a reset or :meth:`stop`.  Contained: a failure ends the reading
        (logged), never the nursery it runs in; then, as when it is cancelled from outside, the serving
        task sees an end of file rather than wait for bytes that no one reads.

        One cancel scope at a time serves both :meth:`stop` (cancelled) and the alarm (its deadline); it
        is made anew only when the alarm goes off."""
        if self._done:
            return  # stopped before it started
        try:
            with contained("HTTP/1.1 socket reader"):
                sock = self.stream.socket
                conn = self.conn
                fd = sock.fileno()
                while self._stopped is None:
                    with trio.CancelScope(deadline=self._alarm) as self._scope:
                        try:
                            while True:
                                if self._fed > self._limit:
                                    self._paused = trio.lowlevel.current_task()
                                    await trio.lowlevel.wait_task_rescheduled(self._abort_paused)
                                    continue
                                if RAW_FD_IO:
                                    await trio.lowlevel.wait_readable(sock)
                                    try:
                                        data = os.read(fd, _RECEIVE_SIZE)
                                    except BlockingIOError:
                                        continue
                                    except OSError:  # a reset
                                        data = b""
                                else:  # pragma: no cover - Windows
                                    try:
                                        data = await self.stream.receive_some(_RECEIVE_SIZE)
                                    except trio.BrokenResourceError:  # a reset
                                        data = b""
                                if not data:
                                    break
                                conn.receive_data(data)
                                self._fed += len(data)
                                self._wake()
                        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                            pass  # the socket was closed under the reader: nothing more will come either
                        self.eof = True
                        self._wake()
                        self.on_eof()
                        return
                    if self._stopped is None:  # the alarm went off
                        self._alarm_went_off()
        finally:
            self._done = True
            if self._stopped is None:
                self.eof = True
                self._wake()
            else:
                self._stopped.set()

    def _alarm_went_off(self) -> None:
        """Time the serving task's wait out if its deadline has passed; set the alarm for it otherwise."""
        if self._waiter is not None and trio.current_time() >= self._wait_deadline:
            self._wait_deadline = inf
            self._timed_out = True
            self._wake()
        self._alarm = self._wait_deadline if self._waiter is not None else inf

    async def wait(self, within: float = inf, *, for_data: bool = True) -> bool:
        """Wait (cancellably) until the reader has given h11 more bytes or seen the end of file (True),
        or ``within`` seconds have passed, or :meth:`interrupt` (False); ``for_data``: the serving task
        needs bytes (a reader paused by the pipelining bound reads again); otherwise it only watches for
        the end of file (a pipelining client is not read further)."""
        if self.eof:
            await trio.lowlevel.checkpoint()
            return True
        deadline = self._wait_deadline = trio.current_time() + within if within < inf else inf
        if deadline < self._alarm:  # the alarm must go off earlier (rare: it is never moved later)
            self._alarm = deadline
            if self._scope is not None:
                self._scope.deadline = deadline
        if for_data:
            self._fed = 0
            paused, self._paused = self._paused, None
            if paused is not None:
                trio.lowlevel.reschedule(paused)
        self._timed_out = False
        self._waiter = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort_wait)
        return not self._timed_out

    def interrupt(self) -> None:
        """End the serving task's wait now, as a timeout would (shutdown closing an idle connection)."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._timed_out = True
            trio.lowlevel.reschedule(waiter)

    async def stop(self) -> None:
        """End the reader and wait until it has: the socket is then free for another reader."""
        scope = self._scope
        if self._done or scope is None:  # over, or not started yet: it never will
            self._done = True
            return
        if self._stopped is None:
            self._stopped = trio.Event()
            scope.cancel()
        await self._stopped.wait()

    def _wake(self) -> None:
        """Wake the serving task (more bytes, the end of file, or its time is up)."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)

    def _abort_wait(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _abort_paused(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._paused = None
        return trio.lowlevel.Abort.SUCCEEDED
