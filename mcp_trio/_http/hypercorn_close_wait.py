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

mcp_trio's ``TCPServer`` subclass runs the 0.18.0 method verbatim (:func:`read_until_closed`) plus
that line; it is the patch we would propose upstream. Why it is correct and changes nothing else:

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
when a stream finishes just as the peer closes). So our ``protocol_send`` differs: an
``Updated(idle=True)`` arriving once the read loop has ended closes the connection at once
(``_initiate_server_close``, exactly what the timer would have done ``keep_alive_timeout`` later)
instead of re-arming the timer. Nothing can ever be read from such a connection again, so "idle" can
only mean "finished".

Scope and safety
----------------

The fix is applied only to the servers mcp_trio starts (:func:`mcp_trio.serve`, the ``mcp-trio``
command): ``hypercorn_server._TCPServer`` overrides ``_read_data`` (with :func:`read_until_closed` and
the final ``idle_task.stop()``) and ``protocol_send``; hypercorn's own classes are never changed, so
another hypercorn app in the same process behaves as shipped.  The subclass is used only when the
hypercorn modules it relies on are, in their code, the 0.18.0 code (``hypercorn_guard``); otherwise
mcp_trio's server refuses to start, unless told to serve hypercorn as shipped.  The asyncio worker is
not concerned: its ``_close`` already stops the idle task.

Removing this module
--------------------

When a hypercorn release stops the idle task once the read loop ends (or otherwise releases a closed
idle connection at once), ``tests/integration/test_hypercorn_close_wait.py`` shows that stock hypercorn
no longer keeps the socket; then drop the override, this module and its section of docs/hypercorn.md.
"""

from __future__ import annotations

from math import inf
from typing import Any

import trio
from hypercorn.events import Closed, RawData
from hypercorn.trio.tcp_server import MAX_RECV

from . import hypercorn_fast_path as fast

__all__ = ["read_until_closed"]


async def read_until_closed(self: Any) -> None:
    """hypercorn 0.18.0's ``TCPServer._read_data``: read until the connection can deliver no more bytes,
    then tell the protocol ``Closed()``.  The caller then stops the idle timer.  Unlike upstream, a read
    without ``read_timeout`` (the default) opens no timeout scope (upstream's ``fail_after(inf)``), and
    under the fast path reads a plain TCP stream through :func:`.hypercorn_fast_path.socket_reader`."""
    timeout = self.config.read_timeout or inf
    receive = fast.socket_reader(self.stream) if self.fast_path else None
    while True:
        try:
            if receive is not None and timeout == inf:
                data = await receive()
            elif timeout == inf:
                data = await self.stream.receive_some(MAX_RECV)
            else:
                with trio.fail_after(timeout):
                    data = await self.stream.receive_some(MAX_RECV)
        except (
            trio.ClosedResourceError,
            trio.BrokenResourceError,
            trio.TooSlowError,
        ):
            break
        else:
            self._handling = True  # mcp_trio's fast path: an idle timeout here closes the connection
            await self.protocol.handle(RawData(bytes(data)))
            self._handling = False
            if data == b"":
                break
            del data  # not kept while the loop waits for more (h11 has its own copy)
    await self.protocol.handle(Closed())
