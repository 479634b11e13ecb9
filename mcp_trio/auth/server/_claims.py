"""What a verifier makes of a token's claims (a JWT's payload, an introspection answer): an
:class:`~mcp_trio.auth.AccessToken`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._token import AccessToken

__all__ = ["access_token", "number", "strings"]


def number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def strings(value: object) -> tuple[str, ...] | None:
    """A claim that is one string or a list of strings, as a tuple; None for anything else."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """``scope`` (space-separated) or else ``scp`` (a list, or space-separated)."""
    value = claims.get("scope")
    if value is None:
        value = claims.get("scp")
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def access_token(token: str, claims: dict[str, Any], audience: tuple[str, ...]) -> AccessToken:
    return AccessToken(
        token=token,
        subject=_text(claims.get("sub")),
        scopes=_scopes(claims),
        client_id=_text(claims.get("client_id")) or _text(claims.get("azp")),
        issuer=_text(claims.get("iss")),
        audience=audience,
        expires_at=number(claims.get("exp")),
        claims=claims,
    )
