"""Who may call the endpoint: DNS-rebinding protection (the ``Host`` and ``Origin`` a request may
carry, and when the check applies) and CORS (which web origins' scripts may call, and the answer to a
preflight).

Sans-IO: every function takes plain values and either returns or raises
:class:`RemoteProtocolError` carrying the HTTP status and any extra headers.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import RemoteProtocolError
from .request import RequestFacts

__all__ = [
    "CORS_ALLOW_METHODS",
    "CORS_EXPOSE_HEADERS",
    "CORS_MAX_AGE",
    "CORS_REQUEST_HEADERS",
    "LOOPBACK_HOSTS",
    "CORSPolicy",
    "OriginPolicy",
    "check_listener_host",
    "check_origin",
    "cors_preflight",
    "is_loopback",
    "is_preflight",
    "local_host",
    "normalize_host",
    "normalize_origin",
    "protection_applies",
]

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """DNS-rebinding protection: which ``Host`` and ``Origin`` values are acceptable.

    Entries are ``host`` (any port) or ``host:port``; origins are ``scheme://host[:port]`` and
    ``scheme://host:*`` for any port.  ``None`` switches a check off.
    """

    allowed_hosts: frozenset[str] | None
    allowed_origins: frozenset[str] | None

    @classmethod
    def loopback(cls) -> OriginPolicy:
        origins = {f"{scheme}://{host}:*" for scheme in ("http", "https") for host in LOOPBACK_HOSTS}
        return cls(allowed_hosts=LOOPBACK_HOSTS, allowed_origins=frozenset(origins))

    @classmethod
    def off(cls) -> OriginPolicy:
        return cls(allowed_hosts=None, allowed_origins=None)

    @classmethod
    def protecting(
        cls, hosts: Iterable[str] = (), origins: Iterable[str] = (), cors: CORSPolicy | None = None
    ) -> OriginPolicy:
        """The loopback names and origins, plus ``hosts``, ``origins`` and the origins ``cors`` admits
        (an origin allowed to call from a browser is an allowed origin; CORS for any origin leaves the
        ``Origin`` check off).  ValueError for an entry that is not a host or an origin."""
        loopback = cls.loopback()
        assert loopback.allowed_hosts is not None and loopback.allowed_origins is not None
        allowed_hosts = loopback.allowed_hosts | {normalize_host(h) for h in _entries(hosts, "allowed_hosts")}
        allowed_origins = loopback.allowed_origins | {
            normalize_origin(o) for o in _entries(origins, "allowed_origins")
        }
        if cors is not None and cors.any_origin:
            return cls(allowed_hosts=allowed_hosts, allowed_origins=None)
        if cors is not None:
            allowed_origins |= cors.origins
        return cls(allowed_hosts=allowed_hosts, allowed_origins=allowed_origins)

    def host_allowed(self, host: str) -> bool:
        if self.allowed_hosts is None:
            return True
        host = host.lower()
        return host in self.allowed_hosts or _split_port(host)[0] in self.allowed_hosts

    def origin_allowed(self, origin: str) -> bool:
        if self.allowed_origins is None:
            return True
        return _origin_listed(self.allowed_origins, origin)


def _entries(value: Iterable[str], name: str) -> Iterable[str]:
    """``value`` unless it is one string (whose characters would be taken for entries): TypeError."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a collection of strings, such as frozenset({{{value!r}}})")
    return value


def _origin_listed(entries: frozenset[str], origin: str) -> bool:
    """Whether ``origin`` is one of ``entries`` (``scheme://host:*`` entries match any port)."""
    origin = origin.lower().rstrip("/")
    if origin in entries:
        return True
    base, _port = _split_port(origin)
    return f"{base}:*" in entries


_ORIGIN_ENTRY = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#@\s]+")
_HOST_ENTRY = re.compile(r"[^/?#@\s]+")


def normalize_origin(entry: str) -> str:
    """An allowed-origin entry as requests carry it (lower case, no trailing ``/``): ValueError for
    anything but ``null`` or ``scheme://host[:port]`` (``scheme://host:*``: any port)."""
    text = entry.strip().lower().rstrip("/")
    if text != "null" and not _ORIGIN_ENTRY.fullmatch(text):
        raise ValueError(f"not an origin (scheme://host[:port]): {entry!r}")
    return text


