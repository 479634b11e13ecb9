"""How the OAuth client finds out where to authorize: ``WWW-Authenticate`` challenges (RFC 6750, RFC
9728), protected resource metadata (RFC 9728) and authorization server metadata (RFC 8414, OpenID
Connect Discovery), in the order the MCP specification gives, with the 2025-03-26 fallbacks."""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..._protocol import safejson
from ._errors import OAuthError

__all__ = [
    "MAX_REDIRECTS",
    "BearerChallenge",
    "Challenge",
    "Discovery",
    "ResourceMetadata",
    "ServerMetadata",
    "URLPolicy",
    "bearer_challenge",
    "canonical_url",
    "discover",
    "parse_www_authenticate",
    "resource_matches",
]

logger = logging.getLogger("mcp_trio.auth")

MAX_HEADER = 16 * 1024  # of one WWW-Authenticate value: anything longer is cut there
MAX_DOCUMENT = 1024 * 1024  # of a metadata document
MAX_REDIRECTS = 3  # followed by one metadata GET, each checked against the URL policy

# -- WWW-Authenticate (RFC 9110 section 11.6.1) -------------------------------------------------

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"?'  # an unterminated quoted string runs to the end (tolerated)
_SCHEME_RE = re.compile(rf"({_TOKEN})")
_PARAM_RE = re.compile(rf"({_TOKEN})[ \t]*=[ \t]*({_QUOTED}|{_TOKEN})?")
_TOKEN68_RE = re.compile(r"([A-Za-z0-9\-._~+/]+=*)[ \t]*(?=,|$)")
_SPACE_RE = re.compile(r"[ \t]*")
_GAP_RE = re.compile(r"[ \t,]*")
_ESCAPE_RE = re.compile(r"\\(.)")


