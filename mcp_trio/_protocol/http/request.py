"""The head and body rules of a Streamable HTTP request: which methods exist, what a POST, a GET and a
DELETE must carry (``Accept``, ``Content-Type``, size, ``Last-Event-ID``, ``Mcp-Session-Id``,
``MCP-Protocol-Version``), and the framing and duplicate-header checks that keep a proxy and this
server reading the same request.

Sans-IO: every function takes plain values and either returns or raises
:class:`RemoteProtocolError` carrying the HTTP status, the JSON-RPC code and any extra headers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from ...errors import RemoteProtocolError
from .. import versions
from ..session import parse_event_id

__all__ = [
    "ALLOWED_METHODS",
    "AMBIGUOUS_FRAMING",
    "RequestFacts",
    "accepts",
    "app_not_running",
    "body_too_large",
    "check_delete",
    "check_duplicates",
    "check_framing",
    "check_get",
    "check_method",
    "check_post",
    "check_protocol_version",
    "check_session_header",
    "server_busy",
    "session_not_found",
]

ALLOWED_METHODS = ("GET", "POST", "DELETE")
SESSION_HEADER = "mcp-session-id"


@dataclass(slots=True)
class RequestFacts:
    """What the transport looks at in an HTTP request's head (header names lower-case); read-only by
    convention (not ``frozen``: one is built for every request, and a frozen dataclass of this many
    fields is several times slower to build; see docs/performance.md)."""

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
    client_session_id: str | None = None
    """``Mcp-Client-Session-Id`` (else ``X-Mcp-Client-Session-Id``) as sent: see
    :mod:`~mcp_trio._protocol.clientsession` (conflicting copies are listed in ``conflicts``, and
    never refused)."""

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
            client_session_id=found.get(b"mcp-client-session-id") or found.get(b"x-mcp-client-session-id"),
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
        b"mcp-client-session-id",
        b"x-mcp-client-session-id",
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


_ERA_HEADERS = frozenset(
    {
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "access-control-request-method",
        "mcp-client-session-id",
        "x-mcp-client-session-id",
    }
)
"""Headers whose conflicting copies :func:`check_duplicates` leaves to the code that reads them (with
``Mcp-Param-*``): ``modern.check_headers`` answers -32020, :func:`check_protocol_version` -32600 and
:func:`cors_preflight` 400; a client session id's are ignored (never refused)."""


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


def check_method(facts: RequestFacts) -> None:
    if facts.method not in ALLOWED_METHODS:
        raise RemoteProtocolError(
            f"Method Not Allowed: {facts.method}",
            http_status=405,
            headers=(("allow", ", ".join(ALLOWED_METHODS)),),
        )


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
