"""DPoP (RFC 9449) for the OAuth client: a key pair that signs one proof per HTTP request, and the nonces
servers hand out.  Needs joserfc (the ``auth`` extra), imported when the first proof is made."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ._errors import OAuthError

__all__ = ["DPoPKey"]


class DPoPKey:
    """The key that binds this client's tokens (RFC 9449), kept in memory: tokens issued for it are of
    no use to another process.  ``key`` is a joserfc private key (default: a new P-256 key, made on first
    use) signed with ``algorithm``."""

    def __init__(self, key: Any = None, algorithm: str = "ES256") -> None:
        self.algorithm = algorithm
        self._key = key
        self.nonces: dict[str, str] = {}
        """The last ``DPoP-Nonce`` each origin (scheme://host:port) gave."""

    def _signing_key(self) -> Any:
        if self._key is None:
            try:
                from joserfc.jwk import ECKey
            except ImportError as exc:  # pragma: no cover - depends on the installation
                raise OAuthError("DPoP needs joserfc: pip install 'mcp_trio[auth]'") from exc
            self._key = ECKey.generate_key("P-256")
        return self._key

    @staticmethod
    def origin(url: str) -> str:
        parts = urlsplit(url)
        return f"{parts.scheme.lower()}://{parts.netloc.lower()}"

    def remember(self, url: str, nonce: str | None) -> None:
        """Keep the ``DPoP-Nonce`` a response from ``url`` carried, for the next proof to its origin."""
        if nonce:
            self.nonces[self.origin(url)] = nonce

    def proof(self, method: str, url: str, access_token: str | None = None) -> str:
        """A fresh proof for one request: ``htm``, ``htu`` (``url`` without query and fragment), ``iat``,
        a new ``jti``, the origin's nonce if it gave one, and ``ath`` for a request carrying
        ``access_token``."""
        from joserfc import jwt

        key = self._signing_key()
        parts = urlsplit(url)
        claims: dict[str, Any] = {
            "jti": uuid.uuid4().hex,
            "htm": method.upper(),
            "htu": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
            "iat": int(time.time()),
        }
        nonce = self.nonces.get(self.origin(url))
        if nonce is not None:
            claims["nonce"] = nonce
        if access_token is not None:
            digest = hashlib.sha256(access_token.encode("ascii", errors="replace")).digest()
            claims["ath"] = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
        header = {"typ": "dpop+jwt", "alg": self.algorithm, "jwk": key.as_dict(private=False)}
        return str(jwt.encode(header, claims, key))

    def supported_by(self, metadata_values: Any) -> bool:
        """Whether an authorization server's ``dpop_signing_alg_values_supported`` lists our algorithm."""
        return isinstance(metadata_values, list) and self.algorithm in metadata_values
