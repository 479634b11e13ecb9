"""The options of ``mcp-trio serve`` and ``mcp-trio demo`` that configure the served app: session and
connection limits, Host/Origin checks and CORS, the worker options and OAuth, and the
:class:`ServerConfig` they make (:func:`config_from_args`)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._protocol import http
from .._protocol.card import ServerCard
from .._protocol.cluster import check_worker_id
from .._protocol.ratelimits import RateLimit
from .._transport.config import ServerConfig
from .output import add_log_level

if TYPE_CHECKING:
    from ..auth.server._resource import ProtectedResource

__all__ = ["add_server_options", "config_from_args"]


_CONFIG_HELP: dict[str, tuple[type, str, str]] = {
    "idle_timeout": (float, "SECONDS", "close a session with no request or stream for this long"),
    "init_timeout": (float, "SECONDS", "close a session not initialized this long after initialize"),
    "keepalive_interval": (float, "SECONDS", "send a comment on idle SSE streams this often"),
    "shutdown_grace": (float, "SECONDS", "how long open streams get to end cleanly on shutdown"),
    "drain_delay": (
        float,
        "SECONDS",
        "on shutdown, serve on this long once the health check (GET without a session) says 503; auto: "
        "3 when handing sessions over (--worker-id with --redis), else 0",
    ),
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


def _default_text(value: object) -> str:
    """A default as the help shows it: 30.0 as 30, None as auto."""
    if value is None:
        return "auto"
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def add_server_options(cmd: argparse.ArgumentParser) -> None:
    """The options of ``serve`` and ``demo``: where and how to serve, then the groups that configure
    the app (limits, origins, workers, OAuth)."""
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
        "--max-connections",
        type=_count,
        default=None,
        metavar="N",
        help="--http h11: connections open at once; beyond, the oldest idle one (or one still sending its "
        "request head) is closed to make room, else the new one gets 503 (default: from the descriptor "
        "limit, 896 with 1024; 0: no cap)",
    )
    cmd.add_argument(
        "--max-connections-per-address",
        type=_count,
        default=None,
        metavar="N",
        help="--http h11: connections open at once from one client address; beyond, 503 (default: a "
        "quarter of --max-connections; 0: no cap, as behind a reverse proxy)",
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
    cmd.add_argument(
        "--server-card",
        action="store_true",
        help="serve a server card at <endpoint>/server-card and an AI Catalog at "
        "/.well-known/ai-catalog.json, made from server/discover (a draft: SEP-2127)",
    )
    cmd.add_argument(
        "--server-card-url",
        default=None,
        metavar="URL",
        help="the endpoint's public URL the card names (default: the OAuth resource, else the URL the "
        "card is requested at); implies --server-card",
    )
    cmd.add_argument(
        "--admin-bind",
        default=None,
        metavar="HOST:PORT",
        help="serve the operations listener there (port 0 picks a free port): /metrics (Prometheus), "
        "/healthz, /readyz (503 while starting, draining or when Redis is unreachable) and /stats; "
        "a loopback address unless --admin-bind-public",
    )
    cmd.add_argument(
        "--admin-bind-public",
        action="store_true",
        help="let --admin-bind be an address beyond loopback (0.0.0.0, ::, a host name, another "
        "interface's address): whoever reaches it reads the metrics, statistics and health, without "
        "authentication (a WARNING says so at startup); keep it on a private network",
    )
    cmd.add_argument(
        "--admin-allowed-host",
        action="append",
        default=None,
        metavar="HOST[:PORT]",
        help="a Host the operations listener answers besides its own address and the loopback names "
        "(the name Prometheus or a probe scrapes it by); repeatable; any other Host is refused with 421",
    )
    add_log_level(cmd)
    cmd.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="how log records are written on stderr: text lines (default), or one JSON object per line "
        "(time, level, logger, message, and the trace and span ids of the current span), with a record "
        "per request (see --request-log)",
    )
    cmd.add_argument(
        "--request-log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="log one INFO record per request on the mcp_trio.requests logger, whatever --log-level "
        "says: method, target, status, duration, request id, hashed session id and principal, trace "
        "ids (default: on with --log-format json, off with text)",
    )
    limits = cmd.add_argument_group(
        "session and connection limits",
        "These and --json-response, --stats-path, --server-card configure the app when\n"
        "MODULE:ATTR names an MCPServer; an MCPApp brings its own ServerConfig.",
    )
    for option, (kind, metavar, text) in _CONFIG_HELP.items():
        limits.add_argument(
            f"--{option.replace('_', '-')}",
            type=kind,
            default=None,
            metavar=metavar,
            help=f"{text} (default {_default_text(_CONFIG_DEFAULTS[option])})",
        )
    limits.add_argument(
        "--rate-limit",
        action="append",
        type=_rate_limit,
        metavar="SCOPE=N/PERIOD",
        help="a rate limit (draft SEP-3304): N requests per PERIOD (s, min or h; e.g. 10s) with bursts of "
        "N, for each SCOPE: principal, address, session, tool:NAME or method:NAME; refused requests get "
        "429 and -32023; shared by the workers with --redis; repeatable (e.g. --rate-limit "
        "address=100/min --rate-limit tool:search=5/s)",
    )
    _add_origin_options(cmd)
    _add_worker_options(cmd)
    _add_oauth_options(cmd)


def _count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _rate_limit(text: str) -> RateLimit:
    """An argparse type: a :class:`RateLimit` (``SCOPE=N/PERIOD``)."""
    try:
        return RateLimit.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        help="share list-changed and resource-updated notifications, tasks, the events kept for "
        "resumption and the --rate-limit buckets with the other workers through Redis "
        "(redis://HOST:PORT[/DB], rediss:// or "
        "unix://), signed with the key ring of MCP_TRIO_REQUEST_STATE_SECRET (required); needs pip "
        "install 'mcp_trio[redis]'",
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


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The ServerConfig of the options of :func:`add_server_options` (those not given keep
    ServerConfig's defaults); ValueError (ImportError without joserfc) for OAuth options that do not fit."""
    options = {name: getattr(args, name) for name in _CONFIG_OPTIONS if getattr(args, name) is not None}
    options.update(_origin_config(args))
    if args.worker_id is not None:
        options["worker_id"] = args.worker_id
    if args.rate_limit:
        options["rate_limits"] = tuple(args.rate_limit)
    oauth = _oauth_config(args)
    if oauth is not None:
        options["oauth"] = oauth
    if args.server_card or args.server_card_url is not None:
        options["server_card"] = ServerCard(url=args.server_card_url)
    return ServerConfig(json_response=args.json_response, stats_path=args.stats_path, **options)
