"""How the OAuth client finds out where to authorize: from a ``WWW-Authenticate`` challenge
(:mod:`._challenge`), protected resource metadata (RFC 9728) and authorization server metadata (RFC
8414, OpenID Connect Discovery), in the order the MCP specification gives, with the 2025-03-26
fallbacks; every URL checked by the client's :class:`~._urls.URLPolicy` first."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..._protocol import safejson
from ._challenge import BearerChallenge
from ._errors import OAuthError
from ._urls import (
    URLPolicy,
    http_url,
    origin,
    resource_matches,
    resource_metadata_urls,
    server_metadata_urls,
    shown,
)

__all__ = ["MAX_REDIRECTS", "Discovery", "ResourceMetadata", "ServerMetadata", "discover", "get_json"]

logger = logging.getLogger("mcp_trio.auth")

MAX_DOCUMENT = 1024 * 1024  # of a metadata document
MAX_REDIRECTS = 3  # followed by one metadata GET, each checked against the URL policy

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
                        raise OAuthError(f"GET {shown(url)}: a redirect to something not a URL") from exc
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
            raise OAuthError(f"GET {shown(url)} failed: {exc!r}") from exc
        if target is None:
            break
        policy.check(target, f"the redirect from {shown(url)} to")
        url = target
    else:
        raise OAuthError(f"GET {shown(url)}: more than {MAX_REDIRECTS} redirects")
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
            return value if http_url(value) else None

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
        servers = tuple(s for s in _strings(document.get("authorization_servers")) or () if http_url(s))
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
        if legacy and isinstance(named, str) and http_url(named) and origin(named) == origin(issuer):
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
            logger.info("authorization server %s skipped: %s", shown(issuer), why)
            tried.append(f"{shown(issuer)} refused: {why}")
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
