"""The OAuth client of the MCP authorization specification as an ``httpx.Auth``: :class:`OAuth` (the
authorization code flow with PKCE, for a user) and :class:`ClientCredentials` (a client on its own
behalf).

The flow of one request never holds a lock across a ``yield`` (where httpx sends the request): only
the renewal of a token (discovery, registration, the user's authorization, the token request) runs
under this object's lock, inside one step of the flow.  So concurrent requests that all get 401 wait for
one authorization and then retry with its token, and a request that is cancelled or abandoned at any
point leaves nothing held."""

from __future__ import annotations

import inspect
import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias

import httpx
import trio

from ._discovery import BearerChallenge, Discovery, bearer_challenge, canonical_url, discover, split_scope
from ._dpop import DPoPKey
from ._errors import OAuthError
from ._flow import (
    ClientAuth,
    authorization_url,
    choose_auth_method,
    error_of,
    pkce_pair,
    post_form,
    private_key_jwt,
    read_callback,
    register_client,
    registration_auth_method,
    token_request,
)
from ._redirect import RedirectHandler
from ._store import ClientRegistration, MemoryTokenStore, OAuthTokens, TokenStore

__all__ = ["ClientCredentials", "IDJAGExchange", "JWTBearer", "OAuth", "OAuthError"]

logger = logging.getLogger("mcp_trio.auth")

LEEWAY = 30.0  # seconds before its expiry a token is renewed
AS_TIMEOUT = httpx.Timeout(15.0)  # each request to an authorization server (and for metadata)


@dataclass
class _Binding:
    """What this client uses for one MCP endpoint: where it authorized, and the current tokens."""

    discovery: Discovery
    tokens: OAuthTokens | None


def _said(challenge: BearerChallenge) -> str:
    parts = [p for p in (challenge.error, challenge.error_description) if p]
    return f" ({': '.join(parts)})" if parts else ""


def _union(*groups: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(scope for group in groups for scope in group))


