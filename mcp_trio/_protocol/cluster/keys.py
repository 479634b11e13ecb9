"""The cluster's key ring (the ``requestState`` ring, ``MCP_TRIO_REQUEST_STATE_SECRET``): how it is read
from the environment, and :class:`ClusterKeys`, the signing and tagging keys derived from it for what
workers write to Redis."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Sequence

__all__ = ["MIN_SECRET_BYTES", "REQUEST_STATE_SECRET_ENV", "TAG_BYTES", "ClusterKeys", "parse_secret_ring"]

REQUEST_STATE_SECRET_ENV = "MCP_TRIO_REQUEST_STATE_SECRET"
"""Environment variable with the ``requestState`` key ring: comma-separated base64 keys, first seals."""
MIN_SECRET_BYTES = 32


def parse_secret_ring(text: str) -> tuple[bytes, ...]:
    """The keys of a ``MCP_TRIO_REQUEST_STATE_SECRET`` value: comma-separated base64 (standard or
    URL-safe alphabet, padding optional, spaces around each ignored), each of at least 32 bytes.  The
    first seals new ``requestState``; every one verifies.  ValueError says what is wrong, never what
    the keys are."""
    entries = [entry.strip() for entry in text.split(",")]
    if not any(entries):
        raise ValueError(f"{REQUEST_STATE_SECRET_ENV} is set but empty")
    keys = []
    for position, entry in enumerate(entries, start=1):
        if not entry:
            raise ValueError(f"{REQUEST_STATE_SECRET_ENV}: key {position} is empty (a stray comma?)")
        standard = entry.replace("-", "+").replace("_", "/")
        try:
            key = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{REQUEST_STATE_SECRET_ENV}: key {position} is not base64") from None
        if len(key) < MIN_SECRET_BYTES:
            raise ValueError(
                f"{REQUEST_STATE_SECRET_ENV}: key {position} has {len(key)} bytes, at least "
                f"{MIN_SECRET_BYTES} are needed (make one with 'openssl rand -base64 32')"
            )
        keys.append(key)
    return tuple(keys)


TAG_BYTES = 16
"""Length of a keyed tag (a session's or a principal's), before hex."""


class ClusterKeys:
    """The cluster's key ring (the ``requestState`` ring, ``MCP_TRIO_REQUEST_STATE_SECRET``) applied to
    what workers write to Redis.  Each key of the ring gives, by HMAC-SHA256 with a fixed label, a
    signing key and a tagging key (never the ring's key itself, so a signature here is never a valid
    ``requestState``), and a key id (16 hex digits, that reveal nothing of the key).

    :meth:`sign` signs with the first key (the current one); :meth:`verify` accepts a signature of any
    key of the ring, so keys rotate as for ``requestState``: add the new key second on every worker,
    then move it first, then drop the old one.  :meth:`tags` are keyed hashes of a value (a session id,
    a principal's identity) that can be stored in Redis and compared without revealing the value."""

    __slots__ = ("_by_id", "_keys")

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys or not all(isinstance(key, bytes) and key for key in keys):
            raise ValueError("the cluster's key ring: at least one key, each non-empty bytes")
        derived = []
        for key in keys:
            kid = hashlib.sha256(b"mcp-trio cluster key id\0" + key).hexdigest()[:16]
            signing = hmac.new(key, b"mcp-trio cluster messages v1", hashlib.sha256).digest()
            tagging = hmac.new(key, b"mcp-trio cluster tags v1", hashlib.sha256).digest()
            derived.append((kid, signing, tagging))
        self._keys = tuple(derived)
        self._by_id = {kid: signing for kid, signing, _ in reversed(derived)}

    @classmethod
    def of(cls, secret: bytes | Sequence[bytes] | None) -> ClusterKeys:
        """The ring of ``secret`` (a key or a sequence of keys), else of the environment variable
        :data:`REQUEST_STATE_SECRET_ENV`; ValueError if neither is given (workers that share Redis need
        a shared secret: without one, whatever can write to Redis could speak for a worker)."""
        if secret is None:
            text = os.environ.get(REQUEST_STATE_SECRET_ENV)
            if text is None:
                raise ValueError(
                    f"workers that share Redis sign what they write there with a shared key ring: set "
                    f"{REQUEST_STATE_SECRET_ENV} on every worker (make a key with 'openssl rand -base64 "
                    f"32'), or pass secret= to RedisNotificationBus"
                )
            return cls(parse_secret_ring(text))
        return cls([secret] if isinstance(secret, bytes) else list(secret))

    @property
    def key_id(self) -> str:
        """The id of the key that signs (the first of the ring)."""
        return self._keys[0][0]

    def sign(self, label: bytes, *parts: bytes) -> tuple[str, str]:
        """The key id and the signature (hex) of ``parts`` under ``label``, with the current key."""
        kid, signing, _ = self._keys[0]
        return kid, _mac(signing, label, parts)

    def verify(self, kid: object, signature: object, label: bytes, *parts: bytes) -> bool:
        """Whether ``signature`` is one of ``parts`` under ``label`` by the key ``kid`` of the ring."""
        if not isinstance(kid, str) or not isinstance(signature, str):
            return False
        signing = self._by_id.get(kid)
        if signing is None:
            return False
        return hmac.compare_digest(_mac(signing, label, parts), signature)

    def tags(self, label: bytes, value: bytes) -> tuple[str, ...]:
        """A keyed hash of ``value`` (32 hex digits) by every key of the ring, the current key's first."""
        return tuple(_mac(tagging, label, (value,))[: 2 * TAG_BYTES] for _, _, tagging in self._keys)

    def tag(self, label: bytes, value: bytes) -> str:
        """The current key's :meth:`tags`."""
        return self.tags(label, value)[0]

    def matches(self, label: bytes, value: bytes, tag: object) -> bool:
        """Whether ``tag`` is a tag of ``value`` by any key of the ring."""
        if not isinstance(tag, str):
            return False
        found = False
        for candidate in self.tags(label, value):
            found |= hmac.compare_digest(candidate, tag)
        return found


def _mac(key: bytes, label: bytes, parts: Sequence[bytes]) -> str:
    """HMAC-SHA256 over ``label`` and ``parts``, each preceded by its length (so no two different
    sequences of parts share their bytes)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in (label, *parts):
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()
