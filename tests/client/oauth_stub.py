"""A stub OAuth world for the tests of mcp_trio.auth's client: an authorization server and a protected
resource, each a small hand-written ASGI app served by a real hypercorn on 127.0.0.1:0.

:class:`StubAS` implements what the MCP client needs of an authorization server, strictly enough to
catch a wrong client: RFC 8414 metadata, dynamic registration (RFC 7591), an authorization endpoint that
redirects at once (no login page; it checks the client, the redirect URI and the PKCE S256 challenge),
and a token endpoint (authorization_code with the PKCE verifier, refresh_token, client_credentials with
client_secret_basic or private_key_jwt).  It counts what it did (``hits``, ``grants``) and can be made to
misbehave (``metadata_override``, ``refresh_fails``...).

:class:`StubRS` is the protected resource: RFC 9728 metadata, and in front of an inner ASGI app (the real
demo MCP server, or a tiny JSON endpoint) a bearer check against the tokens the stub AS issued: 401 with
a ``WWW-Authenticate`` challenge without a valid token for its resource, 403 ``insufficient_scope`` when
a scope the request needs (``required_scopes``, per JSON-RPC method or tool name) is missing.

:class:`BrowserRedirect` is the user's browser for these tests: it follows the authorization URL one step
(the stub redirects at once) and returns the redirected URL, counting authorizations.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import httpx
import trio

from mcp_trio._http.hypercorn_server import serve_hypercorn
from mcp_trio.server import hypercorn_config

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def read_body(receive: Receive) -> bytes:
    data = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return data
        data += message.get("body", b"")
        if not message.get("more_body"):
            return data


async def respond(
    send: Send,
    status: int,
    payload: Any = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> None:
    body = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    out += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass
class Issued:
    client_id: str
    scopes: tuple[str, ...]
    resource: str | None
    expires_at: float
    jkt: str | None = None  # the thumbprint of the DPoP key the token is bound to


def check_dpop_proof(proof: str | None, method: str, url: str, nonce: str | None) -> tuple[str | None, str]:
    """Verify a DPoP proof (RFC 9449 section 4.3): its key's thumbprint, or None and why not."""
    from joserfc import jwt
    from joserfc.jwk import JWKRegistry

    if not proof:
        return None, "no proof"
    try:
        header = json.loads(base64.urlsafe_b64decode(proof.split(".")[0] + "=="))
        key = JWKRegistry.import_key(header["jwk"])
        token = jwt.decode(proof, key)
    except Exception as exc:
        return None, f"bad proof: {exc!r}"
    claims = token.claims
    if header.get("typ") != "dpop+jwt" or "d" in header["jwk"]:
        return None, "bad header"
    if claims.get("htm") != method or claims.get("htu") != url or not claims.get("jti"):
        return None, f"bad claims {claims}"
    if abs(time.time() - claims.get("iat", 0)) > 60:
        return None, "stale"
    if nonce is not None and claims.get("nonce") != nonce:
        return None, "use_dpop_nonce"
    return key.thumbprint(), ""