@dataclass(frozen=True)
class Challenge:
    """One challenge of a ``WWW-Authenticate`` header: its scheme (lower case), its parameters (names in
    lower case; the first of a repeated name wins) and its token68, if it had one instead."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=dict)
    token68: str | None = None


def _unquote(value: str) -> str:
    if value.startswith('"'):
        inner = value[1:-1] if len(value) > 1 and value.endswith('"') else value[1:]
        return _ESCAPE_RE.sub(r"\1", inner)
    return value


def parse_www_authenticate(values: Iterable[str]) -> list[Challenge]:
    """Every challenge of one or more ``WWW-Authenticate`` header values.

    Tolerant by design: whatever a server sends, this returns what it could read and never raises;
    text it cannot read is skipped (a value longer than 16 KiB is cut there)."""
    challenges: list[Challenge] = []
    for raw in values:
        text = raw[:MAX_HEADER]
        n = len(text)
        i = _GAP_RE.match(text, 0).end()  # type: ignore[union-attr]
        while i < n:
            scheme = _SCHEME_RE.match(text, i)
            if scheme is None:  # not a token: skip the character and resynchronize
                i = _GAP_RE.match(text, i + 1).end()  # type: ignore[union-attr]
                continue
            i = scheme.end()
            params: dict[str, str] = {}
            token68: str | None = None
            gap = _SPACE_RE.match(text, i).end()  # type: ignore[union-attr]
            if gap > i:  # the scheme is followed by a space: a token68 or parameters
                i = gap
                param = _PARAM_RE.match(text, i)
                if param is None or (param.group(2) is None and _TOKEN68_RE.match(text, i)):
                    t68 = _TOKEN68_RE.match(text, i)
                    if t68 is not None:
                        token68 = t68.group(1)
                        i = t68.end()
                while True:
                    param = _PARAM_RE.match(text, i) if token68 is None else None
                    if param is None:
                        break
                    name = param.group(1).lower()
                    params.setdefault(name, _unquote(param.group(2) or ""))
                    i = _SPACE_RE.match(text, param.end()).end()  # type: ignore[union-attr]
                    if i < n and text[i] == ",":
                        i = _GAP_RE.match(text, i).end()  # type: ignore[union-attr]
                        continue
                    break
            challenges.append(Challenge(scheme.group(1).lower(), params, token68))
            # whatever is left up to the next separator is not readable: skip to a comma or space
            while i < n and text[i] not in " \t,":
                if text[i - 1] in " \t," and _SCHEME_RE.match(text, i):
                    break
                i += 1
            i = _GAP_RE.match(text, i).end()  # type: ignore[union-attr]
    return challenges


@dataclass(frozen=True)
class BearerChallenge:
    """What a 401 or 403 answer said about authorization: the parameters of its Bearer challenge
    (RFC 6750 section 3, RFC 9728 section 5.1), None where absent."""

    resource_metadata: str | None = None
    scope: tuple[str, ...] | None = None
    error: str | None = None
    error_description: str | None = None


def split_scope(value: str | None) -> tuple[str, ...]:
    """A space-separated scope string as its scopes, in order, without repeats."""
    return tuple(dict.fromkeys((value or "").split()))


def bearer_challenge(headers: httpx.Headers) -> BearerChallenge:
    """The Bearer challenge of a response's ``WWW-Authenticate`` headers (any challenge carrying
    parameters when there is no Bearer one; an empty one when there is nothing)."""
    challenges = parse_www_authenticate(headers.get_list("www-authenticate"))
    chosen = next((c for c in challenges if c.scheme == "bearer"), None)
    if chosen is None:
        chosen = next((c for c in challenges if c.params), None)
    if chosen is None:
        return BearerChallenge()
    params = chosen.params
    scope = split_scope(params["scope"]) if "scope" in params else None
    return BearerChallenge(
        resource_metadata=params.get("resource_metadata") or None,
        scope=scope or None,
        error=params.get("error") or None,
        error_description=params.get("error_description") or None,
    )


# -- URLs ---------------------------------------------------------------------------------------


def _http_url(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > 4096:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def canonical_url(url: str) -> str:
    """The canonical URI of an MCP endpoint (RFC 8707 section 2): scheme and host in lower case, no
    fragment, and no trailing slash on an empty path."""
    parts = urlsplit(url)
    path = "" if parts.path == "/" else parts.path
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), "", "", ""))


def _port(parts: Any) -> int | None:
    try:
        port: int | None = parts.port
    except ValueError:
        return None
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return port


def resource_matches(resource: str, server_url: str) -> bool:
    """Whether a protected resource metadata ``resource`` covers the MCP endpoint ``server_url``: the
    same scheme, host and port, and a path that is the endpoint's path or one of its parents."""
    try:
        want, have = urlsplit(resource), urlsplit(server_url)
    except ValueError:
        return False
    if want.scheme.lower() != have.scheme.lower() or want.fragment:
        return False
    if (want.hostname or "").lower() != (have.hostname or "").lower() or _port(want) != _port(have):
        return False
    prefix = want.path.rstrip("/")
    path = have.path.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def _well_known(url: str, suffix: str) -> str:
    """RFC 8414 / RFC 9728 path insertion: ``https://h/p`` -> ``https://h/.well-known/<suffix>/p``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{suffix}{path}", "", ""))


def resource_metadata_urls(server_url: str, from_header: str | None) -> list[str]:
    """Where to look for protected resource metadata, in order: the challenge's ``resource_metadata``,
    then the path-inserted well-known URL, then the one at the root."""
    urls = [from_header] if from_header and _http_url(from_header) else []
    urls.append(_well_known(server_url, "oauth-protected-resource"))
    urls.append(_well_known(origin(server_url), "oauth-protected-resource"))
    return list(dict.fromkeys(urls))


def server_metadata_urls(issuer: str) -> list[str]:
    """Where to look for an authorization server's metadata, in the order of the 2025-11-25
    specification: RFC 8414 path insertion, OpenID Connect path insertion, OpenID Connect path
    appending (the last only for an issuer with a path)."""
    parts = urlsplit(issuer)
    urls = [
        _well_known(issuer, "oauth-authorization-server"),
        _well_known(issuer, "openid-configuration"),
    ]
    path = parts.path.rstrip("/")
    if path:
        urls.append(
            urlunsplit((parts.scheme, parts.netloc, f"{path}/.well-known/openid-configuration", "", ""))
        )
    return urls


# -- which URLs the client may be sent to ---------------------------------------------------------

_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")


def host_kind(host: str) -> str:
    """What a URL's host names, as far as can be told without resolving it: ``"loopback"`` (a loopback
    or unspecified address, ``localhost`` and ``*.localhost``), ``"link-local"``, ``"private"`` (private,
    shared and other non-global unicast ranges), ``"forbidden"`` (multicast and reserved addresses) or
    ``"public"`` (a global address, or any other host name: names are not resolved).

    Literal addresses are read the way the socket layer reads them: IPv4 in its legacy forms too
    (``2130706433``, ``0x7f.1``, ``127.1``), IPv6 with a zone, IPv4-mapped IPv6 as its IPv4 address."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        if not _NUMERIC_HOST.fullmatch(name):
            return "public"
        try:  # inet_aton reads what getaddrinfo would connect to: 127.1, 0x7f000001, 2130706433
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return "public"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return "loopback"
    if address.is_multicast or address.is_reserved:
        return "forbidden"
    if address.is_link_local:
        return "link-local"
    if address.is_private or not address.is_global:
        return "private"
    return "public"


