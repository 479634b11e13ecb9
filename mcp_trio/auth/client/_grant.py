"""What every grant of the OAuth client shares, as an ``httpx.Auth``: :class:`Grant` (the flow of a
request, discovery, the token store, refresh, DPoP).  Each grant (:class:`~mcp_trio.auth.OAuth`,
:class:`~mcp_trio.auth.ClientCredentials`, :class:`~mcp_trio.auth.JWTBearer`) says how it
authenticates the client and how it obtains new tokens.

The flow of one request never holds a lock across a ``yield`` (where httpx sends the request): only
the renewal of a token (discovery, registration, the user's authorization, the token request) runs
under this object's lock, inside one step of the flow.  So concurrent requests that all get 401 wait for
one authorization and then retry with its token, and a request that is cancelled or abandoned at any
point leaves nothing held."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypedDict

import httpx
import trio

from ._challenge import BearerChallenge, bearer_challenge, split_scope
from ._discovery import Discovery, discover
from ._dpop import DPoPKey
from ._errors import OAuthError
from ._flow import (
    ClientAuth,
    token_request,
)
from ._store import MemoryTokenStore, OAuthTokens, TokenStore
from ._urls import canonical_url

__all__ = ["AS_TIMEOUT", "Grant", "GrantOptions", "union"]

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


def union(*groups: Sequence[str]) -> tuple[str, ...]:
    """The scopes of every group, each once, in order."""
    return tuple(dict.fromkeys(scope for group in groups for scope in group))


class GrantOptions(TypedDict, total=False):
    """The options every grant takes as :class:`~mcp_trio.auth.OAuth` does (see its documentation)."""

    scopes: Sequence[str] | None
    store: TokenStore | None
    send_resource: bool
    max_authorizations: int
    http: httpx.AsyncClient | None
    issuer: str | None
    dpop: bool


class Grant(httpx.Auth):
    """What every grant shares: the flow of a request, discovery, the store, refresh, DPoP."""

    requires_request_body = True

    def __init__(
        self,
        *,
        client_id: str | None,
        scopes: Sequence[str] | None = None,
        store: TokenStore | None = None,
        send_resource: bool = True,
        max_authorizations: int = 3,
        http: httpx.AsyncClient | None = None,
        issuer: str | None = None,
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
            base: tuple[str, ...] = union(self.scopes, prior)
        elif challenged:
            base = prior
        else:
            supported = found.resource_metadata.scopes_supported if found.resource_metadata else None
            base = prior or supported or ()
        return union(base, challenged)

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

    async def _grant(
        self,
        client: httpx.AsyncClient,
        found: Discovery,
        auth: ClientAuth,
        scopes: tuple[str, ...],
        data: dict[str, str],
        what: str,
    ) -> OAuthTokens:
        """A token request of a grant without a user (``data`` names the grant), for ``scopes`` and
        (with ``send_resource``) the resource."""
        scope = " ".join(scopes) or None
        if scope:
            data["scope"] = scope
        if self.send_resource:
            data["resource"] = found.resource
        logger.info("%s at %s for %s (scope: %s)", what, found.issuer, found.resource, scope or "none")
        return await token_request(
            client, found.metadata, data, auth, requested_scope=scope, dpop=self._dpop_for(found)
        )
