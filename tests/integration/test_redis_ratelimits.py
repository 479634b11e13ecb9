"""Rate limits shared by workers through a real Redis (:class:`mcp_trio.redis.RedisRateLimiter`,
following the draft SEP-3304): a principal limited to N requests gets N across two workers, then 429
(``Retry-After``, ``RateLimit-*``, -32023) on both, and a new session does not reset it; Redis
stopped: each worker's own limits hold (never unlimited); Redis started again: shared again.  What a
writer to Redis without the key ring can do to a bucket makes the limits no looser than each
worker's own.  Then two ``mcp-trio demo --redis URL --rate-limit ...`` processes.

redis-server comes from Debian (the fixtures of test_redis.py start it on a free port and kill it
after the test).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import coredis
import test_redis
import trio
from mcp_http import POST_HEADERS, fetch_stats, http_client, serve_demo, wait_for
from test_redis import RedisServer

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.redis import RedisRateLimiter
from mcp_trio.server import HTTPRequestInfo, RateLimit
from mcp_trio.testing import ASGIClient, open_asgi_client

STARTUP = 10.0
STEP = 8.0
"""Deadline of one wait for a state of a test (Redis noticed gone, or back)."""
V2026 = "2026-07-28"
N = 5

redis = test_redis.redis
"""The fixture of test_redis.py: a redis-server of its own for each test, killed after it."""
key_ring = test_redis.key_ring
"""The fixture of test_redis.py (autouse): the workers share the key ring, and so principals' keys."""


async def who(request: HTTPRequestInfo) -> object:
    return request.header("x-user")


def limited_worker(url: str) -> MCPApp:
    """A worker whose principals get N requests a minute, shared through Redis at ``url``."""
    config = ServerConfig(
        authenticate=who,
        rate_limits=[RateLimit("principal", N, 60.0)],
        rate_limit_store_factory=lambda: RedisRateLimiter(url, retry_initial=0.05, retry_max=0.3),
    )
    return MCPApp(build_demo_server(), config)


def store_state(app: MCPApp) -> str:
    state: str = app.statistics()["rate_limit_store"]["state"]
    return state


async def eventually_state(apps: tuple[MCPApp, ...], state: str) -> None:
    for _ in range(int(STEP / 0.02)):
        if all(store_state(app) == state for app in apps):
            return
        await trio.sleep(0.02)
    raise AssertionError(f"the stores are not {state} within {STEP} s: {[store_state(a) for a in apps]}")


@asynccontextmanager
async def two_workers(url: str) -> AsyncIterator[tuple[tuple[MCPApp, ASGIClient], tuple[MCPApp, ASGIClient]]]:
    a, b = limited_worker(url), limited_worker(url)
    async with open_asgi_client(a) as asgi_a, open_asgi_client(b) as asgi_b:
        await eventually_state((a, b), "connected")
        yield (a, asgi_a), (b, asgi_b)


def meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }


async def ping(asgi: ASGIClient, user: str, request_id: int = 1) -> tuple[int, dict[str, str], Any]:
    """A 2026-era request (``tools/list``) from ``user``: the answer's status, headers and body."""
    request = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {"_meta": meta()}}
    headers = {**POST_HEADERS, "mcp-protocol-version": V2026, "mcp-method": "tools/list", "x-user": user}
    body = json.dumps(request)
    response = await asgi.request("POST", headers=headers, body=body.encode())
    return response.status, response.headers, await response.json()


async def admitted(asgi: ASGIClient, user: str, most: int) -> int:
    """How many requests of ``user`` are admitted in a row before a 429 (checked), at most ``most``."""
    for count in range(most + 1):
        status, headers, body = await ping(asgi, user, count)
        if status == 429:
            assert headers["ratelimit-limit"] == str(N) and headers["ratelimit-remaining"] == "0"
            assert 1 <= int(headers["retry-after"]) <= 60
            error = body["error"]
            assert error["code"] == -32023 and error["data"]["limit"] == N
            assert error["data"]["retryAfterMs"] > 0
            return count
        assert status == 200, body
    raise AssertionError(f"{user}: more than {most} requests admitted")


async def all_admitted(asgi: ASGIClient, user: str, count: int) -> None:
    for n in range(count):
        status, _, body = await ping(asgi, user, n)
        assert status == 200, body


@asynccontextmanager
async def raw_client(server: RedisServer) -> AsyncIterator[coredis.Redis[bytes]]:
    """A plain coredis client, to look at (and write into) Redis by hand."""
    client: coredis.Redis[bytes] = coredis.Redis.from_url(server.url)
    async with client:
        yield client


