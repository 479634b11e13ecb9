"""An OAuth-protected MCPApp on real HTTP servers (hypercorn and the embedded h11 server, in process, on
127.0.0.1), verifying real JWT access tokens with :class:`JWTVerifier` against a real issuer (a small
ASGI app on hypercorn serving RFC 8414 metadata and a JWKS; see tests/server/test_auth_verifiers.py),
talked to with httpx:

- the protected resource metadata at both well-known URLs, readable from any origin, and at the URL
  the challenge names;
- the 401 challenge of both eras; 400 for a malformed or repeated ``Authorization`` header; a token in
  the query string or the body does not count;
- 403 ``insufficient_scope`` naming only what a tool needs, in a 2025 session and in a 2026 request
  (decided from the headers: the body is never read);
- a 2025 session is its owner's: another subject's token gets 404, the owner's refreshed token keeps
  it, and the handler sees the subject;
- the issuer going away: keys already fetched keep working, an unknown key gets 503.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import trio
from joserfc import jwk
from mcp_http import HTTP_SERVER, INIT, POST_HEADERS, VERSION, serve_demo, serve_in_process
from tests.server.test_auth_verifiers import Issuer
from tests.server.test_auth_verifiers import running as running_issuer

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig
from mcp_trio.auth import AccessToken, JWTVerifier, ProtectedResource

SERVERS = ["hypercorn", "h11"]
MODERN = "2026-07-28"
STEP = 5.0


def client_for(kind: str) -> httpx.AsyncClient:
    """An httpx client; on the h11 server without keep-alive: serve_h11 closes a connection whose
    request body it answered before reading (every 401 does) without saying ``Connection: close``, so a
    client that reuses it at once may find it closed under its next request."""
    limits = httpx.Limits(max_keepalive_connections=0) if kind == "h11" else httpx.Limits()
    return httpx.AsyncClient(timeout=10, limits=limits)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build() -> MCPServer:
    server = MCPServer("protected", "1.0.0")

    @server.tool()
    async def whoami(ctx: Context) -> str:
        principal = ctx.principal
        assert isinstance(principal, AccessToken)
        return f"{principal.subject} {sorted(principal.scopes)}"

    @server.tool()
    async def admin() -> str:
        return "admin done"

    return server


@dataclass
class Protected:
    url: str
    resource: str
    issuer: Any
    http: httpx.AsyncClient

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    def token(self, subject: str = "alice", scope: str = "mcp", **claims: Any) -> str:
        return str(self.issuer.mint({"sub": subject, "scope": scope, "aud": self.resource, **claims}))

    async def post(
        self, body: bytes | dict[str, Any], token: str | None = None, **headers: str
    ) -> httpx.Response:
        sent = {**POST_HEADERS, **headers}
        if token is not None:
            sent["authorization"] = f"Bearer {token}"
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        with trio.fail_after(STEP):
            return await self.http.post(self.url, content=content, headers=sent)


@asynccontextmanager
async def protected(kind: str) -> AsyncIterator[Protected]:
    """The app on ``kind`` of server, protected by a JWTVerifier of a running issuer."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    async with running_issuer(Issuer()) as issuer:
        oauth = ProtectedResource(
            resource=resource,
            authorization_servers=[issuer.issuer],
            verifier=JWTVerifier(issuer.issuer, resource, timeout=1.0, min_refresh_interval=0),
            scopes_supported=["mcp"],
            required_scopes=["mcp"],
            tool_scopes={"admin": ["mcp:admin"]},
        )
        app = MCPApp(build(), ServerConfig(oauth=oauth, shutdown_grace=1.0))
        async with (
            serve_in_process(app, kind, stop_within=10, port=port) as (url, _port, _stop),
            client_for(kind) as http,
        ):
            yield Protected(url, resource, issuer, http)


def challenge(response: httpx.Response) -> dict[str, str]:
    scheme, _, rest = response.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    params = {}
    for part in rest.split(", "):
        name, _, value = part.partition("=")
        params[name] = value.strip('"')
    return params


def refusal(response: httpx.Response, status: int) -> dict[str, str]:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == -32600
    return challenge(response)


def modern_call(tool: str, request_id: int = 1) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": meta},
    }


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


def result_text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [
            line[5:] for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()
        ]
        message = json.loads(data[-1])
    else:
        message = response.json()
    return str(message["result"]["content"][0]["text"])


