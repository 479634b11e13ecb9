"""A hosted python-sdk server's server card (SEP-2127, a draft): made from the SDK server's own
``server/discover`` answer, with the title, description and website its ``serverInfo`` carries."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer

from mcp_trio import ServerConfig
from mcp_trio.sdk import hosted_app
from mcp_trio.server import ServerCard
from mcp_trio.testing import open_asgi_client

from .peers import Modern

CAPABILITIES = "io.github.mcp-trio/capabilities"


def sdk_server() -> MCPServer:
    server = MCPServer(
        "sdk-weather",
        title="SDK Weather",
        description="Forecasts from the python-sdk.",
        website_url="https://example.com/sdk-weather",
        version="3.1.0",
    )

    @server.tool()
    async def forecast(city: str) -> str:
        return f"rain in {city}"

    return server


async def test_the_hosted_servers_card_says_what_its_server_discover_says() -> None:
    # what the card adds never overrides what serverInfo says
    card = ServerCard(title="Another title", description="Another description.")
    app = hosted_app(sdk_server(), ServerConfig(server_card=card))
    async with open_asgi_client(app) as asgi:
        response = await asgi.request("GET", "/mcp/server-card")
        assert response.status == 200
        assert response.headers["content-type"] == "application/mcp-server-card+json"
        document = await response.json()
        request = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
        peer = Modern(None, "")  # type: ignore[arg-type]  (only its headers and body)
        answer = await asgi.request(
            "POST", headers=peer.headers(request), body=json.dumps(peer.body(request)).encode()
        )
        assert answer.status == 200
        result: dict[str, Any] = (await answer.json())["result"]
    info = result["_meta"]["io.modelcontextprotocol/serverInfo"]
    assert document["name"] == "localhost/sdk-weather"
    assert document["version"] == info["version"] == "3.1.0"
    assert document["title"] == info["title"] == "SDK Weather"
    assert document["description"] == info["description"] == "Forecasts from the python-sdk."
    assert document["websiteUrl"] == info["websiteUrl"]
    assert document["remotes"][0]["supportedProtocolVersions"] == result["supportedVersions"]
    assert document["_meta"][CAPABILITIES] == result["capabilities"]
    assert "tools" in result["capabilities"]
