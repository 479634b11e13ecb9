"""The events kept for resumption, shared by workers through Redis: :class:`mcp_trio.redis.RedisEventStore`.

The store alone against a redis-server of its own: store, flush, replay, positions, release, forget;
two stores with the same key ring as two workers (what one writes, the other replays after ``flush``);
the per-session bounds, enforced in Redis as in memory; the TTL; entries written into Redis by hand
(altered, copied to another session or stream, signed by another ring) dropped and counted; Redis
killed and started again (the store goes on in memory, the writer catches up) or frozen (a replay
answers within the timeout); a full queue; then an app that runs the writer, and ``--redis``.

redis-server comes from Debian (the fixtures of test_redis.py start it on a free port and kill it
after the test).  Without it the tests are skipped when run by hand, and fail under the test command.
"""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import coredis
import test_redis
import trio
from test_redis import RedisServer, command

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio._cli.serve import _use_redis
from mcp_trio._protocol.cluster import SESSION_TAG, ClusterKeys, events_key, seal_event_entry
from mcp_trio.demo import build_demo_server
from mcp_trio.redis import RedisEventStore
from mcp_trio.server import InMemoryEventStore, StoredEvent
from mcp_trio.testing import open_asgi_client

STARTUP = 10.0
STEP = 5.0
"""Deadline of one wait for a state of a test."""
TIMEOUT = 1.0
"""The stores' command timeout in these tests."""
SECRET = b"test cluster key ring, 32 bytes!"
"""The same ring as test_redis.SECRET (base64 there)."""
OTHER_RING = ClusterKeys([b"a key that is not the cluster's!"])

redis = test_redis.redis
"""The fixture of test_redis.py: a redis-server of its own for each test, killed after it."""
key_ring = test_redis.key_ring
"""The fixture of test_redis.py (autouse): MCP_TRIO_REQUEST_STATE_SECRET for the stores and workers."""


def make_store(server: RedisServer, **options: Any) -> RedisEventStore:
    options.setdefault("timeout", TIMEOUT)
    options.setdefault("retry_max", 0.2)
    return RedisEventStore(server.url, **options)


