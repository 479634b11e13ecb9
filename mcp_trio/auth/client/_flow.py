"""The exchanges of the OAuth client with an authorization server: PKCE, the authorization request and
its response (state, RFC 9207 ``iss``), client registration (RFC 7591), token requests and client
authentication (``client_secret_basic``, ``client_secret_post``, ``none``, ``private_key_jwt``)."""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

import httpx

from ..._protocol import safejson
from ._discovery import ServerMetadata
from ._dpop import DPoPKey
from ._errors import OAuthError
from ._store import ClientRegistration, OAuthTokens

__all__ = [
    "ClientAuth",
    "authorization_url",
    "choose_auth_method",
    "pkce_pair",
    "read_callback",
    "register_client",
    "token_request",
]

logger = logging.getLogger("mcp_trio.auth")

MAX_RESPONSE = 256 * 1024  # of a token or registration response
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
SECRET_METHODS = ("client_secret_basic", "client_secret_post")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def pkce_pair() -> tuple[str, str]:
    """A PKCE code verifier (64 unreserved characters) and its S256 challenge (RFC 7636)."""
    verifier = _b64url(secrets.token_bytes(48))
    return verifier, _b64url(hashlib.sha256(verifier.encode("ascii")).digest())


def with_query(url: str, params: Mapping[str, str]) -> str:
    """``url`` with ``params`` added to its query (keeping what it had)."""
    parts = urlsplit(url)
    query = urlencode(params, quote_via=quote)
    joined = f"{parts.query}&{query}" if parts.query else query
    return urlunsplit((parts.scheme, parts.netloc, parts.path, joined, ""))


def authorization_url(endpoint: str, params: Mapping[str, str | None]) -> str:
    return with_query(endpoint, {k: v for k, v in params.items() if v is not None})


def read_callback(callback_url: str, *, state: str, issuer: str, iss_supported: bool) -> str:
    """The authorization code of an authorization response, after the checks the 2026-07-28 specification
    makes before anything of it is used: RFC 9207 ``iss`` (compared to ``issuer`` as strings, no
    normalization; required when the server advertised it), then ``state``, then ``error``."""
    try:
        parts = urlsplit(callback_url)
    except ValueError as exc:
        # not quoted: the text may hold the authorization code
        raise OAuthError("the redirected URL is not a URL") from exc
    query = parse_qs(parts.query, keep_blank_values=True)

    def one(name: str) -> str | None:
        values = query.get(name)
        if values is None:
            return None
        if len(values) != 1:
            raise OAuthError(f"the authorization response carries {name!r} {len(values)} times")
        return values[0]

    iss = one("iss")
    if iss is None and iss_supported:
        raise OAuthError(
            f"the authorization server {issuer} advertises RFC 9207 iss, but its response has none:"
            " refusing the response"
        )
    if iss is not None and iss != issuer:
        raise OAuthError(
            f"the authorization response comes from issuer {iss!r}, not from {issuer!r} (a mix-up?):"
            " refusing the response"
        )
    if one("state") != state:
        raise OAuthError("the authorization response's state does not match the request's: refusing it")
    error = one("error")
    if error is not None:
        description = one("error_description")
        raise OAuthError(
            f"the authorization server refused: {error}" + (f" ({description})" if description else ""),
            error=error,
            description=description,
        )
    code = one("code")
    if not code:
        raise OAuthError("the authorization response carries no code")
    return code


def choose_auth_method(metadata: ServerMetadata, *, has_secret: bool) -> str:
    """How to authenticate at the token endpoint with what a client has (RFC 8414: a server that lists
    no method supports ``client_secret_basic``)."""
    if not has_secret:
        return "none"
    supported = metadata.token_endpoint_auth_methods_supported or ("client_secret_basic",)
    return next((m for m in SECRET_METHODS if m in supported), "client_secret_basic")


def registration_auth_method(metadata: ServerMetadata) -> str:
    """What to ask for in a dynamic registration: ``none`` (a public client: nothing to keep secret)
    when the server supports it, else a secret method it lists."""
    supported = metadata.token_endpoint_auth_methods_supported or ("client_secret_basic",)
    return next((m for m in ("none", *SECRET_METHODS) if m in supported), "client_secret_basic")


