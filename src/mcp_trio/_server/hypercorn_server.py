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
- **Closed idle connections are released at once** (the CLOSE_WAIT fix, ``hypercorn_patch``).
- **The fast path** (``hypercorn_fast_path``, on unless ``fast_path=False``): an idle timer without a
  task per request, one socket write per ASGI send, no needless round trips on the app's queue.

Every upstream function that is rebound or whose behaviour the subclasses rely on is checked against
the sha256 of its hypercorn 0.18.0 source.  Where one differs, or sources are not shipped (a
``.pyc``-only install), :func:`serve_hypercorn` logs a warning and serves with hypercorn as shipped.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import logging
import textwrap
import types
from collections.abc import Awaitable, Callable
from math import inf
from typing import Any, ClassVar

import h11
import hypercorn.config
import hypercorn.trio
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.trio import run as _run_module
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import TrioSingleTask
from hypercorn.utils import wrap_app

from . import hypercorn_fast_path as fast
from . import hypercorn_patch as close_wait

__all__ = ["CANCELLABLE_SEND", "hypercorn_fixes_available", "serve_hypercorn"]

logger = logging.getLogger(__name__)

CANCELLABLE_SEND = "mcp_trio.cancellable_send"
"""ASGI scope extension set by mcp_trio's servers on HTTP/1.1 requests: cancelling the app's ``send()``
is safe there (an interrupted write closes that connection and nothing else)."""

# sha256[:16] of the dedented hypercorn 0.18.0 source of each function we rebind, replace or rely on.
_EXPECTED = {
    "worker_serve": "8dc8347a9fc357ca",
    "TCPServer.run": "30e3a0c602fd1a3e",
    "TCPServer.protocol_send": "22b51ba714d07580",
    "TCPServer._read_data": "73588ef2e57091d4",
    "TCPServer._close": "544a46e0eb9f7c16",
    "ProtocolWrapper.__init__": "e978b0c0e9e8d22c",
    "TrioSingleTask": "aa59316c028b876a",
    "H11Protocol._send_h11_event": "fdb5e069793a1d99",
    "H11Protocol.stream_send": "c7ef437818f28b28",
    "HTTPStream.app_send": "6371d58b7f58ae8d",
    "TaskGroup.spawn_app": "487c35772c8bd89c",
}


def _targets() -> dict[str, Any]:
    return {
        "worker_serve": _run_module.worker_serve,
        "TCPServer.run": TCPServer.run,
        "TCPServer.protocol_send": TCPServer.protocol_send,
        "TCPServer._read_data": TCPServer._read_data,
        "TCPServer._close": TCPServer._close,
        "ProtocolWrapper.__init__": ProtocolWrapper.__init__,
        "TrioSingleTask": TrioSingleTask,
        "H11Protocol._send_h11_event": H11Protocol._send_h11_event,
        "H11Protocol.stream_send": H11Protocol.stream_send,
        "HTTPStream.app_send": HTTPStream.app_send,
        "TaskGroup.spawn_app": TaskGroup.spawn_app,
    }


def _source_hash(obj: Any) -> str | None:
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@functools.cache
def hypercorn_fixes_available() -> str | None:
    """None when the installed hypercorn is the 0.18.0 code our subclasses were written against;
    otherwise why not (then :func:`serve_hypercorn` serves with hypercorn as shipped)."""
    try:
        version = importlib.metadata.version("hypercorn")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - it is a dependency
        return "hypercorn's version is unknown"
    if not version.startswith("0.18."):
        return f"hypercorn {version} is not 0.18"
    for name, obj in _targets().items():
        found = _source_hash(obj)
        if found is None:
            return f"the source of hypercorn's {name} is not available"
        if found != _EXPECTED[name]:
            return f"hypercorn's {name} is not the 0.18.0 code (sha256 {found})"
    return None


def _rebind(function: Any, **names: Any) -> Any:
    """``function`` with some of its global names bound to other objects (its module is untouched)."""
    namespace = {**function.__globals__, **names}
    rebound = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__qualname__ = function.__qualname__
    return rebound


# -- HTTP/1.1 protocol ------------------------------------------------------------------------------


class _SafeH11Protocol(H11Protocol):
    """h11 as hypercorn drives it, but a ``LocalProtocolError`` closes the connection instead of
    escaping the worker (upstream re-raises it unless the client was at fault)."""

    async def _send_h11_event(self, event: Any) -> None:
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError as exc:
            if self.connection.their_state != h11.ERROR:
                logger.warning("closing a connection after an HTTP/1.1 protocol error: %s", exc)
                await self._abandon()
            return
        await self._write(data)

    async def _write(self, data: bytes) -> None:
        await self.send(RawData(data=data))

    async def _abandon(self) -> None:
        await self.send(Closed())