class URLPolicy:
    """Where the OAuth client agrees to go for one MCP server: every URL it fetches during discovery
    (metadata documents, each redirect) and every endpoint the authorization server's metadata names
    (authorization, token, registration) is checked first, before any connection:

    - ``http`` or ``https`` only; and ``https`` when the MCP server is ``https``, except on loopback;
    - not a multicast or reserved address; not a loopback, link-local or private address (by literal
      address, or a ``localhost`` name) unless the MCP server itself is on an address of the same kind.

    Host names are not resolved: a public name that resolves to a private address is not caught here.
    """

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        self.server_url = server_url
        self.secure = parts.scheme.lower() == "https"
        self.server_kind = host_kind(parts.hostname or "")

    def refusal(self, url: str) -> str | None:
        """Why ``url`` is refused, or None when the client may use it."""
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:
            return "it is not a URL"
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not host:
            return "it is not an http(s) URL"
        kind = host_kind(host)
        if self.secure and scheme != "https" and kind != "loopback":
            return "the MCP server uses https, so every authorization URL must too"
        if kind == "forbidden":
            return "it names a multicast or reserved address"
        if kind != "public" and kind != self.server_kind:
            return f"it names a {kind} address and the MCP server is not on one"
        return None

    def check(self, url: str, what: str) -> None:
        """Raise :class:`OAuthError` if ``url`` (``what`` says which URL it is) is refused."""
        why = self.refusal(url)
        if why is not None:
            raise OAuthError(f"refusing {what} {_shown(url)}: {why} (the client's URL policy)")


def _shown(url: str) -> str:
    """A URL for a message: without its query and fragment (which could carry a secret), and cut."""
    try:
        parts = urlsplit(url)
        text = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
    except ValueError:
        text = url.split("?", 1)[0].split("#", 1)[0]
    return text[:200]


# -- documents ----------------------------------------------------------------------------------


_REDIRECTS = (301, 302, 303, 307, 308)


async def get_json(
    client: httpx.AsyncClient, url: str, policy: URLPolicy
) -> tuple[int, dict[str, Any] | None]:
    """GET a JSON document: its status and the object (None when it is not a JSON object the safe
    decoder accepts, is larger than 1 MiB, or the status is not 200).  ``url`` and each redirect (at
    most :data:`MAX_REDIRECTS`) are checked against ``policy`` before they are fetched; a refused URL,
    too many redirects or a failed connection raise :class:`OAuthError`."""
    policy.check(url, "the metadata URL")
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            async with client.stream(
                "GET", url, headers={"accept": "application/json"}, follow_redirects=False
            ) as response:
                status = response.status_code
                location = response.headers.get("location")
                if status in _REDIRECTS and location:
                    try:
                        target = str(response.url.join(location))
                    except (httpx.InvalidURL, ValueError) as exc:
                        raise OAuthError(f"GET {_shown(url)}: a redirect to something not a URL") from exc
                elif status != 200:
                    return status, None
                else:
                    target = None
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_DOCUMENT:
                            logger.info("%s: the document is over %d bytes; ignored", url, MAX_DOCUMENT)
                            return status, None
        except httpx.HTTPError as exc:
            raise OAuthError(f"GET {_shown(url)} failed: {exc!r}") from exc
        if target is None:
            break
        policy.check(target, f"the redirect from {_shown(url)} to")
        url = target
    else:
        raise OAuthError(f"GET {_shown(url)}: more than {MAX_REDIRECTS} redirects")
    try:
        document = safejson.loads(body, max_size=MAX_DOCUMENT)
    except safejson.JSONRejected as exc:
        logger.info("%s: not JSON the client accepts (%s); ignored", url, exc)
        return status, None
    return status, document if isinstance(document, dict) else None


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(item for item in value if isinstance(item, str))


