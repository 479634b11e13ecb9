"""The authorization code flow with PKCE, for a user: :class:`OAuth`."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

import httpx

from ._discovery import Discovery
from ._errors import OAuthError
from ._flow import (
    ClientAuth,
    authorization_url,
    pkce_pair,
    read_callback,
    register_client,
    registration_auth_method,
    token_request,
)
from ._grant import Grant, union
from ._redirect import RedirectHandler
from ._store import ClientRegistration, OAuthTokens, TokenStore

__all__ = ["OAuth"]

logger = logging.getLogger("mcp_trio.auth")


class OAuth(Grant):
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
            wanted = list(union(wanted, ["offline_access"]))
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