@pytest.mark.parametrize("kind", SERVERS)
async def test_metadata_and_the_challenges(kind: str) -> None:
    async with protected(kind) as p:
        # no token: 401 naming the metadata (which is where it says) and the required scope
        response = await p.post(INIT)
        params = refusal(response, 401)
        assert params == {
            "resource_metadata": f"{p.base}/.well-known/oauth-protected-resource/mcp",
            "scope": "mcp",
        }
        for url in (params["resource_metadata"], f"{p.base}/.well-known/oauth-protected-resource"):
            metadata = await p.http.get(url, headers={"origin": "https://app.example.com"})
            assert metadata.status_code == 200 and metadata.headers["access-control-allow-origin"] == "*"
            assert metadata.json()["resource"] == p.resource
            assert metadata.json()["authorization_servers"] == [p.issuer.issuer]
            head = await p.http.head(url)
            assert head.status_code == 200 and head.content == b""
            assert int(head.headers["content-length"]) == len(metadata.content)
            preflight = await p.http.options(
                url, headers={"origin": "https://app.example.com", "access-control-request-method": "GET"}
            )
            assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == "*"
        # 2026: server/discover and tools/call get the same challenge
        discover = await p.post(b"{}", **modern_headers("server/discover"))
        assert refusal(discover, 401) == params
        call = await p.post(modern_call("whoami"), **modern_headers("tools/call", "whoami"))
        assert refusal(call, 401) == params
        # an invalid token: the signature of another key
        forged = p.issuer.mint(
            {"aud": p.resource}, key=jwk.RSAKey.generate_key(2048, parameters={"kid": "k1"})
        )
        params = refusal(await p.post(INIT, forged), 401)
        assert params["error"] == "invalid_token" and "signature" in params["error_description"]
        # a token for another resource
        other = p.token(aud="https://other.example.com/mcp")
        assert refusal(await p.post(INIT, other), 401)["error"] == "invalid_token"


@pytest.mark.parametrize("kind", SERVERS)
async def test_malformed_headers_and_tokens_elsewhere(kind: str) -> None:
    async with protected(kind) as p:
        token = p.token()
        twice = [
            *POST_HEADERS.items(),
            ("authorization", f"Bearer {token}"),
            ("authorization", f"Bearer {token}"),
        ]
        response = await p.http.post(p.url, content=json.dumps(INIT).encode(), headers=twice)
        assert refusal(response, 400)["error"] == "invalid_request"
        assert (
            refusal(await p.post(INIT, **{"authorization": "Basic YTpi"}), 400)["error"] == "invalid_request"
        )
        assert refusal(await p.post(INIT, **{"authorization": f"Bearer {token} {token}"}), 400)["error"] == (
            "invalid_request"
        )
        # in the query string or the body, a token is no token
        in_query = await p.http.post(
            p.url, params={"access_token": token}, content=json.dumps(INIT).encode(), headers=POST_HEADERS
        )
        assert "error" not in refusal(in_query, 401)
        in_body = await p.post({**INIT, "access_token": token})
        assert "error" not in refusal(in_body, 401)
        # a 15 kB token (within both servers' 16 KiB head) is read and refused as a token; garbage is
        # malformed: never a 5xx
        huge = await p.post(INIT, **{"authorization": "Bearer " + "a" * 15_000})
        assert refusal(huge, 401)["error"] == "invalid_token"
        non_ascii = [*POST_HEADERS.items(), ("authorization", b"Bearer tok\xe9n\xff")]
        garbage = await p.http.post(p.url, content=json.dumps(INIT).encode(), headers=non_ascii)
        assert refusal(garbage, 400)["error"] == "invalid_request"


