"""Tasks of a worker that stopped, through a real Redis: :class:`mcp_trio.redis.RedisTaskStore`'s
liveness keys.

The stores alone (with bare task managers as workers): a task whose worker's liveness key expired, was
released, or names another run of the worker is recorded ``failed`` by the next read through any other
worker, atomically, and published, but only by a store connected long enough; a sweep does the same for
tasks nobody reads, then forgets the run; a finished task, a forged record and a forged or stale
liveness value change nothing; a task's end is never replaced; a Redis outage fails no live task.
Then workers serving requests: two demo apps on hypercorn, ``a`` shut down cleanly (its quick task
completes, its long one is recorded ``failed``, "shut down"); two ``mcp-trio demo --redis`` processes,
``a`` stopped by SIGTERM (its task ``failed``, "shut down"), or killed with SIGKILL while its task runs
(the task answered ``failed`` through ``b`` within seconds, a finished one still ``completed``).

redis-server comes from Debian (the fixtures of test_redis.py start it on a free port and kill it after
the test).  Without it the tests are skipped when run by hand, and fail under the test command.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast

import test_redis
import test_redis_tasks
import trio
from mcp_http import http_client, serve_demo, serve_in_process
from test_redis import RedisServer
from test_redis_tasks import OTHER_RING, Worker, eventually, raw, record_json, stored

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._app.tasks import ENDED_ELSEWHERE, TaskManager
from mcp_trio._app.tasks.run import TaskRun
from mcp_trio._protocol.cluster import ClusterKeys, seal_task_record
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import TaskStoreUnavailable
from mcp_trio.redis import RedisTaskStore
from mcp_trio.redis.task_liveness import SETTLE, STOPPED_MESSAGE, seal_alive, stopped
from mcp_trio.server import TaskRecord

STARTUP = 10.0
STEP = 5.0
TIMEOUT = 1.0
BEAT, TTL, RETRY = 0.1, 0.5, 0.2
"""The stores' liveness in these tests: a beat every 0.1 s, a key lives 0.5 s; a store judges others
once connected for TTL + RETRY (0.7 s)."""
KILLED_WITHIN = 10.0
"""A killed ``mcp-trio demo`` worker's task must read ``failed`` this soon (its key lives 3 s; the
other worker judges once connected for 5 s)."""

redis = test_redis.redis
key_ring = test_redis.key_ring
"""(autouse) The stores, apps and demo workers share a key ring."""


def store_for(url: str) -> RedisTaskStore:
    return RedisTaskStore(
        url, timeout=TIMEOUT, retry_max=RETRY, heartbeat_interval=BEAT, heartbeat_ttl=TTL, retry_initial=0.05
    )


@asynccontextmanager
async def worker(url: str, name: str) -> AsyncIterator[tuple[RedisTaskStore, TaskManager]]:
    """A store run for a bare task manager of worker ``name``, connected long enough to judge others;
    cancelled (its liveness key released) after the block."""
    store = store_for(url)
    manager = TaskManager(store, worker_id=name)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run, manager)
        await eventually(lambda: store.state == "connected", STARTUP, "the store connected")
        await trio.sleep(TTL + RETRY + 0.05)
        yield store, manager
        nursery.cancel_scope.cancel()


def task_of(manager: TaskManager, task_id: str, **fields: Any) -> TaskRecord:
    """A record as ``manager`` creates one (its worker, its run)."""
    now = time.time()
    return TaskRecord(
        task_id=task_id,
        owner="",
        created_at=now,
        updated_at=now,
        ttl_ms=60_000,
        worker=manager.worker_id,
        instance=manager.instance_id,
        **fields,
    )


def got(value: TaskRecord | None) -> TaskRecord:
    assert value is not None
    return value


def stopped_as_expected(value: TaskRecord | None) -> TaskRecord:
    record = got(value)
    assert record.status == "failed" and record.status_message == STOPPED_MESSAGE, record
    assert record.error == {"code": -32603, "message": STOPPED_MESSAGE}, record
    assert record.input_requests == {} and record.result is None
    return record


# -- the stores alone -----------------------------------------------------------------------------


async def test_a_task_of_a_released_or_expired_worker_is_recorded_failed(redis: RedisServer) -> None:
    """Worker a ends cleanly (its key released): a's tasks read failed through b at once; worker c's
    key (written by hand, as c's store writes it) expires: c's task reads failed once it has; each
    change is published once, on b."""
    published: list[dict[str, Any]] = []
    async with worker(redis.url, "b") as (b, manager_b):

        async def publish(message: dict[str, Any]) -> None:
            published.append(message)

        manager_b.publish = publish
        async with worker(redis.url, "a") as (a, manager_a):
            running = task_of(manager_a, "ta")
            waiting = task_of(manager_a, "tw", status="input_required", input_requests={"k": {"m": 1}})
            for record in (running, waiting):
                await a.create(record)
            alive = await stored(redis, "mcp_trio:tasks:alive:a")
            assert alive.startswith(b"mta1 ") and alive.endswith(manager_a.instance_id.encode())
            assert got(await b.get("ta")).status == "working"  # a runs: nothing changes
            assert got(await b.get("tw")).status == "input_required"
        assert await raw(redis, "EXISTS", "mcp_trio:tasks:alive:a") == b":0"  # released on the way out
        idle = store_for(redis.url)  # not running: it never judges (b did, by this read or its sweep)
        for task_id in ("ta", "tw"):
            stopped_as_expected(await b.get(task_id))
        assert [m["params"]["status"] for m in published] == ["failed", "failed"]
        assert published[0]["method"] == "notifications/tasks"
        assert published[0]["params"]["statusMessage"] == STOPPED_MESSAGE
        stopped_as_expected(await idle.get("ta"))  # recorded so, signed, for every worker
        assert 58_000 < await test_redis_tasks.pttl(redis, "mcp_trio:task:ta") <= 60_000  # TTL kept

        ring = ClusterKeys.of(None)
        key = "mcp_trio:tasks:alive:c"
        value = seal_alive(ring, key, "c-run-1", time.time())
        assert await raw(redis, "SET", key, value, "PX", "400") == b"+OK"
        c_task = TaskRecord("tc", "", time.time(), time.time(), 60_000, worker="c", instance="c-run-1")
        await b.create(c_task)
        assert got(await b.get("tc")).status == "working"
        with trio.fail_after(STEP):
            while got(await b.get("tc")).status == "working":  # noqa: ASYNC110
                await trio.sleep(0.05)
        stopped_as_expected(await b.get("tc"))
        stats = b.statistics()["task_store"]
        assert stats["tasks_stopped"] == 3 and stats["liveness_forged"] == 0
        assert len(published) == 3


async def test_only_a_store_connected_long_enough_judges(redis: RedisServer) -> None:
    """Worker c's key is gone (as after a Redis restart, before c wrote it again): a store that is not
    running, or has not been connected for ``heartbeat_ttl + retry_max``, leaves c's task as it is; b
    records it failed once it has been."""
    now = time.time()
    idle = store_for(redis.url)
    await idle.create(TaskRecord("tc", "", now, now, 60_000, worker="c", instance="c-run"))
    b = store_for(redis.url)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run, TaskManager(b, worker_id="b"))
        await eventually(lambda: b.state == "connected", STARTUP, "b connected")
        assert got(await b.get("tc")).status == "working"
        assert got(await idle.get("tc")).status == "working"
        with trio.fail_after(STEP):
            while got(await b.get("tc")).status == "working":  # noqa: ASYNC110
                await trio.sleep(0.05)
        stopped_as_expected(await idle.get("tc"))
        nursery.cancel_scope.cancel()


async def test_the_sweep_records_unread_tasks_of_a_stopped_run_failed(redis: RedisServer) -> None:
    """Nobody reads the tasks of worker c's run that stopped: b's sweep records them failed (and
    publishes it), then forgets the run; entries no worker writes (a garbage run, a run whose set is
    not a set, a forged record's id) are dropped, and the forged record is left as it is."""
    published: list[dict[str, Any]] = []
    runs = "mcp_trio:tasks:runs"
    async with worker(redis.url, "b") as (b, manager_b):

        async def publish(message: dict[str, Any]) -> None:
            published.append(message)

        manager_b.publish = publish
        now = time.time()
        for n in range(40):  # more than a round's share
            await b.create(TaskRecord(f"c{n}", "", now, now, 60_000, worker="c", instance="c-run"))
        forged = record_json(TaskRecord("cf", "", now, now, 60_000, worker="c", instance="c-run"))
        assert await raw(redis, "SET", "mcp_trio:task:cf", forged) == b"+OK"
        running = "mcp_trio:tasks:running:c/c-run"
        assert await raw(redis, "SADD", running, "cf", "x" * 300) == b":2"
        assert await raw(redis, "SCARD", running) == b":42"
        assert await raw(redis, "SET", "mcp_trio:tasks:running:d/d-run", "not a set") == b"+OK"
        old = str(int((now - 60) * 1000))
        for member in ("c/c-run", "d/d-run", "not a run!"):
            assert await raw(redis, "ZADD", runs, old, member) == b":1"
        with trio.fail_after(STEP):
            while await raw(redis, "ZCARD", runs) != b":1":  # noqa: ASYNC110 (b's own run is left)
                await trio.sleep(0.05)
        for n in range(40):
            value = json.loads((await stored(redis, f"mcp_trio:task:c{n}")).split(b" ", 3)[3])
            assert value["status"] == "failed" and value["status_message"] == STOPPED_MESSAGE, value
        assert await stored(redis, "mcp_trio:task:cf") == forged
        assert await raw(redis, "EXISTS", running) == b":0"
        assert sorted(m["params"]["taskId"] for m in published) == sorted(f"c{n}" for n in range(40))
        assert {m["params"]["status"] for m in published} == {"failed"}
        assert b.statistics()["task_store"]["tasks_stopped"] == 40


async def test_a_run_s_set_of_running_tasks_holds_only_those(redis: RedisServer) -> None:
    """The ids of a's running tasks leave a's set when a task ends (its last write), is forgotten (its
    TTL), or is gone another way (an id no record backs: a's sweep tidies it away); the set expires."""
    async with worker(redis.url, "a") as (a, manager_a):
        running = f"mcp_trio:tasks:running:a/{manager_a.instance_id}"
        for task_id in ("t1", "t2", "t3"):
            await a.create(task_of(manager_a, task_id))
            assert await raw(redis, "SISMEMBER", running, task_id) == b":1"
        await a.put(task_of(manager_a, "t1", status="completed", result={"content": []}))
        await a.delete("t2")
        assert await raw(redis, "SMEMBERS", running) == b"*1\r\n$2\r\nt3"
        assert await raw(redis, "SADD", running, "ghost") == b":1"
        with trio.fail_after(10):  # every 30 rounds of 0.1 s
            while await raw(redis, "SISMEMBER", running, "ghost") != b":0":  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert await raw(redis, "SMEMBERS", running) == b"*1\r\n$2\r\nt3"  # its own: never judged
        assert 0 < await test_redis_tasks.pttl(redis, running) <= 86_400_000
        assert got(await a.get("t3")).status == "working"


async def test_a_task_s_end_is_never_replaced(redis: RedisServer) -> None:
    """c's task, recorded failed while c could not reach Redis: c's later writes (a new status, its
    result) are dropped and counted; a write over a task that has not ended goes through."""
    async with worker(redis.url, "b") as (b, _):
        now = time.time()
        await b.create(TaskRecord("tc", "", now, now, 60_000, worker="c", instance="c-run"))
        stopped_as_expected(await b.get("tc"))
        late = TaskRecord("tc", "", now, now, 60_000, worker="c", instance="c-run", status="completed")
        late.result = {"content": []}
        await b.put(late)
        await b.put(TaskRecord("tc", "", now, now, 60_000, worker="c", instance="c-run"))
        stopped_as_expected(await b.get("tc"))
        assert b.statistics()["task_store"]["writes_refused"] == 2
        await b.create(TaskRecord("t2", "", now, now, 60_000))
        await b.put(TaskRecord("t2", "", now, now, 60_000, status="completed"))
        assert got(await b.get("t2")).status == "completed"
        assert b.statistics()["task_store"]["writes_refused"] == 2


async def test_a_redis_outage_fails_no_live_worker_s_task(redis: RedisServer) -> None:
    """Redis frozen (SIGSTOP) for three times the liveness TTL, a's key expiring meanwhile: once it is
    back, both reconnect, a writes its key again, and a's task stays running throughout, through b.
    (Here a and b reconnect at about the same time; the rule that keeps b from judging a before a could
    reconnect is test_only_a_store_connected_long_enough_judges's.)"""
    async with worker(redis.url, "b") as (b, _), worker(redis.url, "a") as (a, manager_a):
        await a.create(task_of(manager_a, "ta"))
        assert redis.process is not None
        redis.process.send_signal(signal.SIGSTOP)
        try:
            await trio.sleep(3 * TTL)
        finally:
            redis.process.send_signal(signal.SIGCONT)
        seen: list[str] = []
        with trio.fail_after(STEP):
            while len(seen) < 40:  # two seconds of reads, every 50 ms
                try:
                    seen.append(got(await b.get("ta")).status)
                except TaskStoreUnavailable:
                    seen.append("unavailable")
                await trio.sleep(0.05)
        assert set(seen) <= {"working", "unavailable"} and seen[-1] == "working", seen
        for store in (a, b):
            stats = store.statistics()["task_store"]
            assert stats["failures"] >= 1 and stats["state"] == "connected", stats  # both lost Redis
        assert b.statistics()["task_store"]["tasks_stopped"] == 0


async def test_a_task_ended_elsewhere_is_cancelled_here_and_not_published(redis: RedisServer) -> None:
    """a runs a task whose record another worker ended (it took a for stopped while a could not reach
    Redis): a's next write of it is dropped, nothing is published, and the task is cancelled in a."""
    published: list[dict[str, Any]] = []
    async with worker(redis.url, "a") as (a, manager_a):

        async def publish(message: dict[str, Any]) -> None:
            published.append(message)

        manager_a.publish = publish
        record = task_of(manager_a, "t1")
        await a.create(record.copy())
        run = TaskRun(manager_a, record, None)
        run.created.set()
        manager_a.runs["t1"] = run
        await run.save()  # its own write: stored and published
        assert [m["params"]["status"] for m in published] == ["working"]
        ended = stopped(record, time.time())
        key = "mcp_trio:task:t1"
        value = seal_task_record(ClusterKeys.of(None), key, record_json(ended))
        assert await raw(redis, "SET", key, value, "KEEPTTL") == b"+OK"  # as b's script writes it
        run.record.status, run.record.result = "completed", {"content": []}
        await run.save()
        assert run.cancel_reason == ENDED_ELSEWHERE and run.scope.cancel_called
        assert len(published) == 1  # the dropped write was not published
        stopped_as_expected(await a.get("t1"))
        assert a.statistics()["task_store"]["writes_refused"] == 1


async def test_a_worker_restarted_under_its_id_fails_the_earlier_runs_tasks(redis: RedisServer) -> None:
    """a's first run was killed with a task running (its key, naming that run, has not expired yet):
    once a's second run writes the key, the first run's task reads failed, through b and through a;
    the second run's own task is left alone."""
    async with worker(redis.url, "b") as (b, _):
        now = time.time()
        await b.create(TaskRecord("old", "", now, now, 60_000, worker="a", instance="a-first-run"))
        key = "mcp_trio:tasks:alive:a"
        value = seal_alive(ClusterKeys.of(None), key, "a-first-run", time.time())
        assert await raw(redis, "SET", key, value, "PX", "60000") == b"+OK"
        assert got(await b.get("old")).status == "working"
        async with worker(redis.url, "a") as (a, second_run):
            with trio.fail_after(STEP):  # the second run's key in place (slower on a loaded machine)
                while second_run.instance_id.encode() not in await raw(redis, "GET", key):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            await a.create(task_of(second_run, "new"))
            stopped_as_expected(await a.get("old"))
            stopped_as_expected(await b.get("old"))
            assert got(await b.get("new")).status == "working"
            assert got(await a.get("new")).status == "working"


async def test_finished_tasks_and_forgeries_stay_as_they_are(redis: RedisServer) -> None:
    """Worker d never beat (its key is gone): its completed and cancelled tasks read as they are; a
    record of it not signed for its key reads as no task and is left in Redis untouched.  Worker e's
    key holds a value the ring does not verify (unsigned, another ring's, signed for another key, or
    stale), naming another run: e's task is left working (and counted), for as long as the value is
    there."""
    ring = ClusterKeys.of(None)
    async with worker(redis.url, "b") as (b, _):
        now = time.time()
        done = TaskRecord("d1", "", now, now, 60_000, status="completed", worker="d", instance="d-run")
        done.result = {"content": [{"type": "text", "text": "done"}]}
        cancelled = TaskRecord("d2", "", now, now, 60_000, status="cancelled", worker="d", instance="d-run")
        for record in (done, cancelled):
            await b.create(record)
        assert got(await b.get("d1")) == done
        assert got(await b.get("d2")) == cancelled
        running = TaskRecord("d3", "", now, now, 60_000, worker="d", instance="d-run")
        forged = {
            "d3": record_json(running),  # unsigned
            "d4": seal_task_record(OTHER_RING, "mcp_trio:task:d4", record_json(running)),
        }
        for task_id, value in forged.items():
            assert await raw(redis, "SET", f"mcp_trio:task:{task_id}", value) == b"+OK"
            assert await b.get(task_id) is None
            assert await stored(redis, f"mcp_trio:task:{task_id}") == value  # not resealed as failed

        await b.create(TaskRecord("e1", "", now, now, 60_000, worker="e", instance="e-run"))
        key = "mcp_trio:tasks:alive:e"
        values = [
            b"mta1 00 00 1 another-run",
            seal_alive(OTHER_RING, key, "another-run", time.time()),
            seal_alive(ring, "mcp_trio:tasks:alive:f", "another-run", time.time()),
            seal_alive(ring, key, "another-run", time.time() - 3600),  # put back from an hour ago
            b"not even close",
        ]
        for value in values:
            assert await raw(redis, "SET", key, value) == b"+OK"
            assert got(await b.get("e1")).status == "working", value
        assert await raw(redis, "DEL", key) == b":1"
        assert await raw(redis, "HSET", key, "f", "v") == b":1"  # not even a string
        assert got(await b.get("e1")).status == "working"
        stats = b.statistics()["task_store"]
        assert stats["liveness_forged"] == len(values) + 1 and stats["tasks_stopped"] == 0
        assert stats["records_forged"] == len(forged)
        assert await raw(redis, "DEL", key) == b":1"  # now it is gone: e stopped
        stopped_as_expected(await b.get("e1"))


async def test_the_end_is_recorded_only_over_the_value_judged(redis: RedisServer) -> None:
    """The script that records a task failed does so only if the record is still the value read and
    the worker's key still as judged: a task that ended meanwhile, or a worker that came back, wins."""
    ring = ClusterKeys.of(None)
    alive_key = "mcp_trio:tasks:alive:c"
    async with worker(redis.url, "b") as (b, _):
        now = time.time()
        for task_id in ("t1", "t2"):
            await b.create(TaskRecord(task_id, "", now, now, 60_000, worker="c", instance="c-run"))
        before = await stored(redis, "mcp_trio:task:t1")  # read while c's key is gone; then t1 ends:
        completed = TaskRecord("t1", "", now, now, 60_000, status="completed", worker="c", instance="c-run")
        completed.result = {"content": []}
        await b.put(completed)
        stale = TaskRecord("t1", "", now, now, 60_000, worker="c", instance="c-run")
        assert got(await b._settle(stale, before)) == completed  # judged on what was read before the end
        assert got(await b.get("t1")) == completed

        t2 = await stored(redis, "mcp_trio:task:t2")
        failed = b"a value the script must not store"
        value = seal_alive(ring, alive_key, "c-run", time.time())
        assert await raw(redis, "SET", alive_key, value) == b"+OK"  # c came back after the judgement
        keys = ("mcp_trio:task:t2", alive_key, "mcp_trio:tasks:running:c/c-run")
        assert await raw(redis, "SISMEMBER", keys[2], "t2") == b":1"
        for judged in (("absent", b""), ("kept", b"another value")):
            reply = await raw(redis, "EVAL", SETTLE, "3", *keys, t2, *judged, failed, "t2")
            assert reply == b":0", reply
        assert await stored(redis, "mcp_trio:task:t2") == t2
        reply = await raw(redis, "EVAL", SETTLE, "3", *keys, t2, "kept", value, failed, "t2")
        assert reply == b":1"  # the control: as judged, it is replaced
        assert await stored(redis, "mcp_trio:task:t2") == failed
        assert await raw(redis, "SISMEMBER", keys[2], "t2") == b":0"  # no longer a running task
        assert b.statistics()["task_store"]["tasks_stopped"] == 0


# -- workers serving requests ---------------------------------------------------------------------


def app_for(url: str, name: str, grace: float = 2.0) -> MCPApp:
    config = ServerConfig(
        task_store_factory=lambda: store_for(url),
        worker_id=name,
        task_poll_interval=0.05,
        shutdown_grace=grace,
    )
    return MCPApp(build_demo_server(), config)


async def test_a_worker_shut_down_records_its_tasks_failed(redis: RedisServer) -> None:
    """Worker a stops (hypercorn's shutdown, then the app's, grace 3 s) with two tasks running: the one
    that ends within the grace (2.5 s) completes; the other is cancelled at the end of the grace and recorded
    failed, "shut down", as b answers."""
    apps = {name: app_for(redis.url, name, grace=3.0) for name in ("a", "b")}
    async with http_client() as http, AsyncExitStack() as stack:
        served = {}
        for name, app in apps.items():
            served[name] = await stack.enter_async_context(
                serve_in_process(app, "hypercorn", stop_within=STEP)
            )
            await eventually(
                lambda app=app: app.statistics()["task_store"]["state"] == "connected", STARTUP, "connected"
            )
        a, b = (Worker(http, served[name][0], apps[name]) for name in ("a", "b"))
        quick = await a.start_task("slow_compute", {"seconds": 2.5, "label": "quick"})
        long = await a.start_task("slow_compute", {"seconds": 60})
        served["a"][2].set()  # stop a
        start = trio.current_time()
        with trio.fail_after(8):
            while apps["a"].statistics()["tasks_running"]:  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert trio.current_time() - start >= 2.4  # the long task was given the grace
        done = await b.task(quick)
        assert done["status"] == "completed", done
        assert done["result"]["content"] == [{"type": "text", "text": "Computed quick after 2.5 s"}]
        ended = await b.task(long)
        assert ended["status"] == "failed", ended
        assert ended["statusMessage"] == "The server shut down before this task ended"
        assert ended["error"] == {"code": -32603, "message": ended["statusMessage"]}
        assert apps["b"].statistics()["task_store"]["tasks_stopped"] == 0  # a recorded it itself


async def test_a_worker_stopped_by_sigterm_records_its_task_failed(redis: RedisServer) -> None:
    """``mcp-trio demo --redis`` (shutdown grace 2 s) gets SIGTERM with a task running: it exits with
    status 0 within the grace and a margin, and the task reads failed through the other worker, saying
    the server shut down."""
    async with (
        http_client() as http,
        serve_demo("--worker-id", "a", "--redis", redis.url) as demo_a,
        serve_demo("--worker-id", "b", "--redis", redis.url) as demo_b,
    ):
        a, b = (Worker(http, demo.url, cast(MCPApp, None)) for demo in (demo_a, demo_b))
        running = await a.start_task("slow_compute", {"seconds": 600})
        assert (await b.task(running))["status"] == "working"
        took = await demo_a.stop(signal.SIGTERM)  # asserts status 0 within the grace and a margin
        assert took >= 1.9  # the task was given the grace
        task = await b.task(running)
        assert task["status"] == "failed", task
        assert task["statusMessage"] == "The server shut down before this task ended", task
        assert await raw(redis, "EXISTS", "mcp_trio:tasks:alive:a") == b":0"  # released
        print(f"SIGTERM: exited after {took:.1f} s")


async def test_a_killed_workers_task_reads_failed_through_the_other(redis: RedisServer) -> None:
    """Two ``mcp-trio demo --redis`` workers; a is killed (SIGKILL) while its task runs and while a
    task it finished is stored: through b, the running one reads failed within seconds, saying the
    worker stopped, and the finished one stays completed."""
    async with (
        http_client() as http,
        serve_demo("--worker-id", "a", "--redis", redis.url) as demo_a,
        serve_demo("--worker-id", "b", "--redis", redis.url) as demo_b,
    ):
        a, b = (Worker(http, demo.url, cast(MCPApp, None)) for demo in (demo_a, demo_b))
        with trio.fail_after(STARTUP):
            while await raw(redis, "EXISTS", "mcp_trio:tasks:alive:a", "mcp_trio:tasks:alive:b") != b":2":  # noqa: ASYNC110
                await trio.sleep(0.05)
        finished = await a.start_task("slow_compute", {"seconds": 0.1, "label": "early"})
        await b.wait_status(finished, "completed")
        running = await a.start_task("slow_compute", {"seconds": 600})
        assert (await b.task(running))["status"] == "working"
        demo_a.stopped = True  # serve_demo does not expect a clean exit
        demo_a.process.kill()
        with trio.fail_after(STEP):
            await demo_a.process.wait()
        killed = trio.current_time()
        with trio.fail_after(KILLED_WITHIN):
            while (task := await b.task(running))["status"] == "working":  # noqa: ASYNC110
                await trio.sleep(0.2)
        took = trio.current_time() - killed
        assert task["status"] == "failed" and task["statusMessage"] == STOPPED_MESSAGE, task
        assert task["error"] == {"code": -32603, "message": STOPPED_MESSAGE}
        assert (await b.task(finished))["status"] == "completed"
        print(f"killed worker's task read failed after {took:.1f} s")
        value = json.loads((await stored(redis, f"mcp_trio:task:{running}")).split(b" ", 3)[3])
        assert value["status"] == "failed"
