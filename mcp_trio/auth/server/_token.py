"""What a protected resource knows of a request's bearer token: :class:`AccessToken`, the
:class:`TokenVerifier` protocol that makes one, and the two ways a verification fails."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ...errors import MCPTrioError

__all__ = ["AccessToken", "InvalidToken", "TokenVerifier", "VerifierUnavailable"]


@dataclass(frozen=True, slots=True)
class AccessToken:
    """A verified access token: who it speaks for and what it allows.

    With :class:`~mcp_trio.auth.ProtectedResource` in ``ServerConfig.oauth``, this is
    :attr:`Context.principal <mcp_trio.Context.principal>` for every handler.  ``token`` (the bearer
    string itself) and ``claims`` stay out of ``repr()``, so a logged token shows who, not what.
    """

    token: str = field(repr=False)
    subject: str | None = None
    """``sub``: the resource owner (a user), or the client itself for a client-credentials token."""
    scopes: frozenset[str] = frozenset()
    client_id: str | None = None
    """The OAuth client the token was issued to (``client_id``, or ``azp``)."""
    issuer: str | None = None
    audience: tuple[str, ...] = ()
    expires_at: float | None = None
    """``exp``: seconds since the epoch."""
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Every claim of the token (a JWT's payload, or the introspection response)."""

    @property
    def owner(self) -> tuple[str | None, ...]:
        """Whose token this is: ``(issuer, subject, client_id)``.  A 2025 session belongs to the owner
        of the token that created it, so a refreshed token (a new string, the same owner) keeps the
        session.  A token naming neither a subject nor a client stands only for itself."""
        if self.subject is None and self.client_id is None:
            return (self.issuer, None, None, self.token)
        return (self.issuer, self.subject, self.client_id)

    def has_scopes(self, scopes: Iterable[str]) -> bool:
        """Whether the token grants every one of ``scopes``."""
        return self.scopes.issuperset(scopes)

    def expired(self, now: float | None = None, *, leeway: float = 0.0) -> bool:
        """Whether ``expires_at`` has passed (``now``: seconds since the epoch, default the clock)."""
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) > self.expires_at + leeway


class InvalidToken(MCPTrioError):
    """A verifier refuses a token: malformed, badly signed, expired, for another resource or issuer,
    inactive.  The request gets 401 with ``error="invalid_token"`` and ``description`` as
    ``error_description``: keep it short and safe to show (never the token)."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class VerifierUnavailable(MCPTrioError):
    """A verifier cannot decide now: the issuer's keys or the introspection endpoint cannot be
    reached (refused, too slow, a bad answer).  The request gets 503 with ``Retry-After``: the token
    may well be valid, so the client is told to retry, not to authorize again."""


@runtime_checkable
class TokenVerifier(Protocol):
    """Turns a bearer token into an :class:`AccessToken`, or raises :class:`InvalidToken` (or
    :class:`VerifierUnavailable`).  :class:`~mcp_trio.auth.JWTVerifier` and
    :class:`~mcp_trio.auth.IntrospectionVerifier` are two; any object with this method is one.

    The verifier decides whether the token is genuine, current and meant for this resource (its
    audience); scopes are checked afterwards, by :class:`~mcp_trio.auth.ProtectedResource`."""

    async def verify(self, token: str) -> AccessToken: ...
