"""``mcp-trio serve MODULE:ATTR`` and ``mcp-trio demo``: load the app (or build the demo's), check the
options that only make sense together, and serve it over HTTP (hypercorn or the embedded h11 server,
HTTPS with --certfile) or stdio until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import secrets
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from .._protocol.cluster import REQUEST_STATE_SECRET_ENV, parse_secret_ring
from .._transport.config import ServerConfig
from .output import EXIT_CONNECTION, EXIT_LIFESPAN_FAILED, EXIT_USAGE, add_command, report
from .server_options import add_server_options, config_from_args

if TYPE_CHECKING:
    # The server side is imported where a server command needs it: `mcp-trio tools|call` start faster.
    from types import ModuleType

    from .._transport.asgi import MCPApp

__all__ = ["add_server_commands", "load_app", "run_server", "serve_command"]

logger = logging.getLogger("mcp_trio.serve")

SERVE_DESCRIPTION = """\
Serve the MCPServer or MCPApp named by MODULE:ATTR until Ctrl-C or SIGTERM.
Once listening it prints one line "mcp-trio: serving on URL" on stdout, URL
being the MCP endpoint (http://HOST:PORT/mcp, or https:// with --certfile),
and "mcp-trio: stopped" when it has shut down.  With --stdio, stdout carries
only MCP messages.  The server's lifespan (MCPServer(lifespan=...)) runs
from before it listens until after it has stopped; if it fails, the server
stops and the command exits with status 1.
"""

DEMO_DESCRIPTION = """\
Serve mcp_trio's demo server until Ctrl-C or SIGTERM: tools (echo, add,
count, sleep, test_image_content, ...), resources and prompts to try clients
against.  Its endpoint is http://127.0.0.1:8000/mcp unless --bind says
otherwise.
"""

SERVE_EPILOG = """\
examples:
  mcp-trio serve my_package.server:server
  mcp-trio serve my_package.server:server --bind 0.0.0.0:8080 --http h11
  mcp-trio serve my_package.server:make_app --stdio

"""


def add_server_commands(sub: Any) -> None:
    """Add ``serve`` and ``demo`` to the subparsers ``sub`` of the ``mcp-trio`` parser."""
    serve_cmd = add_command(
        sub,
        "serve",
        description=SERVE_DESCRIPTION,
        epilog=SERVE_EPILOG,
    )
    serve_cmd.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="package.module:name of an MCPServer, an MCPApp, a python-sdk server (MCPServer or low-level "
        "Server), or a function returning one "
        "(the current directory is on the import path)",
    )
    demo_cmd = add_command(
        sub,
        "demo",
        description=DEMO_DESCRIPTION,
        epilog="example:\n  mcp-trio demo --bind 127.0.0.1:8000\n\n",
    )
    for cmd in (serve_cmd, demo_cmd):
        add_server_options(cmd)


def load_app(target: str, config: ServerConfig) -> MCPApp:
    """``package.module:attr`` naming an :class:`MCPApp`, an :class:`MCPServer` or a factory of either."""
    from .._app.server import MCPServer
    from .._transport.asgi import MCPApp

    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise SystemExit(f"mcp-trio: expected MODULE:ATTR, got {target!r}")
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the module exists but an import inside it failed: the traceback says where
        raise SystemExit(f"mcp-trio: cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"mcp-trio: {target}: {module_name} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, (MCPApp, MCPServer)) and not _from_sdk(obj):
        obj = obj()
    if isinstance(obj, MCPServer):
        return MCPApp(obj, config)
    if isinstance(obj, MCPApp):
        return obj
    if _from_sdk(obj):  # a python-sdk server: hosted (the sdk extra)
        app: MCPApp = _sdk().hosted_app(obj, config)
        return app
    raise SystemExit(
        f"mcp-trio: {target} is neither an MCPServer, an MCPApp nor a python-sdk server "
        "(mcp.server.mcpserver.MCPServer, mcp.server.lowlevel.Server)"
    )


def _from_sdk(obj: object) -> bool:
    """Whether ``obj`` is a server of the python-sdk (without importing it when it is not loaded)."""
    if not type(obj).__module__.startswith("mcp."):
        return False
    found: bool = _sdk().is_sdk_server(obj)
    return found


class UntestedSDKExit(SystemExit):
    """``load_app``: the installed ``mcp`` is not a release hosting was tested with (exit status 3, as
    for a hypercorn the guard refuses)."""


def _sdk() -> ModuleType:
    """:mod:`mcp_trio.sdk`, which checks the installed ``mcp`` when first imported: if hosting was not
    tested with it (:class:`~mcp_trio.sdk.UntestedSDK`, a ``RuntimeError``), the command's one line."""
    try:
        from .. import sdk
    except RuntimeError as exc:
        raise UntestedSDKExit(f"mcp-trio: {exc}") from None
    return sdk