def normalize_host(entry: str) -> str:
    """An allowed-host entry in lower case: ValueError for anything but ``host`` or ``host:port``."""
    text = entry.strip().lower()
    if not _HOST_ENTRY.fullmatch(text):
        raise ValueError(f"not a host (host or host:port): {entry!r}")
    return text


def protection_applies(setting: bool | None, *, allow_lists: bool, local_address: str | None) -> bool:
    """Whether DNS-rebinding protection checks a request.

    ``setting`` (``ServerConfig.dns_rebinding_protection``) True or False decides alone.  None (auto):
    on for every request when ``allow_lists`` (``allowed_hosts`` or ``allowed_origins`` is configured:
    a list of what is allowed is enforced wherever requests come from), else on for a request that
    arrived on a loopback connection (``local_address``: the server's own address on that connection,
    ASGI ``scope["server"]``), as when a local client or a reverse proxy on the same machine connects to
    127.0.0.1."""
    if setting is not None:
        return setting
    return allow_lists or is_loopback(local_address)


def _split_port(hostport: str) -> tuple[str, str | None]:
    """``'h:80'`` -> ``('h', '80')``; ``'[::1]:80'`` -> ``('[::1]', '80')``; no port -> ``(h, None)``."""
    head, sep, tail = hostport.rpartition(":")
    if sep and tail.isascii() and tail.isdigit() and not head.endswith(":"):
        return head, tail
    return hostport, None


@functools.lru_cache(maxsize=256)
def is_loopback(host: str | None) -> bool:
    """True for a server address on the loopback interface (how DNS-rebinding protection turns on)."""
    if host is None:
        return False
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_origin(facts: RequestFacts, policy: OriginPolicy) -> None:
    """421 for a foreign ``Host``, 403 for a foreign ``Origin`` (DNS-rebinding protection)."""
    if facts.host is not None and not policy.host_allowed(facts.host):
        raise RemoteProtocolError(
            f"Misdirected Request: host {facts.host!r} is not allowed (see allowed_hosts, --allowed-hosts)",
            http_status=421,
        )
    if facts.origin is not None and not policy.origin_allowed(facts.origin):
        raise RemoteProtocolError(
            f"Forbidden: origin {facts.origin!r} is not allowed (see allowed_origins, --allowed-origins)",
            http_status=403,
        )


def local_host(server: tuple[str, int | None] | None) -> str | None:
    """The ``Host`` that names a connection's own address (ASGI ``scope["server"]``): ``host:port``
    (``[v6]:port`` for IPv6; an IPv4-mapped address as the IPv4 one a client connected to), lower
    case; None when unknown (a Unix socket)."""
    if server is None or server[1] is None:
        return None
    host = server[0].lower()
    if host.startswith("::ffff:") and "." in host:  # a dual-stack socket's IPv4 client
        host = host[7:]
    return f"[{host}]:{server[1]}" if ":" in host else f"{host}:{server[1]}"


def check_listener_host(facts: RequestFacts, policy: OriginPolicy, local: str | None) -> None:
    """The operations listener's DNS-rebinding protection: 421 unless ``Host`` is the address the
    request arrived on (``local``, :func:`local_host`), a loopback name, or a host ``policy`` allows
    (:meth:`OriginPolicy.protecting`); conflicting copies of ``Host`` are refused too.  A request
    without ``Host`` (HTTP/1.0; no browser sends one) passes, as at the MCP endpoint.  The message
    names no host: the answer says nothing of what the listener serves."""
    if "host" in facts.conflicts or (
        facts.host is not None and facts.host.lower() != local and not policy.host_allowed(facts.host)
    ):
        raise RemoteProtocolError(
            "Misdirected Request: this listener does not serve that host (see admin_allowed_hosts, "
            "--admin-allowed-host)",
            http_status=421,
        )


# -- CORS -------------------------------------------------------------------------------------

CORS_ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
CORS_REQUEST_HEADERS = frozenset(
    {
        "accept",
        "authorization",
        "content-type",
        "last-event-id",
        "mcp-client-session-id",
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "mcp-session-id",
    }
)
"""The request headers MCP clients send, besides ``Mcp-Param-{Name}``: what a preflight may ask for."""
CORS_EXPOSE_HEADERS = "Mcp-Session-Id, WWW-Authenticate, Retry-After, RateLimit-Limit, RateLimit-Remaining"
"""Response headers a browser script may read besides the CORS-safelisted ones."""
CORS_MAX_AGE = 7200
"""How long (seconds) a browser may reuse a preflight's answer (Chromium's own cap)."""

