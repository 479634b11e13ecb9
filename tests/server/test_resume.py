"""Resumption with Last-Event-ID: only that stream's later events, never another session's."""

from __future__ import annotations

import json

import pytest

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.server import InMemoryEventStore

from .conftest import Client, call_body, init_body, settle


async def test_resume_a_post_stream_after_disconnect(client: Client, app: MCPApp) -> None:
    await client.initialize()
    response = await client.post(call_body(2, "count", {"steps": 3, "delay": 0.05}, progressToken="t"))
    priming = await response.next_event()
    first = await response.next_event()
    assert json.loads(first.data)["params"]["progress"] == 1
    await response.aclose()  # the connection drops; the request goes on (disconnect is not cancellation)
    await settle()
    assert app.statistics()["inflight"] == 1
    resumed = await client.get_stream(**{"last-event-id": first.id})
    messages = []
    while (message := await resumed.next_message()) is not None:
        messages.append(message)
    # everything after `first`, in order, ending with the response; then the stream is over
    assert [m.get("method") for m in messages][-1] is None and messages[-1]["id"] == 2
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress == [2, 3]
    assert priming.id.split("-")[0] == first.id.split("-")[0]  # ids encode the stream
    await settle()
    assert app.statistics()["streams"] == 1


async def test_resume_a_finished_stream_replays_then_ends(client: Client) -> None:
    await client.initialize()
    response = await client.post(call_body(2, "echo", {"text": "hi"}))
    priming = await response.next_event()
    await response.aclose()
    resumed = await client.get_stream(**{"last-event-id": priming.id})
    message = await resumed.next_message()
    assert message["result"]["content"][0]["text"] == "hi"
    assert await resumed.next_event() is None


async def test_resume_the_get_stream(client: Client, app: MCPApp) -> None:
    await client.initialize()
    get = await client.get_stream()
    priming = await get.next_event()
    await get.aclose()
    await settle()
    session = app._manager.get(client.session_id)
    await session.send_message({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    resumed = await client.get_stream(**{"last-event-id": priming.id})
    message = await resumed.next_message()
    assert message["method"] == "notifications/tools/list_changed"
    assert not resumed.complete  # the GET stream stays open for new messages
    await session.send_message({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"})
    assert (await resumed.next_message())["method"] == "notifications/resources/list_changed"


async def test_event_ids_never_replay_another_sessions_events(client: Client) -> None:
    await client.initialize()
    victim = client.session_id
    response = await client.post(call_body(2, "echo", {"text": "secret"}))
    priming = await response.next_event()
    await response.aclose()
    await client.initialize()  # the attacker's own session
    assert client.session_id != victim
    resumed = await client.get_stream(**{"last-event-id": priming.id})
    assert resumed.status == 200
    body = b""
    while (event := await resumed.next_event()) is not None:
        body += event.data.encode()
    assert b"secret" not in body


@pytest.mark.parametrize(
    "event_id", ["garbage", "0-\u00b2", "\u00b2-0", "1-\u0661", "1-\uff11", "-1-0", "0-1" + "9" * 60]
)
async def test_a_last_event_id_we_did_not_make_is_400(client: Client, app: MCPApp, event_id: str) -> None:
    """Not ``STREAM-SEQ`` in ASCII digits (Unicode digits pass str.isdigit() and int(), not this check):
    400 -32600, and the session is unharmed."""
    await client.initialize()
    get = await client.get_stream(**{"last-event-id": event_id})
    assert get.status == 400
    body = await get.json()
    assert body["error"]["code"] == -32600 and "Last-Event-ID" in body["error"]["message"], body
    assert app.statistics()["sessions"] == 1
    get = await client.get_stream()
    assert get.status == 200
    assert (await get.next_event()).id == "0-0"
    await get.aclose()


async def test_only_later_events_of_that_stream(client: Client, app: MCPApp) -> None:
    await client.initialize()
    session = app._manager.get(client.session_id)
    get = await client.get_stream()
    await get.next_event()
    for n in range(3):
        await session.send_message({"jsonrpc": "2.0", "method": "notifications/x", "params": {"n": n}})
    events = [await get.next_event() for _ in range(3)]
    await get.aclose()
    resumed = await client.get_stream(**{"last-event-id": events[0].id})
    assert [(await resumed.next_message())["params"]["n"] for _ in range(2)] == [1, 2]


@pytest.mark.parametrize("config", [ServerConfig(event_store_factory=lambda: None)])
async def test_without_event_store_no_ids_and_no_priming(client: Client, app: MCPApp) -> None:
    await client.initialize()
    response = await client.post(call_body(2, "echo", {"text": "hi"}))
    event = await response.next_event()
    assert event.id is None and json.loads(event.data)["id"] == 2
    assert "event_store" not in app.statistics()


async def test_in_memory_store_is_bounded() -> None:
    from mcp_trio.server import StoredEvent

    store = InMemoryEventStore(max_events_per_stream=3, max_sessions=2)
    for session in ("a", "b", "c"):
        for seq in range(5):
            await store.store(session, StoredEvent(1, seq, b"{}"))
    stats = store.statistics()
    assert stats["sessions"] == 2 and stats["streams"] == 2 and stats["events"] == 6 and stats["bytes"] == 12
    assert await store.replay_after("a", 1, -1) == []  # the oldest session was dropped
    assert [e.seq for e in await store.replay_after("c", 1, 0)] == [2, 3, 4]
    await store.forget_session("c")
    assert store.statistics()["sessions"] == 1


async def test_the_initialize_answer_is_resumable_until_the_client_says_initialized(
    client: Client, app: MCPApp
) -> None:
    """The ``initialize`` answer's stream is kept (a client that lost it may resume it) until the
    client sends ``notifications/initialized``: then it has the answer, and an idle session keeps no
    event at all."""
    response = await client.asgi.request("POST", headers=client.headers(), body=init_body())
    client.session_id = response.headers["mcp-session-id"]
    priming = await response.next_event()
    answer = await response.next_event()
    store = app._manager.event_store
    assert store.holds(client.session_id)
    resumed = await client.get_stream(**{"last-event-id": priming.id})
    message = await resumed.next_message()
    assert message["result"]["protocolVersion"] == json.loads(answer.data)["result"]["protocolVersion"]
    assert (await client.notify("notifications/initialized")).status == 202
    assert not store.holds(client.session_id)
    assert store.statistics()["events"] == 0
    resumed = await client.get_stream(**{"last-event-id": priming.id})
    assert await resumed.next_message() is None  # nothing kept to replay: the stream just ends
    other = Client(client.asgi, app)  # another session's events are untouched
    await other.initialize(initialized=False)
    assert store.holds(other.session_id)