@dataclass(frozen=True)
class ResourceMetadata:
    """Protected resource metadata (RFC 9728): the parts the client uses."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None
    url: str
    """Where it was found."""


@dataclass(frozen=True)
class ServerMetadata:
    """Authorization server metadata (RFC 8414 / OpenID Connect Discovery): the parts the client uses.
    ``discovered`` is False for the 2025-03-26 default endpoints (no metadata document at all)."""

    issuer: str
    authorization_endpoint: str | None
    token_endpoint: str | None
    registration_endpoint: str | None = None
    scopes_supported: tuple[str, ...] | None = None
    code_challenge_methods_supported: tuple[str, ...] | None = None
    token_endpoint_auth_methods_supported: tuple[str, ...] | None = None
    grant_types_supported: tuple[str, ...] | None = None
    client_id_metadata_document_supported: bool = False
    iss_parameter_supported: bool = False
    discovered: bool = True
    url: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_document(cls, document: Mapping[str, Any], url: str) -> ServerMetadata:
        def endpoint(name: str) -> str | None:
            value = document.get(name)
            return value if _http_url(value) else None

        return cls(
            issuer=str(document["issuer"]),
            authorization_endpoint=endpoint("authorization_endpoint"),
            token_endpoint=endpoint("token_endpoint"),
            registration_endpoint=endpoint("registration_endpoint"),
            scopes_supported=_strings(document.get("scopes_supported")),
            code_challenge_methods_supported=_strings(document.get("code_challenge_methods_supported")),
            token_endpoint_auth_methods_supported=_strings(
                document.get("token_endpoint_auth_methods_supported")
            ),
            grant_types_supported=_strings(document.get("grant_types_supported")),
            client_id_metadata_document_supported=document.get("client_id_metadata_document_supported")
            is True,
            iss_parameter_supported=document.get("authorization_response_iss_parameter_supported") is True,
            url=url,
            raw=dict(document),
        )

    @classmethod
    def defaults(cls, base: str) -> ServerMetadata:
        """The 2025-03-26 fallback: ``/authorize``, ``/token`` and ``/register`` at ``base``."""
        return cls(
            issuer=base,
            authorization_endpoint=f"{base}/authorize",
            token_endpoint=f"{base}/token",
            registration_endpoint=f"{base}/register",
            discovered=False,
        )


async def fetch_resource_metadata(
    client: httpx.AsyncClient, server_url: str, from_header: str | None, policy: URLPolicy | None = None
) -> ResourceMetadata | None:
    """The protected resource metadata of ``server_url`` (None when there is none anywhere).

    Raises :class:`OAuthError` when the document's ``resource`` does not cover ``server_url`` (a
    server must not send the client to authorize for another resource) or names no authorization
    server."""
    policy = policy or URLPolicy(server_url)
    for url in resource_metadata_urls(server_url, from_header):
        status, document = await get_json(client, url, policy)
        if document is None:
            logger.debug("no protected resource metadata at %s (HTTP %s)", url, status)
            continue
        resource = document.get("resource")
        if not isinstance(resource, str) or not resource_matches(resource, server_url):
            raise OAuthError(
                f"the protected resource metadata at {url} is for {resource!r}, not for {server_url}:"
                " refusing to authorize for another resource"
            )
        servers = tuple(s for s in _strings(document.get("authorization_servers")) or () if _http_url(s))
        if not servers:
            raise OAuthError(f"the protected resource metadata at {url} names no authorization server")
        return ResourceMetadata(resource, servers, _strings(document.get("scopes_supported")), url)
    return None


async def fetch_server_metadata(
    client: httpx.AsyncClient, issuer: str, policy: URLPolicy, *, legacy: bool = False
) -> ServerMetadata | None:
    """The metadata of the authorization server ``issuer`` (None when no well-known URL has it).

    A document whose ``issuer`` is not exactly ``issuer`` (RFC 8414 section 3.3) is refused with
    :class:`OAuthError`: its endpoints are not used.  ``legacy`` (2025-03-26 discovery, where ``issuer``
    is only the MCP server's origin, not an issuer identifier anyone published) accepts a document from
    that origin naming an issuer of the same origin; that issuer is then the one recorded."""
    for url in server_metadata_urls(issuer):
        status, document = await get_json(client, url, policy)
        if document is None:
            logger.debug("no authorization server metadata at %s (HTTP %s)", url, status)
            continue
        named = document.get("issuer")
        if legacy and isinstance(named, str) and _http_url(named) and origin(named) == origin(issuer):
            if named != issuer:
                logger.info("2025-03-26 discovery: %s names the issuer %s (same origin)", url, named)
            return ServerMetadata.from_document(document, url)
        if named != issuer:
            raise OAuthError(
                f"the authorization server metadata at {url} names the issuer {document.get('issuer')!r},"
                f" not {issuer!r}: refusing to use it"
            )
        return ServerMetadata.from_document(document, url)
    return None


@dataclass(frozen=True)
class Discovery:
    """Where and for what the client authorizes for one MCP endpoint."""

    server_url: str
    resource: str
    """The resource identifier: the protected resource metadata's ``resource``, else the endpoint."""
    issuer: str
    metadata: ServerMetadata
    resource_metadata: ResourceMetadata | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.issuer, self.resource)


