"""A WebSocket upgrade to an OAuth-protected endpoint (``ServerConfig(oauth=ProtectedResource(...))``), on
a real hypercorn and serve_h11: the bearer check refuses the upgrade (401 with the challenge, 403 for the
required scopes), and once connected each request still needs the scopes of its operation (method, tool
by name), as each POST does over HTTP; the connection's principal is the token's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, RejectData, Request

from mcp_trio import (
    Context,
    MCPApp,
    MCPServer,
    RPCError,
    ServerConfig,
    TransportError,
    hypercorn_config,
    open_websocket_client,
    serve,
    serve_h11,
)
from mcp_trio.auth import AccessToken, ProtectedResource

from .test_auth_app import ISSUER, RESOURCE, Tokens

Serve = Callable[[MCPApp, trio.Nursery], Awaitable[str]]


async def _hypercorn(app: MCPApp, nursery: trio.Nursery) -> str:
    config = hypercorn_config(["127.0.0.1:0"])
    urls = await nursery.start(lambda task_status: serve(app, config, task_status=task_status))
    return str(urls[0])


async def _h11(app: MCPApp, nursery: trio.Nursery) -> str:
    urls = await nursery.start(serve_h11, app, "127.0.0.1", 0)
    return str(urls[0])


@pytest.fixture(params=[_hypercorn, _h11], ids=["hypercorn", "h11"])
async def protected(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Tokens]]:
    tokens = Tokens()
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
    app = MCPApp(server, ServerConfig(oauth=resource, shutdown_grace=1))
    async with trio.open_nursery() as nursery:
        url = await request.param(app, nursery)
        yield "ws" + url.removeprefix("http") + "/mcp", tokens
        nursery.cancel_scope.cancel()


async def _refused(url: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[bytes, bytes], bytes]:
    """A raw upgrade request: the status, headers and body of its refusal."""
    host, port = url.removeprefix("ws://").removesuffix("/mcp").rsplit(":", 1)
    ws = WSConnection(ConnectionType.CLIENT)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        request = Request(host=f"{host}:{port}", target="/mcp", subprotocols=["mcp"], extra_headers=headers)
        await stream.send_all(ws.send(request))
        status, found, body = 0, {}, b""
        while True:
            for event in ws.events():
                assert not isinstance(event, AcceptConnection), "the upgrade was accepted"
                if isinstance(event, RejectConnection):
                    status, found = event.status_code, dict(event.headers)
                elif isinstance(event, RejectData):
                    body += event.data
            data = await stream.receive_some(65536)
            if not data:
                return status, found, body
            ws.receive_data(data)


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_scopes_are_checked_at_the_upgrade_and_per_operation(
    protected: tuple[str, Tokens], mode: Any
) -> None:
    url, tokens = protected
    with trio.fail_after(20):
        status, headers, body = await _refused(url, [])
        assert status == 401
        challenge = headers[b"www-authenticate"].decode()
        assert challenge.startswith("Bearer resource_metadata=") and 'scope="mcp"' in challenge
        assert json.loads(body)["error"]["message"] == "Unauthorized: a bearer token is required"
        status, headers, body = await _refused(url, [(b"authorization", b"Bearer nope")])
        assert status == 401 and b"invalid_token" in headers[b"www-authenticate"]
        tokens.issue("weak", "bob")  # no scope at all
        status, headers, body = await _refused(url, [(b"authorization", b"Bearer weak")])
        assert status == 403 and b"insufficient_scope" in headers[b"www-authenticate"]
        assert json.loads(body)["error"]["data"]["error"] == "insufficient_scope"
        with pytest.raises(TransportError, match="HTTP 401"):
            async with open_websocket_client(url, mode=mode):
                pass

        tokens.issue("basic", "alice", "mcp")
        bearer = {"Authorization": "Bearer basic"}
        async with open_websocket_client(url, mode=mode, headers=bearer) as session:
            result = await session.call_tool("whoami", {})
            assert result.content[0].text == "alice"  # type: ignore[union-attr]
            with pytest.raises(RPCError) as refused:
                await session.call_tool("admin", {})
            assert refused.value.code == -32600
            assert refused.value.data["error"] == "insufficient_scope"
            assert refused.value.data["scope"] == "mcp mcp:admin"
            again = await session.call_tool("whoami", {})  # the connection goes on
            assert again.content[0].text == "alice"  # type: ignore[union-attr]

        tokens.issue("full", "carol", "mcp", "mcp:admin")
        async with open_websocket_client(url, mode=mode, headers={"Authorization": "Bearer full"}) as session:
            assert (await session.call_tool("admin", {})).content[0].text == "done"  # type: ignore[union-attr]
