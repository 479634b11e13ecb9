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

The reader waits for the socket to be readable and then reads it (without the attempt before the wait
that ``receive_some`` makes, which fails with ``EAGAIN`` on every request of a keep-alive connection).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import h11
import trio

__all__ = ["SocketReader"]

_RECEIVE_SIZE = 65536


class SocketReader:
    """The socket reader of one connection: :meth:`run` in a task of the connection, :meth:`wait` in its
    serving task, :meth:`stop` before anything else reads the socket (a lingering close, WebSocket)."""

    __slots__ = (
        "_done",
        "_fed",
        "_limit",
        "_paused",
        "_scope",
        "_stopped",
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

    async def run(self) -> None:
        """Read until the end of file, a reset or :meth:`stop`."""
        if self._done:
            return  # stopped before it started
        sock = self.stream.socket
        conn = self.conn
        with trio.CancelScope() as self._scope:
            try:
                fd = sock.fileno()
                while True:
                    if self._fed > self._limit:
                        self._paused = trio.lowlevel.current_task()
                        await trio.lowlevel.wait_task_rescheduled(self._abort_paused)
                        continue
                    await trio.lowlevel.wait_readable(sock)
                    try:
                        data = os.read(fd, _RECEIVE_SIZE)
                    except BlockingIOError:
                        continue
                    except OSError:  # a reset
                        data = b""
                    if not data:
                        break
                    conn.receive_data(data)
                    self._fed += len(data)
                    self._wake()
            except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                pass  # the socket was closed under the reader (the connection is ending)
            else:
                self.eof = True
                self._wake()
                self.on_eof()
        self._done = True
        if self._stopped is not None:
            self._stopped.set()

    async def wait(self, *, for_data: bool = True) -> None:
        """Wait (cancellably) until the reader has given h11 more bytes or seen the end of file;
        ``for_data``: the serving task needs bytes (a reader paused by the pipelining bound reads again);
        otherwise it only watches for the end of file (a pipelining client is not read further)."""
        if self.eof:
            await trio.lowlevel.checkpoint()
            return
        if for_data:
            self._fed = 0
            paused, self._paused = self._paused, None
            if paused is not None:
                trio.lowlevel.reschedule(paused)
        self._waiter = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort_wait)

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
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)

    def _abort_wait(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _abort_paused(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._paused = None
        return trio.lowlevel.Abort.SUCCEEDED