def _drop_hypercorn_banner(record: logging.LogRecord) -> bool:
    """hypercorn's "Running on http://host:port" (no MCP path): the CLI prints the endpoint itself."""
    return not str(record.msg).startswith("Running on")


async def run_server(
    app: MCPApp,
    bind: str,
    http_server: str = "hypercorn",
    *,
    hypercorn_fast_path: bool = True,
    tls: tuple[str, str] | None = None,
    allow_stock_hypercorn: bool = False,
    admin_bind: str | None = None,
    admin_allowed_hosts: tuple[str, ...] = (),
    admin_public: bool = False,
    max_connections: int | None = None,
    max_connections_per_address: int | None = None,
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM; print each bound URL, once, when listening.  ``tls``:
    (certfile, keyfile) to serve HTTPS, and HTTP/2 to clients that offer it (hypercorn only);
    ``allow_stock_hypercorn``, ``admin_bind``, ``admin_allowed_hosts``, ``admin_public``: as
    :func:`mcp_trio.serve` (the operations listener's URL is printed first: ``mcp-trio: operations
    listener on URL``); ``max_connections``, ``max_connections_per_address``: the h11 server's
    (:class:`~mcp_trio.server.H11Config`)."""
    # The signal handler is in place before the servers start, so a SIGINT right after the
    # "serving on" line is a clean stop (a trigger opened by the server's own task could come too late).
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def wait_for_signal() -> None:
            async for _ in signals:
                return

        await _run_server(
            app,
            bind,
            http_server,
            wait_for_signal,
            hypercorn_fast_path,
            tls,
            allow_stock_hypercorn,
            None
            if admin_bind is None
            else {
                "admin_bind": admin_bind,
                "admin_allowed_hosts": admin_allowed_hosts,
                "admin_public": admin_public,
            },
            {"max_connections": max_connections, "max_connections_per_address": max_connections_per_address},
        )


async def _run_server(
    app: MCPApp,
    bind: str,
    http_server: str,
    wait_for_signal: Callable[[], Awaitable[None]],
    hypercorn_fast_path: bool,
    tls: tuple[str, str] | None,
    allow_stock_hypercorn: bool,
    admin: dict[str, Any] | None = None,
    h11_options: dict[str, Any] | None = None,
) -> None:
    """``admin``: the operations listener's options of :func:`mcp_trio.serve` (None: no listener);
    ``h11_options``: fields of the h11 server's ``H11Config``."""
    from .._serve import serve

    run: Callable[..., Awaitable[None]]
    if http_server == "h11" and tls is not None:
        raise ValueError("the embedded h11 server does not do TLS")
    if http_server == "h11":
        from .._http.h11_server import H11Config

        host, _, port = bind.rpartition(":")
        run = functools.partial(
            serve,
            app,
            host.strip("[]") or "127.0.0.1",
            int(port),
            http="h11",
            config=H11Config(shutdown_grace=app.config.shutdown_grace, **(h11_options or {})),
            shutdown_trigger=wait_for_signal,
        )
    else:
        from .._http.hypercorn_server import hypercorn_config

        # hypercorn's default error log writes to stderr itself *and* propagates to the root logger:
        # every message (its own "Running on" banner too) came out twice.  Its messages go through
        # Python logging only, at --log-level, and the banner is left to the line printed below.
        error_log = logging.getLogger("hypercorn.error")
        if _drop_hypercorn_banner not in error_log.filters:
            error_log.addFilter(_drop_hypercorn_banner)
        run = functools.partial(
            serve,
            app,
            http="hypercorn",
            config=hypercorn_config([bind], errorlog=error_log),
            certfile=tls[0] if tls else None,
            keyfile=tls[1] if tls else None,
            shutdown_trigger=wait_for_signal,
            hypercorn_fast_path=hypercorn_fast_path,
            allow_stock_hypercorn=allow_stock_hypercorn,
        )
    if admin is not None:
        run = functools.partial(run, **admin, admin_started=_print_admin_urls)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(run)  # an address it cannot listen on: ListenError, for main()
        for url in urls:
            print(f"mcp-trio: serving on {url}", flush=True)
    print("mcp-trio: stopped", flush=True)


def _print_admin_urls(urls: list[str]) -> None:
    for url in urls:
        print(f"mcp-trio: operations listener on {url}", flush=True)


def _use_redis(parser: argparse.ArgumentParser, app: MCPApp, url: str) -> None:
    """Give the app's server a Redis notification bus (it runs in the app's nursery), its tasks a Redis
    store, its sessions a Redis event store and its rate limits a Redis store, each unless its config
    names a store of its own."""
    from .._app.bus import LocalNotificationBus
    from .._transport.eventstore import InMemoryEventStore

    worker = app.config.worker_id
    try:
        from ..redis import RedisNotificationBus

        bus = RedisNotificationBus(url, instance_id=f"{worker}-{secrets.token_hex(4)}" if worker else None)
    except (ImportError, ValueError) as exc:
        parser.error(f"--redis: {exc}")
    current = app.server.notifications
    if type(current) is not LocalNotificationBus or len(current):
        parser.error("--redis: the server already has a notification bus of its own")
    app.server.notifications = bus
    if app.config.task_store_factory is None:  # tasks too: any worker answers for any task
        from ..redis import RedisTaskStore

        app._modern.tasks.store = RedisTaskStore(url)
    if app.config.event_store_factory is InMemoryEventStore:  # and the events kept for resumption
        from ..redis import RedisEventStore

        config = app.config
        app._manager.event_store = RedisEventStore(
            url, max_bytes=config.max_event_store_bytes, ttl=max(3600.0, config.idle_timeout)
        )
    limits = app._modern.limits
    if limits and limits.store is None:  # and the rate limits' buckets, across the workers
        from ..redis import RedisRateLimiter

        limits.store = RedisRateLimiter(url)


def _tls_files(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str] | None:
    """``--certfile`` and ``--keyfile``: both or neither, over hypercorn, and loadable (checked here, so
    that a bad file is a usage error, not a failure to listen)."""
    if args.certfile is None and args.keyfile is None:
        return None
    if args.certfile is None or args.keyfile is None:
        parser.error("--certfile and --keyfile go together: give both to serve HTTPS, or neither")
    if args.stdio:
        parser.error("--certfile/--keyfile are for HTTP, not --stdio")
    if args.http == "h11":
        parser.error(
            "--http h11 cannot serve TLS (the embedded server speaks plain HTTP/1.1): leave --http out "
            "to serve HTTPS and HTTP/2 with hypercorn, or let a proxy terminate TLS"
        )
    try:
        # password="": an encrypted key fails here instead of OpenSSL asking for its password on the tty
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.certfile, args.keyfile, password="")
    except OSError as exc:  # ssl.SSLError included
        parser.error(f"--certfile/--keyfile: cannot load a certificate and its unencrypted key: {exc}")
    return args.certfile, args.keyfile


