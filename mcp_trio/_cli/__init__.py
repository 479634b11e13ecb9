"""The ``mcp-trio`` command.

``mcp-trio serve MODULE:ATTR`` serves an :class:`MCPServer` or :class:`MCPApp` (Streamable HTTP on
hypercorn or the embedded h11 server, or stdio), ``mcp-trio demo`` the demo server, and the client
commands of :mod:`._cli_client` talk to a running server: ``mcp-trio tools URL`` lists its tools,
``mcp-trio call URL TOOL`` calls one.  ``mcp-trio --help`` and ``mcp-trio COMMAND --help`` describe
every option and the exit status; docs/cli.md is the user's guide.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import logging
import os
import secrets
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import trio

from .. import __version__
from .._protocol import http
from .._protocol.cluster import REQUEST_STATE_SECRET_ENV, check_worker_id, parse_secret_ring
from .._transport.config import ServerConfig
from .client import (
    EXIT_BROKEN_PIPE,
    EXIT_CONNECTION,
    EXIT_INTERRUPTED,
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    add_client_commands,
    run_client_command,
    single_exception,
)

if TYPE_CHECKING:
    # The server side is imported where a server command needs it: `mcp-trio tools|call` start faster.
    from .._transport.asgi import MCPApp
    from ..auth.server._resource import ProtectedResource

__all__ = ["main"]

DESCRIPTION = """\
Serve MCP servers over Streamable HTTP (or stdio) on Trio, and talk to them
from the terminal.
"""

EPILOG = """\
try it: run 'mcp-trio demo' in one terminal, then in another
  mcp-trio tools http://127.0.0.1:8000/mcp
  mcp-trio call http://127.0.0.1:8000/mcp echo --arg text=hello

'mcp-trio COMMAND --help' describes a command and its options.