async def eventually(predicate: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``predicate`` (bounded in time and count)."""
    for _ in range(int(within / 0.01) + 1):
        if predicate():
            return
        await trio.sleep(0.01)
    raise AssertionError(f"{what}: not within {within} s")


@asynccontextmanager
async def running(*stores: RedisEventStore) -> AsyncIterator[None]:
    """Each store's writer (``run``), connected; cancelled after the block."""
    async with trio.open_nursery() as nursery:
        for store in stores:
            await nursery.start(store.run)
            await eventually(lambda s=store: s.state == "connected", STARTUP, "the store connected")
        yield
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def raw_client(server: RedisServer) -> AsyncIterator[coredis.Redis[bytes]]:
    """A plain coredis client, to look at (and write into) Redis by hand."""
    client: coredis.Redis[bytes] = coredis.Redis.from_url(server.url)
    async with client:
        yield client


def key_of(session_id: str, prefix: str = "mcp_trio") -> str:
    return events_key(prefix, ClusterKeys([SECRET]).tag(SESSION_TAG, session_id.encode()))


def event(stream_id: int, seq: int, size: int = 8) -> StoredEvent:
    return StoredEvent(stream_id, seq, (b"%d-%d:" % (stream_id, seq)).ljust(size, b"x"))


def stats(store: RedisEventStore) -> dict[str, Any]:
    return store.statistics()


# -- the store alone ------------------------------------------------------------------------------


async def test_store_replay_positions_release_forget(redis: RedisServer) -> None:
    first, second = make_store(redis), make_store(redis)
    async with running(first, second):
        for seq in range(5):
            await first.store("s1", event(0, seq))
        for seq in (1, 2, 4):  # a gap (a priming event's seq, say)
            first.store_nowait("s1", event(3, seq))
        await first.store("s2", event(1, 0))
        first.store_nowait("s3", event(0, 2))
        first.store_nowait("s3", event(0, 1))  # not after the stream's last one: Redis keeps it out
        assert await first.flush(STEP)
        stored = stats(first)
        assert (stored["stored"], stored["written"], stored["stale"]) == (11, 10, 1)
        assert (stored["outbox"], stored["dropped"]) == (0, 0)
        assert await second.replay_after("s3", 0, -1) == [event(0, 2)]

        # the worker that wrote them replays from memory; another one from Redis, the same events
        mine = await first.replay_after("s1", 0, 1)
        assert [e.seq for e in mine] == [2, 3, 4] and stats(first)["replays_local"] == 1
        assert await second.replay_after("s1", 0, 1) == mine
        assert await second.replay_after("s1", 3, 1) == [event(3, 2), event(3, 4)]
        assert await second.replay_after("s1", 7, -1) == []  # a stream with no events
        assert await second.replay_after("s9", 0, -1) == []  # a session with none
        assert stats(second)["replays_redis"] == 5
        assert stats(second)["forged"] == 0

        assert await second.positions("s1") == {0: 4, 3: 4}
        assert await second.positions("s2") == {1: 0}
        assert await second.positions("nothing") == {}

        # the adopting worker goes on numbering; its replay merges Redis and what it stored since
        await second.store("s1", event(0, 5))
        assert [e.seq for e in await second.replay_after("s1", 0, 2)] == [3, 4, 5]
        assert await second.flush(STEP)
        assert await second.positions("s1") == {0: 5, 3: 4}

        async with raw_client(redis) as client:
            key = key_of("s1")
            assert await client.exists([key]) == 1
            ttl = await client.pttl(key)
            assert 3_590_000 < ttl <= 3_600_000  # the default TTL, refreshed by the last write
            assert "s1" not in key and not any(b"s1" in k for k in await client.keys("*"))

            # release: the memory copy only; the session's end there then deletes nothing in Redis
            first.release("s1")
            assert stats(first)["sessions"] == 2  # s2 and s3 are left
            await first.forget_session("s1")
            assert await first.flush(STEP)
            assert await client.exists([key]) == 1
            assert [e.seq for e in await first.replay_after("s1", 0, 3)] == [4, 5]  # from Redis now

            # forget_session: the session has ended: its events go from memory and from Redis
            await second.forget_session("s1")
            assert await second.flush(STEP)
            assert await client.exists([key]) == 0
            await first.forget_session("s2")
            assert await first.flush(STEP)
            assert await client.exists([key_of("s2")]) == 0
    assert stats(first)["state"] == "stopped"


async def test_bounds_are_the_memory_stores_in_redis(redis: RedisServer) -> None:
    bounds = {"max_events_per_stream": 3, "max_streams_per_session": 3, "max_bytes_per_session": 200}
    writer, reader = make_store(redis, **bounds), make_store(redis, **bounds)
    memory = InMemoryEventStore(**bounds)
    # a stream 0 (the GET stream) and POST streams, events of various sizes; one larger than the bound
    events = [event(0, seq, 10) for seq in range(5)]
    events += [event(stream, seq, 25 + 5 * stream) for stream in range(1, 6) for seq in range(2)]
    events += [event(2, 7, 40), event(0, 9, 150), event(6, 0, 201), event(4, 5, 20)]
    async with running(writer, reader):
        for item in events:
            await writer.store("s", item)
            await memory.store("s", item)
        assert await writer.flush(STEP)
        for stream in range(7):
            expected = await memory.replay_after("s", stream, -1)
            assert await reader.replay_after("s", stream, -1) == expected, stream
        positions = await reader.positions("s")
        assert positions == memory.last_seqs("s") and len(positions) <= 3
        async with raw_client(redis) as client:
            fields = await client.hgetall(key_of("s"))
            kept = memory.statistics()
            entries = [name for name in fields if name.startswith(b"e")]
            assert len(entries) == kept["events"] and int(fields[b"B"]) == kept["bytes"] <= 200
            assert await client.pttl(key_of("s")) > 0

    # the per-stream bound alone, with many events: never more than 3 kept, and the newest
    async with running(writer):
        for seq in range(200):
            writer.store_nowait("t", event(0, seq))
        assert await writer.flush(STEP)
        assert [e.seq for e in await reader.replay_after("t", 0, -1)] == [197, 198, 199]
        assert stats(writer)["batches"] >= 1 and stats(writer)["written"] == len(events) - 1 + 200

    # workers whose bounds differ share a session's hash: the smaller bounds trim it, nothing is reset
    wide = make_store(redis, max_events_per_stream=10, max_streams_per_session=5)
    async with running(wide, writer):
        for stream in range(5):
            for seq in range(10):
                wide.store_nowait("u", event(stream, seq))
        assert await wide.flush(STEP)
        assert [e.seq for e in await reader.replay_after("u", 4, -1)] == [7, 8, 9]  # its newest 3
        wide_reader = make_store(redis, max_events_per_stream=10, max_streams_per_session=5)
        assert len(await wide_reader.positions("u")) == 5
        writer.store_nowait("u", event(4, 10))
        assert await writer.flush(STEP)
        assert stats(writer)["resets"] == 0 and stats(wide)["resets"] == 0
        assert [e.seq for e in await wide_reader.replay_after("u", 4, -1)] == [8, 9, 10]
        assert await wide_reader.positions("u") == {0: 9, 3: 9, 4: 10}  # stream 0, the 2 most recent


async def test_ttl_option(redis: RedisServer) -> None:
    store = make_store(redis, ttl=2.0)
    async with running(store), raw_client(redis) as client:
        await store.store("s", event(0, 0))
        assert await store.flush(STEP)
        assert 0 < await client.pttl(key_of("s")) <= 2000
        await client.script_flush()  # Redis forgets the writer's script: it is loaded again
        await store.store("s", event(0, 1))
        assert await store.flush(STEP)
        assert stats(store)["written"] == 2 and stats(store)["write_errors"] == 0
        await client.pexpire(key_of("s"), 60_000)
        store.touch("s")  # the TTL again
        store.touch("never-stored")  # creates nothing
        assert await store.flush(STEP)
        assert 0 < await client.pttl(key_of("s")) <= 2000
        assert await client.exists([key_of("never-stored")]) == 0
        for _ in range(200):  # expired within 10 s
            if not await client.exists([key_of("s")]):
                break
            await trio.sleep(0.05)
        else:
            raise AssertionError("the key did not expire")
        reader = make_store(redis)
        assert await reader.replay_after("s", 0, -1) == []


async def test_forged_entries_are_dropped_and_counted(redis: RedisServer) -> None:
    keys = ClusterKeys([SECRET])
    writer, reader = make_store(redis), make_store(redis)
    async with running(writer), raw_client(redis) as client:
        for seq in range(3):
            await writer.store("victim", event(0, seq))
        await writer.store("other", event(0, 0))
        assert await writer.flush(STEP)
        victim, other = key_of("victim"), key_of("other")
        genuine = await client.hget(victim, "e0:1")
        assert genuine is not None

        altered = genuine[:-1] + b"!"  # the data changed
        await client.hset(victim, {"e0:0": altered})
        # a valid entry of another session, copied into this one's stream 0
        copied = (await client.hget(other, "e0:0")) or b""
        await client.hset(victim, {"e0:2": copied})
        assert await reader.replay_after("victim", 0, -1) == [event(0, 1)]
        assert stats(reader)["forged"] == 2

        # signed by another ring; unsigned; an entry of stream 0 moved to stream 1
        await client.hset(victim, {"e0:0": seal_event_entry(OTHER_RING, victim, 0, 0, b"injected")})
        await client.hset(victim, {"e0:2": b"plain text, no signature"})
        assert await reader.replay_after("victim", 0, -1) == [event(0, 1)]
        assert stats(reader)["forged"] == 4
        await client.hset(victim, {"s1": b"1 2 8 1", "e1:1": genuine, "S": b"0 1"})
        assert await reader.replay_after("victim", 1, -1) == []
        assert stats(reader)["forged"] == 5
        # positions: the last entry of each stream, checked too (stream 0's is the unsigned one)
        assert await reader.positions("victim") == {}
        assert stats(reader)["forged"] == 7

        # the genuine entry, resealed properly for its key: accepted (the check is the signature)
        await client.hset(victim, {"e0:2": seal_event_entry(keys, victim, 0, 2, b"resealed")})
        assert await reader.replay_after("victim", 0, 0) == [event(0, 1), StoredEvent(0, 2, b"resealed")]

        # garbage the scripts cannot use: the writer starts the session's hash again
        await client.hset(victim, {"S": b"0 0 0 x"})
        await writer.store("victim", event(0, 3))
        assert await writer.flush(STEP)
        assert stats(writer)["resets"] == 1
        assert await reader.replay_after("victim", 0, -1) == [event(0, 3)]
        await client.delete([victim])
        await client.set(victim, b"a string, not a hash")
        await writer.store("victim", event(0, 4))
        assert await writer.flush(STEP)
        assert stats(writer)["resets"] == 2
        assert await reader.replay_after("victim", 0, -1) == [event(0, 4)]


async def test_redis_down_then_back_the_writer_catches_up(redis: RedisServer) -> None:
    writer = make_store(redis, retry_max=0.2)
    async with running(writer):
        await writer.store("s", event(0, 0))
        assert await writer.flush(STEP)
        await redis.kill()
        for seq in range(1, 6):  # stored in memory, queued for Redis
            await writer.store("s", event(0, seq))
        await eventually(lambda: writer.state == "disconnected", STEP, "the outage noticed")
        assert [e.seq for e in await writer.replay_after("s", 0, 0)] == [1, 2, 3, 4, 5]
        assert stats(writer)["outbox"] == 5
        with trio.fail_after(TIMEOUT + 1):
            assert not await writer.flush(0.2)

        # another worker: Redis unreachable, its replay has nothing and says so, at once
        reader = make_store(redis)
        with trio.fail_after(TIMEOUT + 1):
            assert await reader.replay_after("s", 0, -1) == []
        assert stats(reader)["unavailable"] == 1

        await redis.start()  # same port, empty
        assert await writer.flush(STEP)
        assert writer.state == "connected" and stats(writer)["outbox"] == 0
        assert [e.seq for e in await reader.replay_after("s", 0, -1)] == [1, 2, 3, 4, 5]
        assert await reader.positions("s") == {0: 5}


async def test_frozen_redis_replay_answers_in_time(redis: RedisServer) -> None:
    writer, reader = make_store(redis), make_store(redis)
    async with running(writer):
        await writer.store("s", event(0, 0))
        assert await writer.flush(STEP)
        assert redis.process is not None
        redis.process.send_signal(signal.SIGSTOP)  # accepts connections, answers nothing
        try:
            start = trio.current_time()
            with trio.fail_after(TIMEOUT + 2):
                assert await reader.replay_after("s", 0, -1) == []
            assert trio.current_time() - start >= TIMEOUT * 0.9
            with trio.fail_after(TIMEOUT + 2):
                try:
                    await reader.positions("s")
                except ConnectionError:
                    pass
                else:
                    raise AssertionError("positions answered without Redis")
            assert stats(reader)["unavailable"] == 2
            await writer.store("s", event(0, 1))  # the hot path does not wait
            with trio.fail_after(TIMEOUT + 2):
                assert not await writer.flush(0.3)
        finally:
            redis.process.send_signal(signal.SIGCONT)
        assert await writer.flush(STEP + TIMEOUT)
        assert [e.seq for e in await reader.replay_after("s", 0, -1)] == [0, 1]


async def test_full_queue_drops_and_counts(redis: RedisServer) -> None:
    store = make_store(redis, outbox=3, outbox_bytes=1000)
    for seq in range(5):  # no writer running: the queue fills
        await store.store("s", event(0, seq))
    store.store_nowait("s", event(1, 0, 999))  # over outbox_bytes
    counted = stats(store)
    assert (counted["outbox"], counted["dropped"], counted["stored"]) == (3, 3, 6)
    assert [e.seq for e in await store.replay_after("s", 0, -1)] == [0, 1, 2, 3, 4]  # memory keeps all
    assert not await store.flush(STEP)  # nothing writes: False at once
    async with running(store):
        assert await store.flush(STEP)
    reader = make_store(redis)
    assert [e.seq for e in await reader.replay_after("s", 0, -1)] == [0, 1, 2]
    assert await reader.replay_after("s", 1, -1) == []


# -- in an app ------------------------------------------------------------------------------------


async def test_the_app_runs_the_writer(redis: RedisServer) -> None:
    store = make_store(redis)
    app = MCPApp(MCPServer("events", "1"), ServerConfig(event_store_factory=lambda: store))
    async with app.running():
        await eventually(lambda: store.state == "connected", STARTUP, "the app started the writer")
        assert app.statistics()["event_store"]["state"] == "connected"
    assert store.state == "stopped"


async def test_a_sessions_events_reach_redis_and_go_with_it(redis: RedisServer) -> None:
    """A 2025 session of a real app: its SSE events are written to Redis (another store replays them
    after ``flush``); DELETE ends the session and its events go from Redis too."""
    store, other = make_store(redis), make_store(redis)
    app = MCPApp(build_demo_server(), ServerConfig(event_store_factory=lambda: store))
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    async with open_asgi_client(app) as client:
        response = await client.request("POST", headers=headers, body=rpc(1, "initialize", init))
        session_id = response.headers["mcp-session-id"]
        await response.read()
        headers |= {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
        call = rpc(2, "tools/call", {"name": "echo", "arguments": {"text": "kept in Redis"}})
        response = await client.request("POST", headers=headers, body=call)
        priming = await response.next_event()
        message = await response.next_event()
        assert priming is not None and message is not None and "kept in Redis" in message.data
        await response.aclose()
        assert await store.flush(STEP)
        stream_id, seq = (int(part) for part in priming.id.split("-"))
        replayed = await other.replay_after(session_id, stream_id, seq)
        assert [event.data.decode() for event in replayed] == [message.data]
        assert stats(store)["written"] >= 1 and stats(other)["replays_redis"] == 1

        ended = await client.request("DELETE", headers={"mcp-session-id": session_id})
        assert ended.status in (200, 204)
        await eventually(lambda: stats(store)["sessions"] == 0, STEP, "the session ended")
        assert await store.flush(STEP)
        assert await other.replay_after(session_id, stream_id, seq) == []
        async with raw_client(redis) as raw:
            assert await raw.keys("mcp_trio:events:*") == set()


def rpc(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


def test_redis_option_sets_up_the_event_store() -> None:
    url = "redis://127.0.0.1:1"  # nothing connects: the app is not run
    app = MCPApp(MCPServer("events", "1"), ServerConfig(worker_id="a", max_event_store_bytes=1234))
    _use_redis(argparse.ArgumentParser(), app, url)
    store = app._manager.event_store
    assert isinstance(store, RedisEventStore)
    assert store.statistics()["max_bytes"] == 1234 and store.ttl == 3600.0

    mine = InMemoryEventStore()
    custom = MCPApp(MCPServer("events", "1"), ServerConfig(event_store_factory=lambda: mine))
    _use_redis(argparse.ArgumentParser(), custom, url)
    assert custom._manager.event_store is mine


async def test_a_write_of_a_session_whose_lease_is_another_workers_is_fenced_off(redis: RedisServer) -> None:
    """With a fence (what an app whose bus keeps sessions' leases sets), each operation of a session is
    written only while its lease key holds this worker's lease, or nothing: a worker that lost the
    session (adopted elsewhere while it was paused) neither appends to its events nor deletes them."""
    store = make_store(redis)
    leases = {"mine": b"1 held a i", "lost": b"1 held a i", "new": b"1 held a i"}
    store.fence = lambda sid: (f"lease:{sid}", leases[sid]) if sid in leases else None
    await command(redis.port, b"SET", b"lease:mine", b"1 held a i")
    await command(redis.port, b"SET", b"lease:lost", b"2 held b j")  # taken by b under the next epoch
    async with running(store):
        for session_id in ("mine", "lost", "new", "unlinked"):  # "new": no lease in Redis yet
            store.store_nowait(session_id, event(0, 1))
        assert await store.flush(STEP)
        counts = stats(store)
        assert (counts["written"], counts["fenced"]) == (3, 1), counts
        await store.store("lost", event(0, 2))
        store.forget_session_nowait("lost")  # its end on the stale owner deletes nothing either
        assert await store.flush(STEP)
        assert stats(store)["fenced"] == 3
    reader = make_store(redis)
    async with running(reader):
        assert await reader.replay_after("mine", 0, 0) == [event(0, 1)]
        assert await reader.replay_after("lost", 0, 0) == []
        assert await reader.replay_after("unlinked", 0, 0) == [event(0, 1)]
