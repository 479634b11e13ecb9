"""Serving an :class:`~mcp_trio.MCPApp`: ``serve(app, host, port, http="hypercorn"|"h11")``.

One entry point for both HTTP servers mcp_trio starts: hypercorn as mcp_trio runs it (HTTP/1.1,
HTTP/2, TLS; :mod:`mcp_trio._http.hypercorn_server`) and the embedded Trio + h11 server (HTTP/1.1 only,
cheap; :mod:`mcp_trio._http.h11_server`).  The chosen server is imported when ``serve`` is called, so a
program serving with h11 never loads hypercorn, h2, hpack or priority.  The servers know nothing of
the app: this module hands them what they need of it (its lifetime, its shutdown, its write timeout,
its WebSocket limits).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal

import trio

from ._http.binding import BindError
from .errors import ListenError

if TYPE_CHECKING:
    import hypercorn.config

    from ._http.h11_server import H11Config
    from ._transport.asgi import MCPApp

__all__ = ["serve", "wait_for_signal"]

logger = logging.getLogger("mcp_trio.serve")
ADMIN_SHUTDOWN_GRACE = 1.0
"""Seconds the operations listener's responses under way get once the public listener has closed."""
ADMIN_MAX_CONNECTIONS = 64
"""Connections the operations listener keeps open at once (16 from one address): scrapers and probes
need a few, and a flood of it leaves the descriptors to the public listener."""