async def discover(client: httpx.AsyncClient, server_url: str, challenge: BearerChallenge) -> Discovery:
    """Protected resource metadata, then the metadata of its (first usable) authorization server.

    Without protected resource metadata anywhere (a 2025-03-26 server), the authorization server is the
    endpoint's origin: its metadata at the root, else the default endpoints.

    Every URL fetched, and every endpoint of the metadata found, follows :class:`URLPolicy`: an
    authorization server it refuses is skipped (:class:`OAuthError` when none is left), and metadata
    naming an endpoint it refuses is refused with :class:`OAuthError`."""
    policy = URLPolicy(server_url)
    prm = await fetch_resource_metadata(client, server_url, challenge.resource_metadata, policy)
    if prm is None:
        base = origin(server_url)
        logger.info("%s has no protected resource metadata: 2025-03-26 discovery at %s", server_url, base)
        legacy = await fetch_server_metadata(client, base, policy, legacy=True)
        legacy = legacy or ServerMetadata.defaults(base)
        _check_endpoints(policy, legacy)
        return Discovery(server_url, server_url, legacy.issuer, legacy, None)
    tried: list[str] = []
    for issuer in prm.authorization_servers:
        why = policy.refusal(issuer)
        if why is not None:
            logger.info("authorization server %s skipped: %s", _shown(issuer), why)
            tried.append(f"{_shown(issuer)} refused: {why}")
            continue
        metadata = await fetch_server_metadata(client, issuer, policy)
        if metadata is not None:
            _check_endpoints(policy, metadata)
            return Discovery(server_url, prm.resource, issuer, metadata, prm)
        tried.extend(server_metadata_urls(issuer))
    raise OAuthError(
        f"no authorization server metadata for {server_url} (its resource metadata at {prm.url} names"
        f" {', '.join(prm.authorization_servers)}; tried {', '.join(tried)})"
    )


def _check_endpoints(policy: URLPolicy, metadata: ServerMetadata) -> None:
    """Refuse metadata naming an endpoint the URL policy refuses (before anything is sent there)."""
    for name in ("authorization_endpoint", "token_endpoint", "registration_endpoint"):
        url = getattr(metadata, name)
        if url is not None:
            policy.check(url, f"the {name} of {metadata.issuer!r},")