"""

SERVE_DESCRIPTION = """\
Serve the MCPServer or MCPApp named by MODULE:ATTR until Ctrl-C or SIGTERM.
Once listening it prints one line "mcp-trio: serving on URL" on stdout, URL
being the MCP endpoint (http://HOST:PORT/mcp, or https:// with --certfile),
and "mcp-trio: stopped" when it has shut down.  With --stdio, stdout carries
only MCP messages.
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

_PYTHON_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_HELP = (
    "level of Python logging on stderr (messages of mcp_trio and the libraries under it): "
    "DEBUG, INFO, WARNING (default), ERROR or CRITICAL; not the MCP log level"
)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs keep their lines (lists, examples, the exit status table)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


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
    if callable(obj) and not isinstance(obj, (MCPApp, MCPServer)):
        obj = obj()
    if isinstance(obj, MCPServer):
        return MCPApp(obj, config)
    if isinstance(obj, MCPApp):
        return obj
    raise SystemExit(f"mcp-trio: {target} is neither an MCPServer nor an MCPApp")


class CannotListen(Exception):
    """The server could not bind its address (in use, not local, no permission): exit status 3."""


def _os_error(exc: BaseException) -> OSError | None:
    """``exc`` if it is an OSError, else the first OSError in its exception groups, else None."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _os_error(inner)
            if found is not None:
                return found
    return None


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
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM; print each bound URL, once, when listening.  ``tls``:
    (certfile, keyfile) to serve HTTPS, and HTTP/2 to clients that offer it (hypercorn only);
    ``allow_stock_hypercorn``: as :func:`mcp_trio.serve`."""
    # The signal handler is in place before the servers start, so a SIGINT right after the
    # "serving on" line is a clean stop (a trigger opened by the server's own task could come too late).
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def wait_for_signal() -> None:
            async for _ in signals:
                return

        await _run_server(
            app, bind, http_server, wait_for_signal, hypercorn_fast_path, tls, allow_stock_hypercorn
        )


async def _run_server(
    app: MCPApp,
    bind: str,
    http_server: str,
    wait_for_signal: Callable[[], Awaitable[None]],
    hypercorn_fast_path: bool,
    tls: tuple[str, str] | None,
    allow_stock_hypercorn: bool,
) -> None:
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
            config=H11Config(shutdown_grace=app.config.shutdown_grace),
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
    async with trio.open_nursery() as nursery:
        try:
            urls = await nursery.start(run)
        except BaseException as exc:
            cause = _os_error(exc)
            if cause is None:
                raise
            raise CannotListen(f"cannot listen on {bind}: {cause}") from exc
        for url in urls:
            print(f"mcp-trio: serving on {url}{app.config.path or '/'}", flush=True)
    print("mcp-trio: stopped", flush=True)


_CONFIG_HELP: dict[str, tuple[type, str, str]] = {
    "idle_timeout": (float, "SECONDS", "close a session with no request or stream for this long"),
    "init_timeout": (float, "SECONDS", "close a session not initialized this long after initialize"),
    "keepalive_interval": (float, "SECONDS", "send a comment on idle SSE streams this often"),
    "shutdown_grace": (float, "SECONDS", "how long open streams get to end cleanly on shutdown"),
    "write_timeout": (float, "SECONDS", "break a connection whose socket write takes longer"),
    "body_timeout": (float, "SECONDS", "a request body must arrive within this, else 408"),
    "max_sessions": (int, "N", "answer initialize with 503 beyond this many live sessions"),
    "max_sessions_per_principal": (
        int,
        "N",
        "answer initialize (or a WebSocket upgrade) with 429 beyond this many live sessions of one "
        "authenticated principal (0: no quota)",
    ),
    "max_sessions_per_address": (
        int,
        "N",
        "answer initialize (or a WebSocket upgrade) with 429 beyond this many live sessions from one "
        "client address (0: no quota, as behind a reverse proxy)",
    ),
    "max_event_store_bytes": (
        int,
        "BYTES",
        "bound on the SSE events kept for resumption, all sessions together",
    ),
    "max_body_size": (int, "BYTES", "largest request body accepted (413 beyond)"),
    "sse_retry_ms": (int, "MS", "the SSE retry field sent to 2025-era clients, in milliseconds"),
}
_CONFIG_OPTIONS: dict[str, type] = {name: kind for name, (kind, _, _) in _CONFIG_HELP.items()}
_CONFIG_DEFAULTS = {field.name: field.default for field in dataclasses.fields(ServerConfig)}


def _number(value: object) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _add_log_level(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--log-level",
        type=str.upper,
        choices=_PYTHON_LOG_LEVELS,
        default="WARNING",
        metavar="LEVEL",
        help=LOG_LEVEL_HELP,
    )


def _add_server_options(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--bind",
        default="127.0.0.1:8000",
        metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:8000; port 0 picks a free port)",
    )
    cmd.add_argument(
        "--stdio",
        action="store_true",
        help="speak MCP over stdin/stdout instead of HTTP (for clients that start the server)",
    )
    cmd.add_argument(
        "--http",
        choices=("hypercorn", "h11"),
        default="hypercorn",
        help="HTTP server: hypercorn's trio worker (default) or the embedded Trio + h11 server",
    )
    cmd.add_argument(
        "--no-hypercorn-fast-path",
        action="store_true",
        help="run hypercorn's request path as shipped (see the hypercorn page of the docs)",
    )
    cmd.add_argument(
        "--allow-stock-hypercorn",
        action="store_true",
        help="if the installed hypercorn is not the code mcp_trio's fixes were written for, serve with "
        "hypercorn as shipped, without them (see the hypercorn page of the docs for what that gives up), "
        "instead of refusing to start",
    )
    cmd.add_argument(
        "--certfile",
        default=None,
        metavar="PATH",
        help="serve HTTPS with this certificate (PEM, with its chain; needs --keyfile): HTTP/2 for "
        "clients that offer it (ALPN), else HTTP/1.1; not with --http h11",
    )
    cmd.add_argument(
        "--keyfile", default=None, metavar="PATH", help="the private key of --certfile (PEM, not encrypted)"
    )
    cmd.add_argument(
        "--json-response",
        action="store_true",
        help="answer each request with one JSON body instead of an SSE stream",
    )
    cmd.add_argument(
        "--stats-path", default=None, metavar="PATH", help="serve the app's statistics as JSON on PATH"
    )
    _add_log_level(cmd)
    limits = cmd.add_argument_group(
        "session and connection limits",
        "These and --json-response, --stats-path configure the app when\n"
        "MODULE:ATTR names an MCPServer; an MCPApp brings its own ServerConfig.",
    )
    for option, (kind, metavar, text) in _CONFIG_HELP.items():
        limits.add_argument(
            f"--{option.replace('_', '-')}",
            type=kind,
            default=None,
            metavar=metavar,
            help=f"{text} (default {_number(_CONFIG_DEFAULTS[option])})",
        )
    _add_origin_options(cmd)
    _add_worker_options(cmd)
    _add_oauth_options(cmd)


