"""An embedded HTTP/1.1 server on Trio + h11 for any ASGI app: ``serve_h11``.

hypercorn stays the production server (HTTP/2, TLS, workers, a long record).  This path is for Trio
programs that embed an MCP endpoint and want it cheap: it runs in the caller's nursery and serves the
*same ASGI app*, so every behaviour of the ASGI path (sessions, streams, cancellation, shutdown) is the
app's own and is tested against both servers.  It sets the ``mcp_trio.cancellable_send`` and
``mcp_trio.disconnect_callback`` scope extensions (:mod:`mcp_trio._runtime.contract`) and knows nothing
else of the app: what it needs from
it (its lifetime, its shutdown, its limits) comes in as arguments, which :func:`mcp_trio.serve` fills
in from an ``MCPApp``.

This module listens, accepts and shuts down; each connection is an :class:`~.h11_connection.H11Connection`
(a serving task and a socket reader each).  Everything a connection does runs inside its containment:
a client that resets at any moment ends its connection only.  Each accepted connection is counted
(:mod:`.h11_limits`) until its socket is closed: one over the caps is refused at once, and when
descriptors run out (``accept`` fails with ``EMFILE``), the oldest idle connections make room.

Only HTTP/1.1 (and 1.0) over plain TCP, WebSocket upgrades included (:mod:`.h11_websocket`): no TLS,
no HTTP/2.
"""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from .._runtime.containment import contained
from .binding import BindError
from .h11_connection import H11Connection, peer_log
from .h11_limits import ConnectionLimits, address_key, default_caps, refuse

__all__ = ["H11Config", "serve_h11"]

logger = logging.getLogger(__name__)

_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""``accept`` errors worth waiting out (as ``trio.serve_listeners`` does); any other is raised."""


@dataclass(frozen=True, slots=True)
class H11Config:
    """Settings of the embedded h11 server (``serve(app, http="h11", config=H11Config(...))``)."""

    keep_alive_timeout: float = 5.0
    """Close a keep-alive connection idle for this long between requests (seconds)."""
    read_timeout: float = 30.0
    """A request head (and each wait for request body bytes) must complete within this (seconds)."""
    max_head_size: int = 16 * 1024
    """Largest request head accepted (bytes); larger ones get 431."""
    max_pipelined: int = 64 * 1024
    """Bytes a client may send ahead (pipelining) while a response is under way; beyond, reading stops."""
    shutdown_grace: float = 5.0
    """After the app has closed its sessions, how long responses still under way may take (seconds)."""
    backlog: int | None = None
    """The listening sockets' backlog (None: Trio's, the system's maximum)."""
    max_connections: int | None = None
    """Connections open at once.  Beyond, the oldest connection that is idle or has not sent a whole
    request head is closed to make room, else the new one is refused (503).  None: from the descriptor
    limit when the server starts (an eighth of the descriptors, at least 64, left free: 896 with
    1024); 0: no cap."""
    max_connections_per_address: int | None = None
    """Connections open at once from one client address (IPv4-mapped IPv6 counts as its IPv4 address);
    beyond, a new one is refused (503).  None: a quarter of ``max_connections`` (224 with 1024
    descriptors); 0: no cap (behind a reverse proxy, whose address every connection has)."""
    write_timeout: float | None = None
    """A socket write that cannot complete within this closes its connection (seconds).  None: the
    app's ``config.write_timeout`` (as :func:`mcp_trio.serve` fills it in; no bound otherwise)."""
    websocket_max_message: int | None = None
    """A WebSocket message longer than this (bytes) closes its connection (1009).  None: the app's
    ``config.max_body_size`` (as :func:`mcp_trio.serve` fills it in; no bound otherwise)."""
    websocket_ping_interval: float | None = None
    """A WebSocket ping this often (seconds).  None: the app's ``config.keepalive_interval`` (as
    :func:`mcp_trio.serve` fills it in; no pings otherwise)."""


