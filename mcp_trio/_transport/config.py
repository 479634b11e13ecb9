"""Server configuration: every policy duration and bound, in one place.

Plain data: the features configured here (authentication, OAuth, tasks, sessions) read their settings
from a :class:`ServerConfig`; this module imports none of them at run time (their types are named for
type checkers only), so that the configuration does not depend on what it configures.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._protocol.card import ServerCard
from .._protocol.cluster import check_worker_id
from .._protocol.ratelimits import RateLimit
from .._protocol.session import new_session_id
from .eventstore import EventStore, InMemoryEventStore

if TYPE_CHECKING:
    from .._app.tasks import TaskStore
    from ..auth.server._resource import ProtectedResource
    from .ratelimit import RateLimitStore
    from .registry import SessionRegistry

__all__ = ["DRAIN_DELAY", "LAST_WORDS", "Authenticate", "HTTPRequestInfo", "ServerConfig"]

DRAIN_DELAY = 3.0
"""The ``drain_delay`` of a worker that hands its sessions over: longer than the shipped HAProxy
configuration takes to see a failed health check (checks every second, down after two)."""

LAST_WORDS = 1.0
"""Seconds the requests that a shutdown cancels (once ``shutdown_grace`` has run out) get to unwind
and send their -32000 answers, and the streams of a stopping session get to send what is queued and
end (a healthy write takes far less; a client that stopped reading is cut after it)."""


@dataclass(frozen=True, slots=True)
class HTTPRequestInfo:
    """What an ``authenticate`` hook sees of an HTTP request (header names lower-case)."""

    method: str
    path: str
    headers: tuple[tuple[bytes, bytes], ...]
    client: tuple[str, int] | None

    def header(self, name: str) -> str | None:
        """The first value of a header (``name`` lower-case), decoded as latin-1."""
        wanted = name.encode()
        return next((value.decode("latin-1") for key, value in self.headers if key == wanted), None)


Authenticate = Callable[[HTTPRequestInfo], Awaitable[object]]


@runtime_checkable
class _ProtectedResourceShape(Protocol):
    """What ``ServerConfig.oauth`` must look like (a :class:`mcp_trio.auth.ProtectedResource` does), so
    that a wrong value (a URL, say) is refused when the configuration is made, without this module
    importing the OAuth code; the app's bearer guard checks the exact type where it uses it."""

    resource: str
    authorization_servers: Sequence[str]
    required_scopes: Sequence[str]
    method_scopes: Mapping[str, Sequence[str]]

    def metadata(self) -> dict[str, Any]: ...

    def scopes_for(self, method: str | None, name: str | None = None) -> tuple[str, ...]: ...


