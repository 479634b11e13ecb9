"""Session behaviour over the in-memory transport: requests, streams, cancellation, ownership."""

from __future__ import annotations

import json

import pytest
import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server

from .conftest import POST_HEADERS, Client, call_body, init_body, settle


async def test_initialize_mints_a_random_visible_ascii_session_id(client: Client, app: MCPApp) -> None:
    ids = set()
    for _ in range(5):
        response = await client.asgi.request("POST", headers=POST_HEADERS, body=init_body())
        session_id = response.headers["mcp-session-id"]
        assert len(session_id) >= 32 and all(0x21 <= ord(c) <= 0x7E for c in session_id)
        ids.add(session_id)
    assert len(ids) == 5
    assert app.statistics()["sessions"] == 5


@pytest.mark.parametrize(
    ("requested", "negotiated"),
    [
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ],
)
async def test_version_negotiation(client: Client, requested: str, negotiated: str) -> None:
    message = await client.initialize(requested)
    result = message["result"]
    assert result["protocolVersion"] == negotiated
    assert result["serverInfo"]["name"] == "mcp-trio-demo"
    assert "tools" in result["capabilities"]


async def test_priming_event_only_on_2025_11_25(client: Client) -> None:
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=init_body("2025-11-25"))
    first = await response.next_event()
    assert first is not None and first.data == "" and first.id and first.retry == 1000
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=init_body("2025-06-18"))
    first = await response.next_event()
    assert first is not None and json.loads(first.data)["id"] == 1


async def test_ping_list_and_call(client: Client) -> None:
    await client.initialize()
    assert (await client.request(2, "ping"))["result"] == {}
    tools = (await client.request(3, "tools/list"))["result"]["tools"]
    assert {t["name"] for t in tools} >= {"echo", "add", "count", "sleep"}
    echo = next(t for t in tools if t["name"] == "echo")
    assert echo["inputSchema"]["required"] == ["text"]
    result = (await client.request(4, "tools/call", {"name": "echo", "arguments": {"text": "hé"}}))["result"]
    assert result["content"] == [{"type": "text", "text": "hé"}]
    assert not result.get("isError")
    result = (await client.request(5, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2.5}}))[
        "result"
    ]
    assert result["structuredContent"] == {"sum": 3.5}


async def test_string_request_ids_round_trip(client: Client) -> None:
    await client.initialize()
    assert (await client.request("abc", "ping"))["id"] == "abc"


async def test_errors_of_requests(client: Client) -> None:
    await client.initialize()
    unknown = await client.request(2, "no/such/method")
    assert unknown["error"]["code"] == -32601
    no_tool = await client.request(3, "tools/call", {"name": "nope", "arguments": {}})
    assert no_tool["error"]["code"] == -32602
    bad_params = await client.request(4, "tools/call", {"arguments": {}})
    assert bad_params["error"]["code"] == -32602
    bad_args = await client.request(5, "tools/call", {"name": "add", "arguments": {"a": "x"}})
    assert bad_args["result"]["isError"] is True


async def test_progress_and_log_notifications_travel_on_the_request_stream(client: Client) -> None:
    await client.initialize()
    response = await client.post(call_body(2, "count", {"steps": 2, "delay": 0}, progressToken="tok"))
    messages = []
    while (message := await response.next_message()) is not None:
        messages.append(message)
    methods = [m.get("method") for m in messages]
    assert methods == ["notifications/progress", "notifications/message"] * 2 + [None]
    params = dict(messages[0]["params"])
    params.pop("_meta", None)  # the trace context, when traced (as the test process is: tests/otel.py)
    assert params == {"progressToken": "tok", "progress": 1, "total": 2, "message": "step 1"}
    assert messages[-1]["id"] == 2 and messages[-1]["result"]["content"][0]["text"] == "counted to 2"
    assert response.complete


async def test_set_level_filters_logs(client: Client) -> None:
    await client.initialize()
    assert (await client.request(2, "logging/setLevel", {"level": "warning"}))["result"] == {}
    response = await client.post(call_body(3, "count", {"steps": 2, "delay": 0}))
    messages = []
    while (message := await response.next_message()) is not None:
        messages.append(message)
    assert [m.get("method") for m in messages] == [None]


async def test_cancelled_notification_cancels_the_handler_and_sends_no_response(
    client: Client, app: MCPApp
) -> None:
    await client.initialize()
    response = await client.post(call_body(7, "sleep", {"seconds": 3600}))
    await settle()
    assert app.statistics()["inflight"] == 1
    await client.notify("notifications/cancelled", {"requestId": 7, "reason": "changed my mind"})
    assert await response.next_message() is None  # the stream ends without a response
    assert response.complete
    await settle()
    stats = app.statistics()
    assert stats["inflight"] == 0 and stats["pending_responses"] == 0 and stats["streams"] == 1


async def test_cancelling_an_unknown_request_is_harmless(client: Client) -> None:
    await client.initialize()
    await client.notify("notifications/cancelled", {"requestId": 99})
    await client.notify("notifications/cancelled", {"requestId": {"not": "an id"}})
    assert (await client.request(2, "ping"))["result"] == {}


