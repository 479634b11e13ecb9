"""The JWT bearer grant (an assertion obtained elsewhere exchanged for a token): :class:`JWTBearer`, and
:class:`IDJAGExchange`, the assertion of enterprise-managed authorization."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, Unpack

import httpx

from ._discovery import Discovery
from ._errors import OAuthError
from ._flow import ClientAuth, choose_auth_method, error_of, post_form
from ._grant import AS_TIMEOUT, Grant, GrantOptions
from ._store import OAuthTokens

__all__ = ["IDJAGExchange", "JWTBearer"]

logger = logging.getLogger("mcp_trio.auth")

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"

AssertionSource: TypeAlias = str | Callable[[str, str], Awaitable[str] | str]
"""A JWT assertion, or a function ``(issuer, resource) -> str`` (plain or async) that makes one for the
authorization server ``issuer`` and the MCP server ``resource`` each time a token is needed."""


class JWTBearer(Grant):
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
        **options: Unpack[GrantOptions],
    ) -> None:
        super().__init__(client_id=client_id, **options)
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
        data = {"grant_type": JWT_BEARER_GRANT, "assertion": assertion}
        return await self._grant(client, found, auth, scopes, data, "jwt-bearer grant")


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
