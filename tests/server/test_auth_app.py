"""MCPApp as an OAuth protected resource (``ServerConfig(oauth=ProtectedResource(...))``), through the
in-memory ASGI client: the resource metadata, the bearer check of both eras and every method, the
challenges (401, 400, 403, 503), per-operation scopes, session ownership by owner (a refreshed token
keeps its session), and ``Context.principal``.

The verifier here is a table of tokens the test issues (a real :class:`TokenVerifier`); the JWT and
introspection verifiers are tested against a real issuer in test_auth_verifiers.py, and the whole on
real HTTP servers in tests/integration/test_auth_server.py.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig
from mcp_trio.auth import AccessToken, InvalidToken, ProtectedResource, VerifierUnavailable
from mcp_trio.auth.server._resource import BearerGuard
from mcp_trio.errors import RemoteProtocolError
from mcp_trio.testing import open_asgi_client

from .conftest import POST_HEADERS, Client, init_body
from .test_modern import Modern, headers_for, meta

RESOURCE = "http://127.0.0.1:8000/mcp"
METADATA_URL = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
ISSUER = "https://as.example.com"


class Tokens:
    """A token verifier over the tokens this test issued."""

    def __init__(self) -> None:
        self.table: dict[str, AccessToken] = {}
        self.calls = 0
        self.unavailable = False
        self.broken = False
        self.slow = False

    def issue(self, token: str, subject: str | None = "alice", *scopes: str, client: str = "c1") -> str:
        self.table[token] = AccessToken(
            token=token,
            subject=subject,
            scopes=frozenset(scopes),
            client_id=client,
            issuer=ISSUER,
            audience=(RESOURCE,),
            expires_at=None,
            claims={"sub": subject},
        )
        return token

    async def verify(self, token: str) -> AccessToken:
        self.calls += 1
        if self.slow:
            await trio.sleep_forever()
        if self.unavailable:
            raise VerifierUnavailable("the issuer is down")
        if self.broken:
            raise RuntimeError("a bug in the verifier")
        try:
            return self.table[token]
        except KeyError:
            raise InvalidToken("unknown token") from None


def build() -> MCPServer:
    server = MCPServer("protected", "1.0.0")

    @server.tool()
    async def whoami(ctx: Context) -> str:
        principal = ctx.principal
        assert isinstance(principal, AccessToken)
        return f"{principal.subject} {principal.token}"

    @server.tool()
    async def admin() -> str:
        return "admin done"

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.prompt(description="p")
    async def hello(name: str) -> str:
        return f"hello {name}"

    return server


def resource(tokens: Tokens, **options: Any) -> ProtectedResource:
    settings: dict[str, Any] = {
        "resource": RESOURCE,
        "authorization_servers": [ISSUER],
        "verifier": tokens,
        "scopes_supported": ["mcp"],
        "required_scopes": ["mcp"],
        "tool_scopes": {"admin": ["mcp:admin"]},
        "method_scopes": {"prompts/get": ["mcp:prompts"]},
        "resource_name": "Protected test server",
        **options,
    }
    return ProtectedResource(**settings)


@pytest.fixture
def tokens() -> Tokens:
    tokens = Tokens()
    tokens.issue("alice-1", "alice", "mcp")
    tokens.issue("alice-2", "alice", "mcp")  # alice's token, refreshed
    tokens.issue("alice-admin", "alice", "mcp", "mcp:admin")
    tokens.issue("bob", "bob", "mcp", "mcp:admin")
    tokens.issue("no-scope", "carol")
    return tokens


@pytest.fixture
def config(tokens: Tokens) -> ServerConfig:
    return ServerConfig(oauth=resource(tokens))


@pytest.fixture
async def app(config: ServerConfig) -> MCPApp:
    return MCPApp(build(), config)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def challenge(header: str) -> dict[str, str]:
    """The parameters of a ``Bearer`` challenge (values without quotes; none hold a comma)."""
    scheme, _, rest = header.partition(" ")
    assert scheme == "Bearer", header
    params = {}
    for part in rest.split(", "):
        name, _, value = part.partition("=")
        assert value.startswith('"') and value.endswith('"'), header
        params[name] = value[1:-1]
    return params


async def refused(response: Any, status: int) -> dict[str, str]:
    """Check a refusal: its status, a JSON-RPC error body; returns its challenge's parameters."""
    assert response.status == status, await response.read()
    body = await response.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600, body
    return challenge(response.headers["www-authenticate"])


