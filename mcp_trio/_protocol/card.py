"""Server cards and the AI Catalog (the server card extension, SEP-2127, a draft): sans-IO.

A server card is a public JSON document that describes a remote MCP server before a client connects
(identity, endpoint, protocol revisions).  mcp_trio makes it from the server's own ``server/discover``
answer, so the two cannot disagree: :func:`card_document` maps that answer (and the few fields only a
card has, :class:`ServerCard`) to the card; :func:`catalog_document` makes a domain's AI Catalog entry
for it; :func:`public_response` answers a ``GET`` of either with the headers the draft names (CORS for
any origin, ``Cache-Control``, an ``ETag`` and ``304`` for ``If-None-Match``); :func:`too_many`
refuses a client over its limit.

The draft is maintained in modelcontextprotocol/experimental-ext-server-card (``schema.ts``,
``docs/discovery.md``); it may change.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CARD_MEDIA_TYPE",
    "CARD_SCHEMA",
    "CARD_SUFFIX",
    "CATALOG_MEDIA_TYPE",
    "CATALOG_PATHS",
    "ServerCard",
    "card_document",
    "catalog_document",
    "public_response",
    "refusal_or_preflight",
    "too_many",
]

CARD_SCHEMA = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
CARD_MEDIA_TYPE = "application/mcp-server-card+json"
CATALOG_MEDIA_TYPE = "application/ai-catalog+json"
CARD_SUFFIX = "/server-card"
"""Appended to the endpoint's path: ``GET <streamable-http-url>/server-card``, the reserved location."""
CATALOG_PATHS = frozenset({"/.well-known/ai-catalog.json", "/.well-known/mcp/catalog.json"})
"""Where the catalog is served: the AI Catalog's well-known URI (the draft's current one) and the MCP
Catalog's of earlier drafts (the same document)."""
CATALOG_SPEC_VERSION = "1.0"
CAPABILITIES_META_KEY = "io.github.mcp-trio/capabilities"
"""The card's ``_meta`` key holding the capabilities ``server/discover`` declares (the draft's card has
no field for them)."""
CACHE_CONTROL = b"public, max-age=3600"
"""The draft's ``Cache-Control`` for a card (the catalog gets the same)."""
CORS_HEADERS = (
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"GET"),
    (b"access-control-allow-headers", b"Content-Type, If-None-Match"),
    (b"access-control-expose-headers", b"ETag"),
)
"""The draft's CORS headers: any web page may read the card (public, read-only metadata)."""
PREFLIGHT_MAX_AGE = b"7200"
MAX_DESCRIPTION = 100
"""The card's ``description`` and ``title`` are 1 to 100 characters long."""