async def test_a_principal_gets_n_across_two_workers_then_429(redis: RedisServer) -> None:
    async with two_workers(redis.url) as ((a, asgi_a), (b, asgi_b)):
        with trio.fail_after(30):
            for n in range(N):  # alternating: 3 on a, 2 on b
                status, _, body = await ping(asgi_a if n % 2 == 0 else asgi_b, "alice", n)
                assert status == 200, body
            assert await admitted(asgi_a, "alice", 0) == 0
            assert await admitted(asgi_b, "alice", 0) == 0
            # a new 2025 session does not reset it: initialize is alice's request too
            info = {"name": "t", "version": "1"}
            params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}
            init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()
            response = await asgi_b.request("POST", headers={**POST_HEADERS, "x-user": "alice"}, body=init)
            assert response.status == 429 and (await response.json())["error"]["code"] == -32023
            assert await admitted(asgi_b, "bob", N) == N  # another principal has its own bucket
            # the buckets are Redis keys that expire, named by hashes (no principal in them)
            async with raw_client(redis) as raw:
                keys = await raw.keys("mcp_trio:rl:*")
                assert len(keys) == 2  # alice's and bob's
                for key in keys:
                    assert 0 < await raw.pttl(key) <= 60_000
            for app in (a, b):
                store = app.statistics()["rate_limit_store"]
                assert store["refused"] >= 1 and store["unavailable"] == 0


async def test_redis_stopped_local_limits_hold_restarted_shared_again(redis: RedisServer) -> None:
    async with two_workers(redis.url) as ((a, asgi_a), (b, asgi_b)):
        with trio.fail_after(60):
            await redis.kill()
            status, _, body = await ping(asgi_a, "zed")  # before the store noticed: its command fails
            assert status == 200, body
            await eventually_state((a, b), "disconnected")
            # each worker's own buckets: N each, never unlimited
            assert await admitted(asgi_a, "carol", 2 * N) == N
            assert await admitted(asgi_b, "carol", 2 * N) == N
            assert a.statistics()["rate_limit_store"]["not_connected"] >= N
            await redis.start()
            await eventually_state((a, b), "connected")
            await all_admitted(asgi_a, "dave", 3)
            assert await admitted(asgi_b, "dave", N) == N - 3  # b gives only what is left of dave's N


async def test_a_writer_without_the_key_ring_cannot_loosen_the_limits(redis: RedisServer) -> None:
    async with two_workers(redis.url) as ((a, asgi_a), (b, asgi_b)), raw_client(redis) as raw:
        with trio.fail_after(30):
            await all_admitted(asgi_a, "erin", N)
            (key,) = await raw.keys("mcp_trio:rl:*")
            await raw.hset(key, {"t": "1000000"})  # as if erin had a million tokens
            assert await admitted(asgi_a, "erin", N) == 0  # a's own bucket is empty
            assert await admitted(asgi_b, "erin", 2 * N) == N  # b: its own N, not a million
            await raw.delete([key])  # deleted: a full bucket, no more
            assert await admitted(asgi_a, "erin", N) == 0
            assert await admitted(asgi_b, "erin", N) == 0
            for forged in ("inf", "nan", "-5", "x"):  # out of range, or not a number: no error, no more
                await raw.hset(key, {"t": forged, "at": "0"})
                assert await admitted(asgi_b, "erin", N) == 0
            for app in (a, b):  # the script read every one of them without an error
                assert app.statistics()["rate_limit_store"]["unavailable"] == 0
            # a key of another type makes the script fail: the local buckets decide alone
            await raw.set(key, "junk")
            assert await admitted(asgi_b, "erin", N) == 0
            await all_admitted(asgi_a, "frank", 3)  # shared: 2 left for frank
            (frank,) = [k for k in await raw.keys("mcp_trio:rl:*") if k != key]
            await raw.set(frank, "junk")
            assert await admitted(asgi_b, "frank", 2 * N) == N  # b's own bucket decides alone: N, no more
            assert b.statistics()["rate_limit_store"]["unavailable"] >= 1


# -- two processes -------------------------------------------------------------------------------


async def test_two_demo_workers_share_a_method_limit(redis: RedisServer) -> None:
    flags = ("--redis", redis.url, "--rate-limit", "method:tools/list=3/min")
    async with (
        serve_demo(*flags, "--worker-id", "a") as worker_a,
        serve_demo(*flags, "--worker-id", "b") as worker_b,
    ):
        for worker_ in (worker_a, worker_b):
            await wait_for(worker_, lambda s: s["rate_limit_store"]["state"] == "connected", STARTUP, "up")
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
        body = json.dumps(request).encode()
        headers = {**POST_HEADERS, "mcp-protocol-version": V2026, "mcp-method": "tools/list"}
        statuses = []
        async with http_client() as http:
            for n in range(5):
                url = (worker_a if n % 2 == 0 else worker_b).url
                response = await http.post(url, headers=headers, content=body)
                statuses.append(response.status_code)
                if response.status_code == 429:
                    assert response.headers["ratelimit-limit"] == "3"
                    assert response.json()["error"]["data"]["remaining"] == 0
        assert statuses == [200, 200, 200, 429, 429]
        stats = await fetch_stats(worker_b)
        assert stats["rate_limited"]["method"] >= 1
