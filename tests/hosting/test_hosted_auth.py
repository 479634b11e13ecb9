"""A hosted python-sdk server behind mcp_trio's OAuth protected resource (``ServerConfig.oauth``), on
real hypercorn: a handler sees the verified principal through the SDK's own
``mcp.server.auth.middleware.auth_context.get_access_token()``, in both eras, each request its own;
requests without a valid token, or without a tool's scope, are refused before the SDK sees them, as
for mcp_trio's own servers; a session belongs to its principal.
"""

from __future__ import annotations

import json

import httpx
import trio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import MCPServer

from mcp_trio import ServerConfig
from mcp_trio.auth import AccessToken, InvalidToken, ProtectedResource

from .peers import Legacy, Modern, hosting, tool_call

RESOURCE = "http://127.0.0.1:8000/mcp"
ISSUER = "https://as.example.com"
DEADLINE = 15.0


class Tokens:
    """A token verifier over the tokens this test issued."""

    def __init__(self) -> None:
        self.table: dict[str, AccessToken] = {}

    def issue(self, token: str, subject: str, *scopes: str) -> None:
        self.table[token] = AccessToken(
            token=token,
            subject=subject,
            scopes=frozenset(scopes),
            client_id=f"client-of-{subject}",
            issuer=ISSUER,
            audience=(RESOURCE,),
            expires_at=4_000_000_000.0,
            claims={"sub": subject},
        )

    async def verify(self, token: str) -> AccessToken:
        try:
            return self.table[token]
        except KeyError:
            raise InvalidToken("unknown token") from None


def build(seen: list[object]) -> MCPServer:
    server = MCPServer("protected-sdk")

    @server.tool()
    async def whoami() -> str:
        token = get_access_token()
        seen.append(token)
        assert token is not None
        return json.dumps(
            {
                "subject": token.subject,
                "client": token.client_id,
                "scopes": token.scopes,
                "token": token.token,
                "resource": token.resource,
                "expires_at": token.expires_at,
            }
        )

    @server.tool()
    async def admin() -> str:
        return "admin done"

    return server


def config(tokens: Tokens) -> ServerConfig:
    oauth = ProtectedResource(
        resource=RESOURCE,
        authorization_servers=[ISSUER],
        verifier=tokens,
        required_scopes=["mcp"],
        tool_scopes={"admin": ["mcp:admin"]},
    )
    return ServerConfig(oauth=oauth, shutdown_grace=1.0)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def text(answer: dict) -> str:
    return str(answer["result"]["content"][0]["text"])


async def test_the_sdk_handler_sees_the_principal_in_both_eras() -> None:
    tokens = Tokens()
    tokens.issue("alice-1", "alice", "mcp")
    tokens.issue("bob-1", "bob", "mcp", "mcp:admin")
    seen: list[object] = []
    with trio.fail_after(DEADLINE):
        async with (
            hosting(build(seen), config(tokens)) as hosted,
            httpx.AsyncClient(timeout=DEADLINE) as http,
        ):
            alice = Legacy(http, hosted.url, bearer("alice-1"))
            await alice.open()
            bob = Modern(http, hosted.url, bearer("bob-1"))
            assert json.loads(text(await alice.call_tool("whoami"))) == {
                "subject": "alice",
                "client": "client-of-alice",
                "scopes": ["mcp"],
                "token": "alice-1",
                "resource": RESOURCE,
                "expires_at": 4_000_000_000,
            }
            whoami = json.loads(text(await bob.call_tool("whoami")))
            assert (whoami["subject"], whoami["scopes"]) == ("bob", ["mcp", "mcp:admin"])
            # concurrently, each request sees its own principal
            answers: dict[str, str] = {}
            async with trio.open_nursery() as nursery:
                for name, peer in (("alice", alice), ("bob", bob)):
                    for n in range(3):

                        async def one(name: str = name, peer: Legacy | Modern = peer, n: int = n) -> None:
                            answers[f"{name}{n}"] = json.loads(text(await peer.call_tool("whoami")))[
                                "subject"
                            ]

                        nursery.start_soon(one)
            assert answers == {f"{name}{n}": name for name in ("alice", "bob") for n in range(3)}
            assert len(seen) == 8
            assert text(await bob.call_tool("admin")) == "admin done"


async def test_unauthenticated_and_unscoped_requests_are_refused_before_the_sdk() -> None:
    tokens = Tokens()
    tokens.issue("alice-1", "alice", "mcp")
    tokens.issue("mallory-1", "mallory", "mcp")
    seen: list[object] = []
    with trio.fail_after(DEADLINE):
        async with (
            hosting(build(seen), config(tokens)) as hosted,
            httpx.AsyncClient(timeout=DEADLINE) as http,
        ):
            for peer in (Modern(http, hosted.url), Modern(http, hosted.url, bearer("forged"))):
                message = tool_call(1, "whoami")
                response = await http.post(hosted.url, headers=peer.headers(message), json=peer.body(message))
                assert response.status_code == 401, response.text
                assert response.headers["www-authenticate"].startswith("Bearer ")
                assert "resource_metadata=" in response.headers["www-authenticate"]
                assert response.json()["error"]["code"] == -32600
            legacy = Legacy(http, hosted.url)
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "x", "version": "1"},
                },
            }
            response = await http.post(hosted.url, headers=legacy.headers(), json=init)
            assert response.status_code == 401 and "mcp-session-id" not in response.headers
            # a tool's scope: 403 insufficient_scope
            alice = Modern(http, hosted.url, bearer("alice-1"))
            message = tool_call(2, "admin")
            response = await http.post(hosted.url, headers=alice.headers(message), json=alice.body(message))
            assert response.status_code == 403, response.text
            assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
            # a session is its principal's: another token's requests are refused
            owner = Legacy(http, hosted.url, bearer("alice-1"))
            await owner.open()
            thief = Legacy(http, hosted.url, bearer("mallory-1"))
            thief.session_id = owner.session_id
            response = await http.post(hosted.url, headers=thief.headers(), json=tool_call(3, "whoami"))
            assert response.status_code == 404, response.text
            assert seen == []  # the SDK's handler never ran for any of them
            metadata = await http.get(hosted.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
            assert metadata.status_code == 200 and metadata.json()["resource"] == RESOURCE