_NAME = re.compile(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+")
_NAME_PART = re.compile(r"[^a-zA-Z0-9._-]+")
_HOST = re.compile(
    r"(?:[A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}(?::[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](?::[0-9]{1,5})?"
)


@dataclass(frozen=True, slots=True)
class ServerCard:
    """What a server card says beyond the server's ``server/discover`` answer (``ServerConfig.server_card``).

    The card's version, revisions and capabilities always come from ``server/discover``, and so do its
    title, description, website and icons when the server's ``serverInfo`` has them: these fields only
    fill in what ``serverInfo`` leaves out, so the card cannot contradict what a connected client sees.

    ``name``: the card's reverse-DNS name (``com.example/weather``).  Default: the server's name if it
    has that form, else ``<the endpoint's host, reversed>/<the server's name>``
    (``com.example.mcp/weather`` for ``https://mcp.example.com/mcp``; ``localhost/weather`` on loopback).
    ``url``: the endpoint's public URL (``https://mcp.example.com/mcp``).  Default: the OAuth resource
    when ``ServerConfig.oauth`` is set, else the URL the card was requested at (its scheme, ``Host`` and
    the endpoint's path), which is wrong behind a proxy that changes them: give it there.
    ``description``: 1 to 100 characters.  Default: the first line of the server's instructions if it
    is short enough, else ``"<title or name>, an MCP server"``.
    ``repository``: ``{"url": ..., "source": "github"}`` (and optional ``subfolder``, ``id``).
    ``meta``: the card's ``_meta`` (reverse-DNS keys).
    """

    name: str | None = None
    url: str | None = None
    title: str | None = None
    description: str | None = None
    website_url: str | None = None
    icons: Sequence[Mapping[str, Any]] = ()
    repository: Mapping[str, str] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    requests_per_minute: int | None = 120
    """The requests for the card and the catalog one client address (an IPv4 address, the /64 of an
    IPv6 one) makes a minute: a token bucket, bursts of as many; beyond, 429 with ``Retry-After``
    until the next token.  Behind
    a reverse proxy every client has the proxy's address: raise it, or turn it off (None or 0) and
    limit at the proxy."""

    def __post_init__(self) -> None:
        if self.name is not None and (len(self.name) > 200 or not _NAME.fullmatch(self.name)):
            raise ValueError(
                f"server card name {self.name!r} is not of the form namespace/name (com.example/x)"
            )
        for label, url in (("url", self.url), ("website_url", self.website_url)):
            if url is not None and urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"server card {label} must be an http(s) URL: {url!r}")
        for label, text in (("title", self.title), ("description", self.description)):
            if text is not None and not 1 <= len(text) <= MAX_DESCRIPTION:
                raise ValueError(f"server card {label} must be 1 to {MAX_DESCRIPTION} characters")
        if self.repository is not None and not {"url", "source"} <= set(self.repository):
            raise ValueError("server card repository needs its url and source")
        if CAPABILITIES_META_KEY in self.meta:
            raise ValueError(f"{CAPABILITIES_META_KEY} in a server card's meta comes from server/discover")
        per_minute = self.requests_per_minute
        if per_minute is not None and not (isinstance(per_minute, int) and 0 <= per_minute <= 10**9):
            raise ValueError("server card requests_per_minute: 1 to 10**9, or 0 or None for no limit")
        json.dumps([list(self.icons), self.repository, dict(self.meta)])  # JSON, or a TypeError now


def too_many(retry_after: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """429 for a client over the card's limit: ``Retry-After`` and the CORS headers (a page can read
    the status)."""
    body = b'{"error":"Too Many Requests"}'
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(retry_after).encode()),
        *CORS_HEADERS,
    ]
    return 429, headers, body


def endpoint_url(scheme: str, host: str | None, fallback_host: str, path: str) -> str:
    """The URL a request reached the endpoint by: ``Host`` when it is a host name or address (with a
    port), else the server's own address."""
    if host is None or not _HOST.fullmatch(host):
        host = fallback_host
    return f"{'https' if scheme in ('https', 'wss') else 'http'}://{host}{path}"


def _namespace(url: str) -> str:
    """The reverse-DNS namespace of an endpoint URL's host: ``localhost`` for a loopback one, an
    address as it is (``:`` as ``-``)."""
    host = urlsplit(url).hostname or "localhost"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return ".".join(reversed(host.split(".")))
    return "localhost" if address.is_loopback else host.replace(":", "-")


def _card_name(server_name: str, card: ServerCard, url: str) -> str:
    if card.name is not None:
        return card.name
    if _NAME.fullmatch(server_name) and len(server_name) <= 200:
        return server_name
    suffix = _NAME_PART.sub("-", server_name.replace("/", "-")).strip("-") or "server"
    return f"{_namespace(url)}/{suffix}"[:200]


def _clip(text: str) -> str:
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "\u2026"


def _description(info: Mapping[str, Any], card: ServerCard, discover: Mapping[str, Any]) -> str:
    given = info.get("description")
    if isinstance(given, str) and given.strip():
        return _clip(given.strip())
    if card.description is not None:
        return card.description
    instructions = discover.get("instructions")
    first = instructions.strip().split("\n", 1)[0].strip() if isinstance(instructions, str) else ""
    if 1 <= len(first) <= MAX_DESCRIPTION:
        return first
    return _clip(f"{info.get('title') or card.title or info.get('name') or 'this server'}, an MCP server")