_PROTECTION = {"auto": None, "on": True, "off": False}


def _comma_list(normalize: Callable[[str], str], *, star: bool = False) -> Callable[[str], frozenset[str]]:
    """An argparse type: comma-separated entries, each checked by ``normalize`` (``*`` alone if ``star``)."""

    def parse(text: str) -> frozenset[str]:
        entries = [entry.strip() for entry in text.split(",") if entry.strip()]
        if not entries:
            raise argparse.ArgumentTypeError("expected a comma-separated list")
        if star and "*" in entries:
            if len(entries) > 1:
                raise argparse.ArgumentTypeError("'*' (any origin) stands alone")
            return frozenset({"*"})
        try:
            return frozenset(normalize(entry) for entry in entries)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _add_origin_options(cmd: argparse.ArgumentParser) -> None:
    group = cmd.add_argument_group(
        "browsers and reverse proxies",
        "Host and Origin checks (DNS-rebinding protection) and CORS; like the limits\n"
        "above, for an MCPServer (an MCPApp brings its own ServerConfig).",
    )
    group.add_argument(
        "--allowed-hosts",
        type=_comma_list(http.normalize_host),
        default=None,
        metavar="HOSTS",
        help="comma-separated Host values accepted besides localhost, 127.0.0.1 and [::1] (HOST for "
        "any port, or HOST:PORT), such as the public name a reverse proxy passes on; turns the check on "
        "for every request",
    )
    group.add_argument(
        "--allowed-origins",
        type=_comma_list(http.normalize_origin),
        default=None,
        metavar="ORIGINS",
        help="comma-separated Origin values accepted besides loopback ones (SCHEME://HOST[:PORT], "
        "SCHEME://HOST:* for any port); turns the check on for every request",
    )
    group.add_argument(
        "--dns-rebinding-protection",
        choices=tuple(_PROTECTION),
        default="auto",
        help="check Host (421) and Origin (403) on every request (on), on none (off), or (auto, the "
        "default) on every request when allowed hosts or origins are given, else on the requests "
        "arriving on a loopback connection (a local client, or a proxy on this machine forwarding to "
        "127.0.0.1)",
    )
    group.add_argument(
        "--cors-origins",
        type=_comma_list(http.normalize_origin, star=True),
        default=None,
        metavar="ORIGINS",
        help="comma-separated web origins (SCHEME://HOST[:PORT]) whose pages may call the server from a "
        "browser, or '*' for any; they pass the Origin check too (default: no CORS, OPTIONS gets 405)",
    )


