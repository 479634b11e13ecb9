"""The process-wide bounds on real sockets, on both HTTP servers (hypercorn and serve_h11): the flood of
idle sessions with large results stays under ``max_event_store_bytes`` (read through ``stats_path``),
and the per-address quota refuses a new session, then a WebSocket upgrade, with 429."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server

from .conftest import POST_HEADERS, VERSION, call_body, init_body
from .test_websocket import DEADLINE, RawClient, error_body, kind, refused, serving

__all__ = ["kind"]  # the fixture: both HTTP servers

MiB = 1024 * 1024


def messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (each on one ``data:`` line)."""
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ") and line[6:]]


async def open_session(http: httpx.AsyncClient, url: str) -> httpx.Response:
    response = await http.post(url, headers=POST_HEADERS, content=init_body())
    if response.status_code == 200:
        headers = {**POST_HEADERS, "mcp-protocol-version": VERSION}
        headers["mcp-session-id"] = response.headers["mcp-session-id"]
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert (await http.post(url, headers=headers, content=note)).status_code == 202
    return response


async def test_a_flood_of_large_results_stays_under_the_cap(kind: str) -> None:
    cap, size = 2 * MiB, MiB // 2
    config = ServerConfig(max_event_store_bytes=cap, stats_path="/stats", shutdown_grace=1.0)
    async with serving(kind, MCPApp(build_demo_server(), config)) as served:
        base = f"http://127.0.0.1:{served.port}"
        with trio.fail_after(4 * DEADLINE):
            async with httpx.AsyncClient(timeout=DEADLINE) as http:
                for _ in range(3):  # sessions, each left idle after its calls
                    init = await open_session(http, f"{base}/mcp")
                    assert init.status_code == 200
                    headers = {**POST_HEADERS, "mcp-protocol-version": VERSION}
                    headers["mcp-session-id"] = init.headers["mcp-session-id"]
                    for n in range(3):
                        text = chr(97 + n) * size
                        body = call_body(n + 2, "echo", {"text": text})
                        answer = await http.post(f"{base}/mcp", headers=headers, content=body)
                        assert answer.status_code == 200
                        assert messages(answer.text)[-1]["result"]["content"][0]["text"] == text
                        stats = (await http.get(f"{base}/stats")).json()
                        assert stats["event_store"]["bytes"] <= cap, stats["event_store"]
                stats = served.app.statistics()
        assert stats["sessions"] == 3
        store = stats["event_store"]
        assert 0 < store["bytes"] <= cap and store["evicted_bytes"] >= 9 * size - cap, store


async def test_the_address_quota_counts_sessions_and_websocket_connections(kind: str) -> None:
    config = ServerConfig(max_sessions_per_address=1, shutdown_grace=1.0)
    async with serving(kind, MCPApp(build_demo_server(), config)) as served:
        url = f"http://127.0.0.1:{served.port}/mcp"
        with trio.fail_after(DEADLINE):
            async with httpx.AsyncClient(timeout=DEADLINE) as http:
                first = await open_session(http, url)
                assert first.status_code == 200
                over = await open_session(http, url)
                assert over.status_code == 429 and over.headers["retry-after"] == "5"
                error = over.json()
                assert error["id"] == 1 and "client address" in error["error"]["message"], error
                rejection = await refused(served.port)  # a WebSocket connection would be a session too
                assert rejection.status == 429 and rejection.header(b"retry-after") == b"5"
                assert "client address" in error_body(rejection)["error"]["message"]
                headers = {"mcp-session-id": first.headers["mcp-session-id"]}
                assert (await http.delete(url, headers=headers)).status_code == 200
                while served.app.statistics()["sessions"]:  # noqa: ASYNC110 - its end has no event
                    await trio.sleep(0.01)
                async with RawClient.connect(served.port) as ws:  # the place is free: the upgrade works
                    assert await ws.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
                    assert (await open_session(http, url)).status_code == 429  # and it is taken
                    assert await ws.close() == 1000
                await served.until_no_connection()
                assert (await open_session(http, url)).status_code == 200