def _local_registry() -> SessionRegistry:
    from .registry import LocalSessionRegistry

    return LocalSessionRegistry()


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Settings of an :class:`~mcp_trio.MCPApp`.  Durations are seconds."""

    path: str | None = "/mcp"
    """The MCP endpoint; other paths get 404.  None serves every path."""
    json_response: bool = False
    """Answer requests with one ``application/json`` body instead of an SSE stream."""
    max_body_size: int = 4 * 1024 * 1024
    keepalive_interval: float = 15.0
    """Every SSE stream silent for this long gets a comment (``: keep-alive``), and again each time it
    stays silent this long, so that proxies do not time it out: 2025-era GET and POST streams,
    ``subscriptions/listen`` streams, and 2026-era answers, which become SSE streams when their handler
    is silent this long (not with ``json_response``: a JSON body cannot carry comments).  WebSocket
    connections get a ping this often from mcp_trio's servers.  Proxies' read timeouts must exceed it."""
    sse_retry_ms: int = 1000
    """The SSE ``retry`` field sent on 2025-11-25 streams."""
    sse_start_delay: float = 0.05
    """A POST's SSE response starts (head and priming event) with the request's first message, or after
    this long if the handler has sent nothing yet.  A request answered sooner gets its whole stream in
    one write, with no writer task.  0 starts every stream at once."""
    idle_timeout: float = 30 * 60
    """A session with no open request or stream for this long is closed."""
    init_timeout: float = 60.0
    """A session that has not sent ``notifications/initialized`` this long after ``initialize`` is closed."""
    max_sessions: int = 10_000
    """Beyond this many live sessions, ``initialize`` gets 503 (and a WebSocket upgrade: connections
    are counted apart, with the same bound)."""
    max_sessions_per_principal: int | None = 1_000
    """Beyond this many live sessions (2025-era sessions and WebSocket connections, each counted) of one
    authenticated principal (one owner: see ``authenticate`` and ``oauth``), its ``initialize`` or
    upgrade gets 429 with ``Retry-After``.  Requests without a principal are not counted here.  None or
    0: no quota."""
    max_sessions_per_address: int | None = 1_000
    """Beyond this many live sessions (as for ``max_sessions_per_principal``) from one client address
    (the ASGI scope's ``client``: an IPv4 address, or the /64 of an IPv6 one), ``initialize`` or the
    upgrade gets 429 with ``Retry-After``.  Behind a reverse proxy every client has the proxy's
    address: raise it, or turn it off with None or 0 and rely on ``max_sessions_per_principal`` and
    the proxy's own limits."""
    max_event_store_bytes: int = 128 * 1024 * 1024
    """The bound on the event data the default event store (:class:`~mcp_trio.server.InMemoryEventStore`)
    keeps for all sessions together (its ``max_bytes``); beyond it the streams idle the longest are
    dropped first.  A custom ``event_store_factory`` brings its own bounds."""
    stream_buffer: int = 256
    """Messages queued for one SSE connection.  A sender never blocks: a connection that falls this far
    behind is closed, and its client resumes from the event store with ``Last-Event-ID``."""
    write_timeout: float = 30.0
    """A socket write of a response that cannot complete within this (the client stopped reading)
    breaks that connection, not the session: enforced by mcp_trio's servers (``serve``, ``serve_h11``).
    A session that ends (DELETE, expiry, shutdown) does not wait for such a write."""
    body_timeout: float = 30.0
    """A request body must arrive whole within this; a slower upload gets 408 and its connection is
    closed."""
    shutdown_grace: float = 5.0
    """How long requests in flight get to finish normally when the server shuts down (or a worker hands
    a session over to another): once it has run out, those still running are cancelled and each is
    answered -32000 ``Server shutting down`` on its own stream (docs/transport.md, "Shutdown").  Also
    the bound of the flushes at the end (what is queued for a WebSocket or stdio client, events for a
    shared store)."""
    drain_delay: float | None = None
    """Seconds a stopping app (``app.aclose()``, SIGTERM under ``serve`` or ``mcp-trio``) goes on
    serving as before once its readiness has turned (a ``GET`` without a session, the shipped balancer
    configurations' health check, gets 503 from the start), so that the balancer stops sending it
    requests first.  None: 3 seconds when the app hands its sessions over to other workers (a worker id
    and a Redis bus), else 0."""
    dns_rebinding_protection: bool | None = None
    """Check ``Host`` (421 when foreign) and ``Origin`` (403 when foreign; requests without one pass)
    against the allowed ones: the loopback names (``localhost``, ``127.0.0.1``, ``[::1]``, any port) and
    their ``http(s)`` origins, plus ``allowed_hosts``, ``allowed_origins`` and ``cors_origins``.
    True: every request; False: none.  None (auto): every request when ``allowed_hosts`` or
    ``allowed_origins`` is set; otherwise the requests that arrive on a loopback connection (the
    server's own address on that connection is loopback, as for a local client or a reverse proxy on
    the same machine forwarding to 127.0.0.1), whatever address the server listens on."""
    allowed_hosts: frozenset[str] | None = None
    """Extra ``Host`` values (``host`` for any port, or ``host:port``) accepted besides the loopback
    names, such as the public name a reverse proxy passes on.  Setting it (or ``allowed_origins``)
    turns automatic protection on for every request."""
    allowed_origins: frozenset[str] | None = None
    """Extra ``Origin`` values (``scheme://host[:port]``, ``scheme://host:*``) besides loopback origins.
    Setting it (or ``allowed_hosts``) turns automatic protection on for every request."""
    cors_origins: frozenset[str] | None = None
    """Web origins (``scheme://host[:port]``, ``scheme://host:*``) whose pages may call the endpoint
    from a browser (CORS), or ``frozenset({"*"})`` for any origin (then the ``Origin`` check is off;
    ``Host`` is still checked).  None: CORS off, OPTIONS gets 405.  Preflights from these origins get
    204 with the methods and the MCP request headers they ask for (``Authorization`` included); every
    response to them carries ``Access-Control-Allow-Origin`` and exposes ``Mcp-Session-Id``,
    ``WWW-Authenticate``, ``Retry-After``, ``RateLimit-Limit`` and ``RateLimit-Remaining``; a preflight
    from any other origin gets 403.  These origins pass the ``Origin`` check, and do not by themselves
    turn automatic protection on."""
    event_store_factory: Callable[[], EventStore | None] = field(default=InMemoryEventStore)
    """Makes the app's event store; return None to switch resumability off."""
    session_id_factory: Callable[[], str] = field(default=new_session_id)
    """Makes the id of each new 2025 session: visible ASCII, unique, unguessable (256 random bits by
    default).  A deployment can put routing information in it (a worker's prefix, say)."""
    worker_id: str | None = None
    """This process's name among the workers of one deployment (1 to 32 of ``A-Z a-z 0-9 _ -``).  With
    it, 2025 session ids are ``<worker_id>.<id from session_id_factory>``, so a balancer can route each
    session to its owner, and a session id naming another worker is 404 here (see docs/deploy/workers)."""
    session_registry_factory: Callable[[], SessionRegistry] = field(default=_local_registry)
    """Makes the app's registry of live sessions (:class:`~mcp_trio.server.LocalSessionRegistry` by
    default)."""
    authenticate: Authenticate | None = None
    """Called with each HTTP request's :class:`~mcp_trio.server.HTTPRequestInfo` before any JSON-RPC is read;
    returns the principal (any object, reachable as ``Context.principal``) or raises
    :class:`~mcp_trio.errors.RemoteProtocolError` (``http_status=401`` with a ``www-authenticate`` header, or
    403).  A 2025 session belongs to the principal that created it: the same session id with another
    principal is 404.  None: no authentication."""
    oauth: ProtectedResource | None = None
    """Make the endpoint an OAuth 2.1 protected resource (:class:`mcp_trio.auth.ProtectedResource`): every
    request needs a bearer token its verifier accepts, with the scopes the request needs, and the
    resource metadata is served at its well-known URLs; :attr:`Context.principal
    <mcp_trio.Context.principal>` is the request's :class:`~mcp_trio.auth.AccessToken`.  Not with
    ``authenticate``.  None: no OAuth."""
    request_state_secret: bytes | Sequence[bytes] | None = None
    """HMAC key that seals ``requestState`` of input-required results (2026 era), or a key ring (a
    sequence of keys: the first seals, every one verifies, so keys can be rotated).  None: the ring in
    the environment variable ``MCP_TRIO_REQUEST_STATE_SECRET`` (comma-separated base64 keys of at least
    32 bytes) if it is set, else a random key per app, so a retry must reach the same process.  Give
    every worker the same ring."""
    request_state_ttl: float = 600.0
    """How long a ``requestState`` stays valid."""
    task_store_factory: Callable[[], TaskStore] | None = None
    """Makes the app's store of tasks (tasks extension, 2026 era): None for a
    :class:`~mcp_trio.server.MemoryTaskStore` (this process only); :class:`mcp_trio.redis.RedisTaskStore` lets
    every worker of a deployment answer for any task."""
    task_ttl: float | None = 3600.0
    """How long a task and its result are kept after it was created (its ``ttlMs``); a task still running
    then is cancelled and forgotten.  None: no TTL (the memory store then forgets finished tasks only
    when it needs the room)."""
    task_poll_interval: float = 1.0
    """The ``pollIntervalMs`` suggested to clients polling a task."""
    stats_path: str | None = None
    """If set, ``GET`` on this path answers :meth:`MCPApp.statistics` as JSON (for operators and tests),
    after the endpoint's own admission: the ``Host``/``Origin`` check, then ``oauth`` (a token with the
    endpoint's ``required_scopes``) or ``authenticate``, with the same refusals (421, 403, 401 with its
    challenge); without authentication it is open as the endpoint is.  The statistics count every task
    of the process, so the answer is computed at most every 50 ms, however many requests come."""
    server_card: ServerCard | None = None
    """Serve a server card (the server card extension, SEP-2127, a draft) at ``<path>/server-card`` and
    the AI Catalog linking to it at ``/.well-known/ai-catalog.json``: public documents made from the
    server's ``server/discover`` answer, with what the :class:`~mcp_trio.server.ServerCard` adds
    (``ServerCard()`` adds nothing).  None: not served (404)."""

    rate_limits: Sequence[RateLimit] = ()
    """Rate limits (following the draft SEP-3304, which may change): each a :class:`RateLimit
    <mcp_trio.server.RateLimit>` (``RateLimit.parse("address=100/min")``), a token bucket per
    principal, client address, session, tool or method.  A request over one is refused
    before any handler: HTTP 429 with ``Retry-After``, ``RateLimit-Limit`` and ``RateLimit-Remaining``,
    and the JSON-RPC error -32023 with ``data.retryAfterMs`` (on WebSocket and stdio, the error
    alone).  A new session does not reset ``principal`` and ``address`` limits (docs/rate-limits.md)."""
    rate_limit_store_factory: Callable[[], RateLimitStore] | None = None
    """Makes the store that shares the buckets of ``rate_limits`` with the other workers
    (:class:`mcp_trio.redis.RedisRateLimiter`); the limits of this process apply besides, and alone
    while the store cannot be reached.  None: this process's buckets only."""

    def __post_init__(self) -> None:
        if self.oauth is not None:
            if not isinstance(self.oauth, _ProtectedResourceShape):
                raise TypeError("oauth must be a mcp_trio.auth.ProtectedResource")
            if self.authenticate is not None:
                raise ValueError("oauth and authenticate are exclusive: each decides who sends a request")
        if self.server_card is not None and not isinstance(self.server_card, ServerCard):
            raise TypeError("server_card must be a mcp_trio.server.ServerCard")
        if self.worker_id is not None:
            check_worker_id(self.worker_id)
        if self.drain_delay is not None and not 0 <= self.drain_delay <= 600:
            raise ValueError("drain_delay must be between 0 and 600 seconds (or None)")
        if not self.keepalive_interval > 0:
            raise ValueError("keepalive_interval must be positive (math.inf: no keep-alive comments)")
        if self.max_event_store_bytes < 1:
            raise ValueError("max_event_store_bytes must be at least 1")
        for name in ("max_sessions_per_principal", "max_sessions_per_address"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be positive, or 0 or None for no quota")
        if isinstance(self.rate_limits, str | bytes) or not all(
            isinstance(limit, RateLimit) for limit in self.rate_limits
        ):
            raise TypeError("rate_limits: a sequence of RateLimit (RateLimit.parse('address=100/min'))")
        object.__setattr__(self, "rate_limits", tuple(self.rate_limits))
        if self.task_ttl is not None and not self.task_ttl > 0:
            raise ValueError("task_ttl must be positive (or None)")
        if not 0 < self.task_poll_interval < 3600:
            raise ValueError("task_poll_interval must be between 0 and 3600 seconds")
        secret = self.request_state_secret
        if secret is not None:
            keys = [secret] if isinstance(secret, bytes) else list(secret)
            if not keys or not all(isinstance(key, bytes) and key for key in keys):
                raise ValueError("request_state_secret: a key, or a sequence of keys, each non-empty bytes")
