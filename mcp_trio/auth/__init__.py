"""OAuth 2.1 authorization for MCP: a protected resource (server side) and an OAuth client.

The server side needs the ``auth`` extra (``pip install 'mcp_trio[auth]'``, which brings ``joserfc``) only
for :class:`JWTVerifier`; everything else here runs on the runtime dependencies.  Names are imported on
first use, so ``import mcp_trio.auth`` costs nothing until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # --- the protected resource (server side) ---
    "AccessToken": "server._token",
    "InvalidToken": "server._token",
    "TokenVerifier": "server._token",
    "VerifierUnavailable": "server._token",
    "ProtectedResource": "server._resource",
    "JWTVerifier": "server._verify",
    "IntrospectionVerifier": "server._introspect",
    # --- end of the protected resource ---
    # --- the OAuth client ---
    "OAuth": "client._oauth",
    "ClientCredentials": "client._client_credentials",
    "JWTBearer": "client._jwt_bearer",
    "IDJAGExchange": "client._jwt_bearer",
    "OAuthError": "client._errors",
    "RedirectHandler": "client._redirect",
    "LoopbackRedirect": "client._redirect",
    "HeadlessRedirect": "client._redirect",
    "TokenStore": "client._store",
    "MemoryTokenStore": "client._store",
    "FileTokenStore": "client._store",
    "OAuthTokens": "client._store",
    "ClientRegistration": "client._store",
    # --- end of the OAuth client ---
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and the docs: the real imports
    # --- the protected resource (server side) ---
    from .server._introspect import IntrospectionVerifier as IntrospectionVerifier
    from .server._resource import ProtectedResource as ProtectedResource
    from .server._token import AccessToken as AccessToken
    from .server._token import InvalidToken as InvalidToken
    from .server._token import TokenVerifier as TokenVerifier
    from .server._token import VerifierUnavailable as VerifierUnavailable
    from .server._verify import JWTVerifier as JWTVerifier

    # --- end of the protected resource ---
    # isort: split
    # --- the OAuth client ---
    from .client._client_credentials import ClientCredentials as ClientCredentials
    from .client._errors import OAuthError as OAuthError
    from .client._jwt_bearer import IDJAGExchange as IDJAGExchange
    from .client._jwt_bearer import JWTBearer as JWTBearer
    from .client._oauth import OAuth as OAuth
    from .client._redirect import HeadlessRedirect as HeadlessRedirect
    from .client._redirect import LoopbackRedirect as LoopbackRedirect
    from .client._redirect import RedirectHandler as RedirectHandler
    from .client._store import ClientRegistration as ClientRegistration
    from .client._store import FileTokenStore as FileTokenStore
    from .client._store import MemoryTokenStore as MemoryTokenStore
    from .client._store import OAuthTokens as OAuthTokens
    from .client._store import TokenStore as TokenStore
    # --- end of the OAuth client ---


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
