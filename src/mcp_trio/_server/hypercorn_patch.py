"""Release closed idle keep-alive connections at once under hypercorn 0.18's trio worker.

Removable when upstream fixes it: see "Removing this module" below.

The upstream bug
================

With hypercorn 0.18.x's trio worker, when a client closes an HTTP connection while it is idle
(after a keep-alive response, or before sending any request at all), the server keeps its end of
the socket in ``CLOSE_WAIT``, together with the connection's tasks, until ``keep_alive_timeout``
(5 s by default) runs out. A client that opens a connection per request, a health check or a
load balancer probing the port can therefore pin one file descriptor and a handful of tasks per
connection for 5 s each; under load that piles up into thousands of half-dead sockets.

The mechanism (``hypercorn/trio/tcp_server.py``, hypercorn 0.18.0)
------------------------------------------------------------------

``TCPServer.run`` runs the connection inside a task group (a trio nursery)::

    async with TaskGroup() as task_group:
        ...
        await self.idle_task.restart(self._task_group, self._idle_timeout)
        await self._read_data()
    ...
    finally:
        await self._close()          # send_eof() + stream.aclose(): the socket is closed here

``self.idle_task`` (``TrioSingleTask``, ``hypercorn/trio/worker_context.py``) is a *child task of
that nursery* running ``TCPServer._idle_timeout``, which sleeps for ``keep_alive_timeout`` (or until
graceful shutdown) and then closes the connection. It is armed when the connection opens and again
whenever the protocol reports ``Updated(idle=True)`` (h11: ``H11Protocol._maybe_recycle`` after a
response completed; h2: when no stream is left), and disarmed on ``Updated(idle=False)`` (a new
request).

When the peer closes the idle connection, ``TCPServer._read_data`` receives ``b""``, feeds it to the
protocol (h11 turns it into ``ConnectionClosed``; the client side becomes ``CLOSED``, no event is
sent back), calls ``protocol.handle(Closed())`` (a no-op: there is no stream) and returns. The body
of ``async with TaskGroup()`` is now finished, but a nursery only exits when all its children have
exited, and the idle task is still sleeping. Nothing cancels it: ``_read_data`` ends without
touching ``idle_task``, and ``TCPServer._close`` (unlike the asyncio worker's ``_close``, which ends
with ``await self.idle_task.stop()``) runs only *after* the nursery has exited. So the connection
stays open until ``_idle_timeout`` fires, calls ``_initiate_server_close`` and finally lets the
nursery exit. The same happens when the server closed the stream itself while idle (for example a
malformed request after a keep-alive response), and when the peer resets the connection.

The fix
-------

First, one line at the end of ``TCPServer._read_data``: once the read loop is over and the protocol has
been told ``Closed()``, stop the idle timer::

         await self.protocol.handle(Closed())
    +    await self.idle_task.stop()

This module replaces ``TCPServer._read_data`` with a verbatim copy of the 0.18.0 method plus that
line; it is the patch we would propose upstream. Why it is correct and changes nothing else:

* ``_read_data`` only returns (rather than raising) once no more bytes can ever be read from the
  connection: EOF, the stream was closed (by us or by ``_idle_timeout``), a broken socket, or
  ``read_timeout``. At that point the idle timer has nothing left to guard. Its only job is to
  close an idle connection the peer keeps open, and the peer has closed it, or we already have.
  Stopping it lets the nursery, and then ``run``'s ``finally: await self._close()``, finish at once.
* While the connection is alive the method behaves exactly as before, so keep-alive reuse, HTTP/1.1
  pipelining (the read loop blocks in the protocol while h11 is paused; it has not returned),
  streaming responses and WebSockets are unaffected. ``keep_alive_timeout`` on an idle connection
  that stays open still fires, because the read loop is still waiting then.
* Requests still in flight are unaffected: the idle timer is already stopped while a request is
  being served (``Updated(idle=False)``), and the app tasks are other children of the nursery,
  which still waits for them exactly as before.
* Graceful shutdown: ``_idle_timeout`` wakes on ``context.terminated`` and closes the stream inside
  a shielded scope; the read loop then ends with ``ClosedResourceError`` and ``stop()`` cancels an
  idle task that is finishing anyway (the shield lets ``_initiate_server_close`` complete).
* ``TrioSingleTask.stop()`` takes the same lock as ``restart()``, so it cannot race a concurrent
  re-arm. If the read loop is cancelled (hard shutdown deadline) the new line is not reached, and
  the nursery is being cancelled anyway, like before.

The same bug has a second door, closed by a second small change: a protocol may report
``Updated(idle=True)`` *after* the read loop ended. That happens when the client resets the
connection (RST) while a response is being finished: the read loop ends with
``BrokenResourceError``, so h11 never sees the EOF and still believes the client finished its request;
when the app's task then closes the stream, ``H11Protocol._maybe_recycle`` sees DONE/DONE, starts a
new cycle and sends ``Updated(idle=True)``, which re-arms the timer on a dead socket (h2 can do the same
when a stream finishes just as the peer closes). So ``TCPServer.protocol_send`` is wrapped: an
``Updated(idle=True)`` arriving once the read loop has ended closes the connection at once
(``_initiate_server_close``, exactly what the timer would have done ``keep_alive_timeout`` later)
instead of re-arming the timer. Nothing can ever be read from such a connection again, so "idle" can
only mean "finished".

Scope and safety
----------------

:func:`apply_hypercorn_close_wait_fix` patches only when the installed hypercorn is 0.18.x *and*
``TCPServer._read_data`` is, to the character, the 0.18.0 method this module was written against
(so a hypercorn that changed or fixed the method, or another patch already applied over it, is left
alone). It is idempotent, thread-safe and cheap, so it can be called at import time and from every
entry point. The asyncio worker is not patched: its ``_close`` already stops the idle task.

Removing this module
--------------------

When a hypercorn release stops the idle task once the read loop ends (or otherwise releases a
closed idle connection at once), :func:`apply_hypercorn_close_wait_fix` starts returning ``False``
(the version or the method's source no longer matches), and
``tests/integration/test_hypercorn_close_wait.py`` fails, saying so. Then raise the hypercorn pin in
``pyproject.toml``, delete this module, its calls, its test and ``docs/hypercorn.md``.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import textwrap
import threading
from math import inf

import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer

__all__ = ["apply_hypercorn_close_wait_fix", "hypercorn_close_wait_fix_applied"]

# ``TCPServer._read_data`` exactly as shipped in hypercorn 0.18.0 (dedented). We replace the method
# only if the installed one is this very code.
_EXPECTED_UPSTREAM_SOURCE = """\
async def _read_data(self) -> None:
    while True:
        try:
            with trio.fail_after(self.config.read_timeout or inf):
                data = await self.stream.receive_some(MAX_RECV)
        except (
            trio.ClosedResourceError,
            trio.BrokenResourceError,
            trio.TooSlowError,
        ):
            break
        else:
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
    await self.protocol.handle(Closed())
