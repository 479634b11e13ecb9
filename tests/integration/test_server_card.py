"""The server card and the AI Catalog (a draft, SEP-2127) on real sockets: on hypercorn and on the
embedded h11 server (the app in this process), and from ``mcp-trio demo --server-card`` (the command
line; the test command's second pass runs it on h11 too).  Each card is held against the
``server/discover`` answer of the same server; the headers are the draft's on both servers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from mcp_http import serve_demo, serve_in_process

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.server import ServerCard

DEADLINE = 20.0
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
CAPABILITIES = "io.github.mcp-trio/capabilities"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "card-test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
DRAFT_CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "GET",
    "access-control-allow-headers": "Content-Type, If-None-Match",
    "access-control-expose-headers": "ETag",
}


async def server_discover(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "server/discover",
    }
    response = await client.post(url, content=json.dumps(body), headers=headers)
    assert response.status_code == 200, response.text
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    result: dict[str, Any] = json.loads(text)["result"]
    return result


async def check_card_and_catalog(url: str) -> dict[str, Any]:
    """Fetch the card and the catalog of the endpoint at ``url`` as a browser from another origin would
    (with their conditional requests and a preflight), check them against ``server/discover``; the card."""
    origin = url.removesuffix("/mcp")
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(
            url + "/server-card",
            headers={"accept": "application/mcp-server-card+json", "origin": "https://elsewhere.example"},
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/mcp-server-card+json"
        assert {name: response.headers[name] for name in DRAFT_CORS} == DRAFT_CORS
        assert response.headers["cache-control"] == "public, max-age=3600"
        card: dict[str, Any] = response.json()
        etag = response.headers["etag"]
        again = await client.get(url + "/server-card", headers={"if-none-match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        preflight = await client.options(
            url + "/server-card",
            headers={
                "origin": "https://elsewhere.example",
                "access-control-request-method": "GET",
                "access-control-request-headers": "if-none-match",
            },
        )
        assert preflight.status_code == 204
        assert {name: preflight.headers[name] for name in DRAFT_CORS} == DRAFT_CORS
        catalog = await client.get(origin + "/.well-known/ai-catalog.json")
        assert catalog.status_code == 200
        assert catalog.headers["content-type"] == "application/ai-catalog+json"
        assert catalog.headers["access-control-allow-origin"] == "*"
        [entry] = catalog.json()["entries"]
        assert entry["url"] == url + "/server-card"
        assert entry["type"] == "application/mcp-server-card+json"
        result = await server_discover(client, url)
    info = result["_meta"][SERVER_INFO]
    assert card["name"] == f"localhost/{info['name']}"
    assert card["version"] == info["version"]
    [remote] = card["remotes"]
    assert remote["url"] == url
    assert remote["supportedProtocolVersions"] == result["supportedVersions"]
    assert card["_meta"][CAPABILITIES] == result["capabilities"]
    assert entry["identifier"] == f"urn:air:127.0.0.1:mcp:{info['name']}"
    return card


@pytest.mark.parametrize("kind", ["hypercorn", "h11"])
async def test_the_card_on_both_http_servers(kind: str) -> None:
    app = MCPApp(build_demo_server(), ServerConfig(server_card=ServerCard(), shutdown_grace=1.0))
    with trio.fail_after(DEADLINE):
        async with serve_in_process(app, kind, stop_within=10) as (url, _port, _stop):
            card = await check_card_and_catalog(url)
    assert card["description"] == "The demo server of mcp_trio."  # its instructions


@pytest.mark.parametrize("kind", ["hypercorn", "h11"])
async def test_the_card_is_off_by_default_on_both_http_servers(kind: str) -> None:
    with trio.fail_after(DEADLINE):
        async with (
            serve_in_process(MCPApp(build_demo_server()), kind, stop_within=10) as (url, _port, _stop),
            httpx.AsyncClient(timeout=5) as client,
        ):
            assert (await client.get(url + "/server-card")).status_code == 404
            assert (
                await client.get(url.removesuffix("/mcp") + "/.well-known/ai-catalog.json")
            ).status_code == 404


async def test_mcp_trio_demo_serves_the_card() -> None:
    with trio.fail_after(DEADLINE):
        async with serve_demo("--server-card") as demo:
            card = await check_card_and_catalog(demo.url)
    assert card["name"] == "localhost/mcp-trio-demo"