@dataclass
class ClientAuth:
    """A client's credentials at one token endpoint, and how it presents them.  ``assertion`` makes a
    ``private_key_jwt`` assertion for an audience (the issuer)."""

    client_id: str
    method: str
    client_secret: str | None = field(default=None, repr=False)
    assertion: Callable[[str], str] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, registration: ClientRegistration, metadata: ServerMetadata) -> ClientAuth:
        method = registration.token_endpoint_auth_method or choose_auth_method(
            metadata, has_secret=registration.client_secret is not None
        )
        return cls(registration.client_id, method, registration.client_secret)

    def apply(self, data: dict[str, str], headers: dict[str, str], audience: str) -> None:
        if self.method == "client_secret_basic":
            if self.client_secret is None:
                raise OAuthError(f"client_secret_basic needs a client secret for {self.client_id!r}")
            # RFC 6749 section 2.3.1: both parts form-encoded before base64
            pair = f"{quote(self.client_id, safe='')}:{quote(self.client_secret, safe='')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        elif self.method == "client_secret_post":
            if self.client_secret is None:
                raise OAuthError(f"client_secret_post needs a client secret for {self.client_id!r}")
            data["client_id"] = self.client_id
            data["client_secret"] = self.client_secret
        elif self.method == "private_key_jwt":
            if self.assertion is None:
                raise OAuthError(f"private_key_jwt needs a private key for {self.client_id!r}")
            data["client_id"] = self.client_id
            data["client_assertion_type"] = JWT_BEARER
            data["client_assertion"] = self.assertion(audience)
        elif self.method == "none":
            if self.client_id:  # a grant without client authentication may name no client at all
                data["client_id"] = self.client_id
        else:
            raise OAuthError(f"unsupported token endpoint authentication method {self.method!r}")


async def _post(
    client: httpx.AsyncClient, url: str, *, headers: dict[str, str], **kwargs: Any
) -> tuple[int, Any, httpx.Headers]:
    """POST; return the status, the JSON body (None when it is not JSON the safe decoder accepts) and
    the headers.  Bounded in size; redirects are not followed."""
    try:
        async with client.stream("POST", url, headers=headers, follow_redirects=False, **kwargs) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_RESPONSE:
                    raise OAuthError(f"POST {url}: the answer is larger than {MAX_RESPONSE} bytes")
            status = response.status_code
    except httpx.HTTPError as exc:
        raise OAuthError(f"POST {url} failed: {exc!r}") from exc
    try:
        return status, safejson.loads(body, max_size=MAX_RESPONSE), response.headers
    except safejson.JSONRejected as exc:
        logger.info("POST %s: the answer is not JSON the client accepts (%s)", url, exc)
        return status, None, response.headers


async def post_form(
    client: httpx.AsyncClient, url: str, data: dict[str, str], headers: dict[str, str]
) -> tuple[int, Any]:
    """POST a form; the status and the JSON answer (None when not JSON)."""
    status, body, _ = await _post(client, url, headers=headers, data=data)
    return status, body


def error_of(what: str, status: int, body: Any) -> OAuthError:
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        error = body["error"]
        description = body.get("error_description")
        description = description if isinstance(description, str) else None
        text = f"{what}: {error}" + (f" ({description})" if description else "") + f" [HTTP {status}]"
        return OAuthError(text, error=error, description=description, status=status)
    return OAuthError(f"{what}: HTTP {status}", status=status)


