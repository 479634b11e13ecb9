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
    "AccessToken": "_token",
    "InvalidToken": "_token",
    "TokenVerifier": "_token",
    "VerifierUnavailable": "_token",
    "ProtectedResource": "_resource",
    "JWTVerifier": "_verify",
    "IntrospectionVerifier": "_verify",
    # --- end of the protected resource ---
    # --- the OAuth client ---
    "OAuth": "_client",
    "ClientCredentials": "_client",
    "JWTBearer": "_client",
    "IDJAGExchange": "_client",
    "OAuthError": "_client_errors",
    "RedirectHandler": "_redirect",
    "LoopbackRedirect": "_redirect",
    "HeadlessRedirect": "_redirect",
    "TokenStore": "_store",
    "MemoryTokenStore": "_store",
    "FileTokenStore": "_store",
    "OAuthTokens": "_store",
    "ClientRegistration": "_store",
    # --- end of the OAuth client ---
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and the docs: the real imports
    # --- the protected resource (server side) ---
    from ._resource import ProtectedResource as ProtectedResource
    from ._token import AccessToken as AccessToken
    from ._token import InvalidToken as InvalidToken
    from ._token import TokenVerifier as TokenVerifier
    from ._token import VerifierUnavailable as VerifierUnavailable
    from ._verify import IntrospectionVerifier as IntrospectionVerifier
    from ._verify import JWTVerifier as JWTVerifier

    # --- end of the protected resource ---
    # isort: split
    # --- the OAuth client ---
    from ._client import ClientCredentials as ClientCredentials
    from ._client import IDJAGExchange as IDJAGExchange
    from ._client import JWTBearer as JWTBearer
    from ._client import OAuth as OAuth
    from ._client_errors import OAuthError as OAuthError
    from ._redirect import HeadlessRedirect as HeadlessRedirect
    from ._redirect import LoopbackRedirect as LoopbackRedirect
    from ._redirect import RedirectHandler as RedirectHandler
    from ._store import ClientRegistration as ClientRegistration
    from ._store import FileTokenStore as FileTokenStore
    from ._store import MemoryTokenStore as MemoryTokenStore
    from ._store import OAuthTokens as OAuthTokens
    from ._store import TokenStore as TokenStore
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