def serve_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run ``serve`` or ``demo``; the exit status (a usage error exits through ``parser.error``)."""
    if args.http == "h11" and not args.stdio:
        _host, _, port = args.bind.rpartition(":")
        if not port.isdigit():
            parser.error(f"--bind: expected HOST:PORT, got {args.bind!r}")
    tls = _tls_files(parser, args)
    if (args.http != "h11" or args.stdio) and (
        args.max_connections is not None or args.max_connections_per_address is not None
    ):
        parser.error(
            "--max-connections and --max-connections-per-address are options of --http h11 (hypercorn "
            "bounds connections by its own timeouts: see the embedded server's page of the docs)"
        )
    if args.http == "hypercorn" and not args.stdio and not args.allow_stock_hypercorn:
        from .._http.hypercorn_server import hypercorn_fixes_available, refusal

        reason = hypercorn_fixes_available()
        if reason is not None:
            report(refusal(reason))
            return EXIT_CONNECTION
    try:
        config = config_from_args(args)
    except (ValueError, ImportError) as exc:
        parser.error(str(exc))
    if config.oauth is not None and args.stdio:
        parser.error("--oauth-issuer/--resource are for HTTP; over stdio the client starts the server")
    if config.server_card is not None and args.stdio:
        parser.error("--server-card is for HTTP: a stdio server has no URL to describe")
    ring = os.environ.get(REQUEST_STATE_SECRET_ENV)
    try:
        if ring is not None:
            parse_secret_ring(ring)  # before the app reads it: one line, not a traceback
    except ValueError as exc:
        report(exc)
        return EXIT_USAGE
    try:
        if args.command == "demo":
            from .._transport.asgi import MCPApp
            from ..demo import build_demo_server

            app = MCPApp(build_demo_server(), config)
        else:
            sys.path.insert(0, "")
            app = load_app(args.target, config)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return EXIT_CONNECTION if isinstance(exc, UntestedSDKExit) else EXIT_USAGE
    if config.oauth is not None and app.config is not config:
        parser.error(
            "--oauth-issuer/--resource: MODULE:ATTR names an MCPApp, which brings its own ServerConfig "
            "(give it ServerConfig(oauth=ProtectedResource(...)))"
        )
    if args.admin_bind is not None:
        if args.stdio:
            parser.error("--admin-bind is for HTTP; over stdio the client starts and watches the server")
        _check_admin_options(parser, args)
    elif args.admin_bind_public or args.admin_allowed_host:
        parser.error("--admin-bind-public and --admin-allowed-host are options of --admin-bind")
    if args.redis is not None:
        if args.stdio:
            parser.error("--redis is for HTTP workers; a stdio server serves one client")
        _use_redis(parser, app, args.redis)
    if args.log_format == "json" if args.request_log is None else args.request_log:
        app.server.telemetry.request_log = True
        logging.getLogger("mcp_trio.requests").setLevel(logging.INFO)  # whatever --log-level says
    from .otel_setup import OtelConfigError, start_otlp

    try:
        shutdown_otlp = start_otlp(os.environ)
    except OtelConfigError as exc:
        report(exc)
        return EXIT_USAGE
    try:
        _run(app, config, args, tls, stop_stdio_on_sigterm=shutdown_otlp is not None)
    except BaseException as exc:
        failure = app.server.lifespan.failure_in(exc)
        if failure is None:
            raise
        # the app's own code failed: its traceback in the log, then the one line that says what stopped
        what = f"the lifespan of {app.server.lifespan.owner} failed"
        logger.error("%s", what, exc_info=failure)
        report(f"{what}: {type(failure).__name__}: {failure}" if str(failure) else what)
        return EXIT_LIFESPAN_FAILED
    finally:
        if shutdown_otlp is not None:
            shutdown_otlp()  # the last spans and measurements, within otel_setup.SHUTDOWN_TIMEOUT
    return 0


def _check_admin_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (exit 2) for an ``--admin-bind`` that is not HOST:PORT, or beyond loopback without
    ``--admin-bind-public``, and for an ``--admin-allowed-host`` that is not a host."""
    from .._protocol.http import is_loopback, normalize_host
    from .._serve import EXPOSED, split_bind

    try:
        host, _ = split_bind(args.admin_bind)
        for entry in args.admin_allowed_host or ():
            normalize_host(entry)
    except ValueError as exc:
        parser.error(f"--admin-bind: {exc}")
    if not is_loopback(host) and not args.admin_bind_public:
        parser.error(
            f"--admin-bind {args.admin_bind}: not a loopback address; the operations listener would show "
            f"{EXPOSED} to whoever reaches it (bind it to 127.0.0.1, or add --admin-bind-public)"
        )


