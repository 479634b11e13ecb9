"""Bounds on what one client can make the server keep: resource subscriptions (and their URIs), and the
in-memory event store's streams and bytes per session."""

from __future__ import annotations

import time
from typing import Any

import mcp_types as mt
import pytest

from mcp_trio import MCPApp, MCPServer, RPCError, ServerConfig
from mcp_trio.server import InMemoryEventStore, StoredEvent
from mcp_trio.testing import open_asgi_client

from .conftest import Client, call_body, settle
from .test_stdio_server import modern_meta, open_stdio

MiB = 1024 * 1024


def build(max_subscriptions: int = 3) -> MCPServer:
    server = MCPServer("limits-test", max_subscriptions=max_subscriptions)

    @server.resource("test://doc")
    async def doc() -> str:
        return "doc"

    @server.tool()
    async def touch(uri: str) -> str:
        await server.notify_resource_updated(uri)
        return "ok"

    @server.tool()
    async def blob(size: int) -> str:
        return "x" * size

    return server


@pytest.fixture
async def app(config: ServerConfig) -> MCPApp:
    return MCPApp(build(), config)


async def subscribe(client: Client, request_id: int, uri: str) -> dict[str, Any]:
    return await client.request(request_id, "resources/subscribe", {"uri": uri})


# -- subscriptions -------------------------------------------------------------------------------


def test_default_limits() -> None:
    server = MCPServer("x")
    assert server.max_subscriptions == 1000 and server.max_uri_length == 8192


async def test_subscriptions_are_bounded_per_session(client: Client, app: MCPApp) -> None:
    await client.initialize()
    for n, uri in enumerate(["test://a", "test://b", "test://c", "test://a"], start=2):
        assert (await subscribe(client, n, uri))["result"] == {}  # subscribing again is fine
    refused = await subscribe(client, 6, "test://d")
    assert refused["error"] == {"code": -32602, "message": "Too many subscriptions (limit 3)"}
    await client.request(7, "resources/unsubscribe", {"uri": "test://a"})
    assert (await subscribe(client, 8, "test://d"))["result"] == {}
    (peer,) = app.server.notifications.subscribers
    assert peer.subscriptions == {"test://b", "test://c", "test://d"}


