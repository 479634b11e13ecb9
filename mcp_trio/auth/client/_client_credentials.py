"""The ``client_credentials`` grant, for a client acting on its own behalf: :class:`ClientCredentials`."""

from __future__ import annotations

from typing import Any, Unpack

import httpx

from ._discovery import Discovery
from ._flow import ClientAuth, choose_auth_method, private_key_jwt
from ._grant import Grant, GrantOptions
from ._store import OAuthTokens

__all__ = ["ClientCredentials"]


class ClientCredentials(Grant):
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
        **options: Unpack[GrantOptions],
    ) -> None:
        super().__init__(client_id=client_id, **options)
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
        data = {"grant_type": "client_credentials"}
        return await self._grant(client, found, auth, scopes, data, "client_credentials")
