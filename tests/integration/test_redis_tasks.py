"""Tasks shared by workers through a real Redis: :class:`mcp_trio.redis.RedisTaskStore`.

The store alone (create/get/put/delete, TTL, the size cap under concurrent creators, garbage values,
a Redis that is down or frozen), then two demo apps as two workers (``worker_id`` ``a`` and ``b``) on
real hypercorn sockets sharing one redis-server, driven by raw 2026-07-28 HTTP requests: a task
created on one worker is read, cancelled and answered (``tasks/update``) through the other; a task is
its owner's only, on either worker; with Redis down a request is answered -32603 in bounded time.

redis-server comes from Debian (the fixtures of test_redis.py start it on a free port and kill it
after the test).  Without it the tests are skipped when run by hand, and fail under the test command.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest
import test_redis
import trio
from mcp_http import POST_HEADERS, http_client, serve_in_process
from test_redis import RedisServer, command

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._app.tasks import TASKS_EXTENSION, TaskManager
from mcp_trio._protocol.cluster import ClusterKeys, seal_bus_message, seal_task_record
from mcp_trio.auth import AccessToken
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import TaskStoreFull, TaskStoreUnavailable
from mcp_trio.redis import RedisTaskStore
from mcp_trio.server import TaskRecord

V2026 = "2026-07-28"
STARTUP = 10.0
STEP = 5.0
"""Deadline of one request (or one wait for a state) of a test."""
TIMEOUT = 1.0
"""The stores' command timeout in these tests."""
USER_HEADER = "x-test-user"

redis = test_redis.redis
"""The fixture of test_redis.py: a redis-server of its own for each test, killed after it."""
key_ring = test_redis.key_ring
"""The fixture of test_redis.py (autouse): the stores (and the workers) share a key ring."""


def record(task_id: str, *, ttl_ms: int | None = 60_000, worker: str | None = "a") -> TaskRecord:
    now = time.time()
    return TaskRecord(task_id=task_id, owner="", created_at=now, updated_at=now, ttl_ms=ttl_ms, worker=worker)