@pytest.mark.parametrize("config", [ServerConfig(json_response=True)])
async def test_json_response_mode(client: Client, app: MCPApp) -> None:
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=init_body())
    assert response.headers["content-type"] == "application/json"
    client.session_id = response.headers["mcp-session-id"]
    assert (await response.json())["result"]["protocolVersion"] == "2025-11-25"
    await client.notify("notifications/initialized")
    get = await client.get_stream()
    assert (await get.next_event()).id == "0-0"  # priming
    response = await client.post(call_body(2, "count", {"steps": 1, "delay": 0}, progressToken=1))
    assert response.headers["content-type"] == "application/json"
    assert (await response.json())["result"]["content"][0]["text"] == "counted to 1"
    # without an SSE response of its own, the request's notifications went to the GET stream
    progress = await get.next_message()
    assert progress["method"] == "notifications/progress"
    # cancelled in JSON mode: the exchange ends with 204 and no body
    response_task = client.post(call_body(3, "sleep", {"seconds": 3600}))
    async with trio.open_nursery() as nursery:
        results = []

        async def call() -> None:
            results.append(await response_task)

        nursery.start_soon(call)
        await settle()
        await client.notify("notifications/cancelled", {"requestId": 3})
    assert results[0].status == 204 and await results[0].read() == b""
    await get.aclose()
    await settle()
    assert app.statistics()["inflight"] == 0


async def test_batch_on_2025_03_26(client: Client) -> None:
    await client.initialize("2025-03-26")
    batch = (
        b'[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},'
        b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}]'
    )
    response = await client.post(batch)
    ids = []
    while (message := await response.next_message()) is not None:
        ids.append(message["id"])
    assert sorted(ids) == [2, 3]
    only_notifications = (
        b'[{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","method":"notifications/y"}]'
    )
    response = await client.post(only_notifications)
    assert response.status == 202


@pytest.mark.parametrize("config", [ServerConfig(json_response=True)])
async def test_batch_in_json_mode_answers_an_array(client: Client) -> None:
    await client.initialize("2025-03-26")
    batch = b'[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]'
    body = await (await client.post(batch)).json()
    assert sorted(m["id"] for m in body) == [2, 3]


async def test_client_responses_are_accepted(client: Client) -> None:
    await client.initialize()
    response = await client.post(b'{"jsonrpc":"2.0","id":"s-1","result":{}}')
    assert response.status == 202
    response = await client.post(b'{"jsonrpc":"2.0","id":"s-2","error":{"code":-1,"message":"no"}}')
    assert response.status == 202


async def test_get_stream_gets_priming_event_and_keeps_open(client: Client, app: MCPApp) -> None:
    await client.initialize()
    get = await client.get_stream()
    assert get.status == 200 and get.headers["content-type"] == "text/event-stream"
    assert get.headers["x-accel-buffering"] == "no"
    priming = await get.next_event()
    assert priming.id == "0-0" and priming.data == ""
    await settle()
    assert app.statistics()["connections"] == 1
    assert not get.complete


async def test_second_get_replaces_the_first(client: Client, app: MCPApp) -> None:
    await client.initialize()
    first = await client.get_stream()
    await first.next_event()
    second = await client.get_stream()
    assert second.status == 200
    assert await first.next_event() is None and first.complete  # the old response ended cleanly
    await second.next_event()
    await settle()
    assert app.statistics()["connections"] == 1
    assert not second.complete


async def test_get_disconnect_frees_the_connection(client: Client, app: MCPApp) -> None:
    await client.initialize()
    get = await client.get_stream()
    await get.next_event()
    await settle()
    assert app.statistics()["connections"] == 1
    await get.aclose()
    await settle()
    stats = app.statistics()
    assert stats["connections"] == 0 and stats["session_tasks"] == 1


async def test_delete_ends_every_stream_and_handler(client: Client, app: MCPApp) -> None:
    await client.initialize()
    get = await client.get_stream()
    await get.next_event()
    post = await client.post(call_body(2, "sleep", {"seconds": 3600}))
    await post.next_event()  # priming
    await settle()
    assert app.statistics()["inflight"] == 1
    response = await client.delete()
    assert response.status == 200
    assert await get.next_event() is None and get.complete
    assert await post.next_event() is None and post.complete
    await settle()
    stats = app.statistics()
    assert stats["sessions"] == 0 and stats["session_tasks"] == 0 and stats["event_store"]["sessions"] == 0


async def test_task_count_returns_to_baseline(client: Client, app: MCPApp) -> None:
    await settle()
    baseline = app.statistics()["process_tasks"]
    for _ in range(20):
        await client.initialize()
        get = await client.get_stream()
        await get.next_event()
        await client.request(2, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        assert (await client.delete()).status == 200
        assert await get.next_event() is None
    await settle()
    stats = app.statistics()
    assert stats["process_tasks"] == baseline
    assert stats["sessions"] == 0 and stats["session_tasks"] == 0


async def test_sessions_are_isolated(client: Client, app: MCPApp) -> None:
    await client.initialize()
    first = client.session_id
    await client.initialize()
    second = client.session_id
    assert first != second
    client.session_id = first
    assert (await client.delete()).status == 200
    client.session_id = second
    assert (await client.request(2, "ping"))["result"] == {}


async def test_shutdown_ends_open_streams_cleanly() -> None:
    """A call longer than the grace is answered -32000 on its own stream, then every stream ends."""
    from mcp_trio.testing import open_asgi_client

    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=0.2))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        get = await client.get_stream()
        await get.next_event()
        post = await client.post(call_body(2, "sleep", {"seconds": 3600}))
        await post.next_event()
        await app.aclose()
        assert await get.next_event() is None and get.complete
        answer = await post.next_event()
        assert answer is not None and json.loads(answer.data) == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {"code": -32000, "message": "Server shutting down"},
        }
        assert await post.next_event() is None and post.complete
        await settle()
        assert app.statistics()["sessions"] == 0
        # a closing server refuses new sessions
        response = await asgi.request("POST", headers=POST_HEADERS, body=init_body())
        assert response.status == 503
