"""Verifying a token by asking the authorization server: :class:`IntrospectionVerifier` (RFC 7662
token introspection)."""

from __future__ import annotations

import base64
import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote_plus

import httpx
import trio

from ._claims import access_token, number, strings
from ._fetch import bounded_client, read_json
from ._resource import MAX_TOKEN_SIZE, check_url
from ._token import AccessToken, InvalidToken, VerifierUnavailable

__all__ = ["IntrospectionVerifier"]


class IntrospectionVerifier:
    """Verifies tokens by asking the authorization server (RFC 7662 token introspection).

    ``endpoint`` gets ``POST token=...&token_type_hint=access_token``, authenticated with
    ``client_id``/``client_secret`` (HTTP Basic) when given.  A token passes when the answer says
    ``"active": true``, its ``exp`` (if any) is not past, and, with ``audience`` (str or a sequence),
    its ``aud`` names one of them (RFC 8707: give the resource URL unless your server leaves ``aud``
    out), and with ``issuer`` its ``iss`` is that.  An active answer is kept for ``cache_ttl``
    seconds at most (never past the token's ``exp``), for up to ``cache_size`` tokens (0: no cache), so
    a session's requests do not each ask; a revoked token may thus pass for up to ``cache_ttl``.

    :class:`~mcp_trio.auth.VerifierUnavailable` (503) when the endpoint refuses, answers anything but
    200 with a JSON object, or is slower than ``timeout``.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        client_id: str | None = None,
        client_secret: str | None = None,
        audience: str | Sequence[str] | None = None,
        issuer: str | None = None,
        http: httpx.AsyncClient | None = None,
        timeout: float = 5.0,
        cache_size: int = 1024,
        cache_ttl: float = 300.0,
    ) -> None:
        self.endpoint = check_url(endpoint, "introspection endpoint")
        if client_secret is not None and client_id is None:
            raise ValueError("client_secret needs client_id")
        if timeout <= 0 or cache_size < 0 or cache_ttl < 0:
            raise ValueError("timeout > 0, cache_size and cache_ttl >= 0")
        self.client_id = client_id
        self._secret = client_secret
        if isinstance(audience, str):
            audience = (audience,)
        self.audience = None if audience is None else tuple(audience)
        self.issuer = issuer
        self.timeout = timeout
        self.cache_size = cache_size
        self.cache_ttl = cache_ttl
        self._http = http
        self._cache: OrderedDict[bytes, tuple[AccessToken, float]] = OrderedDict()
        self.requests = 0
        """How many introspection requests were sent."""

    async def verify(self, token: str) -> AccessToken:
        if len(token) > MAX_TOKEN_SIZE:
            raise InvalidToken("the token is too large")
        key = hashlib.sha256(token.encode()).digest()
        now = time.time()
        cached = self._cache.get(key)
        if cached is not None:
            if now < cached[1]:
                self._cache.move_to_end(key)
                return cached[0]
            del self._cache[key]
        answer = await self._introspect(token)
        access = self._check(token, answer, time.time())
        if self.cache_size:
            until = now + self.cache_ttl
            if access.expires_at is not None:
                until = min(until, access.expires_at)
            self._cache[key] = (access, until)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return access

    async def _introspect(self, token: str) -> dict[str, Any]:
        form = {"token": token, "token_type_hint": "access_token"}
        headers = {"accept": "application/json"}
        if self._secret is not None and self.client_id is not None:
            pair = f"{quote_plus(self.client_id)}:{quote_plus(self._secret)}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif self.client_id is not None:
            form["client_id"] = self.client_id
        self.requests += 1
        answer: Any = None
        with trio.move_on_after(self.timeout):
            try:
                async with bounded_client(self._http, self.timeout) as client:
                    request = client.build_request("POST", self.endpoint, data=form, headers=headers)
                    response = await client.send(request, stream=True)
                    try:
                        if response.status_code != 200:
                            raise VerifierUnavailable(f"introspection: HTTP {response.status_code}")
                        answer = await read_json(response, "the introspection answer")
                    finally:
                        await response.aclose()
            except httpx.HTTPError as exc:
                raise VerifierUnavailable(f"introspection: {type(exc).__name__}: {exc}") from None
            if not isinstance(answer, dict):
                raise VerifierUnavailable("introspection: the answer is not a JSON object")
            return answer
        raise VerifierUnavailable(f"introspection: no answer within {self.timeout:g} s")

    def _check(self, token: str, answer: dict[str, Any], now: float) -> AccessToken:
        if answer.get("active") is not True:
            raise InvalidToken("the token is not active")
        expires = answer.get("exp")
        if expires is not None and (number(expires) is None or now > float(expires)):
            raise InvalidToken("the token has expired")
        if self.issuer is not None and answer.get("iss") != self.issuer:
            raise InvalidToken("the token was issued by another issuer")
        audience = strings(answer.get("aud")) or ()
        if self.audience is not None and not set(audience) & set(self.audience):
            raise InvalidToken("the token is meant for another resource (aud)")
        return access_token(token, answer, audience)
