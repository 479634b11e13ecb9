"""Server configuration: every policy duration and bound, in one place."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._protocol.session import new_session_id
from .eventstore import EventStore, InMemoryEventStore

if TYPE_CHECKING:
    from .session import SessionRegistry

__all__ = ["Authenticate", "HTTPRequestInfo", "ServerConfig"]


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


def _local_registry() -> SessionRegistry:
    from .session import LocalSessionRegistry  # the session module imports this one

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
    """Idle SSE streams get a comment frame this often, so proxies do not time them out."""
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
    """Beyond this many live sessions, ``initialize`` gets 503."""
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
    """How long streams get to end cleanly when the server shuts down."""
    dns_rebinding_protection: bool | None = None
    """Check ``Host`` and ``Origin``.  None: on when the server listens on a loopback address."""
    allowed_hosts: frozenset[str] | None = None
    """Extra ``Host`` values (``host`` or ``host:port``) accepted besides the loopback names."""
    allowed_origins: frozenset[str] | None = None
    """Extra ``Origin`` values (``scheme://host[:port]``, ``scheme://host:*``) besides loopback origins."""
    event_store_factory: Callable[[], EventStore | None] = field(default=InMemoryEventStore)
    """Makes the app's event store; return None to switch resumability off."""
    session_id_factory: Callable[[], str] = field(default=new_session_id)
    """Makes the id of each new 2025 session: visible ASCII, unique, unguessable (256 random bits by
    default).  A deployment can put routing information in it (a worker's prefix, say)."""
    session_registry_factory: Callable[[], SessionRegistry] = field(default=_local_registry)
    """Makes the app's registry of live sessions (:class:`~mcp_trio.LocalSessionRegistry` by default)."""
    authenticate: Authenticate | None = None
    """Called with each HTTP request's :class:`~mcp_trio.HTTPRequestInfo` before any JSON-RPC is read;
    returns the principal (any object, reachable as ``Context.principal``) or raises
    :class:`~mcp_trio.RemoteProtocolError` (``http_status=401`` with a ``www-authenticate`` header, or
    403).  A 2025 session belongs to the principal that created it: the same session id with another
    principal is 404.  None: no authentication."""
    request_state_secret: bytes | None = None
    """HMAC key that seals ``requestState`` of input-required results (2026 era).  None: a random key
    per app, so a retry must reach the same process; give every replica the same secret otherwise."""
    request_state_ttl: float = 600.0
    """How long a ``requestState`` stays valid."""
    stats_path: str | None = None
    """If set, ``GET`` on this path answers :meth:`MCPApp.statistics` as JSON (for operators and tests)."""
