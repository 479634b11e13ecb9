"""HTTP request facts -> accept or reject, for the Streamable HTTP transport.

Sans-IO: every function takes plain values and either returns or raises
:class:`RemoteProtocolError` carrying the HTTP status, the JSON-RPC code and any extra headers.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from ..errors import RemoteProtocolError
from . import versions
from .session import parse_event_id

__all__ = [
    "ALLOWED_METHODS",
    "AMBIGUOUS_FRAMING",
    "CORS_ALLOW_METHODS",
    "CORS_EXPOSE_HEADERS",
    "CORS_MAX_AGE",
    "CORS_REQUEST_HEADERS",
    "LOOPBACK_HOSTS",
    "CORSPolicy",
    "OriginPolicy",
    "RequestFacts",
    "accepts",
    "check_delete",
    "check_duplicates",
    "check_framing",
    "check_get",
    "check_method",
    "check_origin",
    "check_post",
    "check_protocol_version",
    "check_session_header",
    "cors_preflight",
    "is_loopback",
    "is_preflight",
    "normalize_origin",
    "protection_applies",
]

ALLOWED_METHODS = ("GET", "POST", "DELETE")
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
SESSION_HEADER = "mcp-session-id"


@dataclass(slots=True)
class RequestFacts:
    """What the transport looks at in an HTTP request's head (header names lower-case); read-only by
    convention (not ``frozen``: a frozen dataclass of this many fields costs several microseconds to
    build, once per request)."""

    method: str
    host: str | None = None
    origin: str | None = None
    accept: str | None = None
    content_type: str | None = None
    content_length: int | None = None
    session_id: str | None = None
    protocol_version: str | None = None
    last_event_id: str | None = None
    mcp_method: str | None = None
    mcp_name: str | None = None
    mcp_params: tuple[tuple[str, str], ...] = ()
    """``Mcp-Param-{Name}`` headers as ``(name lower-case, raw value)``."""
    cors_method: str | None = None
    """``Access-Control-Request-Method`` (of a CORS preflight)."""
    cors_headers: str | None = None
    """``Access-Control-Request-Headers`` (of a CORS preflight; copies joined like ``Accept``'s)."""
    conflicts: tuple[str, ...] = ()
    """Lower-case names of headers above sent more than once with different values (``accept`` and
    ``access-control-request-headers`` excepted: their copies are joined); the first copy is the one
    kept."""
    ambiguous_framing: bool = False
    """Both ``Content-Length`` and ``Transfer-Encoding``: see :func:`check_framing`."""

    @classmethod
    def from_headers(cls, method: str, headers: Iterable[tuple[bytes, bytes]]) -> RequestFacts:
        """Build facts from ASGI-style ``(name, value)`` byte pairs (names lower-case, as ASGI promises).

        Repeated ``Accept`` (and ``Access-Control-Request-Headers``) headers are joined with ``", "``; any
        other repeated header keeps its first
        copy, and is listed in ``conflicts`` if a later copy differs (see :func:`check_duplicates`)."""
        found: dict[bytes, str] = {}
        params: dict[str, str] = {}
        conflicts: tuple[str, ...] = ()
        for name, value in headers:
            if name in _WANTED:
                text = value.decode("latin-1").strip()
                first = found.get(name)
                if first is None:
                    found[name] = text
                elif first != text:
                    if name in _JOINED:
                        found[name] = f"{first}, {text}"
                    elif name.decode() not in conflicts:
                        conflicts += (name.decode(),)
            elif name.startswith(b"mcp-param-"):
                key, text = name[10:].decode("latin-1"), value.decode("latin-1").strip()
                first = params.setdefault(key, text)
                if first is not text and first != text and f"mcp-param-{key}" not in conflicts:
                    conflicts += (f"mcp-param-{key}",)
        return cls(
            method=method,
            host=found.get(b"host"),
            origin=found.get(b"origin"),
            accept=found.get(b"accept"),
            content_type=found.get(b"content-type"),
            content_length=_content_length(found.get(b"content-length")),
            session_id=found.get(b"mcp-session-id"),
            protocol_version=found.get(b"mcp-protocol-version"),
            last_event_id=found.get(b"last-event-id"),
            mcp_method=found.get(b"mcp-method"),
            mcp_name=found.get(b"mcp-name"),
            mcp_params=tuple(params.items()),
            cors_method=found.get(b"access-control-request-method"),
            cors_headers=found.get(b"access-control-request-headers"),
            conflicts=conflicts,
            ambiguous_framing=b"transfer-encoding" in found and b"content-length" in found,
        )


_WANTED = frozenset(
    {
        b"host",
        b"origin",
        b"accept",
        b"content-type",
        b"content-length",
        b"transfer-encoding",
        b"mcp-session-id",
        b"mcp-protocol-version",
        b"last-event-id",
        b"mcp-method",
        b"mcp-name",
        b"access-control-request-method",
        b"access-control-request-headers",
    }
)
_JOINED = frozenset({b"accept", b"access-control-request-headers"})
"""List-valued headers whose repeated copies are joined with ``", "``."""
_HUGE = 10**18
"""Stands for a ``Content-Length`` of more than 18 digits (far more than any body we accept)."""


def _content_length(value: str | None) -> int | None:
    """A ``Content-Length`` of ASCII digits as an int; None when absent or malformed."""
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    digits = value.lstrip("0")
    return int(digits or "0") if len(digits) <= 18 else _HUGE


_ERA_HEADERS = frozenset({"mcp-method", "mcp-name", "mcp-protocol-version", "access-control-request-method"})
"""Headers whose conflicting copies :func:`check_duplicates` leaves to the code that reads them (with
``Mcp-Param-*``): ``modern.check_headers`` answers -32020, :func:`check_protocol_version` -32600 and
:func:`cors_preflight` 400."""


AMBIGUOUS_FRAMING = "Bad Request: Content-Length and Transfer-Encoding in one request"


def check_framing(facts: RequestFacts) -> None:
    """400, and the connection closed after it, for a request with both ``Content-Length`` and
    ``Transfer-Encoding``: the HTTP/1.1 server went by one of them, a proxy in front may have gone by
    the other (request smuggling); RFC 9112 section 6.3 says to close the connection after answering.
    The check is the app's own, so it holds on any server that hands it both headers (hypercorn and
    ``serve_h11`` do: h11 keeps both)."""
    if facts.ambiguous_framing:
        raise RemoteProtocolError(AMBIGUOUS_FRAMING, headers=(("connection", "close"),))


def check_duplicates(facts: RequestFacts) -> None:
    """400 for conflicting copies of a transport header (``Host``, ``Origin``, ``Content-Type``,
    ``Content-Length``, ``Mcp-Session-Id``, ``Last-Event-ID``): which copy a proxy or a load balancer
    reads is anyone's guess, so none is trusted."""
    names = [n for n in facts.conflicts if n not in _ERA_HEADERS and not n.startswith("mcp-param-")]
    if names:
        raise RemoteProtocolError(f"Bad Request: conflicting duplicate {', '.join(names)} headers")


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


def check_method(facts: RequestFacts) -> None:
    if facts.method not in ALLOWED_METHODS:
        raise RemoteProtocolError(
            f"Method Not Allowed: {facts.method}",
            http_status=405,
            headers=(("allow", ", ".join(ALLOWED_METHODS)),),
        )


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


# -- CORS -------------------------------------------------------------------------------------

CORS_ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
CORS_REQUEST_HEADERS = frozenset(
    {
        "accept",
        "authorization",
        "content-type",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "mcp-session-id",
    }
)
"""The request headers MCP clients send, besides ``Mcp-Param-{Name}``: what a preflight may ask for."""
CORS_EXPOSE_HEADERS = "Mcp-Session-Id, WWW-Authenticate, Retry-After"
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


@functools.lru_cache(maxsize=64)
def _media_ranges(accept: str) -> frozenset[str]:
    """The media ranges an ``Accept`` value admits (cached: clients send the same value every time)."""
    ranges = set()
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if any(p.replace(" ", "").lower() in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params):
            continue
        ranges.add(media.lower())
    return frozenset(ranges)


def accepts(accept: str | None, media_type: str) -> bool:
    """Whether an ``Accept`` header admits ``media_type`` (wildcards count; ``q=0`` excludes)."""
    if accept is None:
        return False
    ranges = _media_ranges(accept)
    kind = media_type.split("/")[0]
    return bool(ranges & {media_type, f"{kind}/*", "*/*"})


def check_post(facts: RequestFacts, *, max_body_size: int, json_only: bool = False) -> None:
    """Accept (406), Content-Type (415) and declared size (413) of a POST."""
    if not _verdict(_accepts_post, facts.accept, json_only):
        wanted = ("application/json",) if json_only else ("application/json", "text/event-stream")
        raise RemoteProtocolError(
            f"Not Acceptable: the client must accept {' and '.join(wanted)}", http_status=406
        )
    if not _verdict(_json_content_type, facts.content_type):
        raise RemoteProtocolError(
            "Unsupported Media Type: Content-Type must be application/json", http_status=415
        )
    if facts.content_length is not None and facts.content_length > max_body_size:
        body_too_large(max_body_size)


_CACHED = 256
"""Header values up to this long have their verdicts cached (longer ones, rare, are checked each time:
the caches stay small whatever clients send)."""


def _verdict(check: Any, value: str | None, *args: Any) -> bool:
    """``check(value, *args)``, from its cache when ``value`` is short."""
    if value is not None and len(value) > _CACHED:
        return bool(check.__wrapped__(value, *args))
    return bool(check(value, *args))


@functools.lru_cache(maxsize=64)
def _accepts_post(accept: str | None, json_only: bool) -> bool:
    """Whether a POST's ``Accept`` admits what its answer may be (cached: clients repeat theirs)."""
    wanted = ("application/json",) if json_only else ("application/json", "text/event-stream")
    return all(accepts(accept, media) for media in wanted)


@functools.lru_cache(maxsize=64)
def _json_content_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` is ``application/json`` (a charset, if any, UTF-8); cached."""
    media, *params = (p.strip().lower() for p in (content_type or "").split(";"))
    charset_ok = all(
        p.replace(" ", "") in ("charset=utf-8", 'charset="utf-8"') for p in params if p.startswith("charset")
    )
    return media == "application/json" and charset_ok


def body_too_large(max_body_size: int) -> None:
    raise RemoteProtocolError(f"Payload Too Large: the body exceeds {max_body_size} bytes", http_status=413)


def check_get(facts: RequestFacts) -> None:
    """406 without ``text/event-stream`` in ``Accept``; 400 for a ``Last-Event-ID`` that is not an event id
    this server makes (``STREAM-SEQ`` in ASCII digits: superscript or Arabic-Indic digits are not)."""
    if not accepts(facts.accept, "text/event-stream"):
        raise RemoteProtocolError("Not Acceptable: the client must accept text/event-stream", http_status=406)
    if facts.last_event_id and parse_event_id(facts.last_event_id) is None:
        raise RemoteProtocolError("Bad Request: Last-Event-ID is not an event id of this server")


def check_delete(facts: RequestFacts) -> None:
    """DELETE needs nothing but a session id, checked by :func:`check_session_header`."""


def check_protocol_version(facts: RequestFacts) -> versions.Revision:
    """The revision a request speaks, by its header (absent: 2025-03-26); 400 when unsupported."""
    if facts.protocol_version is None:
        return versions.DEFAULT_HEADER_REVISION
    if "mcp-protocol-version" in facts.conflicts:
        raise RemoteProtocolError("Bad Request: conflicting duplicate mcp-protocol-version headers")
    found = versions.revision(facts.protocol_version)
    if found is None or found.modern:
        supported = ", ".join(r.name for r in versions.LEGACY)
        raise RemoteProtocolError(
            f"Bad Request: unsupported MCP-Protocol-Version {facts.protocol_version!r}"
            f" (supported: {supported})",
            data={"supported": [r.name for r in versions.LEGACY]},
        )
    return found


_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


def check_session_header(facts: RequestFacts) -> str:
    """The session id of a request that needs one: 400 when missing or malformed."""
    sid = facts.session_id
    if not sid:
        raise RemoteProtocolError("Bad Request: Mcp-Session-Id header is required")
    if not _VISIBLE_ASCII.fullmatch(sid):
        raise RemoteProtocolError("Bad Request: malformed Mcp-Session-Id")
    return sid


def session_not_found() -> RemoteProtocolError:
    return RemoteProtocolError("Not Found: unknown or terminated session", http_status=404)


def app_not_running(request_id: mt.RequestId | None = None) -> RemoteProtocolError:
    """503 from an app whose sessions' nursery was never started (its ASGI server does not run the
    lifespan protocol, as many routers' mounts do not forward it)."""
    return RemoteProtocolError(
        "Service Unavailable: the MCP app is not running; serve it under an ASGI server that runs the "
        "lifespan protocol, or start it yourself with `async with app.running():` (or "
        "`await nursery.start(app.run)`)",
        http_status=503,
        code=mt.INTERNAL_ERROR,
        request_id=request_id,
    )


def server_busy() -> RemoteProtocolError:
    return RemoteProtocolError(
        "Service Unavailable: too many sessions",
        http_status=503,
        code=mt.INTERNAL_ERROR,
        headers=(("retry-after", "5"),),
    )