class _OAuthBase(httpx.Auth):
    """What every grant shares: the flow of a request, discovery, the store, refresh, DPoP."""

    requires_request_body = True

    def __init__(
        self,
        *,
        scopes: Sequence[str] | None,
        store: TokenStore | None,
        send_resource: bool,
        max_authorizations: int,
        http: httpx.AsyncClient | None,
        client_id: str | None,
        issuer: str | None,
        dpop: bool | DPoPKey = False,
    ) -> None:
        if max_authorizations < 1:
            raise ValueError(f"max_authorizations must be at least 1, not {max_authorizations}")
        if isinstance(scopes, str):
            raise TypeError("scopes= takes a sequence of scopes, e.g. ['mcp:tools'], not a string")
        self.scopes = tuple(scopes) if scopes is not None else None
        self.store: TokenStore = store if store is not None else MemoryTokenStore()
        self.send_resource = send_resource
        self.max_authorizations = max_authorizations
        self.client_id = client_id
        self._client_issuer = issuer
        self._http = http
        self._dpop = DPoPKey() if dpop is True else (dpop or None)
        self._lock = trio.Lock()
        self._bindings: dict[str, _Binding] = {}
        self._renewals = 0  # how many renewals ended (to tell a waiter that one failed meanwhile)
        self._failure: OAuthError | None = None

    # -- httpx.Auth -----------------------------------------------------------------------------

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError(f"{type(self).__name__} works with httpx.AsyncClient under Trio, not httpx.Client")
        yield request  # pragma: no cover - makes this a generator, as httpx expects

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        server_url = canonical_url(str(request.url))
        if self._lock.locked():  # a renewal is under way: wait for its token rather than collect a 401
            async with self._lock:
                pass
        attempts = 0
        nonce_retries = 0
        issued: str | None = None  # the access token the last renewal for this request obtained
        while True:
            tokens = await self._usable_tokens(server_url, issued)
            self._authorize_request(request, tokens)
            response = yield request
            if self._dpop is not None:
                self._dpop.remember(str(request.url), response.headers.get("dpop-nonce"))
            status = response.status_code
            if status not in (401, 403):
                return
            challenge = bearer_challenge(response.headers)
            if status == 403 and challenge.error != "insufficient_scope":
                return  # a refusal that more authorization would not change
            if (
                status == 401
                and challenge.error == "use_dpop_nonce"
                and tokens is not None
                and tokens.token_type == "DPoP"
                and response.headers.get("dpop-nonce")
                and nonce_retries < 2
            ):
                nonce_retries += 1  # RFC 9449 section 9: the same token, a proof with the server's nonce
                continue
            sent = tokens.access_token if tokens is not None else None
            if status == 401 and sent is not None and sent == issued:
                raise OAuthError(
                    f"{server_url} refused (HTTP 401{_said(challenge)}) the token just issued for it by"
                    f" {self._bindings[server_url].discovery.issuer}"
                )
            attempts += 1
            if attempts > self.max_authorizations:
                raise OAuthError(
                    f"{server_url} still answers HTTP {status}{_said(challenge)} after"
                    f" {self.max_authorizations} authorization attempts: giving up"
                )
            issued = await self._recover(server_url, sent, challenge, status)

    def _authorize_request(self, request: httpx.Request, tokens: OAuthTokens | None) -> None:
        """Put ``tokens`` on ``request``: ``Bearer``, or ``DPoP`` with a fresh proof for a bound token."""
        request.headers.pop("dpop", None)
        if tokens is None:
            request.headers.pop("authorization", None)
        elif tokens.token_type == "DPoP" and self._dpop is not None:
            request.headers["authorization"] = f"DPoP {tokens.access_token}"
            request.headers["dpop"] = self._dpop.proof(request.method, str(request.url), tokens.access_token)
        else:
            request.headers["authorization"] = f"Bearer {tokens.access_token}"

    def _dpop_for(self, found: Discovery) -> DPoPKey | None:
        """The DPoP key to bind tokens from ``found``'s server to: ours, if it supports our algorithm."""
        if self._dpop is None:
            return None
        return (
            self._dpop
            if self._dpop.supported_by(found.metadata.raw.get("dpop_signing_alg_values_supported"))
            else None
        )

    # -- tokens ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def _as_client(self) -> AsyncIterator[httpx.AsyncClient]:
        """The HTTP client for discovery and the authorization server: ``http=``, or one of our own for
        the length of one renewal (so nothing stays open between them)."""
        if self._http is not None:
            yield self._http
        else:
            async with httpx.AsyncClient(timeout=AS_TIMEOUT) as client:
                yield client

    async def _usable_tokens(self, server_url: str, issued: str | None) -> OAuthTokens | None:
        """The tokens to send to ``server_url``, refreshed first if they expire within ``LEEWAY``
        (unless they are ``issued``, just issued for this request: a lifetime shorter than the leeway
        must not make every retry refresh)."""
        binding = self._bindings.get(server_url)
        if binding is None or binding.tokens is None:
            return None
        tokens = binding.tokens
        if tokens.expired(LEEWAY) and tokens.refresh_token and tokens.access_token != issued:
            async with self._lock:
                if (
                    self._bindings.get(server_url) is binding and binding.tokens is tokens
                ):  # not renewed since
                    async with self._as_client() as client:
                        binding.tokens = await self._try_refresh(client, binding.discovery, tokens)
            current = self._bindings.get(server_url)
            return current.tokens if current is not None else None
        return tokens

    async def _recover(
        self, server_url: str, sent: str | None, challenge: BearerChallenge, status: int
    ) -> str | None:
        """After a 401 or 403: make new tokens current for ``server_url``.  Returns the access token
        if the token endpoint just issued it, None if it came from elsewhere (another request's renewal,
        the store)."""
        seen = self._renewals
        async with self._lock:
            if self._renewals != seen and self._failure is not None:
                failure = self._failure
                raise OAuthError(
                    f"the authorization for {server_url} failed in a concurrent request: {failure.message}",
                    error=failure.error,
                    description=failure.description,
                    status=failure.status,
                ) from failure
            binding = self._bindings.get(server_url)
            current = binding.tokens if binding is not None else None
            if current is not None and current.access_token != sent:
                return None  # another request renewed them while this one waited
            try:
                issued = await self._renew(server_url, binding, sent, challenge, status)
            except OAuthError as exc:
                self._failure = exc
                self._renewals += 1
                raise
            self._failure = None
            self._renewals += 1
            return issued

    async def _renew(
        self,
        server_url: str,
        binding: _Binding | None,
        sent: str | None,
        challenge: BearerChallenge,
        status: int,
    ) -> str | None:
        async with self._as_client() as client:
            found = await discover(client, server_url, challenge)
            same = binding is not None and binding.discovery.key == found.key
            if binding is not None and not same:
                logger.info(
                    "%s now names the authorization server %s (was %s)",
                    server_url,
                    found.issuer,
                    binding.discovery.issuer,
                )
            previous = binding.tokens if binding is not None and same else None
            if status == 401:
                stored = await self.store.load_tokens(*found.key)
                if stored is not None and stored.access_token != sent and not stored.expired(LEEWAY):
                    self._bindings[server_url] = _Binding(found, stored)
                    return None
                if stored is not None and stored.refresh_token:
                    refreshed = await self._try_refresh(client, found, stored)
                    if refreshed is not None:
                        self._bindings[server_url] = _Binding(found, refreshed)
                        return refreshed.access_token
                previous = previous or stored
            scopes = self._choose_scopes(found, challenge, previous)
            tokens = await self._obtain(client, found, scopes)
            await self.store.save_tokens(*found.key, tokens)
            self._bindings[server_url] = _Binding(found, tokens)
            return tokens.access_token

    def _choose_scopes(
        self, found: Discovery, challenge: BearerChallenge, previous: OAuthTokens | None
    ) -> tuple[str, ...]:
        """The scopes to ask for: ``scopes=`` if given, else the challenge's ``scope``, else the
        protected resource metadata's ``scopes_supported`` (else none); always with the scopes asked
        for before (a step-up keeps what was granted) and the challenge's."""
        prior = split_scope((previous.requested_scope or previous.scope) if previous is not None else None)
        challenged = challenge.scope or ()
        if self.scopes is not None:
            base: tuple[str, ...] = _union(self.scopes, prior)
        elif challenged:
            base = prior
        else:
            supported = found.resource_metadata.scopes_supported if found.resource_metadata else None
            base = prior or supported or ()
        return _union(base, challenged)

    async def _try_refresh(
        self, client: httpx.AsyncClient, found: Discovery, tokens: OAuthTokens
    ) -> OAuthTokens | None:
        """Refresh; None if it failed (a refusal by the server also forgets the stored tokens)."""
        try:
            auth = await self._client_auth(client, found, None)
            if auth is None:
                raise OAuthError(f"no client registration for {found.issuer} to refresh with")
            data = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token or ""}
            if self.send_resource:
                data["resource"] = found.resource
            refreshed = await token_request(
                client, found.metadata, data, auth, previous=tokens, dpop=self._dpop_for(found)
            )
        except OAuthError as exc:
            logger.info("refreshing the token for %s failed (%s); authorizing again", found.resource, exc)
            if exc.status is not None:
                await self.store.delete_tokens(*found.key)
            return None
        logger.info("refreshed the token for %s at %s", found.resource, found.issuer)
        await self.store.save_tokens(*found.key, refreshed)
        return refreshed

    def _check_issuer(self, issuer: str) -> None:
        """Pre-registered credentials belong to one authorization server (``issuer=``, else the first
        one met): never present them to another."""
        if self._client_issuer is None:
            self._client_issuer = issuer
        elif self._client_issuer != issuer:
            raise OAuthError(
                f"the client_id {self.client_id!r} is registered with {self._client_issuer}, but the server"
                f" now sends this client to {issuer}: refusing to present it there"
            )

    # -- per grant ------------------------------------------------------------------------------

    async def _client_auth(
        self, client: httpx.AsyncClient, found: Discovery, redirect_uri: str | None
    ) -> ClientAuth | None:
        raise NotImplementedError

    async def _obtain(
        self, client: httpx.AsyncClient, found: Discovery, scopes: tuple[str, ...]
    ) -> OAuthTokens:
        raise NotImplementedError