async def wait_for_signal(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Return when the process receives one of ``signals`` (SIGINT, SIGTERM by default)."""
    with trio.open_signal_receiver(*signals) as received:
        async for _ in received:
            return


async def serve(
    app: MCPApp,
    host: str | None = None,
    port: int | None = None,
    *,
    http: Literal["hypercorn", "h11"] = "hypercorn",
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    certfile: str | None = None,
    keyfile: str | None = None,
    config: hypercorn.config.Config | H11Config | None = None,
    hypercorn_fast_path: bool = True,
    allow_stock_hypercorn: bool = False,
    admin_bind: str | None = None,
    admin_started: Callable[[list[str]], object] | None = None,
    admin_allowed_hosts: Iterable[str] = (),
    admin_public: bool = False,
) -> None:
    """Serve ``app`` on ``host:port`` (127.0.0.1:8000 by default) until ``shutdown_trigger`` returns
    (or the task is cancelled).

    Runs in the caller's nursery: ``await nursery.start(serve, app, "127.0.0.1", 0)`` reports, once
    listening, the app's endpoint on each bound address through ``task_status``: the URL a client
    connects to (``["http://127.0.0.1:40123/mcp"]``: the address, then the app's ``config.path``, ``/``
    when that is None; ``https://`` with TLS), as ``mcp-trio serve`` prints it.  An address it cannot
    listen on raises :class:`~mcp_trio.errors.ListenError` (an ``OSError``, not in an exception group;
    its ``errno`` says why: ``errno.EADDRINUSE`` for a port in use) before anything is served, whichever
    the server.

    The app runs while serving (no ASGI lifespan to arrange), and the server's lifespan with it:
    entered before anything is accepted, left after the shutdown; if it fails (entering raises, or its
    tasks crash) the server stops and ``serve`` raises the lifespan's exception.  Shutdown is graceful:
    the app drains while still listening (its readiness turns, it serves on for ``config.drain_delay``),
    its sessions are closed, so every open stream ends cleanly (each WebSocket with 1001), then
    listening stops and the server's own grace period runs.

    ``http`` chooses the server:

    - ``"hypercorn"`` (the default): hypercorn's trio worker with mcp_trio's fixes, for this server
      only (no request can kill it, closed idle connections are released at once, each socket write
      is bounded by the app's ``config.write_timeout``) and, unless ``hypercorn_fast_path`` is false,
      the fast path; HTTP/2 to clients that offer it.  ``certfile`` and ``keyfile`` serve HTTPS
      (docs/deploy/tls.md).  ``config``: a full ``hypercorn.config.Config`` for what else hypercorn
      offers (several binds, a Unix socket or an inherited ``fd://``, its timeouts); where to listen is
      then its ``bind``, and ``host``/``port`` must not be given.  WebSocket connections get pings
      every ``keepalive_interval`` (unless ``config`` sets ``websocket_ping_interval``) and messages are
      bounded by ``max_body_size``.  The fixes are written for hypercorn 0.18.0's code: when the
      installed hypercorn differs (in its code, not in comments or formatting), ``serve`` raises
      ``RuntimeError`` (``HypercornGuardError``) before binding anything, saying what differs; with
      ``allow_stock_hypercorn=True`` it serves with hypercorn as shipped instead, without any of the
      fixes or the fast path (a WARNING in the log says so and what is given up; docs/hypercorn.md).
    - ``"h11"``: the embedded HTTP/1.1 server (WebSocket included; no TLS, no HTTP/2), loading
      neither hypercorn nor h2 (docs/embedded-server.md).  ``config``: an
      :class:`~mcp_trio._http.h11_server.H11Config` (its timeouts and limits; its ``write_timeout``
      and WebSocket limits default to the app's).

    ``admin_bind="HOST:PORT"`` (port 0 picks a free one) serves the operations listener there too
    (:class:`~mcp_trio._transport.admin.AdminApp`: ``/metrics``, ``/healthz``, ``/readyz``,
    ``/stats``) on the embedded h11 server, whichever ``http`` is.  It listens before the public
    listener starts and stays until the public listener has closed and the app has drained, so
    ``/readyz`` says 503 while the public port still serves (``config.drain_delay``).  Its URLs are
    logged (INFO, logger ``mcp_trio.serve``) and given to ``admin_started``, if set (its base URLs,
    ``http://127.0.0.1:9464``: the paths are ``/metrics`` and the others); ``task_status`` still
    reports the public endpoint.  An ``admin_bind`` it cannot listen on raises ``ListenError`` too
    (``listener="operations listener"``), before the public listener starts.  The listener answers
    only requests whose ``Host`` is its own address, a loopback name, or one of
    ``admin_allowed_hosts`` (``host`` or ``host:port``: the name Prometheus or a probe scrapes it by),
    421 otherwise (DNS-rebinding protection).  An address beyond loopback (``0.0.0.0``, ``::``, a
    host name, another interface's address) exposes the server's metrics, statistics and health to
    whoever reaches it: it needs ``admin_public=True`` (then a WARNING in the log says so), else
    ``serve`` raises ``ValueError`` before binding anything.
    """
    if admin_bind is not None:
        await _serve_with_admin(
            app,
            _AdminOptions(admin_bind, admin_started, tuple(_hosts(admin_allowed_hosts)), admin_public),
            functools.partial(
                serve,
                app,
                host,
                port,
                http=http,
                shutdown_trigger=shutdown_trigger,
                certfile=certfile,
                keyfile=keyfile,
                config=config,
                hypercorn_fast_path=hypercorn_fast_path,
                allow_stock_hypercorn=allow_stock_hypercorn,
            ),
            task_status,
            http_server=http,
        )
        return
    endpoints = _Endpoints(task_status, app)
    try:
        if http == "hypercorn":
            await _serve_hypercorn(
                app,
                host,
                port,
                config,
                certfile=certfile,
                keyfile=keyfile,
                shutdown_trigger=shutdown_trigger,
                task_status=endpoints,
                fast_path=hypercorn_fast_path,
                allow_stock=allow_stock_hypercorn,
            )
        elif http == "h11":
            if certfile is not None or keyfile is not None:
                raise ValueError("the embedded h11 server does not do TLS: serve with http='hypercorn'")
            await _serve_h11(
                app, host, port, config, shutdown_trigger=shutdown_trigger, task_status=endpoints
            )
        else:
            raise ValueError(f"http must be 'hypercorn' or 'h11', not {http!r}")
    except BindError as exc:  # raised bare by either server, before it reported its URLs
        raise ListenError.from_os_error(exc, str(exc.filename)) from exc
    except BaseException as exc:  # the lifespan's failure as itself, from either server
        _raise_lifespan_failure(app, exc)
        raise


class _Endpoints:
    """The ``task_status`` a server is given: the base URLs it reports (``http://127.0.0.1:40123``)
    go to ``serve``'s caller as the app's endpoint on each (``http://127.0.0.1:40123/mcp``), and only
    if the app started (hypercorn binds and reports even after the app's ``lifespan.startup.failed``,
    then raises: ``serve`` raises only)."""

    def __init__(self, task_status: trio.TaskStatus[list[str]], app: MCPApp) -> None:
        self._task_status = task_status
        self._app = app
        self._path = app.config.path or "/"

    def started(self, value: list[str] | None = None) -> None:
        if self._app.startup_failure is None:
            self._task_status.started([url + self._path for url in value or ()])


async def _serve_hypercorn(
    app: MCPApp,
    host: str | None,
    port: int | None,
    config: object,
    *,
    certfile: str | None,
    keyfile: str | None,
    shutdown_trigger: Callable[[], Awaitable[None]] | None,
    task_status: trio.TaskStatus[list[str]],
    fast_path: bool,
    allow_stock: bool,
) -> None:
    import hypercorn.config

    from ._http.hypercorn_server import hypercorn_config, serve_hypercorn

    if config is None:
        config = hypercorn_config([_bind(host or "127.0.0.1", 8000 if port is None else port)])
    elif not isinstance(config, hypercorn.config.Config):
        raise TypeError(
            f"serve(http='hypercorn') takes a hypercorn.config.Config, not {type(config).__name__}"
        )
    elif host is not None or port is not None:
        raise TypeError("serve(): give host and port, or a config whose bind says where to listen, not both")
    else:
        config = copy.copy(config)
    if (certfile is None) != (keyfile is None):
        raise ValueError("serve(): certfile and keyfile go together")
    if certfile is not None:
        config.certfile, config.keyfile = certfile, keyfile
    # WebSocket connections: a ping as often as SSE keep-alives, and hypercorn closes a message longer
    # than the app accepts (1009) before buffering it whole.
    if config.websocket_ping_interval is None:
        config.websocket_ping_interval = app.config.keepalive_interval
    config.websocket_max_message_size = min(config.websocket_max_message_size, app.config.max_body_size)

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        await app.aclose()

    await serve_hypercorn(
        app,
        config,
        shutdown_trigger=trigger,
        task_status=task_status,
        fast_path=fast_path,
        write_timeout=app.config.write_timeout,
        allow_stock=allow_stock,
    )


async def _serve_h11(
    app: MCPApp,
    host: str | None,
    port: int | None,
    config: object,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    from ._http.h11_server import H11Config, serve_h11

    if config is None:
        config = H11Config()
    elif not isinstance(config, H11Config):
        raise TypeError(f"serve(http='h11') takes an H11Config, not {type(config).__name__}")
    server = app.config
    config = dataclasses.replace(
        config,
        write_timeout=server.write_timeout if config.write_timeout is None else config.write_timeout,
        websocket_max_message=(
            server.max_body_size if config.websocket_max_message is None else config.websocket_max_message
        ),
        websocket_ping_interval=(
            server.keepalive_interval
            if config.websocket_ping_interval is None
            else config.websocket_ping_interval
        ),
    )

    async def trigger() -> None:  # as with hypercorn: the app drains (and closes) while still listening
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        await app.aclose()

    await serve_h11(
        app,
        host or "127.0.0.1",
        8000 if port is None else port,
        config=config,
        shutdown_trigger=trigger,
        task_status=task_status,
        lifetime=app.run,
        on_shutdown=app.aclose,
    )


def _raise_lifespan_failure(app: MCPApp, exc: BaseException) -> None:
    """Raise the failure of the app's lifespan if ``exc`` (what the HTTP server raised) holds it: the
    lifespan's own exception, not the groups (or hypercorn's ``LifespanFailureError``) around it."""
    failure = app.server.lifespan.failure_in(exc)
    if failure is not None:
        raise failure from failure.__cause__


@dataclasses.dataclass(frozen=True)
class _AdminOptions:
    """What :func:`serve` was told of the operations listener."""

    bind: str
    started: Callable[[list[str]], object] | None
    allowed_hosts: tuple[str, ...]
    public: bool


def _hosts(value: Iterable[str]) -> Iterable[str]:
    if isinstance(value, (str, bytes)):  # its characters would be taken for hosts
        raise TypeError(f"admin_allowed_hosts must be a collection of strings, such as ({value!r},)")
    return value


EXPOSED = "its metrics (/metrics), statistics (/stats) and health (/healthz, /readyz), without authentication"
"""What an operations listener beyond loopback shows whoever reaches it."""


async def _serve_with_admin(
    app: MCPApp,
    options: _AdminOptions,
    serve_public: Callable[..., Awaitable[None]],
    task_status: trio.TaskStatus[list[str]],
    http_server: str | None = None,
) -> None:
    """The operations listener on ``options.bind`` around ``serve_public`` (the app's own listener,
    served by ``http_server``)."""
    from ._http.h11_server import H11Config, serve_h11
    from ._protocol.http import is_loopback
    from ._transport.admin import AdminApp

    bind = options.bind
    host, port = split_bind(bind)
    beyond_loopback = not is_loopback(host)
    if beyond_loopback and not options.public:
        raise ValueError(
            f"admin_bind {bind!r} is not a loopback address: the operations listener would show {EXPOSED} "
            "to whoever reaches it; bind it to 127.0.0.1 or [::1], or say admin_public=True "
            "(--admin-bind-public) to expose it on purpose"
        )
    admin = AdminApp(app, http_server=http_server, allowed_hosts=options.allowed_hosts)
    stop = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            try:
                urls: list[str] = await nursery.start(
                    functools.partial(
                        serve_h11,
                        admin,
                        host,
                        port,
                        config=H11Config(
                            shutdown_grace=ADMIN_SHUTDOWN_GRACE,
                            write_timeout=app.config.write_timeout,
                            max_connections=ADMIN_MAX_CONNECTIONS,
                        ),
                        shutdown_trigger=stop.wait,
                    )
                )
            except BindError as exc:  # the address as given, and which listener it was for
                raise ListenError.from_os_error(exc, bind, "operations listener") from exc
            logger.info("operations listener on %s", ", ".join(urls))
            if beyond_loopback:
                logger.warning(
                    "the operations listener on %s is not on loopback (admin_public): it shows %s to "
                    "whoever can connect to it; keep it on a private network",
                    ", ".join(urls),
                    EXPOSED,
                )
            if options.started is not None:
                options.started(urls)
            try:
                await serve_public(task_status=task_status)
            finally:
                stop.set()  # the public listener has closed and the app has drained: now this one
    except BaseExceptionGroup as group:  # what the public server raised, as it raises it without us
        if len(group.exceptions) == 1:
            (inner,) = group.exceptions
            raise inner from inner.__cause__  # its own cause kept, the group dropped from its context
        raise


def split_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); ValueError for anything else."""
    host, sep, port = bind.rpartition(":")
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {bind!r}")
    return host, int(port)


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