async def token_request(
    client: httpx.AsyncClient,
    metadata: ServerMetadata,
    data: dict[str, str],
    auth: ClientAuth,
    *,
    requested_scope: str | None = None,
    previous: OAuthTokens | None = None,
    dpop: DPoPKey | None = None,
) -> OAuthTokens:
    """POST a token request (form-encoded) with the client's authentication; the tokens it issued.
    ``previous`` (a refresh) lends its refresh token and scopes to a response without them.  With
    ``dpop``, the request carries a DPoP proof (retried once with the server's nonce if it asks for
    one, RFC 9449 section 8), and a DPoP-bound token is accepted."""
    endpoint = metadata.token_endpoint
    if endpoint is None:
        raise OAuthError(f"the authorization server {metadata.issuer} has no token endpoint")
    for attempt in range(2):
        headers = {"accept": "application/json"}
        auth.apply(data, headers, metadata.issuer)
        if dpop is not None:
            headers["dpop"] = dpop.proof("POST", endpoint)
        status, body, answer_headers = await _post(client, endpoint, headers=headers, data=data)
        if dpop is None:
            break
        dpop.remember(endpoint, answer_headers.get("dpop-nonce"))
        asked = isinstance(body, dict) and body.get("error") == "use_dpop_nonce"
        if not (status == 400 and asked and answer_headers.get("dpop-nonce") and attempt == 0):
            break
    grant = data.get("grant_type", "?")
    if status != 200 or not isinstance(body, dict):
        raise error_of(f"the token request ({grant}) to {endpoint} failed", status, body)
    access_token = body.get("access_token")
    token_type = body.get("token_type")
    if not isinstance(access_token, str) or not access_token:
        raise OAuthError(f"the token response of {endpoint} has no access_token")
    kind = token_type.lower() if isinstance(token_type, str) else None
    if kind != "bearer" and not (kind == "dpop" and dpop is not None):
        supported = "Bearer and DPoP are" if dpop is not None else "only Bearer is"
        raise OAuthError(
            f"the token endpoint {endpoint} issued a {token_type!r} token; {supported} supported"
        )
    expires_in = body.get("expires_in")
    if isinstance(expires_in, str) and expires_in.isdigit():
        expires_in = int(expires_in)
    lifetime = (
        float(expires_in)
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0
        else None
    )
    expires_at = time.time() + lifetime if lifetime is not None else None
    refresh = body.get("refresh_token")
    scope = body.get("scope")
    return OAuthTokens(
        access_token=access_token,
        token_type="DPoP" if kind == "dpop" else "Bearer",
        refresh_token=refresh
        if isinstance(refresh, str) and refresh
        else (previous.refresh_token if previous else None),
        expires_at=expires_at,
        scope=scope if isinstance(scope, str) else (previous.scope if previous else None),
        requested_scope=requested_scope if previous is None else previous.requested_scope,
        lifetime=lifetime,
    )


async def register_client(
    client: httpx.AsyncClient, metadata: ServerMetadata, body: dict[str, Any]
) -> ClientRegistration:
    """Dynamic client registration (RFC 7591) at the server's registration endpoint."""
    endpoint = metadata.registration_endpoint
    if endpoint is None:
        raise OAuthError(f"the authorization server {metadata.issuer} has no registration endpoint")
    status, answer, _ = await _post(
        client,
        endpoint,
        headers={"accept": "application/json", "content-type": "application/json"},
        json=body,
    )
    if status not in (200, 201) or not isinstance(answer, dict):
        raise error_of(f"the client registration at {endpoint} failed", status, answer)
    registration = ClientRegistration.from_json(
        {
            **answer,
            "redirect_uris": answer.get("redirect_uris") or body.get("redirect_uris") or [],
            # not said: with a secret, chosen from the server's metadata; without one, a public client
            "token_endpoint_auth_method": answer.get("token_endpoint_auth_method")
            or (None if isinstance(answer.get("client_secret"), str) else "none"),
        }
    )
    if registration is None:
        raise OAuthError(f"the client registration at {endpoint} returned no client_id")
    logger.info("registered client %s with %s", registration.client_id, metadata.issuer)
    return registration


def private_key_jwt(
    client_id: str, key: Any, algorithm: str, lifetime: float = 120.0
) -> Callable[[str], str]:
    """A maker of ``private_key_jwt`` client assertions (RFC 7523): ``iss`` and ``sub`` are the client,
    ``aud`` the authorization server's issuer.  Needs joserfc (the ``auth`` extra), imported here."""
    try:
        from joserfc import jwt
        from joserfc.jwk import JWKRegistry
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise OAuthError("private_key_jwt needs joserfc: pip install 'mcp_trio[auth]'") from exc
    if isinstance(key, str | bytes):
        kind = {"ES": "EC", "RS": "RSA", "PS": "RSA", "Ed": "OKP"}.get(algorithm[:2])
        try:
            key = JWKRegistry.import_key(key, kind)
        except Exception as exc:
            raise OAuthError(f"the private key for {client_id!r} cannot be read: {exc}") from exc

    def make(audience: str) -> str:
        now = int(time.time())
        claims = {
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + int(lifetime),
            "jti": uuid.uuid4().hex,
        }
        return str(jwt.encode({"alg": algorithm, "typ": "JWT"}, claims, key))

    return make