async def test_the_bound_is_per_session(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        first, second = Client(asgi, app), Client(asgi, app)
        await first.initialize()
        await second.initialize()
        for n in range(3):
            assert (await subscribe(first, 2 + n, f"test://{n}"))["result"] == {}
            assert (await subscribe(second, 2 + n, f"test://{n}"))["result"] == {}
        assert (await subscribe(second, 9, "test://9"))["error"]["code"] == -32602


async def test_subscribed_uris_are_bounded_in_length(client: Client, app: MCPApp) -> None:
    await client.initialize()
    longest = "test://" + "a" * (8192 - len("test://"))
    assert (await subscribe(client, 2, longest))["result"] == {}
    refused = await subscribe(client, 3, longest + "a")
    assert refused["error"] == {"code": -32602, "message": "Resource URI too long (limit 8192 characters)"}
    (peer,) = app.server.notifications.subscribers
    assert peer.subscriptions == {longest}


def test_listen_filter_is_bounded() -> None:
    server = build(max_subscriptions=3)
    uris = ["test://a", "test://b", "test://c"]
    accepted = server.subscription_filter(mt.SubscriptionFilter(resource_subscriptions=uris))
    assert accepted.resource_subscriptions == uris
    with pytest.raises(RPCError) as raised:
        server.subscription_filter(mt.SubscriptionFilter(resource_subscriptions=[*uris, "test://d"]))
    assert (raised.value.code, raised.value.message) == (-32602, "Too many subscriptions (limit 3)")
    with pytest.raises(RPCError) as raised:
        server.subscription_filter(mt.SubscriptionFilter(resource_subscriptions=["test://" + "a" * 8192]))
    too_long = "Resource URI too long (limit 8192 characters)"
    assert (raised.value.code, raised.value.message) == (-32602, too_long)


def test_listen_filter_is_bounded_even_without_resources() -> None:
    server = MCPServer("no-resources", max_subscriptions=1)
    with pytest.raises(RPCError, match="Too many subscriptions"):
        server.subscription_filter(mt.SubscriptionFilter(resource_subscriptions=["test://a", "test://b"]))


async def test_listen_filter_bound_over_stdio() -> None:
    server = build(max_subscriptions=2)
    async with open_stdio(server) as client:
        wanted = {"resourceSubscriptions": ["test://a", "test://b", "test://c"]}
        refused = await client.call(
            1, "subscriptions/listen", {"notifications": wanted, "_meta": modern_meta()}
        )
        assert refused["error"] == {"code": -32602, "message": "Too many subscriptions (limit 2)"}
        wanted = {"resourceSubscriptions": ["test://a", "test://b"]}
        await client.request(2, "subscriptions/listen", {"notifications": wanted, "_meta": modern_meta()})
        ack = await client.receive()
        assert ack["params"]["notifications"] == wanted
        await client.notify("notifications/cancelled", {"requestId": 2})


# -- the in-memory event store -----------------------------------------------------------------


def event(stream_id: int, seq: int, size: int = 10) -> StoredEvent:
    return StoredEvent(stream_id, seq, b"x" * size)


def counts(store: InMemoryEventStore) -> dict[str, int]:
    """What the store keeps: sessions, streams, events, bytes."""
    stats = store.statistics()
    return {name: stats[name] for name in ("sessions", "streams", "events", "bytes")}


async def seqs(store: InMemoryEventStore, session: str, stream_id: int) -> list[int]:
    return [e.seq for e in await store.replay_after(session, stream_id, -1)]


async def test_streams_per_session_drop_the_least_recently_written_but_not_stream_0() -> None:
    store = InMemoryEventStore(max_streams_per_session=4)
    await store.store("s", event(0, 0))  # the GET stream, written first and never again
    for stream_id in range(1, 8):
        await store.store("s", event(stream_id, 0))
        await store.store("other", event(stream_id, 0))
    await store.store("s", event(5, 1))  # stream 5 is now the most recently written
    await store.store("s", event(8, 0))
    assert counts(store) == {"sessions": 2, "streams": 8, "events": 9, "bytes": 90}
    assert [s for s in range(9) if await seqs(store, "s", s)] == [0, 5, 7, 8]
    assert await seqs(store, "s", 5) == [0, 1]
    assert [s for s in range(9) if await seqs(store, "other", s)] == [4, 5, 6, 7]


async def test_one_stream_per_session_keeps_only_the_newest() -> None:
    store = InMemoryEventStore(max_streams_per_session=1)
    await store.store("s", event(0, 0))
    await store.store("s", event(1, 0))
    assert [s for s in range(2) if await seqs(store, "s", s)] == [1]
    await store.store("s", event(0, 1))
    assert [s for s in range(2) if await seqs(store, "s", s)] == [0]
    assert store.statistics()["bytes"] == 10


async def test_bytes_per_session_drop_the_oldest_events_of_the_oldest_streams() -> None:
    store = InMemoryEventStore(max_bytes_per_session=100)
    for seq in range(3):
        await store.store("s", event(0, seq, 20))  # 60 bytes on the GET stream
    await store.store("s", event(1, 0, 30))
    await store.store("s", event(2, 0, 10))
    assert store.statistics()["bytes"] == 100
    await store.store("s", event(1, 1, 25))  # 125: stream 0 is the least recently written
    assert await seqs(store, "s", 0) == [2]  # its two oldest events went (85 bytes left)
    await store.store("s", event(3, 0, 50))  # 135: stream 0 goes, stream 2, then stream 1's oldest
    assert await seqs(store, "s", 0) == [] and await seqs(store, "s", 2) == []
    assert await seqs(store, "s", 1) == [1] and await seqs(store, "s", 3) == [0]
    assert counts(store) == {"sessions": 1, "streams": 2, "events": 2, "bytes": 75}


async def test_an_event_larger_than_the_bound_is_not_stored() -> None:
    store = InMemoryEventStore(max_bytes_per_session=100)
    await store.store("s", event(1, 0, 60))
    await store.store("s", event(1, 1, 101))
    await store.store("t", event(1, 0, 101))
    assert await seqs(store, "s", 1) == [0]
    assert counts(store) == {"sessions": 1, "streams": 1, "events": 1, "bytes": 60}
    await store.store("s", event(2, 0, 100))  # exactly the bound: kept, alone
    assert await seqs(store, "s", 1) == [] and await seqs(store, "s", 2) == [0]
    assert store.statistics()["bytes"] == 100


async def test_bytes_follow_every_drop() -> None:
    store = InMemoryEventStore(max_events_per_stream=2, max_sessions=2)
    for seq in range(5):
        await store.store("a", event(1, seq, 10 + seq))
    assert await seqs(store, "a", 1) == [3, 4]
    assert store.statistics()["bytes"] == 13 + 14
    await store.store("b", event(1, 0, 7))
    await store.store("c", event(1, 0, 5))  # "a" is dropped: the least recently written session
    assert counts(store) == {"sessions": 2, "streams": 2, "events": 2, "bytes": 12}
    await store.forget_session("b")
    assert store.statistics()["bytes"] == 5


async def test_many_large_tool_results_stay_under_the_default_bounds() -> None:
    store = InMemoryEventStore()
    result = 3 * MiB
    for stream_id in range(1, 26):  # 25 tool calls returning 3 MB each
        await store.store("s", event(stream_id, 0, 100))  # a progress notification
        await store.store("s", event(stream_id, 1, result))
    # the newest five calls fit (15 MiB) and are kept whole; the older ones went, oldest first
    assert counts(store) == {"sessions": 1, "streams": 5, "events": 10, "bytes": 5 * (100 + result)}
    assert [s for s in range(1, 26) if await seqs(store, "s", s)] == [21, 22, 23, 24, 25]
    await store.store("s", event(0, 0, MiB))  # 500 bytes too many: call 21 goes, progress first
    assert await seqs(store, "s", 21) == [] and await seqs(store, "s", 0) == [0]
    assert store.statistics()["bytes"] == 4 * (100 + result) + MiB


async def test_storing_is_cheap_per_event() -> None:
    store = InMemoryEventStore(
        max_events_per_stream=10, max_streams_per_session=8, max_bytes_per_session=2000
    )
    started = time.process_time()  # CPU seconds: a busy machine does not count
    for n in range(100_000):
        store.store_nowait(f"s{n % 10}", event(n % 97, n, 1 + n % 40))
    assert time.process_time() - started < 5
    stats = store.statistics()
    assert stats["bytes"] <= 10 * 2000 and stats["streams"] <= 10 * 8 and stats["events"] <= 10 * 8 * 10


@pytest.mark.parametrize(
    "bounds",
    [
        {"max_events_per_stream": 0},
        {"max_streams_per_session": 0},
        {"max_bytes_per_session": 0},
        {"max_sessions": -1},
        {"max_bytes": 0},
    ],
)
def test_bounds_must_be_positive(bounds: dict[str, int]) -> None:
    (name,) = bounds
    with pytest.raises(ValueError, match=f"{name} must be at least 1"):
        InMemoryEventStore(**bounds)


@pytest.mark.parametrize(
    "config",
    [ServerConfig(event_store_factory=lambda: InMemoryEventStore(max_streams_per_session=3))],
)
async def test_a_session_keeps_its_newest_streams(client: Client, app: MCPApp) -> None:
    await client.initialize()
    for n in range(6):
        response = await client.post(call_body(10 + n, "blob", {"size": 10 + n}))
        message = await client.read_message(response)
        assert message["result"]["content"][0]["text"] == "x" * (10 + n)
    await settle()
    stats = app.statistics()["event_store"]
    assert stats["sessions"] == 1 and stats["streams"] == 3 and stats["events"] == 3
    assert 0 < stats["bytes"] < 3 * 200


async def test_listen_filter_bound_over_http(app: MCPApp) -> None:
    from .test_modern import Modern

    async with open_asgi_client(app) as asgi:
        wanted = {"notifications": {"resourceSubscriptions": [f"test://{n}" for n in range(4)]}}
        status, body = await Modern(asgi).call("subscriptions/listen", wanted)
        assert status == 400
        assert body["error"] == {"code": -32602, "message": "Too many subscriptions (limit 3)"}
