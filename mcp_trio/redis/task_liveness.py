"""Whether the worker that runs a task is still there: the liveness keys of
:class:`~mcp_trio.redis.RedisTaskStore`, and how a task of a worker that stopped is recorded ``failed``.

Each worker's store keeps ``<prefix>:tasks:alive:<worker>``: the id of the worker's current run (its
task manager's ``instance_id``, which every record it creates names), signed with the cluster's key
ring for that key and timestamped, expiring ``heartbeat_ttl`` seconds after the store last wrote it.
A task whose record is not terminal has stopped when its worker's key is gone (the worker was killed,
or cannot reach Redis), or holds a valid value naming another run (the worker was restarted under the
same id).  A value the ring does not verify, or signed too long ago, proves nothing: the task is left
as it is (``liveness_forged`` counts them).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypeVar

import mcp_types as mt
import trio

from .._app.tasks import TaskManager, TaskRecord
from .._protocol.cluster import WORKER_ID, ClusterKeys, ForgedMessage
from .._runtime.peerlog import RateLimitedLog
from ..errors import TaskStoreUnavailable
from .connection import get_value, logger

if TYPE_CHECKING:
    import coredis

_T = TypeVar("_T")

__all__ = [
    "LIVENESS_MAX_AGE",
    "RELEASE",
    "SETTLE",
    "STOPPED_MESSAGE",
    "TaskLiveness",
    "judge",
    "liveness_key",
    "may_stop",
    "open_alive",
    "seal_alive",
    "stopped",
]

STOPPED_MESSAGE = "The worker running this task stopped before it ended"
"""The ``statusMessage`` (and error message) of a task whose worker stopped."""
LIVENESS_MAX_AGE = 60.0
"""Seconds (either way) a signed liveness value may be away from now and still count: a value is
rewritten every ``heartbeat_interval``, so an older one was put back by something else."""

_MAGIC = b"mta1"
_LABEL = b"task worker alive"
_HEX = re.compile(rb"[0-9a-f]+")
_INSTANCE = re.compile(rb"[0-9A-Za-z_-]{1,64}")

SETTLE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local alive = redis.call('GET', KEYS[2])
if ARGV[2] == 'absent' then
  if alive then return 0 end
elseif alive ~= ARGV[3] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL')
return 1
"""
"""Replace a task's record (KEYS[1]) by ARGV[4], its expiry kept, only if it still holds exactly the
value read (ARGV[1]) and the worker's liveness key (KEYS[2]) is still as it was judged: gone
(ARGV[2] ``absent``) or holding exactly ARGV[3].  1 replaced, 0 something changed meanwhile."""
RELEASE = """
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, -string.len(ARGV[1])) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
"""Delete a liveness key only if it still names this run (ARGV[1]: `` <instance>``)."""


def liveness_key(prefix: str, worker: str) -> str:
    return f"{prefix}:tasks:alive:{worker}"


def seal_alive(keys: ClusterKeys, key: str, instance: str, now: float) -> bytes:
    """The value of the liveness key ``key``: ``mta1 <key id> <signature> <ts> <instance>``, signed
    for that key at ``now`` (seconds since the epoch)."""
    ts = str(int(now * 1000)).encode()
    kid, signature = keys.sign(_LABEL, key.encode(), ts, instance.encode())
    return b" ".join((_MAGIC, kid.encode(), signature.encode(), ts, instance.encode()))


def open_alive(keys: ClusterKeys, key: str, value: object, now: float) -> str:
    """The run named by ``value`` read from ``key``: :class:`ForgedMessage` if the ring does not verify
    it for that key, or it was signed more than :data:`LIVENESS_MAX_AGE` away from ``now``."""
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes):
        raise ForgedMessage("the key does not hold a string")
    fields = value.split(b" ")
    if len(fields) != 5 or fields[0] != _MAGIC:
        raise ForgedMessage("not a signed liveness value")
    _, kid, signature, ts, instance = fields
    if not (_HEX.fullmatch(kid) and _HEX.fullmatch(signature) and _INSTANCE.fullmatch(instance)):
        raise ForgedMessage("not a signed liveness value")
    if not ts.isdigit() or len(ts) > 16:
        raise ForgedMessage("no valid timestamp")
    if not keys.verify(kid.decode(), signature.decode(), _LABEL, key.encode(), ts, instance):
        raise ForgedMessage("a signature the key ring does not verify for this key")
    if abs(int(ts) / 1000 - now) > LIVENESS_MAX_AGE:
        raise ForgedMessage(f"signed more than {LIVENESS_MAX_AGE:g} s away from now")
    return instance.decode()


Verdict = Literal["running", "stopped", "forged"]


def judge(keys: ClusterKeys, key: str, record: TaskRecord, value: object, now: float) -> Verdict:
    """Whether the run of a worker that runs ``record`` (not terminal, naming its worker and run) is
    still there, from ``value``, what the worker's liveness key ``key`` holds (None: gone)."""
    if value is None:
        return "stopped"
    try:
        instance = open_alive(keys, key, value, now)
    except ForgedMessage:
        return "forged"
    return "running" if instance == record.instance else "stopped"