@pytest.mark.parametrize("kind", SERVERS)
async def test_a_session_of_its_owner_with_per_tool_scopes(kind: str) -> None:
    async with protected(kind) as p:
        alice = p.token("alice", "mcp")
        response = await p.post(INIT, alice)
        assert response.status_code == 200
        session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": VERSION}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await p.post(initialized, alice, **session)).status_code == 202

        def call(tool: str) -> dict[str, Any]:
            return {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": tool, "arguments": {}},
            }

        assert result_text(await p.post(call("whoami"), alice, **session)) == "alice ['mcp']"
        params = refusal(await p.post(call("admin"), alice, **session), 403)
        assert params["error"] == "insufficient_scope" and params["scope"] == "mcp mcp:admin"
        # another subject: the session does not exist for them
        bob = p.token("bob", "mcp mcp:admin")
        assert (await p.post(call("whoami"), bob, **session)).status_code == 404
        with trio.fail_after(STEP):
            stream = await p.http.get(
                p.url, headers={**session, "accept": "text/event-stream", "authorization": f"Bearer {bob}"}
            )
        assert stream.status_code == 404
        # alice's next token (refreshed, with more scope): the same session
        await trio.sleep(1.1)  # a new iat, so a new token string
        refreshed = p.token("alice", "mcp mcp:admin")
        assert refreshed != alice
        assert result_text(await p.post(call("admin"), refreshed, **session)) == "admin done"
        assert result_text(await p.post(call("whoami"), refreshed, **session)) == "alice ['mcp', 'mcp:admin']"
        with trio.fail_after(STEP):
            deleted = await p.http.delete(p.url, headers={**session, "authorization": f"Bearer {refreshed}"})
        assert deleted.status_code == 200


@pytest.mark.parametrize("kind", SERVERS)
async def test_a_modern_request_is_scoped_by_its_headers(kind: str) -> None:
    async with protected(kind) as p:
        alice = p.token("alice", "mcp")
        assert result_text(
            await p.post(modern_call("whoami"), alice, **modern_headers("tools/call", "whoami"))
        ) == ("alice ['mcp']")
        # the body is not read before the scope check: garbage gets the 403, not a parse error
        response = await p.post(b"\xff not JSON", alice, **modern_headers("tools/call", "admin"))
        params = refusal(response, 403)
        assert params["scope"] == "mcp mcp:admin" and params["error"] == "insufficient_scope"
        admin = p.token("alice", "mcp mcp:admin")
        assert result_text(
            await p.post(modern_call("admin"), admin, **modern_headers("tools/call", "admin"))
        ) == ("admin done")


@pytest.mark.parametrize("kind", SERVERS)
async def test_the_issuer_going_away(kind: str) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    async with running_issuer(Issuer()) as issuer:
        verifier = JWTVerifier(
            issuer.issuer, resource, timeout=3.0, min_refresh_interval=0, keys_max_age=0.05
        )
        token = issuer.mint({"aud": resource, "scope": "mcp"})
        assert (await verifier.verify(token)).subject == "alice"  # the keys are fetched
    oauth = ProtectedResource(resource=resource, authorization_servers=[issuer.issuer], verifier=verifier)
    app = MCPApp(build(), ServerConfig(oauth=oauth, shutdown_grace=1.0))
    unknown = issuer.mint(
        {"aud": resource}, key=jwk.RSAKey.generate_key(2048, parameters={"kid": "k9"})
    )
    async with (
        serve_in_process(app, kind, stop_within=10, port=port) as (url, _port, _stop),
        client_for(kind) as http,
    ):
        p = Protected(url, resource, issuer, http)
        start = time.monotonic()
        assert (await p.post(INIT, token)).status_code == 200  # cached key, stale set: still fine
        response = await p.post(INIT, unknown)
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert time.monotonic() - start < 3.0 + 2 * STEP  # bounded by the verifier's timeout: no hang


async def test_the_demo_with_the_oauth_flags() -> None:
    """``mcp-trio demo --oauth-issuer URL --resource URL --required-scope S``: a real process, which
    fetches the keys of the issuer running here."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    async with running_issuer(Issuer()) as issuer:
        flags = ["--bind", f"127.0.0.1:{port}", "--oauth-issuer", issuer.issuer, "--resource", resource]
        async with (
            serve_demo(*flags, "--required-scope", "mcp:tools") as demo,
            client_for(HTTP_SERVER) as http,
        ):
            assert demo.url == resource
            p = Protected(demo.url, resource, issuer, http)
            params = refusal(await p.post(INIT), 401)
            assert params == {
                "resource_metadata": f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp",
                "scope": "mcp:tools",
            }
            metadata = (await http.get(params["resource_metadata"])).json()
            assert metadata["scopes_supported"] == ["mcp:tools"] and metadata["authorization_servers"] == [
                issuer.issuer
            ]
            assert refusal(await p.post(INIT, p.token(scope="other")), 403)["scope"] == "mcp:tools"
            assert refusal(await p.post(INIT, p.token(scope="mcp:tools", aud="https://x.example.com")), 401)
            assert (await p.post(INIT, p.token(scope="mcp:tools"))).status_code == 200
        assert issuer.hits["/jwks"] == 1
