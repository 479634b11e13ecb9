"""No ASGI send of the app is ever cancelled midway (hypercorn dies of it: see asgi._uncancellable).

Each send of the test client takes time here, so every cancellation path of the server (DELETE with
open streams, a second GET, a client disconnect, server shutdown, a 2026 disconnect mid-stream) has a
chance to land inside a send; none may."""

from __future__ import annotations

import json

import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.testing import open_asgi_client

from .conftest import Client, call_body, settle

SLOW = 0.01


async def test_cancellation_never_lands_inside_a_send() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    async with open_asgi_client(app) as asgi:
        asgi.send_delay = SLOW
        client = Client(asgi, app)
        for _ in range(5):
            await client.initialize()
            get = await client.get_stream()
            second = await client.get_stream()  # replaces the first while it may be sending
            post = await client.post(call_body(2, "count", {"steps": 50, "delay": 0}, progressToken=1))
            await trio.sleep(SLOW * 3)
            await client.delete()  # cancels every writer of the session, mid-send if it can
            for response in (get, second, post):
                while await response.next_event() is not None:
                    pass
        await client.initialize()
        post = await client.post(call_body(3, "count", {"steps": 50, "delay": 0}, progressToken=1))
        await trio.sleep(SLOW * 3)
        await post.aclose()  # a client disconnect mid-stream
        modern_headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "count",
        }
        params = {
            "name": "count",
            "arguments": {"steps": 50, "delay": 0},
            "_meta": {
                "progressToken": 1,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        }
        body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}).encode()
        modern = await asgi.request("POST", headers=modern_headers, body=body)
        await trio.sleep(SLOW * 3)
        await modern.aclose()  # 2026: the disconnect cancels the handler, which may be sending
        get = await client.get_stream()
        await app.aclose()  # shutdown with a stream open
        while await get.next_event() is not None:
            pass
        await settle()
        assert asgi.cancelled_sends == 0