def card_document(
    discover: Mapping[str, Any],
    server_info: Mapping[str, Any],
    card: ServerCard,
    url: str,
    auth_metadata_url: str | None = None,
) -> dict[str, Any]:
    """The server card of an endpoint at ``url``: ``discover`` is its ``server/discover`` result and
    ``server_info`` the ``serverInfo`` that result names (the answer's ``_meta``); with
    ``auth_metadata_url`` (OAuth) the endpoint needs a bearer token, found through that metadata."""
    name = str(server_info.get("name") or "")
    document: dict[str, Any] = {
        "$schema": CARD_SCHEMA,
        "name": _card_name(name, card, url),
        "version": str(server_info.get("version") or ""),
        "description": _description(server_info, card, discover),
    }
    title = server_info.get("title") or card.title
    if isinstance(title, str) and title:
        document["title"] = _clip(title)
    website = server_info.get("websiteUrl") or card.website_url
    if isinstance(website, str) and website:
        document["websiteUrl"] = website
    if card.repository is not None:
        document["repository"] = dict(card.repository)
    icons = server_info.get("icons") or list(card.icons)
    if isinstance(icons, list) and icons:
        document["icons"] = icons
    remote: dict[str, Any] = {"type": "streamable-http", "url": url}
    if auth_metadata_url is not None:
        remote["headers"] = [
            {
                "name": "Authorization",
                "description": "An OAuth 2.1 bearer token; the protected resource metadata is at "
                + auth_metadata_url,
                "isRequired": True,
                "isSecret": True,
                "value": "Bearer {token}",
                "variables": {
                    "token": {"description": "An access token", "isRequired": True, "isSecret": True}
                },
            }
        ]
    versions = discover.get("supportedVersions")
    if isinstance(versions, list) and versions:
        remote["supportedProtocolVersions"] = [str(v) for v in versions]
    document["remotes"] = [remote]
    meta = dict(card.meta)
    capabilities = discover.get("capabilities")
    if isinstance(capabilities, dict):
        meta[CAPABILITIES_META_KEY] = capabilities
    if meta:
        document["_meta"] = meta
    return document


def catalog_document(card: Mapping[str, Any], card_url: str) -> dict[str, Any]:
    """The AI Catalog of the domain serving the card at ``card_url``: one entry, linking to it.  Its
    identifier is ``urn:air:<host>:mcp:<the card name's last part>``."""
    host = urlsplit(card_url).hostname or "localhost"
    publisher = host.replace(":", "-")  # an IPv6 address: no colons in a URN segment
    suffix = str(card["name"]).rpartition("/")[2]
    entry = {"identifier": f"urn:air:{publisher}:mcp:{suffix}", "type": CARD_MEDIA_TYPE, "url": card_url}
    return {"specVersion": CATALOG_SPEC_VERSION, "entries": [entry]}


def _etag(body: bytes) -> bytes:
    return b'"' + hashlib.sha256(body).hexdigest()[:32].encode() + b'"'


def _matches(if_none_match: str | None, etag: bytes) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (weak comparison, RFC 9110 13.1.2) or is ``*``."""
    if if_none_match is None:
        return False
    wanted = etag.decode()
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == wanted:
            return True
    return False


def refusal_or_preflight(method: str) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
    """(status, headers, body) answering a request for a public document (a card, a catalog) that is
    not a GET or HEAD: 204 to a CORS preflight (OPTIONS), else 405; None for GET and HEAD."""
    cors = list(CORS_HEADERS)
    if method in ("GET", "HEAD"):
        return None
    if method == "OPTIONS":
        return 204, [*cors, (b"access-control-max-age", PREFLIGHT_MAX_AGE)], b""
    body = b'{"error":"Method Not Allowed"}'
    headers = [(b"content-type", b"application/json"), (b"allow", b"GET, HEAD, OPTIONS")]
    return 405, [*headers, (b"content-length", str(len(body)).encode()), *cors], body


def public_response(
    method: str, document: Mapping[str, Any], media_type: str, if_none_match: str | None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) answering a GET or HEAD of a public document (a card, a catalog): the
    draft's CORS and caching headers, an ``ETag``, and ``304`` when ``If-None-Match`` names it."""
    body = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    etag = _etag(body)
    headers = [(b"etag", etag), (b"cache-control", CACHE_CONTROL), *CORS_HEADERS]
    if _matches(if_none_match, etag):
        return 304, headers, b""
    headers += [(b"content-type", media_type.encode()), (b"content-length", str(len(body)).encode())]
    return 200, headers, b"" if method == "HEAD" else body