async def serve_h11(
    app: Callable[..., Awaitable[None]],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    config: H11Config | None = None,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    lifetime: Callable[..., Awaitable[None]] | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve the ASGI ``app`` over HTTP/1.1 on ``host:port`` until ``shutdown_trigger`` returns.

    Runs in the caller's nursery (``await nursery.start(serve_h11, app, "127.0.0.1", 0)`` reports the
    bound URLs, e.g. ``["http://127.0.0.1:40123"]``).  ``lifetime`` (an ``MCPApp``'s ``run``) is started
    with ``nursery.start`` before listening and cancelled once serving is over, like an ASGI lifespan.
    Shutdown is graceful: listening stops, idle connections close, ``on_shutdown()`` runs (an
    ``MCPApp``'s ``aclose``: its sessions close, so every stream ends with its final event), responses
    under way get ``shutdown_grace``.  Cancelling the task instead stops everything at once.
    An address it cannot listen on raises :class:`~.binding.BindError` (an ``OSError``).
    """
    config = config or H11Config()
    try:
        listeners = await trio.open_tcp_listeners(port, host=host, backlog=config.backlog)
    except OSError as exc:
        raise BindError.of(exc, f"[{host}]:{port}" if ":" in host else f"{host}:{port}") from exc
    urls = [_url(listener.socket.getsockname()) for listener in listeners]
    limits = connection_limits(config)
    shutting_down = False
    all_closed = trio.Event()

    def is_shutting_down() -> bool:
        return shutting_down

    async def handle(
        stream: trio.SocketStream, nursery: trio.Nursery, key: str, addresses: tuple[Any, Any]
    ) -> None:
        # Counted (under ``key``) from its accept until its socket is closed, whatever happens; nothing
        # a connection raises may end the server's nursery.
        connection: H11Connection | None = None
        try:
            with contained("HTTP/1.1 connection"):
                connection = H11Connection(stream, app, config, *addresses, limits)
                await connection.serve(is_shutting_down, nursery)
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            limits.release(key, shed=connection is not None and connection.is_shed)
            if shutting_down and not limits.total:
                all_closed.set()

    def admit(stream: trio.SocketStream, nursery: trio.Nursery) -> None:
        try:
            sock = stream.socket
            server_addr, client = _addr(sock.getsockname()), _addr(sock.getpeername())
        except OSError:  # reset before we looked at it (ENOTCONN): nothing to answer
            stream.socket.close()
            return
        key = address_key(client[0]) if client is not None else ""
        if not limits.admit(key):
            peer_log.log(logging.INFO, "refused a connection from %s: too many connections (503)", key)
            refuse(stream)
            return
        try:
            nursery.start_soon(handle, stream, nursery, key, (server_addr, client))
        except BaseException:  # pragma: no cover - the nursery is closing: never counted as open
            limits.release(key)
            stream.socket.close()
            raise

    async def accept(listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                await _make_room(limits, exc)
                continue
            admit(stream, nursery)

    try:
        async with trio.open_nursery() as app_nursery:
            if lifetime is not None:
                await app_nursery.start(lifetime)
            async with trio.open_nursery() as conn_nursery:
                with trio.CancelScope() as accepting:
                    async with trio.open_nursery() as accept_nursery:
                        for listener in listeners:
                            accept_nursery.start_soon(accept, listener, conn_nursery)
                        task_status.started(urls)
                        if shutdown_trigger is None:
                            await trio.sleep_forever()
                        else:
                            await shutdown_trigger()
                        accepting.cancel()
                shutting_down = True
                for listener in listeners:
                    await listener.aclose()
                while limits.shed_oldest():  # idle connections close, and those without a whole head
                    pass
                if on_shutdown is not None:
                    await on_shutdown()  # an MCPApp's sessions end: their streams send their last events
                if limits.total:
                    with trio.move_on_after(config.shutdown_grace):
                        await all_closed.wait()
                conn_nursery.cancel_scope.cancel()
            app_nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()


def connection_limits(config: H11Config) -> ConnectionLimits:
    """The caps of ``config``, the defaults filled in from the descriptor limit (0: no cap)."""
    total, per_address = default_caps()
    if config.max_connections is not None:
        total = config.max_connections or sys.maxsize
        per_address = max(1, total // 4)
    if config.max_connections_per_address is not None:
        per_address = config.max_connections_per_address or sys.maxsize
    return ConnectionLimits(total, per_address)


async def _make_room(limits: ConnectionLimits, exc: OSError) -> None:
    """``accept`` failed for want of descriptors (or memory): close the oldest idle connection (or one
    whose head is not whole) and wait until its socket is closed, then ``accept`` again; with none
    to close, wait 0.1 s (as ``trio.serve_listeners`` does)."""
    if limits.shed_oldest():
        peer_log.log(logging.WARNING, "accept failed (%s): closing the oldest idle connection", exc)
        with trio.move_on_after(1.0):
            await limits.wait_released()
        return
    peer_log.log(logging.WARNING, "accept failed, retrying in 0.1 s: %r", exc)
    await trio.sleep(0.1)


def _addr(sockname: Any) -> tuple[str, int] | None:
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return (str(sockname[0]), int(sockname[1]))
    return None  # pragma: no cover - not an IP socket


def _url(sockname: Any) -> str:
    host, port = sockname[0], sockname[1]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"
