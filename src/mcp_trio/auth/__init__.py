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
    # --- end of the protected resource ---
    # --- the OAuth client ---
    # --- end of the OAuth client ---
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and the docs: the real imports
    pass


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
