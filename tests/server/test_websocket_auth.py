"""A WebSocket upgrade to an OAuth-protected endpoint (``ServerConfig(oauth=ProtectedResource(...))``), on
a real hypercorn and serve_h11: the bearer check refuses the upgrade (401 with the challenge, 403 for the
required scopes), and once connected each request still needs the scopes of its operation (method, tool
by name), as each POST does over HTTP; the connection's principal is the token's."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, RPCError, ServerConfig, open_websocket_client
from mcp_trio.auth import AccessToken, ProtectedResource
from mcp_trio.errors import TransportError

from .test_auth_app import ISSUER, RESOURCE, Tokens
from .test_websocket import error_body, kind, refused, serving, text_of

__all__ = ["kind"]  # the fixture: every test on both servers


def build(tokens: Tokens) -> MCPApp:
    server = MCPServer("protected", "1.0.0")

    @server.tool()
    async def whoami(ctx: Context) -> str:
        principal = ctx.principal
        assert isinstance(principal, AccessToken)
        return f"{principal.subject}"

    @server.tool()
    async def admin() -> str:
        return "done"

    resource = ProtectedResource(
        resource=RESOURCE,
        authorization_servers=[ISSUER],
        verifier=tokens,
        required_scopes=["mcp"],
        tool_scopes={"admin": ["mcp:admin"]},
    )
    return MCPApp(server, ServerConfig(oauth=resource, shutdown_grace=1))


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_scopes_are_checked_at_the_upgrade_and_per_operation(kind: str, mode: Any) -> None:
    tokens = Tokens()
    async with serving(kind, build(tokens)) as served:
        url = served.url
        with trio.fail_after(20):
            no_token = await refused(served.port)
            assert no_token.status == 401
            challenge = (no_token.header(b"www-authenticate") or b"").decode()
            assert challenge.startswith("Bearer resource_metadata=") and 'scope="mcp"' in challenge
            assert error_body(no_token)["error"]["message"] == "Unauthorized: a bearer token is required"
            bad = await refused(served.port, headers=[(b"authorization", b"Bearer nope")])
            assert bad.status == 401 and b"invalid_token" in (bad.header(b"www-authenticate") or b"")
            tokens.issue("weak", "bob")  # no scope at all
            weak = await refused(served.port, headers=[(b"authorization", b"Bearer weak")])
            assert weak.status == 403 and error_body(weak)["error"]["data"]["error"] == "insufficient_scope"
            with pytest.raises(TransportError, match="HTTP 401"):
                async with open_websocket_client(url, mode=mode):
                    pass

            tokens.issue("basic", "alice", "mcp")
            bearer = {"Authorization": "Bearer basic"}
            async with open_websocket_client(url, mode=mode, headers=bearer) as session:
                assert text_of(await session.call_tool("whoami", {})) == "alice"
                with pytest.raises(RPCError) as denied:
                    await session.call_tool("admin", {})
                assert denied.value.code == -32600
                assert denied.value.data["error"] == "insufficient_scope"
                assert denied.value.data["scope"] == "mcp mcp:admin"
                assert text_of(await session.call_tool("whoami", {})) == "alice"  # the connection goes on

            tokens.issue("full", "carol", "mcp", "mcp:admin")
            full = {"Authorization": "Bearer full"}
            async with open_websocket_client(url, mode=mode, headers=full) as session:
                assert text_of(await session.call_tool("admin", {})) == "done"