async def eventually(predicate: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``predicate`` (bounded in time and count)."""
    for _ in range(int(within / 0.01) + 1):
        if predicate():
            return
        await trio.sleep(0.01)
    raise AssertionError(f"{what}: not within {within} s")


@asynccontextmanager
async def running(store: RedisTaskStore, worker: str | None = "a") -> AsyncIterator[TaskManager]:
    """``store.run`` for a bare task manager (no app), connected; cancelled after the block."""
    manager = TaskManager(store, worker_id=worker)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run, manager)
        await eventually(lambda: store.state == "connected", STARTUP, "the store connected")
        yield manager
        nursery.cancel_scope.cancel()


async def raw(server: RedisServer, *args: str | bytes) -> bytes:
    return await command(server.port, *(a.encode() if isinstance(a, str) else a for a in args))


async def stored(server: RedisServer, key: str) -> bytes:
    """The string value of ``key``, as Redis holds it."""
    reply = await raw(server, "GET", key)
    header, _, rest = reply.partition(b"\r\n")
    assert header.startswith(b"$") and header != b"$-1", reply
    return rest[: int(header[1:])]


def record_json(value: TaskRecord) -> bytes:
    return json.dumps(value.to_json(), separators=(",", ":")).encode()


OTHER_RING = ClusterKeys([b"a key that is not the cluster's!"])


async def pttl(server: RedisServer, key: str) -> int:
    reply = await raw(server, "PTTL", key)
    assert reply.startswith(b":"), reply
    return int(reply[1:])


# -- the store alone ------------------------------------------------------------------------------


async def test_create_get_put_delete(redis: RedisServer) -> None:
    store = RedisTaskStore(redis.url, timeout=TIMEOUT)
    first = record("t1")
    await store.create(first)
    got = await store.get("t1")
    assert got == first and got is not first
    assert await store.get("t2") is None
    assert 59_000 < await pttl(redis, "mcp_trio:task:t1") <= 60_000

    first.status, first.result = "completed", {"content": [{"type": "text", "text": "done"}]}
    first.input_requests = {}
    await store.put(first)
    got = await store.get("t1")
    assert got is not None and got.status == "completed" and got.result == first.result
    assert 58_000 < await pttl(redis, "mcp_trio:task:t1") <= 60_000  # put keeps the expiry

    await store.put(record("never-created"))  # put replaces only what exists
    assert await store.get("never-created") is None
    assert await raw(redis, "EXISTS", "mcp_trio:task:never-created") == b":0"

    forever = record("t-forever", ttl_ms=None)
    await store.create(forever)
    assert await pttl(redis, "mcp_trio:task:t-forever") == -1  # no TTL: no expiry
    assert await raw(redis, "ZCARD", "mcp_trio:tasks:index") == b":2"

    await store.delete("t1")
    await store.delete("t1")  # idempotent
    assert await store.get("t1") is None
    assert await raw(redis, "ZCARD", "mcp_trio:tasks:index") == b":1"
    assert (await store.get("t-forever")) == forever

    other = RedisTaskStore(redis.url, prefix="other", timeout=TIMEOUT)  # prefixes do not share
    assert await other.get("t-forever") is None
    stats = store.statistics()["task_store"]
    assert stats["created"] == 2 and stats["unavailable"] == 0 and stats["state"] == "stopped"


async def test_ttl_expiry_and_put_after_expiry(redis: RedisServer) -> None:
    store = RedisTaskStore(redis.url, timeout=TIMEOUT)
    short = record("short", ttl_ms=300)
    await store.create(short)
    assert await store.get("short") is not None
    await trio.sleep(0.5)
    assert await store.get("short") is None
    short.status = "completed"
    await store.put(short)  # a task already forgotten stays forgotten
    assert await store.get("short") is None
    assert await raw(redis, "EXISTS", "mcp_trio:task:short") == b":0"


async def test_size_cap(redis: RedisServer) -> None:
    store = RedisTaskStore(redis.url, max_tasks=3, timeout=TIMEOUT)
    for n in range(2):
        await store.create(record(f"long-{n}"))
    await store.create(record("short", ttl_ms=200))
    with pytest.raises(TaskStoreFull):
        await store.create(record("refused"))
    assert await store.get("refused") is None
    await store.delete("long-0")  # room again
    await store.create(record("long-2"))
    with pytest.raises(TaskStoreFull):
        await store.create(record("refused"))
    await trio.sleep(0.3)  # the short one expired: its place is free
    await store.create(record("long-3"))
    assert await raw(redis, "ZCARD", "mcp_trio:tasks:index") == b":3"
    assert store.statistics()["task_store"]["full"] == 2


async def test_size_cap_under_concurrent_creators(redis: RedisServer) -> None:
    """Two workers' stores creating 40 tasks at once under a cap of 10: exactly 10 are stored."""
    stores = [RedisTaskStore(redis.url, max_tasks=10, timeout=STEP) for _ in range(2)]
    outcomes: list[str] = []

    async def create(store: RedisTaskStore, n: int) -> None:
        try:
            await store.create(record(f"t{n}"))
        except TaskStoreFull:
            outcomes.append("full")
        else:
            outcomes.append("created")

    with trio.fail_after(STEP * 2):
        async with running(stores[0], "a"), running(stores[1], "b"), trio.open_nursery() as nursery:
            for n in range(40):
                nursery.start_soon(create, stores[n % 2], n)
    assert outcomes.count("created") == 10 and outcomes.count("full") == 30
    assert await raw(redis, "ZCARD", "mcp_trio:tasks:index") == b":10"
    found = [n for n in range(40) if await stores[0].get(f"t{n}") is not None]
    assert len(found) == 10


async def test_a_garbage_value_reads_as_no_task(redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """Values signed by the key ring for their key (so only a worker of the cluster could have written
    them) that are not valid records: read as no task, counted as malformed, logged once."""
    store = RedisTaskStore(redis.url, timeout=TIMEOUT)
    keys = ClusterKeys.of(None)
    wrong_id = json.dumps(record("someone-else").to_json())
    bad_status = json.dumps({**record("bad-status").to_json(), "status": "exploded"})
    missing = json.dumps({k: v for k, v in record("missing").to_json().items() if k != "owner"})
    values = {
        "not-json": b"not json",
        "binary": b"\xff\xfe",
        "a-list": b"[1, 2]",
        "wrong-id": wrong_id.encode(),
        "bad-status": bad_status.encode(),
        "missing": missing.encode(),
        "bool-time": json.dumps({**record("bool-time").to_json(), "created_at": True}).encode(),
    }
    for task_id, value in values.items():
        key = f"mcp_trio:task:{task_id}"
        assert await raw(redis, "SET", key, seal_task_record(keys, key, value)) == b"+OK"
    assert await raw(redis, "HSET", "mcp_trio:task:a-hash", "f", "v") == b":1"
    values["a-hash"] = b""
    with caplog.at_level(logging.DEBUG, logger="mcp_trio.redis"):
        for task_id in values:
            assert await store.get(task_id) is None, task_id
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # logged once
    assert "is not a task record" in warnings[0].getMessage()
    stats = store.statistics()["task_store"]
    assert stats["malformed_records"] == len(values) and stats["records_forged"] == 0
    await store.create(record("fine"))  # the store goes on
    assert await store.get("fine") is not None


async def test_a_record_not_signed_for_its_key_reads_as_no_task(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """What something without the key ring writes into Redis: an unsigned record, one signed by another
    ring, a stored record altered (another owner), a valid record copied under another task's key.
    Each reads as no task, is counted as forged (not malformed), and the log gets one line."""
    store = RedisTaskStore(redis.url, timeout=TIMEOUT)
    await store.create(record("t1"))
    sealed = await stored(redis, "mcp_trio:task:t1")
    assert sealed.startswith(b"mtr1 ") and sealed.endswith(record_json(record_of(await store.get("t1"))))
    assert b'"owner":""' in sealed
    values = {
        "unsigned": record_json(record("unsigned")),
        "wrong-ring": seal_task_record(
            OTHER_RING, "mcp_trio:task:wrong-ring", record_json(record("wrong-ring"))
        ),
        "t1": sealed.replace(b'"owner":""', b'"owner":"someone else"'),  # tampered, its signature kept
        "copied": sealed,  # t1's valid value under another task's key
    }
    for task_id, value in values.items():
        assert await raw(redis, "SET", f"mcp_trio:task:{task_id}", value) == b"+OK"
    with caplog.at_level(logging.DEBUG, logger="mcp_trio.redis"):
        for task_id in values:
            assert await store.get(task_id) is None, task_id
    stats = store.statistics()["task_store"]
    assert stats["records_forged"] == len(values) and stats["malformed_records"] == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings  # rate-limited: the others are only counted
    assert "mcp_trio:task:unsigned is not signed by the key ring" in warnings[0]
    await store.put(record("t1"))  # a worker's write replaces the forgery with a signed record
    assert record_of(await store.get("t1")).owner == ""


def record_of(value: TaskRecord | None) -> TaskRecord:
    assert value is not None
    return value


async def test_records_outlive_a_key_rotation(redis: RedisServer) -> None:
    """Keys rotate as for the other signed messages: a record signed with the old key is read by a ring
    that still holds it; a write reseals it with the ring's first key; a ring without the key that
    signed a record reads it as no task."""
    old, new = b"the old key of the ring, 32 bytes", b"the new key of the ring, 32 bytes"
    before = RedisTaskStore(redis.url, timeout=TIMEOUT, secret=old)
    rotated = RedisTaskStore(redis.url, timeout=TIMEOUT, secret=[new, old])
    after = RedisTaskStore(redis.url, timeout=TIMEOUT, secret=new)
    await before.create(record("t1"))
    await before.create(record("t2"))
    assert (await stored(redis, "mcp_trio:task:t1")).split(b" ")[1] == ClusterKeys([old]).key_id.encode()
    got = record_of(await rotated.get("t1"))  # signed with the old key, still in the ring
    got.status, got.result = "completed", {"content": []}
    await rotated.put(got)
    assert (await stored(redis, "mcp_trio:task:t1")).split(b" ")[1] == ClusterKeys([new]).key_id.encode()
    assert record_of(await after.get("t1")).status == "completed"
    assert await after.get("t2") is None  # the old key is gone from this ring
    assert await before.get("t1") is None  # and the new key was never in that one
    for store in (before, after):
        assert store.statistics()["task_store"]["records_forged"] == 1
    assert rotated.statistics()["task_store"]["records_forged"] == 0


@pytest.mark.parametrize("connected", [False, True], ids=["without-run", "with-run"])
async def test_redis_down_raises_unavailable_in_time(redis: RedisServer, connected: bool) -> None:
    store = RedisTaskStore(redis.url, timeout=TIMEOUT, retry_max=0.2)
    async with AsyncExitStack() as stack:
        if connected:
            await stack.enter_async_context(running(store))
        await store.create(record("t1"))
        assert redis.process is not None
        redis.process.send_signal(signal.SIGSTOP)  # accepts connections, answers nothing: a hang
        try:
            hanging = (
                lambda: store.get("t1"),
                lambda: store.create(record("t2")),
                lambda: store.put(record("t1")),
            )
            for operation in hanging:
                start = trio.current_time()
                with trio.fail_after(TIMEOUT + 2), pytest.raises(TaskStoreUnavailable):
                    await operation()
                assert trio.current_time() - start >= TIMEOUT * 0.9
        finally:
            redis.process.send_signal(signal.SIGCONT)
        with trio.fail_after(STEP):  # back: answers again (directly, or once run() reconnected)
            while True:
                try:
                    assert await store.get("t1") is not None
                    break
                except TaskStoreUnavailable:
                    await trio.sleep(0.05)
        await redis.kill()  # refused: at once
        refused = (
            lambda: store.get("t1"),
            lambda: store.create(record("t3")),
            lambda: store.put(record("t1")),
            lambda: store.delete("t1"),
            lambda: store.signal(record("t1"), {"cancel": True}),
        )
        for operation in refused:
            with trio.fail_after(TIMEOUT), pytest.raises(TaskStoreUnavailable):
                await operation()
        if connected:
            await eventually(lambda: store.state == "disconnected", STEP, "the outage noticed")
            await redis.start()  # same port
            await eventually(lambda: store.state == "connected", STEP, "reconnected")
            assert await store.get("t1") is None  # an empty Redis
    assert store.state == "stopped"


async def test_signals_reach_the_worker_subscribed(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[tuple[str, dict[str, Any]]] = []

    class Manager(TaskManager):
        async def on_signal(self, task_id: str, message: Any) -> None:
            received.append((task_id, dict(message)))

    store_a = RedisTaskStore(redis.url, timeout=TIMEOUT, signal_limit=4096)
    sender = RedisTaskStore(redis.url, timeout=TIMEOUT)
    async with trio.open_nursery() as nursery:
        await nursery.start(store_a.run, Manager(store_a, worker_id="a"))
        await eventually(lambda: store_a.state == "connected", STARTUP, "a subscribed")
        assert await sender.signal(record("t1", worker="a"), {"cancel": True}) is True
        assert await sender.signal(record("t1", worker="nobody"), {"cancel": True}) is False
        assert await sender.signal(record("t1", worker=None), {"cancel": True}) is False
        assert await sender.signal(record("t1", worker="bad id!"), {"cancel": True}) is False
        await eventually(lambda: len(received) == 1, STEP, "the signal arrived")
        assert received == [("t1", {"cancel": True})]
        channel = "mcp_trio:tasks:worker:a"
        keys = ClusterKeys.of(None)
        with caplog.at_level(logging.WARNING, logger="mcp_trio.redis"):
            for garbage in (b"not json", b"[]", b'{"cancel": true}', b'{"taskId": 7}', b"\xff"):
                assert (
                    await redis.publish(channel, seal_bus_message(keys, channel, garbage, time.time())) == 1
                )
            big = json.dumps({"taskId": "t2", "inputResponses": {"x": "y" * 5000}}).encode()
            assert await redis.publish(channel, seal_bus_message(keys, channel, big, time.time())) == 1
            # not signed by the key ring: a cancel written into Redis by anything without the secret
            cancel = b'{"taskId": "t1", "cancel": true}'
            other = ClusterKeys([b"a key that is not the cluster's!"])
            for forged in (cancel, seal_bus_message(other, channel, cancel, time.time())):
                assert await redis.publish(channel, forged) == 1
            good = seal_bus_message(keys, channel, b'{"taskId": "t3", "cancel": true}', time.time())
            assert await redis.publish(channel, good) == 1
            await eventually(lambda: len(received) == 2, STEP, "the good one after the garbage")
        assert received[1] == ("t3", {"cancel": True})
        stats = store_a.statistics()["task_store"]
        assert stats["signals_malformed"] == 6 and stats["signals_received"] == 2
        assert stats["signals_forged"] == 2
        assert len([r for r in caplog.records if "malformed signal" in r.getMessage()]) == 1
        assert len([r for r in caplog.records if "unauthenticated signal" in r.getMessage()]) == 1
        assert sender.statistics()["task_store"]["signals_unheard"] == 1
        nursery.cancel_scope.cancel()
    assert store_a.state == "stopped"


# -- two workers on hypercorn ---------------------------------------------------------------------


async def authenticate(info: Any) -> object:
    """The principal is the user a test names in a header (or nobody)."""
    user: str | None = info.header(USER_HEADER)
    return user


CLUSTER_SECRET = b"the workers' shared key ring, 32+ bytes"
"""Workers that share a task store share the key ring: owner keys are keyed hashes under it."""


def app_for(url: str, worker: str, **options: Any) -> MCPApp:
    config = ServerConfig(
        task_store_factory=lambda: RedisTaskStore(url, timeout=TIMEOUT, retry_max=0.5),
        worker_id=worker,
        request_state_secret=CLUSTER_SECRET,
        task_poll_interval=0.05,
        shutdown_grace=2,
        **{"authenticate": authenticate, **options},
    )
    return MCPApp(build_demo_server(), config)


def empty(answer: dict[str, Any]) -> bool:
    """Whether ``answer`` is the empty result of ``tasks/cancel`` or ``tasks/update``."""
    result = answer.get("result")
    return isinstance(result, dict) and {k: v for k, v in result.items() if k != "_meta"} == {
        "resultType": "complete"
    }


def store_state(app: MCPApp) -> str:
    return str(app.statistics()["task_store"]["state"])


@asynccontextmanager
async def two_workers(redis_server: RedisServer, **options: Any) -> AsyncIterator[tuple[Worker, Worker]]:
    apps = [app_for(redis_server.url, "a", **options), app_for(redis_server.url, "b", **options)]
    async with (
        http_client() as http,
        serve_in_process(apps[0], "hypercorn", stop_within=STEP) as (url_a, _, _),
        serve_in_process(apps[1], "hypercorn", stop_within=STEP) as (url_b, _, _),
    ):
        for app in apps:
            await eventually(lambda app=app: store_state(app) == "connected", STARTUP, "store subscribed")
        yield Worker(http, url_a, apps[0]), Worker(http, url_b, apps[1])
        for app in apps:
            assert app.statistics()["tasks_running"] == 0


class Worker:
    """One worker's endpoint, spoken to with raw 2026-07-28 requests (one per POST, no session)."""

    def __init__(self, http: httpx.AsyncClient, url: str, app: MCPApp) -> None:
        self.http = http
        self.url = url
        self.app = app
        self.next_id = 0

    async def rpc(
        self, method: str, params: dict[str, Any], *, name: str | None = None, user: str | None = "x"
    ) -> tuple[int, dict[str, Any]]:
        """POST one request; its HTTP status and JSON-RPC response (read from JSON or SSE)."""
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {
                "elicitation": {},
                "extensions": {TASKS_EXTENSION: {}},
            },
        }
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}
        headers = {**POST_HEADERS, "mcp-protocol-version": V2026, "mcp-method": method}
        if name is not None:
            headers["mcp-name"] = name
        if user is not None:
            headers[USER_HEADER] = user
        with trio.fail_after(STEP):
            response = await self.http.post(self.url, content=json.dumps(body).encode(), headers=headers)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
            messages = [json.loads(d) for d in data if d]
            answer = next(m for m in messages if m.get("id") == self.next_id)
        else:
            answer = response.json()
        return response.status_code, answer

    async def start_task(self, tool: str, arguments: dict[str, Any], user: str = "x") -> str:
        status, answer = await self.rpc(
            "tools/call", {"name": tool, "arguments": arguments}, name=tool, user=user
        )
        assert status == 200, answer
        result = answer["result"]
        assert result["resultType"] == "task" and result["status"] in ("working", "input_required"), result
        task_id: str = result["taskId"]
        return task_id

    async def task(self, task_id: str, user: str = "x") -> dict[str, Any]:
        """``tasks/get``: the task, or the JSON-RPC error."""
        status, answer = await self.rpc("tasks/get", {"taskId": task_id}, name=task_id, user=user)
        assert status == 200, answer
        if "error" in answer:
            return {"error": answer["error"]}
        result: dict[str, Any] = answer["result"]
        return result

    async def wait_status(self, task_id: str, wanted: str, within: float = STEP) -> dict[str, Any]:
        return await self.wait_status_as(task_id, wanted, "x", within)

    async def wait_status_as(
        self, task_id: str, wanted: str, user: str, within: float = STEP
    ) -> dict[str, Any]:
        with trio.fail_after(within):
            while (task := await self.task(task_id, user))["status"] != wanted:
                assert task["status"] in ("working", "input_required"), task
                await trio.sleep(0.05)
        return task


async def test_a_task_created_on_a_is_read_on_b(redis: RedisServer) -> None:
    async with two_workers(redis) as (a, b):
        task_id = await a.start_task("slow_compute", {"seconds": 0.5, "label": "shared"})
        seen = await b.task(task_id)
        assert seen["taskId"] == task_id and seen["status"] == "working", seen
        assert a.app.statistics()["tasks_running"] == 1 and b.app.statistics()["tasks_running"] == 0
        done = await b.wait_status(task_id, "completed")
        assert done["result"]["content"] == [{"type": "text", "text": "Computed shared after 0.5 s"}]
        assert (await a.task(task_id))["result"] == done["result"]
        assert await pttl(redis, f"mcp_trio:task:{task_id}") > 3_500_000  # the default TTL, 1 h


async def test_tasks_cancel_on_b_cancels_the_task_on_a(redis: RedisServer) -> None:
    async with two_workers(redis) as (a, b):
        task_id = await a.start_task("slow_compute", {"seconds": 60})
        assert (await b.task(task_id))["status"] == "working"
        status, answer = await b.rpc("tasks/cancel", {"taskId": task_id}, name=task_id)
        assert status == 200 and empty(answer), answer
        await eventually(lambda: a.app.statistics()["tasks_running"] == 0, STEP, "a's task ended")
        for worker in (a, b):
            seen = await worker.wait_status(task_id, "cancelled")
            assert "cancelled" in seen["statusMessage"].lower(), seen
        status, answer = await b.rpc("tasks/cancel", {"taskId": task_id}, name=task_id)
        assert status == 200 and empty(answer), answer  # idempotent once it ended
        stats = b.app.statistics()["task_store"]
        assert stats["signals_sent"] == 1 and stats["signals_unheard"] == 0
        assert a.app.statistics()["task_store"]["signals_received"] == 1


async def test_tasks_update_on_b_answers_the_task_on_a(redis: RedisServer) -> None:
    async with two_workers(redis) as (a, b):
        task_id = await a.start_task("confirm_delete", {"filename": "notes.txt"})
        waiting = await b.wait_status(task_id, "input_required")
        (key, request), *more = waiting["inputRequests"].items()
        assert not more and request["method"] == "elicitation/create", waiting
        answer = {"action": "accept", "content": {"confirm": True}}
        params = {"taskId": task_id, "inputResponses": {key: answer}}
        status, reply = await b.rpc("tasks/update", params, name=task_id)
        assert status == 200 and empty(reply), reply
        done = await b.wait_status(task_id, "completed")
        assert done["result"]["content"] == [{"type": "text", "text": "Deleted notes.txt"}]
        assert (await a.task(task_id))["status"] == "completed"
        assert a.app.statistics()["task_store"]["signals_received"] == 1  # through Redis
        status, reply = await b.rpc("tasks/update", params, name=task_id)  # nothing waits for it now
        assert status == 200 and reply["error"]["code"] == -32602, reply


async def test_a_partial_update_on_b_is_seen_at_once_on_either_worker(
    redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read your writes: once ``tasks/update`` on b is acknowledged, a ``tasks/get`` anywhere shows the
    answered request gone (b waits for a to store it, here a worker whose writes lag), the other still
    pending; an answer of the wrong shape is refused by b as a would refuse it."""
    async with two_workers(redis) as (a, b):
        task_id = await a.start_task("multi_input", {})
        for _ in range(int(STEP / 0.05)):  # both questions asked (the tool asks them one after the other)
            waiting = await b.task(task_id)
            if len(waiting.get("inputRequests") or {}) == 2:
                break
            await trio.sleep(0.05)
        first, second = waiting["inputRequests"]
        wrong = {"taskId": task_id, "inputResponses": {first: {"action": "maybe"}}}
        status, reply = await b.rpc("tasks/update", wrong, name=task_id)
        assert status == 200 and reply["error"]["code"] == -32602, reply
        store = a.app._modern.tasks.store
        put = store.put

        async def lagging_put(record: Any) -> None:  # a's writes reach Redis 0.3 s late (a loaded worker)
            await trio.sleep(0.3)
            await put(record)

        monkeypatch.setattr(store, "put", lagging_put)
        answer = {"action": "accept", "content": {"name": "partial-1", "confirm": True}}
        params = {"taskId": task_id, "inputResponses": {first: answer}}
        status, reply = await b.rpc("tasks/update", params, name=task_id)
        assert status == 200 and empty(reply), reply
        for worker in (b, a):
            seen = await worker.task(task_id)
            assert seen["status"] == "input_required" and list(seen["inputRequests"]) == [second], seen
        params = {"taskId": task_id, "inputResponses": {second: answer}}
        status, reply = await b.rpc("tasks/update", params, name=task_id)
        assert status == 200 and empty(reply), reply
        assert (await b.wait_status(task_id, "completed"))["status"] == "completed"
        assert a.app.statistics()["task_store"]["signals_received"] == 2  # the wrong answer never left b


async def test_a_task_is_its_owners_only_on_either_worker(redis: RedisServer) -> None:
    async with two_workers(redis) as (a, b):
        task_id = await a.start_task("slow_compute", {"seconds": 60}, user="x")
        for worker in (a, b):
            for user in ("y", None):
                status, answer = await worker.rpc("tasks/get", {"taskId": task_id}, name=task_id, user=user)
                assert status == 200 and answer["error"]["code"] == -32602, answer
                assert answer["error"]["message"] == "Failed to retrieve task: Task not found"
                for method, extra in (("tasks/cancel", {}), ("tasks/update", {"inputResponses": {}})):
                    params = {"taskId": task_id, **extra}
                    status, answer = await worker.rpc(method, params, name=task_id, user=user)
                    assert answer["error"]["message"] == "Failed to retrieve task: Task not found"
            assert (await worker.task(task_id, user="x"))["status"] == "working"
        unknown = "0" * 32
        assert (await b.task(unknown))["error"]["message"] == "Failed to retrieve task: Task not found"
        status, answer = await b.rpc("tasks/cancel", {"taskId": task_id}, name=task_id, user="x")
        assert empty(answer), answer
        await a.wait_status(task_id, "cancelled")


async def test_a_forged_record_is_no_task_for_anyone(redis: RedisServer) -> None:
    """Through tasks/get on either worker: a record written into Redis by something without the key
    ring, one altered to name another owner (to read someone's result), or copied under another task
    id, is answered as an unknown task, to the owner it names as to anyone; the same record signed by
    the ring (what a worker writes) is found, so the answer is the seal's doing."""
    not_found = "Failed to retrieve task: Task not found"
    async with two_workers(redis) as (a, b):
        mine = await a.start_task("slow_compute", {"seconds": 0.1, "label": "x's secret"}, user="x")
        theirs = await a.start_task("slow_compute", {"seconds": 0.1}, user="y")
        for task_id, user in ((mine, "x"), (theirs, "y")):
            await b.wait_status_as(task_id, "completed", user)
        sealed = await stored(redis, f"mcp_trio:task:{mine}")
        y_record = json.loads((await stored(redis, f"mcp_trio:task:{theirs}")).split(b" ", 3)[3])
        x_record = json.loads(sealed.split(b" ", 3)[3])
        assert x_record["owner"] != y_record["owner"]
        ring = ClusterKeys.of(None)

        def made(task_id: str, owner: str) -> bytes:
            return json.dumps({**x_record, "task_id": task_id, "owner": owner}).encode()

        ids = [f"{n:032x}" for n in range(1, 4)]
        forged = {
            mine: sealed.replace(
                json.dumps(x_record["owner"]).encode(), json.dumps(y_record["owner"]).encode()
            ),
            ids[0]: made(ids[0], y_record["owner"]),  # unsigned
            ids[1]: seal_task_record(OTHER_RING, f"mcp_trio:task:{ids[1]}", made(ids[1], y_record["owner"])),
            ids[2]: await stored(redis, f"mcp_trio:task:{theirs}"),  # y's valid record, copied
        }
        assert forged[mine] != sealed
        for task_id, value in forged.items():
            assert await raw(redis, "SET", f"mcp_trio:task:{task_id}", value) == b"+OK"
        for worker in (a, b):
            for task_id in forged:
                for user in ("y", "x"):
                    answer = await worker.task(task_id, user=user)
                    assert answer["error"]["message"] == not_found, (task_id, user, answer)
        unknown = await b.task("f" * 32, user="y")
        assert unknown["error"]["message"] == not_found
        forged_reads = sum(w.app.statistics()["task_store"]["records_forged"] for w in (a, b))
        assert forged_reads == 2 * 2 * len(forged)
        control = "c" * 32  # signed by the ring for its key: found, by its owner only
        key = f"mcp_trio:task:{control}"
        assert (
            await raw(redis, "SET", key, seal_task_record(ring, key, made(control, y_record["owner"])))
            == b"+OK"
        )
        found = await b.task(control, user="y")
        assert found["status"] == "completed" and found["result"]["content"][0]["text"].endswith(
            "after 0.1 s"
        )
        assert (await b.task(control, user="x"))["error"]["message"] == not_found
        assert (await b.task(theirs, user="y"))["status"] == "completed"  # the original is untouched


async def bare_token(info: Any) -> object:
    """The principal is an access token naming neither a subject nor a client (RFC 7662 allows it):
    the header's value is its raw string."""
    token: str | None = info.header(USER_HEADER)
    return None if token is None else AccessToken(token=token)


async def everything_in(server: RedisServer) -> bytes:
    """Every key in Redis and every value under it, as raw replies (each read command is tried on
    each key; those of the wrong type answer an error)."""

    async def session(*commands: tuple[bytes, ...]) -> bytes:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            for args in (*commands, (b"QUIT",)):
                parts = b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
                await stream.send_all(b"*%d\r\n" % len(args) + parts)
            reply = b""
            with trio.fail_after(STEP):
                while chunk := await stream.receive_some(65536):  # Redis closes after QUIT
                    reply += chunk
            return reply

    listing = await session((b"KEYS", b"*"))
    lines = listing.split(b"\r\n")
    keys = [lines[n + 1] for n, line in enumerate(lines) if line.startswith(b"$") and line != b"$-1"]
    reads = [
        command
        for key in keys
        for command in (
            (b"GET", key),
            (b"HGETALL", key),
            (b"ZRANGE", key, b"0", b"-1"),
            (b"LRANGE", key, b"0", b"-1"),
            (b"SMEMBERS", key),
            (b"XRANGE", key, b"-", b"+"),
        )
    ]
    return listing + await session(*reads)


async def test_a_bare_token_is_never_in_redis_and_owns_its_task_on_either_worker(redis: RedisServer) -> None:
    token, other = "raw-bearer-" + "7" * 40, "raw-bearer-" + "8" * 40
    async with two_workers(redis, authenticate=bare_token) as (a, b):
        task_id = await a.start_task("confirm_delete", {"filename": "notes.txt"}, user=token)
        for worker in (a, b):  # the same token, on either worker: its owner
            assert (await worker.task(task_id, user=token))["status"] == "input_required"
            assert (await worker.task(task_id, user=other))["error"]["code"] == -32602
        stored = await everything_in(redis)
        assert f"mcp_trio:task:{task_id}".encode() in stored and b'"owner"' in stored  # what was read
        assert token.encode() not in stored and b"7" * 40 not in stored
        status, answer = await b.rpc("tasks/cancel", {"taskId": task_id}, name=task_id, user=token)
        assert status == 200 and empty(answer), answer
        await a.wait_status_as(task_id, "cancelled", token)


@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_redis_down_answers_32603_in_time(
    redis: RedisServer, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis killed (refused at once) or frozen (SIGSTOP: nothing answers): tools/call as a task and
    tasks/get get a JSON-RPC -32603 within the store's timeout, with HTTP 200; the worker goes on."""
    async with two_workers(redis) as (a, b):
        task_id = await a.start_task("slow_compute", {"seconds": 0.2})
        await b.wait_status(task_id, "completed")
        assert redis.process is not None
        if how == "killed":
            await redis.kill()
        else:
            redis.process.send_signal(signal.SIGSTOP)
        try:
            with caplog.at_level(logging.CRITICAL, logger="mcp_trio"):  # the failed writes log errors
                for worker in (a, b):
                    start = trio.current_time()
                    arguments = {"name": "slow_compute", "arguments": {"seconds": 0.1}}
                    status, answer = await worker.rpc("tools/call", arguments, name="slow_compute")
                    assert status == 200 and answer["error"]["code"] == -32603, answer
                    assert answer["error"]["message"] == "Task store unavailable: try again later"
                    status, answer = await worker.rpc("tasks/get", {"taskId": task_id}, name=task_id)
                    assert status == 200 and answer["error"]["code"] == -32603, answer
                    assert trio.current_time() - start < 2 * TIMEOUT + 1.5
                    status, answer = await worker.rpc(
                        "tools/call", {"name": "greet", "arguments": {"name": "z"}}, name="greet"
                    )
                    assert answer["result"]["content"][0]["text"] == "Hello, z!", answer  # no task: fine
                await eventually(lambda: a.app.statistics()["tasks_running"] == 0, STEP, "refused task ended")
        finally:
            if redis.process is not None:
                redis.process.send_signal(signal.SIGCONT)
        if how == "killed":
            await redis.start()
        await eventually(lambda: store_state(a.app) == store_state(b.app) == "connected", STEP, "reconnected")
        if how == "frozen":  # the data survived the freeze
            assert (await b.task(task_id))["status"] == "completed"
        task_id = await a.start_task("slow_compute", {"seconds": 0.1})  # tasks work again
        await b.wait_status(task_id, "completed")
