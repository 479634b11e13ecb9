"""One owner at a time for a 2025 session across workers (fencing), with a real redis-server and two
apps in one process, workers ``a`` and ``b``.

The session's lease and its record carry an epoch, raised by one at each adoption; every write of an
owner compares its lease, epoch included, with what Redis holds.  Here: an owner that stopped beating
(as a paused one does) is adopted from; its later write is refused and it lets the session go; a
request at it then is not served from its copy, it gets the session back (its home) under the next
epoch with what the adopter changed.  And what a Redis writer without the key ring can write: a lease,
a heartbeat, a draining mark of its own, a live owner's heartbeat deleted or written back from earlier,
a record of an earlier epoch written back: none of it moves the session or makes two owners.
(The real pause, SIGSTOP of a worker process, is in ``test_fencing.py``.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import test_redis
import trio
from test_redis import STARTUP, RedisServer, call, eventually, initialized_session, legacy_headers, worker

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._protocol.cluster import SESSION_TAG, heartbeat_key, lease_key, record_key
from mcp_trio.redis import RedisNotificationBus
from mcp_trio.redis.sessions import SessionLeases
from mcp_trio.testing import ASGIClient, open_asgi_client

redis = test_redis.redis
"""The fixture of test_redis.py: a redis-server of its own for each test, killed after it."""
key_ring = test_redis.key_ring
"""The fixture of test_redis.py (autouse): the workers share a key ring."""

STEP = 10.0
"""Deadline of one request of a test (an adoption waits a heartbeat interval and a half)."""


@dataclass
class Worker:
    name: str
    bus: RedisNotificationBus
    asgi: ASGIClient

    @property
    def leases(self) -> SessionLeases:
        return self.bus.session_leases

    async def post(self, session_id: str, body: dict[str, Any]) -> tuple[int, bytes]:
        with trio.fail_after(STEP):
            response = await self.asgi.request(
                "POST", headers=legacy_headers(session_id), body=json.dumps(body).encode()
            )
            return response.status, await response.read()


@asynccontextmanager
async def two_apps(url: str) -> AsyncIterator[tuple[Worker, Worker]]:
    (server_a, bus_a), (server_b, bus_b) = worker(url), worker(url)
    async with (
        open_asgi_client(MCPApp(server_a, ServerConfig(worker_id="a"))) as asgi_a,
        open_asgi_client(MCPApp(server_b, ServerConfig(worker_id="b"))) as asgi_b,
    ):
        await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "both connected")
        yield Worker("a", bus_a, asgi_a), Worker("b", bus_b, asgi_b)


async def open_session(at: Worker) -> str:
    with trio.fail_after(STEP):
        session_id = await initialized_session(at.asgi)
    status, _ = await at.post(session_id, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert status == 202
    return session_id


def ping(n: int = 2) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": "ping"}


def set_level(level: str, n: int = 3) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": "logging/setLevel", "params": {"level": level}}


def keys_of(bus: RedisNotificationBus, session_id: str) -> tuple[str, str]:
    tag = bus._keys.tag(SESSION_TAG, session_id.encode())
    return record_key(bus.prefix, tag), lease_key(bus.prefix, tag)


async def stop_beating(bus: RedisNotificationBus, port: int) -> None:
    """The worker's heartbeat stops (its loop sleeps an hour after its next beat) and is gone from
    Redis, as a paused worker's expires: it does not know."""
    bus.worker_link.heartbeat_interval = 3600.0
    await trio.sleep(1.2)  # its loop's current sleep ends (1 s), it beats once more, then sleeps long
    assert bus.worker_link.worker_id is not None
    await call(port, "DEL", heartbeat_key(bus.prefix, bus.worker_link.worker_id))


async def just_beaten(bus: RedisNotificationBus, port: int) -> None:
    """Until the worker's heartbeat was renewed (its next beat is a heartbeat interval away)."""
    assert bus.worker_link.worker_id is not None
    key = heartbeat_key(bus.prefix, bus.worker_link.worker_id)
    before = await call(port, "GET", key)
    with trio.fail_after(5):
        while await call(port, "GET", key) == before:  # noqa: ASYNC110 - Redis has no event for it
            await trio.sleep(0.01)


async def test_a_stale_owner_is_fenced_off_and_gets_its_session_back_under_the_next_epoch(
    redis: RedisServer,
) -> None:
    async with two_apps(redis.url) as (a, b):
        session_id = await open_session(a)
        assert a.leases.epoch_of(session_id) == 1
        record, lease = keys_of(a.bus, session_id)
        assert (await call(redis.port, "GET", lease)).startswith(b"1 held a ")
        await stop_beating(a.bus, redis.port)

        assert (await b.post(session_id, set_level("error")))[0] == 200  # adopted by b, changed there
        assert b.leases.epoch_of(session_id) == 2 and b.bus.statistics()["adopted"] == 1
        assert (await call(redis.port, "GET", lease)).startswith(b"2 held b ")
        await eventually(lambda: b"error" in b.leases._records.get(session_id, b""), 5, "b's record")

        # a does not know yet: its heartbeat was renewed less than half its TTL ago at most...
        await eventually(lambda: a.leases.must_confirm(session_id), 5, "a's leases no longer sure")
        # ... and once it is not sure, a request at a is not served from its copy (level debug): a
        # confirms, finds the lease b's, lets its copy go, and asks b for the session back (its home).
        status, body = await a.post(session_id, ping())
        assert status == 200, body
        assert a.bus.statistics()["lost"] == 1 and a.bus.statistics()["confirm_lost"] == 1
        assert a.leases.epoch_of(session_id) == 3  # handed back by b, taken by a under the next epoch
        assert b.leases.epoch_of(session_id) is None
        peek = await b.leases.peek_session(session_id)
        assert peek.record is not None and peek.record.log_level == "error"  # b's change survived
        assert (await call(redis.port, "GET", lease)).startswith(b"3 held a ")
        assert (await call(redis.port, "GET", record)).startswith(b"mtr1 ")