class OAuth(_OAuthBase):
    """The OAuth client of the MCP authorization specification (2025-03-26 to 2026-07-28), as an
    ``httpx.Auth`` for :func:`~mcp_trio.open_client_session` (``auth=OAuth(...)``) or any
    ``httpx.AsyncClient`` under Trio.

    On a 401 it discovers the authorization server (protected resource metadata, then the server's
    metadata), registers if needed (``client_id=`` if given, else a Client ID Metadata Document
    ``client_metadata_url=`` if the server supports them, else dynamic registration, kept in ``store``),
    sends the user through ``redirect`` (PKCE S256, ``state``, ``resource``, RFC 9207 ``iss`` checked),
    exchanges the code and retries the request.  Tokens are kept in ``store`` per (issuer, resource),
    refreshed before they expire or when the server says 401, and a new authorization follows when
    the refresh fails.  A 403 ``insufficient_scope`` asks again for the union of the scopes held and
    the ones challenged.  Each request renews at most ``max_authorizations`` times; concurrent requests
    that all get 401 share one renewal.  Failures raise :class:`OAuthError`.

    ``redirect`` may be None for a client that only uses stored tokens: an authorization is then an
    error.  ``send_resource=False`` leaves out the RFC 8707 ``resource`` parameter (for authorization
    servers that reject it).  ``offline_access=True`` adds the ``offline_access`` scope when the server
    lists it (to get a refresh token).  ``http`` is the client for discovery and the authorization server
    (default: a new one per renewal, 15 s timeouts).  ``issuer`` binds a pre-registered ``client_id`` to
    one authorization server (default: the first one met).  ``dpop=True`` asks an authorization server
    that supports DPoP (RFC 9449, ES256) for sender-constrained tokens: each request then carries a
    fresh proof signed by a key held in memory (needs the ``auth`` extra)."""

    def __init__(
        self,
        *,
        redirect: RedirectHandler | None = None,
        client_name: str = "mcp-trio",
        client_id: str | None = None,
        client_secret: str | None = None,
        token_endpoint_auth_method: str | None = None,
        client_metadata_url: str | None = None,
        scopes: Sequence[str] | None = None,
        store: TokenStore | None = None,
        send_resource: bool = True,
        max_authorizations: int = 3,
        application_type: str = "native",
        http: httpx.AsyncClient | None = None,
        offline_access: bool = True,
        issuer: str | None = None,
        dpop: bool = False,
    ) -> None:
        super().__init__(
            scopes=scopes,
            store=store,
            send_resource=send_resource,
            max_authorizations=max_authorizations,
            http=http,
            client_id=client_id,
            issuer=issuer,
            dpop=dpop,
        )
        if client_secret is not None and client_id is None:
            raise ValueError("client_secret= needs client_id= (a pre-registered client)")
        if client_metadata_url is not None and not client_metadata_url.startswith("https://"):
            raise ValueError(f"client_metadata_url must be an https URL, not {client_metadata_url!r}")
        self.redirect = redirect
        self.client_name = client_name
        self.client_secret = client_secret
        self.token_endpoint_auth_method = token_endpoint_auth_method
        self.client_metadata_url = client_metadata_url
        self.application_type = application_type
        self.offline_access = offline_access

    async def _registration(
        self, client: httpx.AsyncClient, found: Discovery, redirect_uri: str | None
    ) -> ClientRegistration | None:
        """The client to present to ``found``'s server: pre-registered, a metadata document URL, a
        stored registration, or (with a ``redirect_uri``) a new one."""
        metadata = found.metadata
        if self.client_id is not None:
            self._check_issuer(found.issuer)
            uris = (redirect_uri,) if redirect_uri else ()
            return ClientRegistration(
                self.client_id, self.client_secret, self.token_endpoint_auth_method, uris
            )
        if self.client_metadata_url is not None and metadata.client_id_metadata_document_supported:
            return ClientRegistration(self.client_metadata_url, None, "none")
        stored = await self.store.load_client(found.issuer)
        if stored is not None and stored.usable_with(redirect_uri):
            return stored
        if redirect_uri is None:
            return None
        if metadata.registration_endpoint is None:
            raise OAuthError(
                f"the authorization server {found.issuer} supports neither Client ID Metadata Documents"
                f"{'' if self.client_metadata_url else ' (no client_metadata_url= given)'} nor dynamic"
                " client registration: pass client_id= (and client_secret=) of a client registered there"
            )
        grant_types = ["authorization_code", "refresh_token"]
        if (
            metadata.grant_types_supported is not None
            and "refresh_token" not in metadata.grant_types_supported
        ):
            grant_types.remove("refresh_token")
        body: dict[str, Any] = {
            "client_name": self.client_name,
            "redirect_uris": [redirect_uri],
            "grant_types": grant_types,
            "response_types": ["code"],
            "token_endpoint_auth_method": self.token_endpoint_auth_method
            or registration_auth_method(metadata),
            "application_type": self.application_type,
        }
        registration = await register_client(client, metadata, body)
        await self.store.save_client(found.issuer, registration)
        return registration

    async def _client_auth(
        self, client: httpx.AsyncClient, found: Discovery, redirect_uri: str | None
    ) -> ClientAuth | None:
        registration = await self._registration(client, found, redirect_uri)
        return ClientAuth.of(registration, found.metadata) if registration is not None else None

    async def _obtain(
        self, client: httpx.AsyncClient, found: Discovery, scopes: tuple[str, ...]
    ) -> OAuthTokens:
        """The authorization code flow with PKCE."""
        metadata = found.metadata
        methods = metadata.code_challenge_methods_supported
        # The MUST of 2025-06-18 on: no S256 in the metadata, no authorization.  A 2025-03-26 server
        # (no resource metadata) need not list it; there PKCE is used all the same.
        checked = metadata.discovered and (methods is not None or found.resource_metadata is not None)
        if checked and "S256" not in (methods or ()):
            listed = list(methods) if methods is not None else "absent"
            raise OAuthError(
                f"the authorization server {found.issuer} does not advertise PKCE with S256"
                f" (code_challenge_methods_supported: {listed}): refusing to authorize without it"
            )
        if metadata.authorization_endpoint is None:
            raise OAuthError(f"the authorization server {found.issuer} has no authorization endpoint")
        if self.redirect is None:
            raise OAuthError(
                f"{found.server_url} needs an authorization at {found.issuer}, and this OAuth has no"
                " redirect handler (pass redirect=LoopbackRedirect() or HeadlessRedirect(...))"
            )
        redirect_uri = self.redirect.redirect_uri
        auth = await self._client_auth(client, found, redirect_uri)
        assert auth is not None  # with a redirect URI there is always one (or an error)
        wanted = list(scopes)
        if self.offline_access and wanted and "offline_access" in (metadata.scopes_supported or ()):
            wanted = list(_union(wanted, ["offline_access"]))
        scope = " ".join(wanted) or None
        verifier, challenge = pkce_pair()
        state = secrets.token_urlsafe(32)
        url = authorization_url(
            metadata.authorization_endpoint,
            {
                "response_type": "code",
                "client_id": auth.client_id,
                "redirect_uri": redirect_uri,
                "scope": scope,
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "resource": found.resource if self.send_resource else None,
            },
        )
        logger.info("authorizing at %s for %s (scope: %s)", found.issuer, found.resource, scope or "none")
        callback = await self.redirect.authorize(url)
        code = read_callback(
            callback, state=state, issuer=metadata.issuer, iss_supported=metadata.iss_parameter_supported
        )
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        if self.send_resource:
            data["resource"] = found.resource
        return await token_request(
            client, metadata, data, auth, requested_scope=scope, dpop=self._dpop_for(found)
        )