class _FastH11Protocol(_SafeH11Protocol):
    """The fast path's writes: what one ASGI send produces goes out in one socket write."""

    _fp_pending = b""
    _fp_batch = 0
    _fp_hold_head = False

    async def _write(self, data: bytes) -> None:
        await fast.queue_write(self, data)

    async def _abandon(self) -> None:
        self._fp_pending = b""
        await super()._abandon()

    async def stream_send(self, event: Any) -> None:
        await fast.before_stream_send(self, event)
        await super().stream_send(event)


class _TaskGroup(TaskGroup):
    """The connection's task group: the app's queue without needless round trips (fast path), the
    fast path's one write per ASGI send, and the scope extension that says sends may be cancelled."""

    fast_path = True

    async def spawn_app(self, app: Any, config: Any, scope: Any, send: Any) -> Any:
        protocol = getattr(getattr(getattr(send, "__self__", None), "send", None), "__self__", None)
        if isinstance(protocol, _SafeH11Protocol) and isinstance(scope.get("extensions"), dict):
            scope["extensions"][CANCELLABLE_SEND] = {}
        if isinstance(protocol, _FastH11Protocol):
            send = fast.one_write_per_send(protocol, send)
        if not self.fast_path:
            return await super().spawn_app(app, config, scope, send)
        assert self._nursery is not None
        return fast.spawn_app(self._nursery, app, config, scope, send)


# -- the connection ---------------------------------------------------------------------------------


class _TCPServer(TCPServer):
    """One client connection (see the module docstring); subclassed per :func:`serve_hypercorn` call."""

    write_timeout: float = inf
    fast_path = True
    _read_ended = False
    _aborted = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.fast_path:
            self.idle_task = fast.IdleTimer()  # type: ignore[assignment]

    async def run(self) -> None:
        try:
            await self._upstream_run()
        except Exception:
            logger.exception("hypercorn connection failed; closed it")
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
                with trio.fail_after(self.write_timeout):
                    await self.stream.send_all(data)
                written = True
        except trio.TooSlowError:
            logger.info("a write took longer than %s s; closing the connection", self.write_timeout)
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
        write (the overlap is what raised ``BusyResourceError`` out of the worker)."""
        with trio.CancelScope(shield=True):
            async with self.send_lock:
                try:
                    await self.stream.send_eof()
                except (trio.BrokenResourceError, AttributeError, trio.ClosedResourceError, OSError):
                    pass
                await self.stream.aclose()

    async def _read_data(self) -> None:
        await close_wait.read_until_closed(self)
        self._read_ended = True
        await self.idle_task.stop()


def _worker(fast_path: bool, write_timeout: float | None) -> Callable[..., Awaitable[None]]:
    """hypercorn's ``worker_serve`` whose connections are our ``_TCPServer``."""
    h11_class = _FastH11Protocol if fast_path else _SafeH11Protocol
    wrapper = type(
        "_ProtocolWrapper",
        (ProtocolWrapper,),
        {"__init__": _rebind(ProtocolWrapper.__init__, H11Protocol=h11_class)},
    )
    task_group = type("_TaskGroup", (_TaskGroup,), {"fast_path": fast_path})
    server = type(
        "_TCPServer",
        (_TCPServer,),
        {
            "fast_path": fast_path,
            "write_timeout": inf if write_timeout is None else write_timeout,
            "_upstream_run": _rebind(TCPServer.run, ProtocolWrapper=wrapper, TaskGroup=task_group),
        },
    )
    worker: Callable[..., Awaitable[None]] = _rebind(_run_module.worker_serve, TCPServer=server)
    return worker


async def serve_hypercorn(
    app: Any,
    config: hypercorn.config.Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    fast_path: bool = True,
    write_timeout: float | None = None,
) -> None:
    """Serve any ASGI ``app`` like ``hypercorn.trio.serve(app, config, ...)``, with mcp_trio's fixes
    applied to this server only (see the module docstring).  ``fast_path=False`` keeps hypercorn's
    request path as shipped (the fixes still apply); ``write_timeout`` bounds each socket write."""
    reason = hypercorn_fixes_available()
    if reason is not None:
        logger.warning("serving with hypercorn as shipped (no mcp_trio fixes): %s", reason)
        await hypercorn.trio.serve(app, config, shutdown_trigger=shutdown_trigger, task_status=task_status)
        return
    worker = _worker(fast_path, write_timeout)
    await worker(
        wrap_app(app, config.wsgi_max_body_size, None),
        config,
        shutdown_trigger=shutdown_trigger,
        task_status=task_status,
    )

