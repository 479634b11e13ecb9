"""Who a request speaks for, as a key that can be stored and compared: :class:`PrincipalKeys`.

One definition serves the 2025 sessions (a session belongs to the principal that created it) and the
2026 tasks (a task belongs to the principal that started it; its record, and so this key, may be kept
in Redis).  The key is a keyed hash (HMAC-SHA256), never the principal itself: an access token
naming neither a subject nor a client stands only for itself, and a custom principal's ``repr`` may
hold a secret too, so neither may become part of a stored record or a Redis key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence

__all__ = ["PrincipalKeys", "principal_identity"]


def principal_identity(principal: object) -> bytes:
    """What makes two principals the same one, in this process and between workers: the owner of an
    access token (issuer, subject, client; the token itself for a token naming neither), else the
    principal's type and ``repr`` (so a custom principal should have a stable one, such as a dataclass
    or a string).  It may hold a secret: only keyed hashes of it are stored or sent."""
    owner = getattr(principal, "owner", None)
    if isinstance(owner, tuple):
        parts: list[object] = ["token", *("" if part is None else str(part) for part in owner)]
    else:
        parts = [type(principal).__qualname__, repr(principal)]
    return json.dumps(parts, ensure_ascii=False).encode("utf-8", "surrogatepass")


class PrincipalKeys:
    """Turns principals into owner keys under a key ring: the first key makes new keys, every key of
    the ring is accepted when one is checked (so the ring can be rotated).

    Workers that share state (a Redis task store) must share the ring (the app's
    ``request_state_secret``, or ``MCP_TRIO_REQUEST_STATE_SECRET``): otherwise each process uses a
    random key of its own, and a task started through one worker is not its owner's on another.
    No principal (no authentication) is the key ``""``.
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: Sequence[bytes] | None = None) -> None:
        ring = tuple(keys) if keys else (secrets.token_bytes(32),)
        if not all(isinstance(key, bytes) and key for key in ring):
            raise ValueError("principal keys: each key must be non-empty bytes")
        self._keys = ring

    def key(self, principal: object) -> str:
        """The owner key of ``principal`` under the ring's first key."""
        return self._key(principal, self._keys[0])

    def owns(self, owner: str, principal: object) -> bool:
        """Whether ``owner`` (a key this ring made, under any of its keys) is ``principal``'s."""
        if principal is None:
            return owner == ""
        identity, stored = principal_identity(principal), owner.encode("utf-8", "surrogatepass")
        return any(hmac.compare_digest(stored, self._digest(identity, key).encode()) for key in self._keys)

    def _key(self, principal: object, key: bytes) -> str:
        return "" if principal is None else self._digest(principal_identity(principal), key)

    @staticmethod
    def _digest(identity: bytes, key: bytes) -> str:
        return "p1:" + hmac.new(key, identity, hashlib.sha256).hexdigest()