class ClientCredentials(_OAuthBase):
    """The ``client_credentials`` grant for an MCP client acting on its own behalf (no user, no browser;
    the MCP extension ``io.modelcontextprotocol/oauth-client-credentials``), as an ``httpx.Auth``.

    The client authenticates with ``client_secret`` (``client_secret_basic`` or ``client_secret_post``,
    chosen from the server's metadata unless ``token_endpoint_auth_method`` says) or with
    ``private_key`` (``private_key_jwt``, RFC 7523: a PEM string or a joserfc key, signed with
    ``signing_algorithm``; needs the ``auth`` extra).  Discovery, ``scopes``, ``store``, ``resource``
    and the retry bound are those of :class:`OAuth` (``dpop`` too); a token that expires is replaced by a
    new one."""

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str | None = None,
        private_key: str | bytes | Any | None = None,
        signing_algorithm: str = "ES256",
        token_endpoint_auth_method: str | None = None,
        scopes: Sequence[str] | None = None,
        store: TokenStore | None = None,
        send_resource: bool = True,
        max_authorizations: int = 3,
        http: httpx.AsyncClient | None = None,
        issuer: str | None = None,
        dpop: bool = False,
    ) -> None:
        super().__init__(
            scopes=scopes,
            store=store,
            send_resource=send_resource,
            max_authorizations=max_authorizations,
            http=http,
            client_id=client_id,
            issuer=issuer,
            dpop=dpop,
        )
        if client_secret is None and private_key is None:
            raise ValueError("ClientCredentials needs client_secret= or private_key=")
        self.client_secret = client_secret
        self.private_key = private_key
        self.signing_algorithm = signing_algorithm
        self.token_endpoint_auth_method = token_endpoint_auth_method
        self._assertion: Any = None

    async def _client_auth(
        self, client: httpx.AsyncClient, found: Discovery, redirect_uri: str | None
    ) -> ClientAuth | None:
        self._check_issuer(found.issuer)
        assert self.client_id is not None
        if self.private_key is not None and self.token_endpoint_auth_method in (None, "private_key_jwt"):
            if self._assertion is None:
                self._assertion = private_key_jwt(self.client_id, self.private_key, self.signing_algorithm)
            return ClientAuth(self.client_id, "private_key_jwt", assertion=self._assertion)
        method = self.token_endpoint_auth_method or choose_auth_method(found.metadata, has_secret=True)
        return ClientAuth(self.client_id, method, self.client_secret)

    async def _obtain(
        self, client: httpx.AsyncClient, found: Discovery, scopes: tuple[str, ...]
    ) -> OAuthTokens:
        auth = await self._client_auth(client, found, None)
        assert auth is not None
        scope = " ".join(scopes) or None
        data = {"grant_type": "client_credentials"}
        if scope:
            data["scope"] = scope
        if self.send_resource:
            data["resource"] = found.resource
        logger.info(
            "client_credentials at %s for %s (scope: %s)", found.issuer, found.resource, scope or "none"
        )
        return await token_request(
            client, found.metadata, data, auth, requested_scope=scope, dpop=self._dpop_for(found)
        )


JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"

AssertionSource: TypeAlias = str | Callable[[str, str], Awaitable[str] | str]
"""A JWT assertion, or a function ``(issuer, resource) -> str`` (plain or async) that makes one for the
authorization server ``issuer`` and the MCP server ``resource`` each time a token is needed."""


class JWTBearer(_OAuthBase):
    """The JWT bearer grant (RFC 7523 section 2.1): a signed assertion obtained elsewhere is exchanged for
    an access token, with no user and no browser.  For workload identity federation (the MCP extension
    ``io.modelcontextprotocol/auth/wif``: ``assertion`` is the platform's workload token, or a function
    that reads it anew) and for enterprise-managed authorization (``assertion=IDJAGExchange(...)``).

    ``assertion`` is a string or a function ``(issuer, resource) -> str``, plain or async, called for each
    new token.  ``client_id`` (and ``client_secret``, sent as ``token_endpoint_auth_method`` or as the
    server's metadata prefers) authenticate the client if the authorization server wants it.  A refused
    grant is an :class:`OAuthError` at once: the same assertion is never sent twice.  Discovery,
    ``scopes``, ``store``, ``resource``, the retry bound and ``dpop`` are those of :class:`OAuth`."""

    def __init__(
        self,
        *,
        assertion: AssertionSource,
        client_id: str | None = None,
        client_secret: str | None = None,
        token_endpoint_auth_method: str | None = None,
        scopes: Sequence[str] | None = None,
        store: TokenStore | None = None,
        send_resource: bool = True,
        max_authorizations: int = 3,
        http: httpx.AsyncClient | None = None,
        issuer: str | None = None,
        dpop: bool = False,
    ) -> None:
        super().__init__(
            scopes=scopes,
            store=store,
            send_resource=send_resource,
            max_authorizations=max_authorizations,
            http=http,
            client_id=client_id,
            issuer=issuer,
            dpop=dpop,
        )
        if client_secret is not None and client_id is None:
            raise ValueError("client_secret= needs client_id=")
        if not (isinstance(assertion, str) or callable(assertion)):
            raise TypeError("assertion= takes a JWT string or a function (issuer, resource) -> str")
        self.assertion = assertion
        self.client_secret = client_secret
        self.token_endpoint_auth_method = token_endpoint_auth_method

    async def _client_auth(
        self, client: httpx.AsyncClient, found: Discovery, redirect_uri: str | None
    ) -> ClientAuth | None:
        if self.client_id is not None:
            self._check_issuer(found.issuer)
        if self.client_secret is not None:
            assert self.client_id is not None
            method = self.token_endpoint_auth_method or choose_auth_method(found.metadata, has_secret=True)
            return ClientAuth(self.client_id, method, self.client_secret)
        return ClientAuth(self.client_id or "", "none")

    async def _obtain(
        self, client: httpx.AsyncClient, found: Discovery, scopes: tuple[str, ...]
    ) -> OAuthTokens:
        auth = await self._client_auth(client, found, None)
        assert auth is not None
        if isinstance(self.assertion, str):
            assertion = self.assertion
        else:
            made = self.assertion(found.issuer, found.resource)
            assertion = await made if inspect.isawaitable(made) else made
        if not isinstance(assertion, str) or not assertion:
            raise OAuthError(f"the assertion function returned {type(assertion).__name__}, not a JWT string")
        scope = " ".join(scopes) or None
        data = {"grant_type": JWT_BEARER_GRANT, "assertion": assertion}
        if scope:
            data["scope"] = scope
        if self.send_resource:
            data["resource"] = found.resource
        logger.info(
            "jwt-bearer grant at %s for %s (scope: %s)", found.issuer, found.resource, scope or "none"
        )
        return await token_request(
            client, found.metadata, data, auth, requested_scope=scope, dpop=self._dpop_for(found)
        )