@dataclass
class StubAS:
    """The authorization server.  ``url`` is set once it listens."""

    url: str = ""
    expires_in: int = 3600
    refresh_fails: bool = False
    metadata_override: dict[str, Any] = field(default_factory=dict)
    metadata_raw: bytes | None = None  # served instead of the metadata document
    token_raw: bytes | None = None  # served instead of a token response
    iss_in_redirect: str | None = "correct"  # "correct", None (omitted), or a literal value
    registered_secret: bool = False  # dynamic registration issues a client secret
    client_credentials: dict[str, str] = field(default_factory=dict)  # client_id -> secret
    jwt_keys: dict[str, Any] = field(default_factory=dict)  # client_id -> joserfc public key
    deny: bool = False  # the user refuses: error=access_denied
    id_token: str = "id-token-of-the-user"  # what the token exchange accepts as its subject_token
    issued_token_type: str = "urn:ietf:params:oauth:token-type:id-jag"  # what the token exchange says
    assertions: set[str] = field(default_factory=set)  # what the jwt-bearer grant accepts
    dpop_nonce: str | None = None  # with DPoP advertised: the nonce its proofs must carry
    dpop_proofs: list[str] = field(default_factory=list)  # why each DPoP proof was refused ("" if not)
    hits: Counter[str] = field(default_factory=Counter)
    grants: Counter[str] = field(default_factory=Counter)
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, Issued] = field(default_factory=dict)
    refresh_tokens: dict[str, Issued] = field(default_factory=dict)
    authorization_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    token_request_headers: list[dict[str, str]] = field(default_factory=list)
    registrations: list[dict[str, Any]] = field(default_factory=list)

    _jkt: str | None = None  # the DPoP key of the token request being answered

    def metadata(self) -> dict[str, Any]:
        document = {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "registration_endpoint": f"{self.url}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "private_key_jwt"],
            "authorization_response_iss_parameter_supported": True,
            "scopes_supported": ["mcp:read", "mcp:write", "offline_access"],
        }
        document.update(self.metadata_override)
        return {k: v for k, v in document.items() if v is not None}

    def issue(self, client_id: str, scopes: tuple[str, ...], resource: str | None) -> dict[str, Any]:
        access, refresh = f"at-{secrets.token_hex(8)}", f"rt-{secrets.token_hex(8)}"
        jkt, self._jkt = self._jkt, None
        issued = Issued(client_id, scopes, resource, time.time() + self.expires_in, jkt)
        self.tokens[access] = issued
        self.refresh_tokens[refresh] = issued
        answer: dict[str, Any] = {
            "access_token": access,
            "token_type": "DPoP" if jkt else "Bearer",
            "expires_in": self.expires_in,
        }
        answer["refresh_token"] = refresh
        if scopes:
            answer["scope"] = " ".join(scopes)
        return answer

    def valid(self, token: str, resource: str) -> Issued | None:
        issued = self.tokens.get(token)
        if issued is None or issued.expires_at < time.time():
            return None
        if issued.resource is not None and issued.resource != resource:
            return None
        return issued

    def _client_of(self, form: dict[str, str], headers: dict[str, str]) -> tuple[str | None, str]:
        """Who is asking at the token endpoint, and how it authenticated (None: it did not)."""
        basic = headers.get("authorization", "")
        if basic.startswith("Basic "):
            client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
            client_id, secret = unquote(client_id), unquote(secret)
            known = self.clients.get(client_id, {}).get("client_secret") or self.client_credentials.get(
                client_id
            )
            return (client_id if known == secret else None), "client_secret_basic"
        if form.get("client_assertion_type") == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
            from joserfc import jwt

            client_id = form.get("client_id", "")
            key = self.jwt_keys.get(client_id)
            if key is None:
                return None, "private_key_jwt"
            token = jwt.decode(form["client_assertion"], key)
            claims = token.claims
            ok = (
                claims.get("iss") == client_id
                and claims.get("sub") == client_id
                and claims.get("aud") == self.url
            )
            return (client_id if ok and claims.get("exp", 0) > time.time() else None), "private_key_jwt"
        client_id = form.get("client_id", "")
        client = self.clients.get(client_id)
        if client is not None and client.get("client_secret") is None:
            return client_id, "none"
        return None, "none"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        path = scope["path"]
        query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = await read_body(receive)
        self.hits[path] += 1
        if path == "/.well-known/oauth-authorization-server":
            if self.metadata_raw is not None:
                await respond(send, 200, raw=self.metadata_raw)
            else:
                await respond(send, 200, self.metadata())
        elif path == "/register":
            request = json.loads(body)
            self.registrations.append(request)
            client_id = f"client-{len(self.clients) + 1}"
            secret = f"secret-{secrets.token_hex(4)}" if self.registered_secret else None
            self.clients[client_id] = {**request, "client_id": client_id, "client_secret": secret}
            answer = {"client_id": client_id, "redirect_uris": request.get("redirect_uris", [])}
            if secret:
                answer["client_secret"] = secret
            await respond(send, 201, answer)
        elif path == "/authorize":
            await self._authorize(query, send)
        elif path == "/token":
            await self._token({k: v[0] for k, v in parse_qs(body.decode()).items()}, headers, send)
        else:
            await respond(send, 404, {"error": "not_found"})

    async def _authorize(self, query: dict[str, str], send: Send) -> None:
        self.authorization_requests.append(query)
        client = self.clients.get(query.get("client_id", ""))
        redirect_uri = query.get("redirect_uri", "")
        if client is None or redirect_uri not in client.get("redirect_uris", []):
            await respond(
                send, 400, {"error": "invalid_request", "error_description": "unknown client or URI"}
            )
            return
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            await respond(send, 400, {"error": "invalid_request", "error_description": "PKCE S256 required"})
            return
        params: dict[str, str] = {"state": query.get("state", "")}
        if self.deny:
            params["error"] = "access_denied"
        else:
            code = f"code-{secrets.token_hex(8)}"
            self.codes[code] = dict(query)
            params["code"] = code
        if self.iss_in_redirect == "correct":
            params["iss"] = self.url
        elif self.iss_in_redirect is not None:
            params["iss"] = self.iss_in_redirect
        await respond(send, 302, None, {"location": f"{redirect_uri}?{urlencode(params)}"})

    async def _token(self, form: dict[str, str], headers: dict[str, str], send: Send) -> None:
        self.token_requests.append(form)
        self.token_request_headers.append(headers)
        grant = form.get("grant_type", "")
        self.grants[grant] += 1
        if self.token_raw is not None:
            await respond(send, 200, raw=self.token_raw)
            return
        jkt = None
        if "dpop" in headers:
            jkt, why = check_dpop_proof(headers["dpop"], "POST", f"{self.url}/token", self.dpop_nonce)
            self.dpop_proofs.append(why)
            if why == "use_dpop_nonce":
                nonce = {"dpop-nonce": self.dpop_nonce or ""}
                await respond(send, 400, {"error": "use_dpop_nonce"}, nonce)
                return
            if jkt is None:
                await respond(send, 400, {"error": "invalid_dpop_proof", "error_description": why})
                return
        self._jkt = jkt
        if grant == "urn:ietf:params:oauth:grant-type:token-exchange":
            if (
                form.get("subject_token") != self.id_token
                or not form.get("audience")
                or not form.get("resource")
            ):
                await respond(send, 400, {"error": "invalid_grant"})
                return
            jag = f"jag-{secrets.token_hex(8)}"
            self.assertions.add(jag)
            answer = {"access_token": jag, "issued_token_type": self.issued_token_type, "token_type": "N_A"}
            await respond(send, 200, answer)
            return
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            if form.get("assertion") not in self.assertions:
                await respond(send, 400, {"error": "invalid_grant", "error_description": "bad assertion"})
                return
            client = form.get("client_id") or "anonymous"
            await respond(
                send, 200, self.issue(client, tuple(form.get("scope", "").split()), form.get("resource"))
            )
            return
        client_id, _method = self._client_of(form, headers)
        if client_id is None:
            await respond(send, 401, {"error": "invalid_client"})
            return
        if grant == "authorization_code":
            request = self.codes.pop(form.get("code", ""), None)
            if (
                request is None
                or request["client_id"] != client_id
                or request["redirect_uri"] != form.get("redirect_uri")
                or s256(form.get("code_verifier", "")) != request["code_challenge"]
                or request.get("resource") != form.get("resource")
            ):
                await respond(send, 400, {"error": "invalid_grant"})
                return
            scopes = tuple(request.get("scope", "").split())
            await respond(send, 200, self.issue(client_id, scopes, request.get("resource")))
        elif grant == "refresh_token":
            issued = self.refresh_tokens.pop(form.get("refresh_token", ""), None)
            if self.refresh_fails or issued is None or issued.client_id != client_id:
                await respond(send, 400, {"error": "invalid_grant", "error_description": "refresh refused"})
                return
            await respond(send, 200, self.issue(client_id, issued.scopes, form.get("resource")))
        elif grant == "client_credentials":
            scopes = tuple(form.get("scope", "").split())
            await respond(send, 200, self.issue(client_id, scopes, form.get("resource")))
        else:
            await respond(send, 400, {"error": "unsupported_grant_type"})


