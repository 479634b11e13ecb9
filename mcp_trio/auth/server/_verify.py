"""Verifying JWT access tokens (RFC 9068) signed with the issuer's published keys: :class:`JWTVerifier`.
(:class:`~mcp_trio.auth.IntrospectionVerifier`, the other verifier, is in :mod:`._introspect`.)

Everything read from the network is bounded: each fetch in time (``timeout``) and in size, the key set
in keys, and the refetches of the issuer's keys in rate (one at a time, at most one per
``min_refresh_interval``), so neither a flood of forged tokens nor a slow or dead issuer can hold a
request or the issuer for long.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import trio

from ..._protocol import safejson
from ._claims import access_token, number, strings
from ._fetch import bounded_client, read_json
from ._resource import MAX_TOKEN_SIZE, check_url
from ._token import AccessToken, InvalidToken, VerifierUnavailable

if TYPE_CHECKING:
    from joserfc.jwk import Key
    from joserfc.jws import JWSRegistry

__all__ = ["DEFAULT_ALGORITHMS", "JWTVerifier"]

logger = logging.getLogger("mcp_trio.auth")

DEFAULT_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
    "Ed25519",
)
"""The signature algorithms :class:`JWTVerifier` accepts by default: asymmetric ones only."""
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
"""The JWK ``kty`` each family of accepted algorithms needs (by the first two letters)."""
MAX_KEYS = 64
"""Keys kept from one key set (the rest are ignored)."""
_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_AT_JWT = frozenset({"at+jwt", "application/at+jwt"})
_PLAIN_JWT = frozenset({"jwt", "application/jwt"})


def _joserfc_missing(exc: ImportError) -> ImportError:
    error = ImportError(
        "JWTVerifier needs joserfc, which comes with the auth extra: pip install 'mcp_trio[auth]'"
    )
    error.__cause__ = exc
    return error


@functools.cache
def _registry_class() -> type[JWSRegistry]:
    """A JWS registry where the verifier's allow-list alone decides which algorithms are used (joserfc's
    own warns on each use of ``EdDSA``, a name RFC 9864 deprecates; it stays accepted here)."""
    from joserfc.errors import UnsupportedAlgorithmError
    from joserfc.jws import JWSRegistry

    class AllowListRegistry(JWSRegistry):
        def get_alg(self, name: str) -> Any:
            if self.allowed is None or name not in self.allowed or name not in self.algorithms:
                raise UnsupportedAlgorithmError(f"Algorithm of '{name}' is not allowed")
            return self.algorithms[name]

    return AllowListRegistry


def _b64_json(segment: str) -> Any:
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        return safejson.loads(raw)
    except (binascii.Error, ValueError):
        return None


def _metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be, in the order tried: RFC 8414 (path inserted), then OpenID
    Connect Discovery (path inserted, then appended)."""
    parts = urlsplit(issuer)
    base, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    urls = [
        f"{base}/.well-known/oauth-authorization-server{path}",
        f"{base}/.well-known/openid-configuration{path}",
    ]
    if path:
        urls.append(f"{base}{path}/.well-known/openid-configuration")
    return urls


# -- JWT access tokens -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KeySet:
    by_kid: dict[str, Key]
    anonymous: tuple[Key, ...]
    loaded_at: float

    def candidates(self, kid: str | None, alg: str) -> list[Key]:
        if kid is not None:
            key = self.by_kid.get(kid)
            return [key] if key is not None and _fits(key, alg) else []
        return [key for key in (*self.by_kid.values(), *self.anonymous) if _fits(key, alg)]


def _fits(key: Key, alg: str) -> bool:
    """Whether ``key`` may verify a signature made with ``alg``: its type, and its ``alg`` and ``use``
    when the key set names them."""
    if key.key_type != _KEY_TYPES.get(alg[:2]):
        return False
    key_alg = key.alg
    return (not key_alg or key_alg == alg) and key.get("use") in (None, "sig")