async def test_a_write_of_an_older_epoch_is_refused_and_its_owner_lets_the_session_go(
    redis: RedisServer,
) -> None:
    async with two_apps(redis.url) as (a, b):
        session_id = await open_session(a)
        stale = a.leases._records[session_id]
        await stop_beating(a.bus, redis.port)
        assert (await b.post(session_id, set_level("error")))[0] == 200
        await eventually(lambda: b"error" in b.leases._records.get(session_id, b""), 5, "b's record")
        assert b.bus.statistics()["adopted"] == 1
        await trio.sleep(0.3)  # b's writer has written it
        lost: list[str] = []
        on_lost = a.leases.on_lost
        assert on_lost is not None

        def seen_lost(sid: str) -> None:
            lost.append(sid)
            on_lost(sid)

        a.leases.on_lost = seen_lost
        a.leases.session_recorded(session_id, stale)  # a's record of epoch 1 (level unset): refused
        await eventually(lambda: lost == [session_id], 5, "a lets it go")
        assert a.bus.statistics()["lost"] == 1 and a.leases.epoch_of(session_id) is None
        peek = await a.leases.peek_session(session_id)
        assert peek.state == "owned" and peek.owner == "b"
        assert peek.record is not None and peek.record.log_level == "error"  # b's, not a's


async def test_what_a_writer_without_the_key_writes_moves_no_session(redis: RedisServer) -> None:
    async with two_apps(redis.url) as (a, b):
        session_id = await open_session(a)
        record, lease = keys_of(a.bus, session_id)
        beat = heartbeat_key(a.bus.prefix, "a")
        signed_lease = await call(redis.port, "GET", lease)
        signed_record = await call(redis.port, "GET", record)
        assert b.bus.worker_link.worker_id is not None

        # A lease of its own (the unsigned form of earlier releases, or a signed one with an epoch
        # changed): refused as forged; b does not adopt (404), a keeps serving.
        for forged in (f"b {b.bus.instance_id}".encode(), signed_lease.replace(b"1 held a", b"2 held b")):
            await call(redis.port, "SET", lease, forged)
            assert (await b.leases.peek_session(session_id)).state == "forged"
            assert (await b.post(session_id, ping()))[0] == 404
            assert (await a.post(session_id, ping()))[0] == 200
        await call(redis.port, "SET", lease, signed_lease)

        # A heartbeat of its own for a (a draining mark, or garbage): no proof of anything, b
        # neither adopts nor waits for a hand-over (503); a notices at its next beat.
        for forged in (f"{a.bus.instance_id} draining".encode(), b"x"):
            await just_beaten(a.bus, redis.port)
            await call(redis.port, "SET", beat, forged, "PX", "60000")
            assert (await b.leases.peek_session(session_id)).state == "unavailable"
            assert (await b.post(session_id, ping()))[0] == 503
        await eventually(lambda: a.bus.statistics()["heartbeats_changed"] >= 1, 5, "a saw it")

        # a's live heartbeat deleted, or written back from earlier (older than its TTL): b finds a
        # not beating, waits a heartbeat interval and a half, and by then a has beaten: not taken.
        await just_beaten(a.bus, redis.port)
        old = await call(redis.port, "GET", beat)
        await trio.sleep(a.bus.heart.ttl + 0.2)
        for tamper in (("DEL", beat), ("SET", beat, old, "PX", "60000")):
            await just_beaten(a.bus, redis.port)
            await call(redis.port, *tamper)
            peek = await b.leases.peek_session(session_id)
            assert peek.state == "taken"
            assert not await b.leases.take_session(peek)
            assert (await b.post(session_id, ping()))[0] == 503  # a's: b is not its home
        assert b.bus.statistics()["adopted"] == 0
        assert a.leases.epoch_of(session_id) == 1
        assert (await call(redis.port, "GET", lease)) == signed_lease
        assert (await a.post(session_id, ping()))[0] == 200

        # A record or a lease of another epoch than the other (an older one written back): refused.
        await stop_beating(a.bus, redis.port)
        assert (await b.post(session_id, ping()))[0] == 200  # adopted: epoch 2
        current_record = await call(redis.port, "GET", record)
        await call(redis.port, "SET", record, signed_record)  # epoch 1's record, lease of epoch 2
        assert (await a.leases.peek_session(session_id)).state == "forged"
        await call(redis.port, "SET", record, current_record)
        await call(redis.port, "SET", lease, signed_lease)  # epoch 1's lease (a's), record of epoch 2
        assert (await a.leases.peek_session(session_id)).state == "forged"
        counts = a.bus.statistics()
        assert counts["records_forged"] >= 1 and counts["adopted"] == 0
