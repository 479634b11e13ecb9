"""The liveness values of :class:`mcp_trio.redis.RedisTaskStore` without Redis: how a worker's run is
sealed into its liveness key, what a read value proves about a task's worker, the runs' entries, and
the record a stopped worker's task gets; the store's liveness options.  With a real redis-server:
tests/integration/test_redis_task_liveness.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from mcp_trio._app.tasks import STOPPED_MESSAGE, TaskManager
from mcp_trio._protocol.cluster import ClusterKeys, ForgedMessage
from mcp_trio.redis import RedisTaskStore
from mcp_trio.redis.task_liveness import (
    LIVENESS_MAX_AGE,
    judge,
    may_stop,
    open_alive,
    parse_run,
    seal_alive,
    stopped,
)
from mcp_trio.redis.task_records import decode_record
from mcp_trio.server import TaskRecord

RING = ClusterKeys([b"the ring of these tests, 32 bytes!"])
OTHER = ClusterKeys([b"another ring altogether, 32 bytes"])
KEY = "p:tasks:alive:a"


def record(**fields: Any) -> TaskRecord:
    now = time.time()
    base: dict[str, Any] = {"worker": "a", "instance": "run-1"}
    return TaskRecord("t1", "", now, now, 60_000, **{**base, **fields})


def test_a_sealed_value_names_its_run_for_its_key_only() -> None:
    now = time.time()
    value = seal_alive(RING, KEY, "run-1", now)
    assert value.startswith(b"mta1 ") and value.endswith(b" run-1")
    assert open_alive(RING, KEY, value, now) == "run-1"
    assert open_alive(RING, KEY, value.decode(), now + LIVENESS_MAX_AGE - 1) == "run-1"
    two = ClusterKeys([b"the next key of the ring, 32 bytes", b"the ring of these tests, 32 bytes!"])
    assert open_alive(two, KEY, value, now) == "run-1"  # a ring that still holds the key verifies it
    forged = [
        seal_alive(OTHER, KEY, "run-1", now),  # another ring
        seal_alive(RING, "p:tasks:alive:b", "run-1", now),  # another worker's key
        value.replace(b"run-1", b"run-2"),  # another run, the signature kept
        value[:-1],
        b"mta1 " + value[5:].replace(b" ", b"  ", 1),
        b"mtr1" + value[4:],  # the magic of a task record
        b"",
        b"mta1 zz zz 1 run-1",
        b"mta1 00 00 notdigits run-1",
        value + b" extra",
        7,
        None,
    ]
    for bad in forged:
        with pytest.raises(ForgedMessage):
            open_alive(RING, KEY, bad, now)
    for when in (now + LIVENESS_MAX_AGE + 1, now - LIVENESS_MAX_AGE - 1):  # put back, or from the future
        with pytest.raises(ForgedMessage, match="away from now"):
            open_alive(RING, KEY, value, when)
    with pytest.raises(ForgedMessage):
        open_alive(RING, KEY, seal_alive(RING, KEY, "not a run id!", now), now)


def test_what_a_value_proves_about_a_task_s_worker() -> None:
    now = time.time()
    task = record()
    assert judge(RING, KEY, task, None, now) == "stopped"  # the key expired, or was released
    assert judge(RING, KEY, task, seal_alive(RING, KEY, "run-1", now), now) == "running"
    assert judge(RING, KEY, task, seal_alive(RING, KEY, "run-2", now), now) == "stopped"  # restarted
    assert judge(RING, KEY, task, seal_alive(OTHER, KEY, "run-2", now), now) == "forged"
    assert judge(RING, KEY, task, b"garbage", now) == "forged"
    assert judge(RING, KEY, task, object(), now) == "forged"  # a key of another type
    stale = seal_alive(RING, KEY, "run-2", now - 3600)
    assert judge(RING, KEY, task, stale, now) == "forged"


def test_which_records_can_be_judged() -> None:
    assert may_stop(record())
    assert may_stop(record(status="input_required"))
    for status in ("completed", "failed", "cancelled"):
        assert not may_stop(record(status=status))
    assert not may_stop(record(instance=None))  # written before records named their run
    assert not may_stop(record(worker=None))  # a single process
    assert not may_stop(record(worker="not a worker id!"))


def test_a_stopped_task_s_record() -> None:
    task = record(status="input_required", input_requests={"k": {"method": "elicitation/create"}})
    task.updated_at = time.time() + 10  # a later clock than this worker's: time never goes back
    ended = stopped(task, time.time())
    assert ended.status == "failed" and ended.status_message == STOPPED_MESSAGE
    assert ended.error == {"code": -32603, "message": STOPPED_MESSAGE}
    assert ended.input_requests == {} and ended.result is None
    assert ended.updated_at == task.updated_at and ended.task_id == task.task_id
    assert task.status == "input_required" and task.input_requests  # a copy


def test_runs_entries() -> None:
    assert parse_run(b"a/0123abcd") == ("a", "0123abcd")
    assert parse_run("w-1/x_Y-9") == ("w-1", "x_Y-9")
    for bad in (b"a", b"a/", b"/x", b"a b/x", b"a/x/y", b"\xff/x", b"a/" + b"x" * 65, b"x" * 33 + b"/x", 7):
        assert parse_run(bad) is None, bad


def test_records_name_their_run_and_older_ones_still_read() -> None:
    manager = TaskManager(worker_id="a")
    other = TaskManager(worker_id="a")
    assert manager.instance_id != other.instance_id  # each run of a worker has its own
    data = record(instance=manager.instance_id).to_json()
    assert decode_record(json_of(data), "t1").instance == manager.instance_id
    older = {k: v for k, v in data.items() if k != "instance"}  # written before the field existed
    assert decode_record(json_of(older), "t1").instance is None
    with pytest.raises(ValueError, match="instance"):
        decode_record(json_of({**data, "instance": 7}), "t1")


def json_of(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


@pytest.mark.parametrize(("interval", "ttl"), [(0, 1), (1, 1), (2, 1), (-1, 1)])
def test_liveness_options_are_checked(interval: float, ttl: float) -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        RedisTaskStore(
            "redis://127.0.0.1:1", secret=b"k" * 32, heartbeat_interval=interval, heartbeat_ttl=ttl
        )


def test_a_store_judges_only_after_its_ttl_and_retries() -> None:
    store = RedisTaskStore("redis://127.0.0.1:1", secret=b"k" * 32, heartbeat_ttl=4, retry_max=1.5)
    assert store.settle_after == 5.5
    stats = store.statistics()["task_store"]
    assert stats["tasks_stopped"] == stats["liveness_forged"] == stats["writes_refused"] == 0