class JWTVerifier:
    """Verifies JWT access tokens (RFC 9068) signed by ``issuer``, for this resource (``audience``).

    The issuer's public keys come from its ``jwks_uri``, found in its metadata (RFC 8414
    ``/.well-known/oauth-authorization-server``, then OpenID Connect ``/.well-known/openid-configuration``,
    whose ``issuer`` must be ``issuer``), or given as ``jwks_uri``.  They are fetched on the first
    verification and kept by ``kid``; a token signed by a key not in the set makes the verifier fetch
    the set again (a key rotation), one fetch at a time and at most once per ``min_refresh_interval``
    seconds, and a set older than ``keys_max_age`` is fetched again when next used.  A fetch that fails
    keeps the keys already known: tokens they signed keep verifying while the issuer is down.

    A token passes when it is a JWS (not encrypted) signed with one of ``algorithms`` (asymmetric
    only: ``none`` and the HMAC algorithms are refused, so a token "signed" with the public key as an
    HMAC secret never verifies) by a key of the issuer; ``iss`` is ``issuer``; ``aud`` names one of
    ``audience`` (RFC 8707: a token for another resource is refused); ``exp`` is present and not past,
    ``nbf`` and ``iat`` not in the future, each within ``leeway`` seconds.  The ``typ`` header may be
    ``at+jwt`` (RFC 9068), or ``JWT`` or absent, as many authorization servers still send; with
    ``require_at_jwt`` only ``at+jwt`` passes.  Scopes come from ``scope`` (space-separated) or ``scp``.

    :class:`~mcp_trio.auth.InvalidToken` refuses a token (401); :class:`~mcp_trio.auth.VerifierUnavailable`
    (503) says the keys cannot be had now (the issuer refuses, is slower than ``timeout`` or answers
    nonsense).  ``http``: the ``httpx.AsyncClient`` to fetch with (default: a new one per fetch, no
    redirects).  Needs joserfc (the ``auth`` extra): ImportError here without it.
    """

    def __init__(
        self,
        issuer: str,
        audience: str | Sequence[str],
        *,
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway: float = 30.0,
        jwks_uri: str | None = None,
        http: httpx.AsyncClient | None = None,
        timeout: float = 5.0,
        min_refresh_interval: float = 30.0,
        keys_max_age: float = 3600.0,
        require_at_jwt: bool = False,
    ) -> None:
        try:
            import joserfc.jws  # noqa: F401 - only to fail here, with the extra's name
        except ImportError as exc:
            raise _joserfc_missing(exc) from None
        self.issuer = check_url(issuer, "issuer")
        audiences = (audience,) if isinstance(audience, str) else tuple(audience)
        if not audiences or not all(isinstance(a, str) and a for a in audiences):
            raise ValueError("audience: the resource URL (or several), as non-empty strings")
        self.audience = audiences
        allowed = tuple(algorithms)
        refused = [alg for alg in allowed if _KEY_TYPES.get(alg[:2]) is None]
        if not allowed or refused:
            raise ValueError(
                f"algorithms: only asymmetric signature algorithms (RS*, PS*, ES*, EdDSA) may be "
                f"allowed, not {refused or 'none at all'}"
            )
        self.algorithms = allowed
        if leeway < 0 or timeout <= 0 or min_refresh_interval < 0 or keys_max_age <= 0:
            raise ValueError("leeway and min_refresh_interval >= 0, timeout and keys_max_age > 0")
        self.leeway = leeway
        self.jwks_uri = check_url(jwks_uri, "jwks_uri") if jwks_uri is not None else None
        self.timeout = timeout
        self.min_refresh_interval = min_refresh_interval
        self.keys_max_age = keys_max_age
        self.require_at_jwt = require_at_jwt
        self._http = http
        self._registry = _registry_class()(algorithms=list(allowed), strict_check_header=False)
        self._keys: _KeySet | None = None
        self._discovered_uri: str | None = None
        self._fetching: trio.Event | None = None
        self._last_attempt: float | None = None
        self._last_error: VerifierUnavailable | None = None
        self.fetches = 0
        """How many times the key set was fetched (attempts, failed ones included)."""

    async def verify(self, token: str) -> AccessToken:
        alg, kid = self._header(token)
        keys = await self._keys_for(kid, alg)
        payload = self._signed_payload(token, keys, alg)
        claims = _b64_json_bytes(payload)
        if not isinstance(claims, dict):
            raise InvalidToken("the token's payload is not a JSON object")
        return self._check_claims(token, claims)

    # -- the token ------------------------------------------------------------------------------

    def _header(self, token: str) -> tuple[str, str | None]:
        """The ``alg`` and ``kid`` of a token's header, after every check that needs no key."""
        if len(token) > MAX_TOKEN_SIZE:
            raise InvalidToken("the token is too large")
        if token.count(".") == 4:
            raise InvalidToken("encrypted tokens are not accepted")
        if not _JWT.fullmatch(token):
            raise InvalidToken("the token is not a signed JWT")
        header = _b64_json(token.partition(".")[0])
        if not isinstance(header, dict):
            raise InvalidToken("the token's header is not a JSON object")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise InvalidToken("the token's signature algorithm is not accepted")
        typ = header.get("typ")
        accepted = _AT_JWT if self.require_at_jwt else _AT_JWT | _PLAIN_JWT
        checked = typ is not None or self.require_at_jwt
        if checked and (not isinstance(typ, str) or typ.lower() not in accepted):
            raise InvalidToken("the token is not an access token (typ)")
        if "crit" in header:
            raise InvalidToken("the token has critical header parameters this verifier does not know")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("the token's kid is not a string")
        return alg, kid

    def _signed_payload(self, token: str, keys: list[Key], alg: str) -> bytes:
        from joserfc.errors import JoseError
        from joserfc.jws import deserialize_compact

        for key in keys:
            try:
                signed = deserialize_compact(token, key, algorithms=[alg], registry=self._registry)
            except (JoseError, ValueError, TypeError):
                continue
            if signed.payload is not None:
                return signed.payload
        raise InvalidToken("the token's signature is invalid")

    def _check_claims(self, token: str, claims: dict[str, Any]) -> AccessToken:
        now = time.time()
        if claims.get("iss") != self.issuer:
            raise InvalidToken("the token was issued by another issuer")
        audience = strings(claims.get("aud"))
        if audience is None or not set(audience) & set(self.audience):
            raise InvalidToken("the token is meant for another resource (aud)")
        expires = number(claims.get("exp"))
        if expires is None:
            raise InvalidToken("the token has no valid expiry (exp)")
        if now > expires + self.leeway:
            raise InvalidToken("the token has expired")
        for name in ("nbf", "iat"):
            if name in claims:
                moment = number(claims[name])
                if moment is None:
                    raise InvalidToken(f"the token's {name} is not a number")
                if moment > now + self.leeway:
                    raise InvalidToken("the token is not valid yet")
        for name in ("sub", "client_id"):
            if name in claims and not isinstance(claims[name], str):
                raise InvalidToken(f"the token's {name} is not a string")
        return access_token(token, claims, audience)

    # -- the issuer's keys ---------------------------------------------------------------------------

    async def _keys_for(self, kid: str | None, alg: str) -> list[Key]:
        """The keys that may have signed a token (``kid``, ``alg``), fetching the key set first when
        none is known or it is stale, and again for a key it lacks."""
        keys = self._keys
        fetched = False
        if keys is None or trio.current_time() - keys.loaded_at > self.keys_max_age:
            fetched = await self._refresh(wait=keys is None)
        found = self._keys.candidates(kid, alg) if self._keys is not None else []
        if not found and not fetched:
            await self._refresh(wait=True)
            found = self._keys.candidates(kid, alg) if self._keys is not None else []
        if found:
            return found
        if self._keys is None or self._last_error is not None:
            raise VerifierUnavailable(str(self._last_error or "the issuer's keys are not loaded yet"))
        raise InvalidToken("the token was signed by a key the issuer does not publish")

    async def _refresh(self, *, wait: bool) -> bool:
        """Fetch the key set, unless a fetch is under way (then wait for it, bounded, if ``wait``) or
        one started less than ``min_refresh_interval`` ago.  True if this fetched or waited for a fetch."""
        if self._fetching is not None:
            if wait:
                with trio.move_on_after(self.timeout):
                    await self._fetching.wait()
            return wait
        now = trio.current_time()
        if self._last_attempt is not None and now - self._last_attempt < self.min_refresh_interval:
            return False
        self._last_attempt = now
        self._fetching = done = trio.Event()
        self.fetches += 1
        try:
            with trio.move_on_after(self.timeout) as scope:
                keys = await self._load()
            if scope.cancelled_caught:
                raise VerifierUnavailable(f"the issuer's keys did not arrive within {self.timeout:g} s")
            self._keys, self._last_error = keys, None
        except VerifierUnavailable as exc:
            self._last_error = exc
            logger.warning("JWTVerifier: cannot load the keys of %s: %s", self.issuer, exc)
        finally:
            self._fetching = None
            done.set()
        return True

    async def _load(self) -> _KeySet:
        try:
            async with bounded_client(self._http, self.timeout) as client:
                uri = self.jwks_uri or self._discovered_uri or await self._discover(client)
                self._discovered_uri = None  # found again next time unless this fetch works
                data = await self._get(client, uri, "the key set")
        except httpx.HTTPError as exc:
            raise VerifierUnavailable(f"{type(exc).__name__}: {exc}") from None
        keys = self._parse_key_set(data)
        if self.jwks_uri is None:
            self._discovered_uri = uri
        return keys

    async def _get(self, client: httpx.AsyncClient, url: str, what: str) -> Any:
        async with client.stream("GET", url, headers={"accept": "application/json"}) as response:
            if response.status_code != 200:
                raise VerifierUnavailable(f"{what} ({url}): HTTP {response.status_code}")
            return await read_json(response, what)

    async def _discover(self, client: httpx.AsyncClient) -> str:
        """The issuer's ``jwks_uri``, from the first of its metadata documents that answers."""
        failures = []
        for url in _metadata_urls(self.issuer):
            try:
                metadata = await self._get(client, url, "the issuer's metadata")
            except VerifierUnavailable as exc:
                failures.append(str(exc))
                continue
            if not isinstance(metadata, dict) or metadata.get("issuer") != self.issuer:
                raise VerifierUnavailable(f"the metadata at {url} is not that of issuer {self.issuer}")
            try:
                return check_url(metadata.get("jwks_uri"), "jwks_uri")
            except ValueError as exc:
                raise VerifierUnavailable(f"the metadata at {url}: {exc}") from None
        raise VerifierUnavailable("no metadata found: " + "; ".join(failures))

    def _parse_key_set(self, data: Any) -> _KeySet:
        from joserfc.errors import JoseError
        from joserfc.jwk import JWKRegistry

        entries = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise VerifierUnavailable("the key set has no keys list")
        by_kid: dict[str, Key] = {}
        anonymous: list[Key] = []
        for entry in entries[:MAX_KEYS]:
            if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC", "OKP"):
                continue  # symmetric keys never verify here
            try:
                key = JWKRegistry.import_key(entry)
            except (JoseError, ValueError, TypeError):
                logger.info("JWTVerifier: skipping a key of %s that cannot be imported", self.issuer)
                continue
            kid = entry.get("kid")
            if isinstance(kid, str):
                by_kid.setdefault(kid, key)
            else:
                anonymous.append(key)
        return _KeySet(by_kid, tuple(anonymous), trio.current_time())


def _b64_json_bytes(payload: bytes) -> Any:
    try:
        return safejson.loads(payload)
    except ValueError:
        return None
