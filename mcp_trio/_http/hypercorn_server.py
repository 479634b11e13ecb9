"""hypercorn's trio worker as mcp_trio runs it: the same code, with our fixes, and only where we start it.

:func:`serve_hypercorn` serves any ASGI app with hypercorn 0.18's own ``worker_serve`` and
``TCPServer.run``, run with their global names rebound to subclasses of ours (``TCPServer``,
``ProtocolWrapper``, ``TaskGroup``, ``H11Protocol``).  Nothing in hypercorn's modules changes: another
hypercorn app in the same process is served exactly as shipped.  What the subclasses change:

- **No request can kill the server** (upstream pgjones/hypercorn #203, docs/hypercorn.md): every socket
  write and the end-of-file go through the connection's send lock (upstream sends EOF outside it, so a
  request with ``Connection: close`` followed by stray bytes makes two tasks send at once and the
  ``BusyResourceError`` escapes the worker); a write that fails, is cancelled or takes longer than
  ``write_timeout`` closes that connection; an h11 ``LocalProtocolError`` (an app answering after its
  response was cut, a 500 head into a started response) closes that connection; any other failure of
  a connection is logged and ends that connection only.
- **Closed idle connections are released at once** (the CLOSE_WAIT fix, :mod:`.hypercorn_close_wait`).
- **Lingering close** (HTTP/1.1, docs/hypercorn.md section 5; :mod:`.linger`, shared with the h11
  server): after an answer sent before the request body was all read, EOF, then what the client still
  sends is read and dropped (bounded in time and size) before closing, so that the close does not reset
  the connection under the answer.
- **The fast path** (``hypercorn_fast_path``, on unless ``fast_path=False``): an idle timer without a
  task per request, one socket write per ASGI send, no needless round trips on the app's queue.
- **HTTP/2** (negotiated by ALPN under TLS, or h2c; docs/hypercorn.md section 4): our ``H2Protocol``
  subclass.  A send that leaves 32 KiB or more of its response queued waits until that is written out
  (upstream queues without bound when the client's flow-control window is shut), within
  ``write_timeout``; a send cut by cancellation or that times out resets that stream (``RST_STREAM``)
  and nothing else, so the app may cut sends here too; a connection that closes wakes every send still
  waiting (upstream leaves them, and the connection, hanging forever); request data for a stream whose
  response is complete is dropped (upstream raises ``KeyError``, which ends the connection and, on
  hypercorn as shipped, the whole server: pgjones/hypercorn#329); socket writes are never cut half-way
  by the writer's cancellation (one connection carries every stream), only by ``write_timeout``.
- **WebSocket pings** (``websocket_ping_interval``) end with the app's WebSocket call: upstream's pinger
  sleeps out its whole interval after the connection closed, holding the connection's tasks and the
  server's shutdown that long.
- **A misbehaving peer is one log line, rate-limited** (:data:`.hypercorn_protocols.peer_log`): an
  HTTP/2 connection that overflows the priority tree (rapid reset; the tree takes twice
  ``h2_max_concurrent_streams``, not 1 000) gets ``GOAWAY`` ``ENHANCE_YOUR_CALM``; a WebSocket handshake
  with a header hypercorn decodes as ASCII but is not gets 400 (upstream: a traceback per connection for
  both).  Other failures of a connection keep their traceback, rate-limited too (:data:`failure_log`).

Every hypercorn module whose code these connections run or whose names the subclasses use is checked
to be, in its code (comments, docstrings and formatting aside), hypercorn 0.18.0, and, in memory, what that
code defines (no monkeypatch) (:mod:`.hypercorn_guard`).
Where one differs, :func:`serve_hypercorn` refuses to start and says what differs, unless told to serve
with hypercorn as shipped (``allow_stock=True``, ``serve(..., allow_stock_hypercorn=True)``).
"""

from __future__ import annotations

import logging
import socket
import types
from collections.abc import Awaitable, Callable, Sequence
from math import inf
from typing import TYPE_CHECKING, Any, ClassVar

import h11
import hypercorn.config
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio import run as _run_module
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.utils import wrap_app

if TYPE_CHECKING:
    from hypercorn.config import Sockets

from .._runtime.containment import contained
from .._runtime.peerlog import RateLimitedLog
from . import hypercorn_close_wait as close_wait
from . import hypercorn_fast_path as fast
from . import hypercorn_guard
from . import hypercorn_protocols as protocols
from .binding import BindError
from .linger import linger_and_close

__all__ = ["hypercorn_config", "hypercorn_fixes_available", "serve_hypercorn"]