_DEFAULT_ALLOW_HEADERS = ", ".join(sorted(CORS_REQUEST_HEADERS)).encode()
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")


@dataclass(frozen=True, slots=True)
class CORSPolicy:
    """Which web origins may call the endpoint from a browser's scripts (CORS).

    ``origins`` holds ``scheme://host[:port]`` entries (``scheme://host:*``: any port) or ``"*"`` for any
    origin.  A response to an allowed origin names it in ``Access-Control-Allow-Origin`` (an explicit
    list echoes the request's ``Origin`` and every response carries ``Vary: Origin``; ``"*"`` answers
    ``*``).  ``Access-Control-Allow-Credentials`` is never sent: MCP authenticates with an
    ``Authorization`` header, which a preflight allows, not with cookies.
    """

    origins: frozenset[str]

    @classmethod
    def of(cls, origins: Iterable[str]) -> CORSPolicy:
        """From configured entries: ValueError for one that is not an origin, or ``*`` with others."""
        entries = frozenset(
            "*" if o.strip() == "*" else normalize_origin(o) for o in _entries(origins, "cors_origins")
        )
        if "*" in entries and len(entries) > 1:
            raise ValueError("cors origins: '*' (any origin) cannot be combined with other origins")
        return cls(entries)

    @property
    def any_origin(self) -> bool:
        return "*" in self.origins

    def allows(self, origin: str | None) -> bool:
        if origin is None:
            return False
        return self.any_origin or _origin_listed(self.origins, origin)

    def response_headers(self, origin: str | None) -> list[tuple[bytes, bytes]]:
        """The headers every response to a request with this ``Origin`` carries (a preflight's too)."""
        if self.any_origin:
            if origin is None:
                return []
            return [(b"access-control-allow-origin", b"*"), _EXPOSE]
        if origin is None or not self.allows(origin):
            return [_VARY]
        return [(b"access-control-allow-origin", origin.encode("latin-1")), _EXPOSE, _VARY]


_EXPOSE = (b"access-control-expose-headers", CORS_EXPOSE_HEADERS.encode())
_VARY = (b"vary", b"Origin")


def is_preflight(facts: RequestFacts) -> bool:
    """A CORS preflight: ``OPTIONS`` with ``Access-Control-Request-Method``."""
    return facts.method == "OPTIONS" and facts.cors_method is not None


def _mcp_request_header(name: str) -> bool:
    if name in CORS_REQUEST_HEADERS:
        return True
    return name.startswith("mcp-param-") and len(name) > 10 and bool(_TOKEN.fullmatch(name))


def cors_preflight(facts: RequestFacts, policy: CORSPolicy) -> list[tuple[bytes, bytes]]:
    """The headers of the 204 answering a preflight, besides :meth:`CORSPolicy.response_headers`: 403
    for an origin that may not call (400 for conflicting ``Access-Control-Request-Method`` copies).

    ``Access-Control-Allow-Headers`` echoes the requested headers when each is one MCP uses
    (:data:`CORS_REQUEST_HEADERS` or ``mcp-param-<name>``: a wildcard cannot cover them, and ``*``
    never covers ``Authorization``); otherwise it lists :data:`CORS_REQUEST_HEADERS`, and the browser
    refuses to send the request, naming the header.  The methods are always :data:`CORS_ALLOW_METHODS`.
    """
    if "access-control-request-method" in facts.conflicts:
        raise RemoteProtocolError("Bad Request: conflicting duplicate access-control-request-method headers")
    if not policy.allows(facts.origin):
        raise RemoteProtocolError(
            f"Forbidden: origin {facts.origin!r} may not call this endpoint from a browser (see cors_origins,"
            " --cors-origins)",
            http_status=403,
        )
    names = [n for n in (part.strip().lower() for part in (facts.cors_headers or "").split(",")) if n]
    if names and all(_mcp_request_header(name) for name in names):
        allow_headers = ", ".join(dict.fromkeys(names)).encode()
    else:
        allow_headers = _DEFAULT_ALLOW_HEADERS
    return [
        (b"access-control-allow-methods", CORS_ALLOW_METHODS.encode()),
        (b"access-control-allow-headers", allow_headers),
        (b"access-control-max-age", str(CORS_MAX_AGE).encode()),
    ]