def _run(
    app: MCPApp,
    config: ServerConfig,
    args: argparse.Namespace,
    tls: tuple[str, str] | None,
    *,
    stop_stdio_on_sigterm: bool,
) -> None:
    """Serve until stopped.  ``stop_stdio_on_sigterm``: over stdio, a SIGTERM ends serving (as stdin's
    end does) instead of the process, so that what comes after (the last OTLP export) runs."""
    if args.stdio:
        # stdout carries only MCP messages (logging.basicConfig writes to stderr)
        trio.run(_serve_stdio, app, config, stop_stdio_on_sigterm)
        return
    trio.run(
        functools.partial(
            run_server,
            app,
            args.bind,
            args.http,
            hypercorn_fast_path=not args.no_hypercorn_fast_path,
            tls=tls,
            allow_stock_hypercorn=args.allow_stock_hypercorn,
            admin_bind=args.admin_bind,
            admin_allowed_hosts=tuple(args.admin_allowed_host or ()),
            admin_public=args.admin_bind_public,
            max_connections=args.max_connections,
            max_connections_per_address=args.max_connections_per_address,
        )
    )


async def _serve_stdio(app: MCPApp, config: ServerConfig, stop_on_sigterm: bool) -> None:
    from .._transport.stdio import serve_stdio

    if not stop_on_sigterm:
        await serve_stdio(app.server, config=config)
        return
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            await serve_stdio(app.server, config=config)
            nursery.cancel_scope.cancel()