logger = logging.getLogger(__name__)
failure_log = RateLimitedLog(logger, burst=5)
"""A connection that failed otherwise (a bug, ours or hypercorn's): a traceback, at most five a minute.
(What peers do wrong is :data:`.hypercorn_protocols.peer_log`.)"""


def hypercorn_config(bind: Sequence[str] = ("127.0.0.1:8000",), **options: object) -> hypercorn.config.Config:
    """A hypercorn ``Config`` for an MCP endpoint: the given binds, no access log, hypercorn's messages
    through Python logging (the ``hypercorn.error`` logger, once, as your logging configuration says;
    hypercorn's default also writes them to stderr itself), and ``options`` set as attributes."""
    config = hypercorn.config.Config()
    config.bind = list(bind)
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    for name, value in options.items():
        setattr(config, name, value)
    return config


def hypercorn_fixes_available() -> str | None:
    """None when the installed hypercorn is the 0.18.0 code our subclasses were written against;
    otherwise what differs (then :func:`serve_hypercorn` refuses to start, unless told to serve
    hypercorn as shipped).  See :mod:`.hypercorn_guard`."""
    return hypercorn_guard.check()


FIXES_LOST = (
    "a request with Connection: close and stray bytes, an h11 protocol error or HTTP/2 request data "
    "after its response kills the whole server; a write to a client that stops reading never ends "
    "(no write_timeout); closed idle connections are held in CLOSE_WAIT for keep_alive_timeout; "
    "HTTP/2 sends wait forever after their connection closed and queue without bound on a stream "
    "nobody reads; an answer sent before the request body is lost to a reset (no lingering close); "
    "WebSocket pingers outlive their connections and refused upgrades stay open; a peer's "
    "misbehaviour logs an ERROR traceback per connection; no fast path; no "
    "mcp_trio.cancellable_send or mcp_trio.disconnect_callback scope extensions"
)
"""What serving with hypercorn as shipped gives up (docs/hypercorn.md)."""


def refusal(reason: str) -> str:
    """The error message of a refusal to serve: what differs (``reason``) and what to do."""
    return (
        f"mcp_trio refuses to serve with the installed hypercorn: it is not the hypercorn "
        f"{hypercorn_guard.HYPERCORN_VERSION} code mcp_trio's fixes were written for, so they could be "
        f"silently undone.  What differs:\n  " + reason.replace("\n", "\n  ") + "\n"
        f"Install hypercorn=={hypercorn_guard.HYPERCORN_VERSION} (pip install "
        f"'hypercorn=={hypercorn_guard.HYPERCORN_VERSION}'), or serve with hypercorn as shipped, without "
        f"mcp_trio's fixes: serve(..., allow_stock_hypercorn=True) or mcp-trio serve|demo "
        f"--allow-stock-hypercorn (see the hypercorn page of the docs for what that gives up)."
    )


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _rebind(function: Any, **names: Any) -> Any:
    """``function`` with some of its global names bound to other objects (its module is untouched).
    Each name must be one the function (or a function nested in it) looks up: a rebinding that
    would change nothing is an error, not a fix silently off."""
    unused = sorted(set(names) - _global_names(function.__code__))
    if unused:
        raise hypercorn_guard.HypercornGuardError(
            f"{function.__qualname__} does not use {', '.join(unused)}: mcp_trio's fixes do not fit it"
        )
    namespace = {**function.__globals__, **names}
    rebound = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__qualname__ = function.__qualname__
    return rebound


# -- the connection ---------------------------------------------------------------------------------