# -- the metadata ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]
)
async def test_the_metadata_is_public_at_both_well_known_urls(app: MCPApp, tokens: Tokens, path: str) -> None:
    async with open_asgi_client(app) as asgi:
        response = await asgi.request("GET", path, headers={"origin": "https://app.example.com"})
        assert response.status == 200
        assert response.headers["access-control-allow-origin"] == "*"
        assert response.headers["content-type"] == "application/json"
        assert await response.json() == {
            "resource": RESOURCE,
            "authorization_servers": [ISSUER],
            "scopes_supported": ["mcp"],
            "bearer_methods_supported": ["header"],
            "resource_name": "Protected test server",
        }
        head = await asgi.request("HEAD", path)
        assert head.status == 200 and await head.read() == b""
        assert int(head.headers["content-length"]) == len(
            json.dumps(app.config.oauth.metadata(), separators=(",", ":"))
        )  # type: ignore[union-attr]
        preflight = await asgi.request(
            "OPTIONS",
            path,
            headers={
                "origin": "https://app.example.com",
                "access-control-request-method": "GET",
                "access-control-request-headers": "MCP-Protocol-Version",
            },
        )
        assert preflight.status == 204
        assert preflight.headers["access-control-allow-origin"] == "*"
        assert preflight.headers["access-control-allow-headers"] == "mcp-protocol-version"
        assert "GET" in preflight.headers["access-control-allow-methods"]
        post = await asgi.request("POST", path, body=b"{}")
        assert post.status == 405 and post.headers["allow"] == "GET, HEAD, OPTIONS"
        assert (await post.json())["error"]["code"] == -32600
    assert tokens.calls == 0


async def test_the_metadata_carries_one_cors_header_when_cors_is_configured(tokens: Tokens) -> None:
    config = ServerConfig(oauth=resource(tokens), cors_origins=frozenset({"https://app.example.com"}))
    async with open_asgi_client(MCPApp(build(), config)) as asgi:
        response = await asgi.request(
            "GET", "/.well-known/oauth-protected-resource/mcp", headers={"origin": "https://app.example.com"}
        )
        assert response.status == 200 and response.headers["access-control-allow-origin"] == "*"
        # the endpoint keeps its own CORS answer, the challenge readable by the page
        refusal = await asgi.request(
            "POST", headers={**POST_HEADERS, "origin": "https://app.example.com"}, body=init_body()
        )
        assert refusal.status == 401
        assert refusal.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "WWW-Authenticate" in refusal.headers["access-control-expose-headers"]


async def test_the_metadata_is_also_at_the_public_path_of_the_resource(tokens: Tokens) -> None:
    oauth = resource(tokens, resource="https://mcp.example.com/api/mcp/")
    assert oauth.metadata_url == "https://mcp.example.com/.well-known/oauth-protected-resource/api/mcp"
    async with open_asgi_client(MCPApp(build(), ServerConfig(oauth=oauth))) as asgi:
        for path in (
            "/.well-known/oauth-protected-resource/api/mcp",
            "/.well-known/oauth-protected-resource/mcp",
        ):
            response = await asgi.request("GET", path)
            assert response.status == 200 and (await response.json())["resource"] == oauth.resource
        other = await asgi.request("GET", "/.well-known/oauth-protected-resource/other")
        assert other.status == 404
        slash = await asgi.request("GET", "/.well-known/oauth-protected-resource/mcp/")
        assert slash.status == 200


# -- the bearer check ---------------------------------------------------------------------------------


async def test_no_token_gets_the_challenge_in_either_era_and_every_method(
    app: MCPApp, tokens: Tokens
) -> None:
    expected = {"resource_metadata": METADATA_URL, "scope": "mcp"}
    async with open_asgi_client(app) as asgi:
        response = await asgi.request("POST", headers=POST_HEADERS, body=init_body())
        assert await refused(response, 401) == expected
        modern = Modern(asgi)
        response = await modern.post("server/discover")
        assert await refused(response, 401) == expected
        response = await modern.post("tools/call", {"name": "admin", "arguments": {}})
        assert await refused(response, 401) == expected  # the 401 is the same for every operation
        get = await asgi.request("GET", headers={"accept": "text/event-stream", "mcp-session-id": "x"})
        assert await refused(get, 401) == expected
        delete = await asgi.request("DELETE", headers={"mcp-session-id": "x"})
        assert await refused(delete, 401) == expected
    assert tokens.calls == 0


async def test_a_401_names_no_scope_when_none_is_required(tokens: Tokens) -> None:
    config = ServerConfig(oauth=resource(tokens, required_scopes=()))
    async with open_asgi_client(MCPApp(build(), config)) as asgi:
        response = await asgi.request("POST", headers=POST_HEADERS, body=init_body())
        assert await refused(response, 401) == {"resource_metadata": METADATA_URL}