async def json_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    """The inner app of a bare protected resource: 200 with what it got."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    body = await read_body(receive)
    await respond(send, 200, {"ok": True, "path": scope["path"], "body": body.decode(errors="replace")})


@dataclass
class StubRS:
    """The protected resource, in front of ``inner``.  ``url`` is set once it listens."""

    authorization_server: StubAS
    inner: App = json_endpoint
    url: str = ""
    resource_override: str | None = None
    scopes_supported: list[str] | None = None
    challenge_scope: str | None = None  # the scope of every 401 challenge
    required_scopes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # method or tool -> scopes
    serve_metadata: bool = True
    metadata_url_override: str | None = None  # named by the challenges instead of the real one
    authorization_servers_override: list[str] | None = None  # named by the metadata instead of the stub AS
    redirect_hops: int = 0  # the challenges name /hop/N, which redirects N times to the metadata
    redirect_last_to: str | None = None  # where the last hop redirects (the metadata by default)
    refuse_all: bool = False  # every token is invalid here
    dpop_nonce: str | None = None  # DPoP proofs to this server must carry it
    revoked: set[str] = field(default_factory=set)
    hits: Counter[str] = field(default_factory=Counter)
    seen_tokens: list[str | None] = field(default_factory=list)
    seen_headers: list[dict[str, str]] = field(default_factory=list)

    @property
    def resource(self) -> str:
        return self.resource_override or self.url

    @property
    def metadata_url(self) -> str:
        if self.metadata_url_override is not None:
            return self.metadata_url_override
        if self.redirect_hops:
            return f"{self.url}/hop/{self.redirect_hops}"
        return f"{self.url}/.well-known/oauth-protected-resource"

    def challenge(self, error: str | None = None, scope: str | None = None) -> str:
        parts = [f'resource_metadata="{self.metadata_url}"']
        if scope:
            parts.append(f'scope="{scope}"')
        if error:
            parts.append(f'error="{error}"')
        return "Bearer " + ", ".join(parts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        path = scope["path"]
        self.hits[path] += 1
        if path.startswith("/hop/"):
            left = int(path.removeprefix("/hop/")) - 1
            last = self.redirect_last_to or "/.well-known/oauth-protected-resource"
            target = f"/hop/{left}" if left else last
            await respond(send, 302, headers={"location": target})
            return
        if path == "/.well-known/oauth-protected-resource":
            if not self.serve_metadata:
                await respond(send, 404, {"error": "not_found"})
                return
            document: dict[str, Any] = {
                "resource": self.resource,
                "authorization_servers": self.authorization_servers_override
                or [self.authorization_server.url],
            }
            if self.scopes_supported is not None:
                document["scopes_supported"] = self.scopes_supported
            await respond(send, 200, document)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen_headers.append(headers)
        authorization = headers.get("authorization", "")
        scheme, _, token_text = authorization.partition(" ")
        token = token_text if scheme in ("Bearer", "DPoP") and token_text else None
        self.seen_tokens.append(token)
        issued = None
        if token is not None and token not in self.revoked and not self.refuse_all:
            issued = self.authorization_server.valid(token, self.resource)
        body = await read_body(receive)
        if issued is not None and (issued.jkt is not None or scheme == "DPoP"):
            refusal = self._check_dpop(scope, headers, scheme, token or "", issued)
            if refusal is not None:
                await respond(send, 401, {"error": refusal[0]}, refusal[1])
                return
        if issued is None:
            error = "invalid_token" if token is not None else None
            await respond(
                send,
                401,
                {"error": error or "unauthorized"},
                {"www-authenticate": self.challenge(error, self.challenge_scope)},
            )
            return
        needed = self._needed(body)
        missing = [s for s in needed if s not in issued.scopes]
        if missing:
            challenge = self.challenge("insufficient_scope", " ".join(needed))
            await respond(send, 403, {"error": "insufficient_scope"}, {"www-authenticate": challenge})
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.inner(scope, replay, send)

    def _check_dpop(
        self, scope: Scope, headers: dict[str, str], scheme: str, token: str, issued: Issued
    ) -> tuple[str, dict[str, str]] | None:
        """A DPoP-bound token's request (RFC 9449 section 7): None if its proof holds, else the error
        and the headers of the 401."""
        url = f"{self.url}{scope['path']}"
        jkt, why = check_dpop_proof(headers.get("dpop"), scope["method"], url, self.dpop_nonce)
        if why == "use_dpop_nonce":
            challenge = f'DPoP error="use_dpop_nonce", resource_metadata="{self.metadata_url}"'
            return "use_dpop_nonce", {"www-authenticate": challenge, "dpop-nonce": self.dpop_nonce or ""}
        digest = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
        claims = json.loads(base64.urlsafe_b64decode(headers["dpop"].split(".")[1] + "==")) if jkt else {}
        if scheme != "DPoP" or jkt is None or jkt != issued.jkt or claims.get("ath") != digest:
            challenge = f'DPoP error="invalid_token", resource_metadata="{self.metadata_url}"'
            return "invalid_token", {"www-authenticate": challenge}
        return None

    def _needed(self, body: bytes) -> tuple[str, ...]:
        try:
            message = json.loads(body) if body else {}
        except ValueError:
            return ()
        if not isinstance(message, dict):
            return ()
        method = str(message.get("method", ""))
        name = (
            str((message.get("params") or {}).get("name", ""))
            if isinstance(message.get("params"), dict)
            else ""
        )
        return self.required_scopes.get(name, ()) or self.required_scopes.get(method, ())


class BrowserRedirect:
    """The user's browser: one GET of the authorization URL (the stub answers with the redirect at once);
    returns where it redirects.  ``delay`` makes the user slow; ``calls`` counts authorizations."""

    redirect_uri = "http://127.0.0.1:9/callback"

    def __init__(self, delay: float = 0.0, rewrite: Callable[[str], str] | None = None) -> None:
        self.delay = delay
        self.rewrite = rewrite
        self.calls = 0
        self.urls: list[str] = []

    async def authorize(self, authorization_url: str) -> str:
        self.calls += 1
        self.urls.append(authorization_url)
        await trio.sleep(self.delay)
        async with httpx.AsyncClient(timeout=5.0) as client:
            response = await client.get(authorization_url, follow_redirects=False)
        location = response.headers.get("location")
        assert response.status_code == 302 and location, (response.status_code, response.text)
        return self.rewrite(location) if self.rewrite else location


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@asynccontextmanager
async def serving(app: App) -> AsyncIterator[str]:
    """Serve ``app`` with hypercorn on 127.0.0.1:0 for the block; yields its base URL."""
    stop = trio.Event()
    config = hypercorn_config(["127.0.0.1:0"], graceful_timeout=1.0)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve_hypercorn(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield urls[0]
        finally:
            stop.set()


@asynccontextmanager
async def oauth_world(inner: App = json_endpoint, **rs_options: Any) -> AsyncIterator[tuple[StubAS, StubRS]]:
    """A stub authorization server and a protected resource in front of ``inner``, both listening."""
    authorization_server = StubAS()
    resource_server = StubRS(authorization_server, inner, **rs_options)
    async with serving(authorization_server) as as_url, serving(resource_server) as rs_url:
        authorization_server.url = as_url
        resource_server.url = rs_url
        yield authorization_server, resource_server