def _origin_config(args: argparse.Namespace) -> dict[str, object]:
    """The ServerConfig fields of the options of :func:`_add_origin_options` that were given."""
    options: dict[str, object] = {"dns_rebinding_protection": _PROTECTION[args.dns_rebinding_protection]}
    for name in ("allowed_hosts", "allowed_origins", "cors_origins"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    return options


def _worker_id(text: str) -> str:
    try:
        return check_worker_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_worker_options(cmd: argparse.ArgumentParser) -> None:
    group = cmd.add_argument_group(
        "several workers (see the docs' deploy/workers page)",
        "Processes behind one balancer, sharing Redis.  The requestState key ring\n"
        "comes from the environment (MCP_TRIO_REQUEST_STATE_SECRET), never from here.",
    )
    group.add_argument(
        "--worker-id",
        type=_worker_id,
        default=None,
        metavar="ID",
        help="this worker's id (1-32 of A-Z a-z 0-9 _ -): 2025 session ids become ID.<random>, so a "
        "balancer can route each session to its worker (for an MCPServer, like the limits above)",
    )
    group.add_argument(
        "--redis",
        default=None,
        metavar="URL",
        help="share list-changed and resource-updated notifications with the other workers through "
        "Redis (redis://HOST:PORT[/DB], rediss:// or unix://), signed with the key ring of "
        "MCP_TRIO_REQUEST_STATE_SECRET (required); needs pip install 'mcp_trio[redis]'",
    )


def _add_oauth_options(cmd: argparse.ArgumentParser) -> None:
    group = cmd.add_argument_group(
        "OAuth (see the docs' authorization page)",
        "Make the endpoint an OAuth 2.1 protected resource: every request needs a\n"
        "bearer token, a JWT access token of the issuer for the resource.  Needs\n"
        "pip install 'mcp_trio[auth]'; for an MCPServer, like the limits above.",
    )
    group.add_argument(
        "--oauth-issuer",
        default=None,
        metavar="URL",
        help="the authorization server whose JWT access tokens are accepted (its keys are found through "
        "its metadata); needs --resource",
    )
    group.add_argument(
        "--resource",
        default=None,
        metavar="URL",
        help="the public URL of this MCP endpoint (https://HOST/mcp; http only on loopback): tokens must "
        "name it as their audience, and clients find the metadata from it",
    )
    group.add_argument(
        "--required-scope",
        action="append",
        default=None,
        metavar="SCOPE",
        help="a scope every request's token must grant (repeat for several); advertised in the metadata",
    )
    group.add_argument(
        "--oauth-audience",
        action="append",
        default=None,
        metavar="AUD",
        help="accept tokens whose aud names this instead of --resource (repeat for several), for an "
        "authorization server that names the resource otherwise",
    )


def _oauth_config(args: argparse.Namespace) -> ProtectedResource | None:
    """The ProtectedResource of the OAuth options, or None; ValueError (ImportError without joserfc)."""
    issuer, resource = getattr(args, "oauth_issuer", None), getattr(args, "resource", None)
    if issuer is None and resource is None:
        if getattr(args, "required_scope", None) or getattr(args, "oauth_audience", None):
            raise ValueError("--required-scope and --oauth-audience need --oauth-issuer and --resource")
        return None
    if issuer is None or resource is None:
        raise ValueError("--oauth-issuer and --resource go together")
    from ..auth.server._resource import ProtectedResource
    from ..auth.server._verify import JWTVerifier

    scopes = args.required_scope or []
    return ProtectedResource(
        resource=resource,
        authorization_servers=[issuer],
        verifier=JWTVerifier(issuer, args.oauth_audience or resource),
        scopes_supported=scopes,
        required_scopes=scopes,
    )


def _use_redis(parser: argparse.ArgumentParser, app: MCPApp, url: str) -> None:
    """Give the app's server a Redis notification bus (it runs in the app's nursery), and its tasks a
    Redis store unless its config names a store of its own."""
    from .._app.bus import LocalNotificationBus

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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-trio", description=DESCRIPTION, epilog=EPILOG + EXIT_STATUS_HELP, formatter_class=_Formatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    serve_cmd = sub.add_parser(
        "serve",
        help="serve your MCPServer or MCPApp (MODULE:ATTR) over HTTP or stdio",
        description=SERVE_DESCRIPTION,
        epilog=SERVE_EPILOG + EXIT_STATUS_HELP,
        formatter_class=_Formatter,
    )
    serve_cmd.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="package.module:name of an MCPServer, an MCPApp, or a function returning one "
        "(the current directory is on the import path)",
    )
    demo_cmd = sub.add_parser(
        "demo",
        help="serve the built-in demo server, to try clients against",
        description=DEMO_DESCRIPTION,
        epilog="example:\n  mcp-trio demo --bind 127.0.0.1:8000\n\n" + EXIT_STATUS_HELP,
        formatter_class=_Formatter,
    )
    for cmd in (serve_cmd, demo_cmd):
        _add_server_options(cmd)
    add_client_commands(sub, _Formatter)
    for cmd in sub.choices.values():
        if not any("--log-level" in action.option_strings for action in cmd._actions):
            _add_log_level(cmd)
    return parser


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    options = {name: getattr(args, name) for name in _CONFIG_OPTIONS if getattr(args, name) is not None}
    options.update(_origin_config(args))
    if args.worker_id is not None:
        options["worker_id"] = args.worker_id
    oauth = _oauth_config(args)
    if oauth is not None:
        options["oauth"] = oauth
    return ServerConfig(json_response=args.json_response, stats_path=args.stats_path, **options)


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        raise SystemExit(EXIT_USAGE)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        client = args.command in ("tools", "call")
        code = run_client_command(args) if client else _serve_command(parser, args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's final flush
    except BaseException as exc:  # sorted out below; anything unexpected is re-raised
        failure = single_exception(exc)
        if isinstance(failure, BrokenPipeError):
            # stdout was closed early (mcp-trio tools URL | head): no traceback; silence the final flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = EXIT_BROKEN_PIPE
        elif isinstance(failure, KeyboardInterrupt):  # Ctrl-C before a server's signal handler was set
            code = EXIT_INTERRUPTED
        elif isinstance(failure, CannotListen):
            print(f"mcp-trio: {failure}", file=sys.stderr)
            code = EXIT_CONNECTION
        else:
            raise
    raise SystemExit(code)


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


def _serve_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.http == "h11" and not args.stdio:
        _host, _, port = args.bind.rpartition(":")
        if not port.isdigit():
            parser.error(f"--bind: expected HOST:PORT, got {args.bind!r}")
    tls = _tls_files(parser, args)
    if args.http == "hypercorn" and not args.stdio and not args.allow_stock_hypercorn:
        from .._http.hypercorn_server import hypercorn_fixes_available, refusal

        reason = hypercorn_fixes_available()
        if reason is not None:
            print(f"mcp-trio: {refusal(reason)}", file=sys.stderr)
            return EXIT_CONNECTION
    try:
        config = config_from_args(args)
    except (ValueError, ImportError) as exc:
        parser.error(str(exc))
    if config.oauth is not None and args.stdio:
        parser.error("--oauth-issuer/--resource are for HTTP; over stdio the client starts the server")
    ring = os.environ.get(REQUEST_STATE_SECRET_ENV)
    try:
        if ring is not None:
            parse_secret_ring(ring)  # before the app reads it: one line, not a traceback
    except ValueError as exc:
        print(f"mcp-trio: {exc}", file=sys.stderr)
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
        return EXIT_USAGE
    if config.oauth is not None and app.config is not config:
        parser.error(
            "--oauth-issuer/--resource: MODULE:ATTR names an MCPApp, which brings its own ServerConfig "
            "(give it ServerConfig(oauth=ProtectedResource(...)))"
        )
    if args.redis is not None:
        if args.stdio:
            parser.error("--redis is for HTTP workers; a stdio server serves one client")
        _use_redis(parser, app, args.redis)
    if args.stdio:
        # stdout carries only MCP messages (logging.basicConfig writes to stderr)
        from .._transport.stdio import serve_stdio

        trio.run(functools.partial(serve_stdio, app.server, config=config))
        return 0
    trio.run(
        functools.partial(
            run_server,
            app,
            args.bind,
            args.http,
            hypercorn_fast_path=not args.no_hypercorn_fast_path,
            tls=tls,
            allow_stock_hypercorn=args.allow_stock_hypercorn,
        )
    )
    return 0