async def test_an_invalid_token_is_401_invalid_token_without_echoing_it(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        response = await asgi.request(
            "POST", headers={**POST_HEADERS, **bearer("forged-secret-value")}, body=init_body()
        )
        text = (await response.read()).decode()
        assert "forged-secret-value" not in text + response.headers["www-authenticate"]
        assert response.status == 401 and json.loads(text)["error"]["data"]["error"] == "invalid_token"
        assert challenge(response.headers["www-authenticate"]) == {
            "error": "invalid_token",
            "error_description": "unknown token",
            "resource_metadata": METADATA_URL,
        }


@pytest.mark.parametrize(
    "value",
    [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer ",
        "Bearer two tokens",
        "Bearer a,b",
        "Bearer tok\u00e9n",
        "bearer-alice-1",
        'Bearer tok"en',
    ],
)
async def test_a_malformed_authorization_header_is_400_invalid_request(
    app: MCPApp, tokens: Tokens, value: str
) -> None:
    async with open_asgi_client(app) as asgi:
        response = await asgi.request(
            "POST", headers={**POST_HEADERS, "authorization": value}, body=init_body()
        )
        params = await refused(response, 400)
        assert params["error"] == "invalid_request" and params["resource_metadata"] == METADATA_URL
    assert tokens.calls == 0


async def test_the_scheme_is_case_insensitive(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        response = await asgi.request(
            "POST", headers={**POST_HEADERS, "authorization": "bEaReR alice-1"}, body=init_body()
        )
        assert response.status == 200


async def test_an_oversized_token_is_401_without_reaching_the_verifier(app: MCPApp, tokens: Tokens) -> None:
    async with open_asgi_client(app) as asgi:
        for size in (16 * 1024 + 1, 200_000):
            response = await asgi.request(
                "POST", headers={**POST_HEADERS, **bearer("a" * size)}, body=init_body()
            )
            params = await refused(response, 401)
            assert params["error"] == "invalid_token" and "too large" in params["error_description"]
    assert tokens.calls == 0


async def test_a_token_without_the_required_scope_is_403(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        response = await asgi.request(
            "POST", headers={**POST_HEADERS, **bearer("no-scope")}, body=init_body()
        )
        params = await refused(response, 403)
        assert params["error"] == "insufficient_scope" and params["scope"] == "mcp"
        assert params["resource_metadata"] == METADATA_URL


async def test_a_verifier_that_cannot_tell_is_503_and_one_that_fails_500(
    app: MCPApp, tokens: Tokens, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_asgi_client(app) as asgi:
        tokens.unavailable = True
        response = await asgi.request("POST", headers={**POST_HEADERS, **bearer("alice-1")}, body=init_body())
        assert response.status == 503 and response.headers["retry-after"] == "5"
        assert (await response.json())["error"]["code"] == -32603
        tokens.unavailable, tokens.broken = False, True
        with caplog.at_level(logging.ERROR, logger="mcp_trio.auth"):
            response = await asgi.request(
                "POST", headers={**POST_HEADERS, **bearer("alice-1")}, body=init_body()
            )
        assert response.status == 500 and (await response.json())["error"]["code"] == -32603
        assert "the token verifier failed" in caplog.text
        tokens.broken = False
        response = await asgi.request("POST", headers={**POST_HEADERS, **bearer("alice-1")}, body=init_body())
        assert response.status == 200


async def test_a_verifier_slower_than_verify_timeout_is_503(tokens: Tokens) -> None:
    tokens.slow = True
    config = ServerConfig(oauth=resource(tokens, verify_timeout=0.2))
    async with open_asgi_client(MCPApp(build(), config)) as asgi:
        with trio.fail_after(2):
            response = await asgi.request(
                "POST", headers={**POST_HEADERS, **bearer("alice-1")}, body=init_body()
            )
        assert response.status == 503


# -- 2025 sessions --------------------------------------------------------------------------------------


class Authorized(Client):
    """A 2025 client sending ``token`` on every request (set ``token`` to change it)."""

    token = "alice-1"

    def headers(self, **extra: str) -> dict[str, str]:
        return super().headers(**bearer(self.token), **extra)

    async def initialize(self, version: str = "2025-11-25", *, initialized: bool = True) -> dict[str, Any]:
        response = await self.asgi.request(
            "POST", headers={**POST_HEADERS, **bearer(self.token)}, body=init_body(version)
        )
        assert response.status == 200, await response.read()
        self.session_id = response.headers["mcp-session-id"]
        self.version = (await self.read_message(response))["result"]["protocolVersion"]
        if initialized:
            await self.notify("notifications/initialized")
        return {}

    async def delete_session(self) -> Any:
        headers = {"mcp-session-id": self.session_id or "", **bearer(self.token)}
        return await self.asgi.request("DELETE", headers=headers)

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments or {}},
        }
        return await self.post(json.dumps(body).encode())


async def text_of(client: Client, response: Any) -> str:
    assert response.status == 200, await response.read()
    message = await client.read_message(response)
    return str(message["result"]["content"][0]["text"])


async def test_a_session_belongs_to_its_owner_and_survives_a_refreshed_token(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        alice = Authorized(asgi, app)
        await alice.initialize()
        assert await text_of(alice, await alice.call("whoami")) == "alice alice-1"
        alice.token = "alice-2"  # refreshed: another string, the same owner
        assert await text_of(alice, await alice.call("whoami")) == "alice alice-2"
        alice.token = "bob"  # another subject with alice's session id
        assert (await alice.call("whoami")).status == 404
        stream = await asgi.request(
            "GET",
            headers={
                "accept": "text/event-stream",
                "mcp-session-id": alice.session_id or "",
                **bearer("bob"),
            },
        )
        assert stream.status == 404
        bob_delete = await asgi.request(
            "DELETE", headers={"mcp-session-id": alice.session_id or "", **bearer("bob")}
        )
        assert bob_delete.status == 404
        alice.token = "alice-1"  # the old token still verifies: the session is still alice's
        assert await text_of(alice, await alice.call("whoami")) == "alice alice-1"
        assert (await alice.delete_session()).status == 200


async def test_another_client_of_the_same_subject_does_not_own_the_session(
    app: MCPApp, tokens: Tokens
) -> None:
    tokens.issue("alice-other-client", "alice", "mcp", client="c2")
    async with open_asgi_client(app) as asgi:
        alice = Authorized(asgi, app)
        await alice.initialize()
        alice.token = "alice-other-client"
        assert (await alice.call("whoami")).status == 404


async def test_a_tool_scope_is_403_naming_only_what_the_call_needs(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        alice = Authorized(asgi, app)
        await alice.initialize()
        params = await refused(await alice.call("admin"), 403)
        assert params["error"] == "insufficient_scope"
        assert params["scope"] == "mcp mcp:admin"  # not mcp:prompts, which this call does not need
        assert "mcp:admin" in params["error_description"]
        assert await text_of(alice, await alice.call("echo", {"text": "hi"})) == "hi"
        alice.token = "alice-admin"  # stepped up: the same owner, so the same session
        assert await text_of(alice, await alice.call("admin")) == "admin done"


async def test_a_method_scope_and_a_batch_needs_the_union(app: MCPApp, tokens: Tokens) -> None:
    async with open_asgi_client(app) as asgi:
        alice = Authorized(asgi, app)
        await alice.initialize("2025-03-26")
        get_prompt = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "prompts/get",
            "params": {"name": "hello", "arguments": {"name": "x"}},
        }
        response = await alice.post(json.dumps(get_prompt).encode())
        params = await refused(response, 403)
        assert params["scope"] == "mcp mcp:prompts"
        batch = [
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "admin", "arguments": {}}},
            get_prompt,
        ]
        tokens.issue("alice-3", "alice", "mcp", "mcp:admin")
        alice.token = "alice-3"
        params = await refused(await alice.post(json.dumps(batch).encode()), 403)
        assert params["scope"] == "mcp mcp:admin mcp:prompts"


async def test_a_403_answers_the_request_by_its_id(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        alice = Authorized(asgi, app)
        await alice.initialize()
        response = await alice.call("admin")
        assert response.status == 403 and (await response.json())["id"] == 7


# -- 2026 requests -----------------------------------------------------------------------------------------


async def test_a_modern_request_sees_its_principal(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        response = await Modern(asgi).post(
            "tools/call",
            {"name": "whoami", "arguments": {}},
            headers={**headers_for("tools/call", "whoami"), **bearer("alice-admin")},
        )
        assert response.status == 200
        body = (
            await response.json()
            if response.headers["content-type"] == "application/json"
            else await response.next_message()
        )
        assert body["result"]["content"][0]["text"] == "alice alice-admin"


async def test_a_modern_tool_scope_is_decided_by_the_headers_before_the_body(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        garbage = b"this is not JSON at all"
        response = await asgi.request(
            "POST", headers={**headers_for("tools/call", "admin"), **bearer("alice-1")}, body=garbage
        )
        params = await refused(response, 403)
        assert params["scope"] == "mcp mcp:admin"
        # with the scope, the body is read: the same garbage is now a parse error
        response = await asgi.request(
            "POST", headers={**headers_for("tools/call", "admin"), **bearer("alice-admin")}, body=garbage
        )
        assert response.status == 400 and (await response.json())["error"]["code"] == -32700
        # base64 Mcp-Name values count as decoded
        response = await asgi.request(
            "POST",
            headers={**headers_for("tools/call", "=?base64?YWRtaW4=?="), **bearer("alice-1")},
            body=garbage,
        )
        assert response.status == 403


async def test_a_modern_request_cannot_dodge_its_scope_by_its_headers(app: MCPApp) -> None:
    """Headers that lie about the tool are refused by the header check, never dispatched."""
    async with open_asgi_client(app) as asgi:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "admin", "arguments": {}, "_meta": meta()},
        }
        response = await asgi.request(
            "POST",
            headers={**headers_for("tools/call", "echo"), **bearer("alice-1")},
            body=json.dumps(body).encode(),
        )
        assert response.status == 400 and (await response.json())["error"]["code"] == -32020
        no_name = {k: v for k, v in headers_for("tools/call", "admin").items() if k != "mcp-name"}
        response = await asgi.request(
            "POST", headers={**no_name, **bearer("alice-1")}, body=json.dumps(body).encode()
        )
        assert response.status == 400 and (await response.json())["error"]["code"] == -32020


# -- configuration -------------------------------------------------------------------------------------------


async def authenticate(info: object) -> object:  # pragma: no cover - never called
    return "someone"


def test_oauth_and_authenticate_are_exclusive(tokens: Tokens) -> None:
    with pytest.raises(ValueError, match="exclusive"):
        ServerConfig(oauth=resource(tokens), authenticate=authenticate)
    with pytest.raises(TypeError, match="ProtectedResource"):
        ServerConfig(oauth="https://as.example.com")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"resource": "http://mcp.example.com/mcp"}, "https"),
        ({"resource": "https://mcp.example.com/mcp#x"}, "fragment"),
        ({"resource": "https://mcp.example.com/mcp?x=1"}, "query"),
        ({"resource": "mcp.example.com/mcp"}, "https"),
        ({"resource": "https://user@mcp.example.com/mcp"}, "user info"),
        ({"resource": 'https://mcp.example.com/"mcp'}, "absolute URL"),
        ({"authorization_servers": []}, "at least one"),
        ({"authorization_servers": ["http://as.example.com"]}, "https"),
        ({"required_scopes": ["two scopes"]}, "not a scope"),
        ({"tool_scopes": {"admin": ['q"uote']}}, "not a scope"),
        ({"bearer_methods_supported": ["cookie"]}, "bearer_methods_supported"),
        ({"verify_timeout": 0}, "positive"),
    ],
)
def test_a_bad_protected_resource_is_refused(tokens: Tokens, options: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        resource(tokens, **options)


@pytest.mark.parametrize(
    "options",
    [
        {"authorization_servers": "https://as.example.com"},
        {"required_scopes": "mcp"},
        {"tool_scopes": [("admin", ["x"])]},
        {"verifier": object()},
    ],
)
def test_a_protected_resource_of_the_wrong_types_is_refused(tokens: Tokens, options: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        resource(tokens, **options)


def test_loopback_resources_may_use_http(tokens: Tokens) -> None:
    for url in ("http://localhost:9/mcp", "http://[::1]:9/mcp", "http://127.0.0.2/mcp"):
        assert resource(tokens, resource=url).resource == url
    root = resource(tokens, resource="https://mcp.example.com")
    assert root.metadata_url == "https://mcp.example.com/.well-known/oauth-protected-resource"
    assert root.scopes_for("tools/call", "admin") == ("mcp", "mcp:admin")
    assert root.scopes_for("tools/list") == ("mcp",)


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(st.binary(max_size=200), st.text(max_size=100).map(lambda t: ("Bearer " + t).encode()))
)
def test_any_authorization_header_is_refused_cleanly(value: bytes) -> None:
    tokens = Tokens()
    tokens.issue("alice-1", "alice", "mcp")
    guard = BearerGuard(resource(tokens), "/mcp")

    async def check() -> None:
        try:
            await guard.authenticate([(b"authorization", value)])
        except RemoteProtocolError as exc:
            assert exc.http_status in (400, 401), exc
            challenge(dict(exc.headers)["www-authenticate"])
        else:
            scheme, token = value.split()  # only the one known token gets through
            assert scheme.lower() == b"bearer" and token == b"alice-1"

    trio.run(check)