def may_stop(record: TaskRecord) -> bool:
    """Whether ``record`` can be judged: not terminal, naming a valid worker id and the run."""
    return (
        not record.terminal
        and record.instance is not None
        and record.worker is not None
        and WORKER_ID.fullmatch(record.worker) is not None
    )


def stopped(record: TaskRecord, now: float) -> TaskRecord:
    """``record`` as recorded once its worker is known to have stopped: ``failed``."""
    ended = record.copy()
    ended.status, ended.status_message = "failed", STOPPED_MESSAGE
    ended.error = {"code": mt.INTERNAL_ERROR, "message": STOPPED_MESSAGE}
    ended.result = None
    ended.input_requests.clear()
    ended.updated_at = max(record.updated_at, now)
    return ended


class TaskLiveness:
    """The part of :class:`~mcp_trio.redis.RedisTaskStore` that keeps this worker's liveness key and
    records the tasks of stopped workers ``failed`` (a base class of the store: what it uses of the
    store is declared here)."""

    prefix: str
    timeout: float
    worker_id: str | None
    heartbeat_interval: float
    heartbeat_ttl: float
    settle_after: float
    _keys: ClusterKeys
    _counts: dict[str, int]
    _live: object
    _manager: TaskManager | None
    _instance: str | None
    _beaten: bool
    _connected_since: float | None
    _forged_records_log: RateLimitedLog

    def task_key(self, task_id: str) -> str:
        raise NotImplementedError

    async def _command(self, what: str, call: Callable[[coredis.Redis[bytes]], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    async def _read(self, task_id: str) -> tuple[TaskRecord, bytes] | None:
        raise NotImplementedError

    def _encode(self, record: TaskRecord, key: str) -> bytes:
        raise NotImplementedError

    def _judging(self) -> bool:
        """Whether :meth:`run` has been connected long enough to judge whether other workers run."""
        since = self._connected_since
        return (
            self._live is not None and since is not None and trio.current_time() - since >= self.settle_after
        )

    async def _settle(self, record: TaskRecord, raw: bytes) -> TaskRecord | None:
        """``record`` (read as ``raw``), recorded ``failed`` if its worker's run stopped."""
        assert record.worker is not None
        key, alive_key = self.task_key(record.task_id), liveness_key(self.prefix, record.worker)
        alive = await self._command("get", lambda c: get_value(c, alive_key))
        verdict = judge(self._keys, alive_key, record, alive, time.time())
        if verdict == "forged":
            self._counts["liveness_forged"] += 1
            self._forged_records_log.log(
                logging.WARNING,
                "Redis task store: the value of %s is not a liveness value signed by the key ring (or is "
                "stale); the tasks of worker %s are left as they are (%d so far)",
                alive_key,
                record.worker,
                self._counts["liveness_forged"],
            )
        if verdict != "stopped":
            return record
        ended = stopped(record, time.time())
        args = [
            raw,
            "absent" if alive is None else "kept",
            alive if isinstance(alive, bytes) else b"",
            self._encode(ended, key),
        ]
        replaced = await self._command("settle", lambda c: c.eval(SETTLE, keys=[key, alive_key], args=args))
        if replaced != 1:  # it changed meanwhile (it ended, or the worker is back): as it is now
            found = await self._read(record.task_id)
            return None if found is None else found[0]
        self._counts["tasks_stopped"] += 1
        logger.info(
            "Redis task store: task %s recorded failed: its worker %s stopped", record.task_id, record.worker
        )
        if self._manager is not None:
            try:
                await self._manager.published(ended.copy())
            except Exception:
                logger.exception("Redis task store: publishing the end of task %s failed", record.task_id)
        return ended

    async def _beat(self, client: coredis.Redis[bytes]) -> None:
        """Write this run's liveness key (expiring after ``heartbeat_ttl``)."""
        assert self.worker_id is not None and self._instance is not None
        key = liveness_key(self.prefix, self.worker_id)
        value = seal_alive(self._keys, key, self._instance, time.time())
        await client.set(key, value, px=max(1, int(self.heartbeat_ttl * 1000)))
        self._beaten = True

    async def _heartbeat(self, client: coredis.Redis[bytes]) -> None:
        while True:
            await trio.sleep(self.heartbeat_interval)
            with trio.fail_after(self.timeout):
                await self._beat(client)

    async def _release(self) -> None:
        """Delete this run's liveness key (the app is ending, its tasks are recorded): the tasks
        it could not record are known to have stopped at once, not after ``heartbeat_ttl``."""
        if self.worker_id is None or self._instance is None or not self._beaten:
            return
        key = liveness_key(self.prefix, self.worker_id)
        ours = f" {self._instance}"
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            try:
                await self._command("release", lambda c: c.eval(RELEASE, keys=[key], args=[ours]))
            except TaskStoreUnavailable:
                pass