"""

_lock = threading.Lock()


async def _read_data(self: TCPServer) -> None:
    """hypercorn 0.18.0's ``TCPServer._read_data`` plus the final ``idle_task.stop()``."""
    while True:
        try:
            with trio.fail_after(self.config.read_timeout or inf):
                data = await self.stream.receive_some(MAX_RECV)
        except (
            trio.ClosedResourceError,
            trio.BrokenResourceError,
            trio.TooSlowError,
        ):
            break
        else:
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
    await self.protocol.handle(Closed())
    # No more bytes can be read, so the keep-alive idle timer has nothing left to time out. Left
    # running, it keeps the connection's task group, and so the socket, open until
    # keep_alive_timeout expires.
    self._mcp_trio_read_ended = True  # type: ignore[attr-defined]
    await self.idle_task.stop()


_upstream_protocol_send = TCPServer.protocol_send


async def _protocol_send(self: TCPServer, event: Event) -> None:
    """``TCPServer.protocol_send``, but a connection that turns idle after its read loop ended is closed
    now instead of re-arming the keep-alive timer (see "a second door" in the module docstring)."""
    if isinstance(event, Updated) and event.idle and getattr(self, "_mcp_trio_read_ended", False):
        await self.idle_task.stop()
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()
        return
    await _upstream_protocol_send(self, event)


def _installed_hypercorn_has_the_bug() -> bool:
    try:
        version = importlib.metadata.version("hypercorn")
    except importlib.metadata.PackageNotFoundError:
        return False
    if not version.startswith("0.18."):
        return False
    try:
        source = textwrap.dedent(inspect.getsource(TCPServer._read_data))
    except (OSError, TypeError):  # no source available: we cannot check the shape, so do not patch
        return False
    return _normalise(source) == _normalise(_EXPECTED_UPSTREAM_SOURCE)


def _normalise(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def apply_hypercorn_close_wait_fix() -> bool:
    """Make hypercorn's trio worker release a connection the client closed while idle at once.

    Patches ``hypercorn.trio.tcp_server.TCPServer._read_data`` when the installed hypercorn is
    0.18.x and the method is the one with the bug (see the module docstring). Idempotent and
    thread-safe; call it any number of times, at import time included. Returns True if the fix is
    active, False if it was not applied (a different hypercorn, or the method was changed).
    """
    with _lock:
        if hypercorn_close_wait_fix_applied():
            return True
        if not _installed_hypercorn_has_the_bug():
            return False
        setattr(TCPServer, "_read_data", _read_data)  # noqa: B010
        setattr(TCPServer, "protocol_send", _protocol_send)  # noqa: B010
        return True


def hypercorn_close_wait_fix_applied() -> bool:
    """True if hypercorn's trio worker runs with the fix in this process."""
    return (
        TCPServer.__dict__.get("_read_data") is _read_data
        and TCPServer.__dict__.get("protocol_send") is _protocol_send
    )