class IDJAGExchange:
    """The assertion of enterprise-managed authorization (the MCP extension
    ``io.modelcontextprotocol/enterprise-managed-authorization``), for :class:`JWTBearer`: exchanges the
    user's identity assertion (an ID token from the enterprise identity provider) at that provider's
    ``token_endpoint`` (RFC 8693 token exchange) for an ID-JAG naming the authorization server as its
    audience and the MCP server as its resource.

    ``subject_token`` is the ID token, or a function returning it (plain or async, called for each
    exchange); ``client_id`` (and ``client_secret``, sent with HTTP Basic) is the client at the identity
    provider.  A refusal is an :class:`OAuthError`."""

    def __init__(
        self,
        token_endpoint: str,
        subject_token: str | Callable[[], Awaitable[str] | str],
        *,
        client_id: str,
        client_secret: str | None = None,
        subject_token_type: str = ID_TOKEN_TYPE,
        scopes: Sequence[str] | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.token_endpoint = token_endpoint
        self.subject_token = subject_token
        self.client_id = client_id
        self.client_secret = client_secret
        self.subject_token_type = subject_token_type
        self.scopes = tuple(scopes) if scopes is not None else None
        self._http = http

    async def __call__(self, issuer: str, resource: str) -> str:
        if isinstance(self.subject_token, str):
            subject = self.subject_token
        else:
            made = self.subject_token()
            subject = await made if inspect.isawaitable(made) else made
        data = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "requested_token_type": ID_JAG_TYPE,
            "audience": issuer,
            "resource": resource,
            "subject_token": subject,
            "subject_token_type": self.subject_token_type,
        }
        if self.scopes:
            data["scope"] = " ".join(self.scopes)
        method = "client_secret_basic" if self.client_secret is not None else "none"
        auth = ClientAuth(self.client_id, method, self.client_secret)
        headers = {"accept": "application/json"}
        auth.apply(data, headers, self.token_endpoint)
        if self._http is not None:
            status, body = await post_form(self._http, self.token_endpoint, data, headers)
        else:
            async with httpx.AsyncClient(timeout=AS_TIMEOUT) as client:
                status, body = await post_form(client, self.token_endpoint, data, headers)
        if status != 200 or not isinstance(body, dict):
            raise error_of(f"the token exchange at {self.token_endpoint} failed", status, body)
        token = body.get("access_token")
        if body.get("issued_token_type") != ID_JAG_TYPE or not isinstance(token, str) or not token:
            raise OAuthError(
                f"the token exchange at {self.token_endpoint} issued no ID-JAG"
                f" (issued_token_type: {body.get('issued_token_type')!r})"
            )
        logger.info(
            "exchanged the identity assertion at %s for an ID-JAG for %s", self.token_endpoint, issuer
        )
        return token
