"""What a 2025 session's end leaves in a real Redis, by how it ended on its worker (its custody,
``_protocol/custody.py``): closed while it was being handed over, it ends as handed over (its record and
events stay, the lease is given up, and the next worker adopts it and replays its events); lost to
another worker while it was ending or being handed over, its record and events are that worker's (its
end here deletes nothing, and no lease is given up that this worker does not hold).

Two apps in one process, each with a Redis bus and a Redis event store; redis-server as in
test_redis.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import test_redis
import trio
from mcp_http import POST_HEADERS
from test_redis import INFO, STARTUP, RedisServer, bus_of, call, eventually, legacy_headers, worker

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._protocol.custody import Custody
from mcp_trio._transport.session import Session
from mcp_trio.redis import RedisEventStore
from mcp_trio.testing import ASGIClient, open_asgi_client

STEP = 5.0
"""Deadline of one wait for a state of a test."""

redis = test_redis.redis
"""The fixture of test_redis.py: a redis-server of its own for each test, killed after it."""
key_ring = test_redis.key_ring
"""The fixture of test_redis.py (autouse): the workers' shared key ring."""


def worker_app(server: RedisServer, name: str) -> tuple[MCPApp, RedisEventStore]:
    store = RedisEventStore(server.url, timeout=1.0, retry_max=0.2)
    config = ServerConfig(
        worker_id=name, drain_delay=0, shutdown_grace=0.5, event_store_factory=lambda: store
    )
    return MCPApp(worker(server.url)[0], config), store


def rpc(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


async def session_with_an_event(client: ASGIClient) -> tuple[str, str, str]:
    """A new initialized session, and one tools/call answered on an SSE stream: the session id, the
    id of that stream's priming event and the answer's text."""
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO}
    response = await client.request("POST", headers=POST_HEADERS, body=rpc(1, "initialize", init))
    assert response.status == 200, await response.read()
    await response.read()
    session_id = response.headers["mcp-session-id"]
    headers = legacy_headers(session_id)
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert (await client.request("POST", headers=headers, body=initialized)).status == 202
    echo = rpc(2, "tools/call", {"name": "echo", "arguments": {"text": "kept for the next owner"}})
    response = await client.request("POST", headers=headers, body=echo)
    priming, answer = await response.next_event(), await response.next_event()
    assert priming is not None and answer is not None and "kept for the next owner" in answer.data
    await response.aclose()
    return session_id, priming.id, answer.data


def session_of(app: MCPApp, session_id: str) -> Session:
    session = app._manager.get(session_id)
    assert session is not None
    return session


async def events_in_redis(server: RedisServer) -> list[bytes]:
    keys: list[bytes] = await call(server.port, "KEYS", "mcp_trio:events:*")
    return keys


async def test_a_session_closed_during_its_hand_over_is_adopted_with_its_events(
    redis: RedisServer,
) -> None:
    """Worker a drains with a call of the session in flight; while the hand-over waits for it, the
    session is closed on a (what its idle timeout or the app's end does): it ends as handed over. Its
    events stay in Redis, its lease is given up with its last record, and worker b adopts it on a GET
    that resumes the call's stream: the answer sent on a is replayed by b."""
    (app_a, store_a), (app_b, _) = worker_app(redis, "a"), worker_app(redis, "b")
    bus_a, bus_b = bus_of(app_a.server), bus_of(app_b.server)
    async with open_asgi_client(app_b) as on_b:
        async with open_asgi_client(app_a) as on_a:
            await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "connected")
            await eventually(lambda: store_a.state == "connected", STARTUP, "the store connected")
            session_id, resume_from, answer = await session_with_an_event(on_a)
            session = session_of(app_a, session_id)
            sleep = rpc(3, "tools/call", {"name": "sleep", "arguments": {"seconds": 60}})
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    slow = await on_a.request("POST", headers=legacy_headers(session_id), body=sleep)
                    assert slow.status == 200
                    await eventually(lambda: app_a.statistics()["inflight"] == 1, STEP, "in flight")
                    nursery.start_soon(app_a.aclose)  # drains: hands the session over
                    await eventually(lambda: session.custody is Custody.MOVING, STEP, "handing over")
                    session.close()
                    assert session.custody is Custody.MOVED
            assert bus_a.statistics()["released"] == 1
            assert await events_in_redis(redis) != []
        headers = {**legacy_headers(session_id), "accept": "text/event-stream", "last-event-id": resume_from}
        with trio.fail_after(STEP):
            resumed = await on_b.request("GET", headers=headers)
            assert resumed.status == 200
            replayed = await resumed.next_event()
            while replayed is not None and not replayed.data:  # a priming event of b's own first
                replayed = await resumed.next_event()
        assert replayed is not None and replayed.data == answer
        await resumed.aclose()
        assert bus_b.statistics()["adopted"] == 1


@pytest.mark.parametrize("when", ["ending", "handed over"])
async def test_a_session_lost_while_it_ends_leaves_its_record_and_events(
    redis: RedisServer, when: str
) -> None:
    """Another worker holds the lease of a session of worker a (what the link finds when its refresh
    or a record write is refused) while the session ends on a (DELETE, idle timeout) or while a hands
    it over: it is that worker's now, so its end on a deletes neither its record nor its events, and a
    gives up no lease."""
    app_a, store_a = worker_app(redis, "a")
    bus_a = bus_of(app_a.server)
    async with open_asgi_client(app_a) as on_a:
        await eventually(lambda: bus_a.state == "connected", STARTUP, "connected")
        await eventually(lambda: store_a.state == "connected", STARTUP, "the store connected")
        session_id, _, _ = await session_with_an_event(on_a)
        session = session_of(app_a, session_id)
        assert await store_a.flush(STEP)
        with trio.fail_after(STEP):
            async with trio.open_nursery() as nursery:
                if when == "ending":
                    session.close()
                    assert session.custody is Custody.CLOSING
                else:
                    sleep = rpc(3, "tools/call", {"name": "sleep", "arguments": {"seconds": 60}})
                    slow = await on_a.request("POST", headers=legacy_headers(session_id), body=sleep)
                    assert slow.status == 200
                    await eventually(lambda: app_a.statistics()["inflight"] == 1, STEP, "in flight")
                    ownership = app_a._legacy.ownership
                    assert ownership is not None
                    nursery.start_soon(ownership.hand_over, session)  # this block waits for its end
                    await eventually(lambda: session.custody is Custody.MOVING, STEP, "handing over")
                # what the link does when it finds the lease is another worker's:
                bus_a.session_leases._lost(session_id)
                assert session.custody is Custody.LOST
            await session.closed.wait()
            await eventually(lambda: app_a.statistics()["sessions"] == 0, STEP, "ended on a")
        assert await store_a.flush(STEP)
        await trio.sleep(0.3)  # the record writer's turn: it would drop the record now
        assert await events_in_redis(redis) != []
        assert len(await call(redis.port, "KEYS", "mcp-trio:session:*")) == 1
        stats = bus_a.statistics()
        assert stats["lost"] == 1 and stats["released"] == 0, stats
