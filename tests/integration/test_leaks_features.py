"""The leak checks hold for sessions that used sampling, elicitation and subscriptions: against a real
hypercorn, sessions that did server-to-client round trips (and one left waiting for the client when it
is deleted) leave no socket, session or task behind."""

from __future__ import annotations

import json
from typing import Any

import trio
from mcp_http import (
    POST_HEADERS,
    VERSION,
    Baseline,
    DemoServer,
    MCPClient,
    SSEResponse,
    assert_back_to_baseline,
    fetch_stats,
    http_client,
)

SESSIONS = 30
CAPABILITIES = {"sampling": {}, "elicitation": {"form": {}}}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "sampled!"}, "model": "m"}
ELICITED = {"action": "accept", "content": {"username": "ann", "email": "ann@example.com"}}


async def initialize(client: MCPClient) -> None:
    params = {
        "protocolVersion": VERSION,
        "capabilities": CAPABILITIES,
        "clientInfo": {"name": "t", "version": "1"},
    }
    answer = await client.request("initialize", params)
    assert answer["result"]["capabilities"]["resources"]["subscribe"] is True
    await client.initialized()


async def answer_server_request(client: MCPClient, stream: SSEResponse, result: dict[str, Any]) -> str:
    """Read the server's request from a tool call's stream, answer it, return the tool's text."""
    request = await stream.next_message()
    assert request is not None and "method" in request, request
    reply = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
    response = await client.http.post(client.url, content=reply, headers=client.headers(**POST_HEADERS))
    assert response.status_code == 202, response.text
    final = await stream.next_message()
    assert final is not None and "result" in final, final
    assert await stream.rest() == []
    text: str = final["result"]["content"][0]["text"]
    return text


async def feature_session(http: Any, url: str) -> None:
    client = MCPClient(http, url)
    await initialize(client)
    get = await client.open_get()
    try:
        assert (await client.request("resources/subscribe", {"uri": "test://watched-resource"}))[
            "result"
        ] == {}
        stream = await client.start_tool_call("test_sampling", {"prompt": "hi"})
        try:
            assert await answer_server_request(client, stream, SAMPLED) == "LLM response: sampled!"
        finally:
            await stream.aclose()
        stream = await client.start_tool_call("test_elicitation", {"message": "who?"})
        try:
            assert "action=accept" in await answer_server_request(client, stream, ELICITED)
        finally:
            await stream.aclose()
        # a handler left waiting for the client's answer when the session is deleted
        waiting = await client.start_tool_call("test_sampling", {"prompt": "never answered"})
        try:
            request = await waiting.next_message()
            assert request is not None and request["method"] == "sampling/createMessage"
            await client.delete()
            assert await waiting.rest() == []  # its stream ends cleanly, with no response
        finally:
            await waiting.aclose()
        assert await get.rest() == []  # so does the GET stream
    finally:
        await get.aclose()


async def test_sessions_with_client_round_trips_leave_nothing(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    with trio.fail_after(60):
        async with http_client() as http:
            for _ in range(SESSIONS):
                with trio.fail_after(5):
                    await feature_session(http, demo_server.url)
            stats = await fetch_stats(demo_server)
            assert stats["sessions"] == 0 and stats["inflight"] == 0 and stats["connections"] == 0, stats
            assert stats["sessions_created"] == SESSIONS
        sockets, stats = await assert_back_to_baseline(demo_server, baseline)
    print(
        f"\n{SESSIONS} sessions with sampling, elicitation and subscriptions: sockets {baseline.sockets} -> "
        f"{sockets}, process_tasks {baseline.process_tasks} -> {stats['process_tasks']}"
    )