class _TCPServer(TCPServer):
    """One client connection (see the module docstring); subclassed per :func:`serve_hypercorn` call."""

    write_timeout: float = inf
    fast_path = True
    _read_ended = False
    _aborted = False
    _read_scope: trio.CancelScope | None = None
    _linger_wanted = False
    _handling = False  # the read task is in protocol.handle (not waiting for bytes)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.fast_path:
            self.idle_task = fast.IdleTimer(self)  # type: ignore[assignment]
            self.send_lock = fast.SendLock()  # type: ignore[assignment]

    async def run(self) -> None:
        try:
            # Any failure (an exception group of BaseExceptions included) ends this connection only.
            with contained("hypercorn connection", failure_log):
                await self._upstream_run()
        finally:
            # Upstream returns without closing the stream when the TLS handshake fails (plain HTTP on
            # the TLS port, a client that gives up): close it here rather than when it is collected.
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    _upstream_run: ClassVar[Callable[[TCPServer], Awaitable[None]]]

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            await self._write(event.data)
        elif isinstance(event, Closed):
            await self._close()
            await self.protocol.handle(Closed())
        elif isinstance(event, Updated):
            if not event.idle:
                await self.idle_task.stop()
            elif self._read_ended:  # CLOSE_WAIT fix, second door: nothing can be read any more
                await self.idle_task.stop()
                with trio.CancelScope(shield=True):
                    await self._initiate_server_close()
            else:
                await self.idle_task.restart(self._task_group, self._idle_timeout)

    async def _write(self, data: bytes) -> None:
        """Write under the send lock within ``write_timeout``; a write that fails, times out or is
        cancelled leaves the stream unusable, so the connection is closed."""
        if not data:
            return
        written = False
        try:
            async with self.send_lock:
                # fail_after, not a scope with a deadline computed here: that costs memory per idle
                # session (docs/performance.md, "The HTTP servers").
                with trio.fail_after(self.write_timeout):
                    await self.stream.send_all(data)
                written = True
        except trio.TooSlowError:
            protocols.peer_log.log(
                logging.INFO, "a write took longer than %s s; closing the connection", self.write_timeout
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            pass
        finally:
            if not written:
                with trio.CancelScope(shield=True):
                    await self._abort()

    async def _abort(self) -> None:
        if self._aborted:
            return
        self._aborted = True
        await self.stream.aclose()
        await self.protocol.handle(Closed())

    async def _close(self) -> None:
        """Upstream's ``_close`` (EOF, then close) under the send lock, so that it never overlaps a
        write (the overlap is what raised ``BusyResourceError`` out of the worker).  After an answer
        sent before the request body was all read, the read task closes the stream instead, once it
        has lingered (:meth:`_read_data`)."""
        with trio.CancelScope(shield=True):
            async with self.send_lock:
                try:
                    await self.stream.send_eof()
                except (trio.BrokenResourceError, AttributeError, trio.ClosedResourceError, OSError):
                    pass
                if self._read_scope is not None and not self._aborted and self._body_unread():
                    self._linger_wanted = True
                    self._read_scope.cancel()  # the read task stops feeding h11, lingers, closes
                    return
                await self.stream.aclose()

    def _body_unread(self) -> bool:
        """HTTP/1.1 (not h2, not a WebSocket) with a request whose body has not all arrived."""
        protocol = getattr(self.protocol, "protocol", None)
        connection = getattr(protocol, "connection", None)
        return (
            isinstance(protocol, H11Protocol)
            and type(connection) is h11.Connection
            and connection.their_state is h11.SEND_BODY
        )

    async def _read_data(self) -> None:
        timer = self.idle_task if isinstance(self.idle_task, fast.IdleTimer) else None
        while True:
            with trio.CancelScope() as scope:
                self._read_scope = scope
                if timer is not None:
                    await self._read_timed(scope, timer)
                else:
                    await close_wait.read_until_closed(self)
            self._read_scope = None
            if not scope.cancelled_caught or self._linger_wanted:
                break
            # The idle timer expired (keep_alive_timeout, or at once on graceful shutdown).
            if not self._handling and timer is not None and timer.deadline == inf:
                continue  # a request came in just as it expired (the read was cut before any byte)
            with trio.CancelScope(shield=True):
                await self._initiate_server_close()  # what hypercorn's idle task does
            break
        if self._linger_wanted:
            await self._linger()
        self._read_ended = True
        await self.idle_task.stop()

    async def _read_timed(self, scope: trio.CancelScope, timer: fast.IdleTimer) -> None:
        """The read loop under the fast path's idle timer: ``scope``'s deadline is the timer's."""
        timers: set[fast.IdleTimer] | None = getattr(self.context.terminated, "timers", None)
        scope.deadline = timer.deadline
        timer.reading = scope
        if timers is not None:
            timers.add(timer)
        try:
            await close_wait.read_until_closed(self)
        finally:
            timer.reading = None
            if timers is not None:
                timers.discard(timer)

    async def _linger(self) -> None:
        """Lingering close (:mod:`.linger`): ``_close`` has sent our EOF (a plain socket;
        ``trio.SSLStream`` has no half-close); read and drop what the client still sends, within the
        bounds, then close the stream.  Only this connection's read task waits."""
        await linger_and_close(self.stream)


def _worker(fast_path: bool, write_timeout: float | None) -> Callable[..., Awaitable[None]]:
    """hypercorn's ``worker_serve`` whose connections are our ``_TCPServer``."""
    h11_base = protocols.FastH11Protocol if fast_path else protocols.SafeH11Protocol
    h11_class = type(
        h11_base.__name__,
        (h11_base,),
        {"_create_stream": _rebind(H11Protocol._create_stream, WSStream=protocols.SafeWSStream)},
    )
    timeout = inf if write_timeout is None else write_timeout
    h2_class = type(
        "_H2Protocol",
        (protocols.SafeH2Protocol,),
        {
            "write_timeout": timeout,
            "_upstream_create_stream": _rebind(H2Protocol._create_stream, WSStream=protocols.SafeWSStream),
        },
    )
    wrapper = type(
        "_ProtocolWrapper",
        (ProtocolWrapper,),
        {
            "__init__": _rebind(ProtocolWrapper.__init__, H11Protocol=h11_class, H2Protocol=h2_class),
            # h2c: an HTTP/1.1 connection that turns into HTTP/2 (prior knowledge or Upgrade)
            "handle": _rebind(ProtocolWrapper.handle, H2Protocol=h2_class),
        },
    )
    task_group = type("_TaskGroup", (protocols.ConnectionTaskGroup,), {"fast_path": fast_path})
    server = type(
        "_TCPServer",
        (_TCPServer,),
        {
            "fast_path": fast_path,
            "write_timeout": timeout,
            "_upstream_run": _rebind(TCPServer.run, ProtocolWrapper=wrapper, TaskGroup=task_group),
        },
    )
    contexts = {"WorkerContext": fast.FastWorkerContext} if fast_path else {}
    worker: Callable[..., Awaitable[None]] = _rebind(_run_module.worker_serve, TCPServer=server, **contexts)
    return worker


async def serve_hypercorn(
    app: Any,
    config: hypercorn.config.Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    fast_path: bool = True,
    write_timeout: float | None = None,
    allow_stock: bool = False,
) -> None:
    """Serve any ASGI ``app`` like ``hypercorn.trio.serve(app, config, ...)``, with mcp_trio's fixes
    applied to this server only (see the module docstring).  ``fast_path=False`` keeps hypercorn's
    request path as shipped (the fixes still apply); ``write_timeout`` bounds each socket write.

    An address it cannot listen on raises :class:`~.binding.BindError` (an ``OSError``), before the
    app starts.  Raises :class:`~.hypercorn_guard.HypercornGuardError` (a ``RuntimeError``),
    before binding anything, when the installed hypercorn is not the code the fixes were written for; with
    ``allow_stock=True`` it serves with hypercorn as shipped instead (without the fixes, said loudly
    in the log)."""
    reason = hypercorn_fixes_available()
    if reason is not None and not allow_stock:
        raise hypercorn_guard.HypercornGuardError(refusal(reason))
    sockets = _listening_sockets(config)
    try:
        if reason is not None:
            logger.warning(
                "SERVING WITH HYPERCORN AS SHIPPED, WITHOUT MCP_TRIO'S FIXES (allowed by "
                "allow_stock_hypercorn).\nWhat differs from hypercorn %s:\n  %s\nGiven up: %s.",
                hypercorn_guard.HYPERCORN_VERSION,
                reason.replace("\n", "\n  "),
                FIXES_LOST,
            )
        # hypercorn.trio.serve is worker_serve(wrap_app(...)) (and two warnings about options it ignores)
        worker = _run_module.worker_serve if reason is not None else _worker(fast_path, write_timeout)
        await worker(
            wrap_app(app, config.wsgi_max_body_size, None),
            config,
            sockets=sockets,
            shutdown_trigger=shutdown_trigger,
            task_status=task_status,
        )
    finally:
        for sock in (*sockets.secure_sockets, *sockets.insecure_sockets, *sockets.quic_sockets):
            sock.close()


def _listening_sockets(config: hypercorn.config.Config) -> Sockets:
    """The sockets of ``config``'s binds, bound and listening, as hypercorn's ``worker_serve`` makes
    them when it is given none; :class:`~.binding.BindError` for a bind that fails (before the app
    starts, and raised bare: in ``worker_serve`` it would come out of three nurseries)."""
    binds = [*config.bind, *config.insecure_bind] if config.ssl_enabled else list(config.bind)
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        _close_sockets_left_in(exc)
        raise BindError.of(exc, ", ".join(binds)) from exc
    try:
        for sock in (*sockets.secure_sockets, *sockets.insecure_sockets):
            sock.listen(config.backlog)
    except OSError as exc:
        for sock in (*sockets.secure_sockets, *sockets.insecure_sockets, *sockets.quic_sockets):
            sock.close()
        raise BindError.of(exc, ", ".join(binds)) from exc
    return sockets


def _close_sockets_left_in(exc: BaseException) -> None:
    """Close the sockets a failed ``create_sockets`` made: hypercorn closes neither the one whose bind
    failed nor those it made before (they would be closed by the garbage collector, with a
    ``ResourceWarning``).  They are in the locals of the frames ``exc`` was raised through."""
    frame = exc.__traceback__
    while frame is not None:
        for value in frame.tb_frame.f_locals.values():
            for item in value if isinstance(value, list) else (value,):
                if isinstance(item, socket.socket):
                    item.close()
        frame = frame.tb_next
