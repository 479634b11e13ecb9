"""Whether the worker that runs a task is still there: the liveness keys of
:class:`~mcp_trio.redis.RedisTaskStore`, and how a task of a worker that stopped is recorded ``failed``.

Each worker's store keeps ``<prefix>:tasks:alive:<worker>``: the id of the worker's current run (its
task manager's ``instance_id``, which every record it creates names), signed with the cluster's key
ring for that key and timestamped, expiring ``heartbeat_ttl`` seconds after the store last wrote it.
A task whose record is not terminal has stopped when its worker's key is gone (the worker was killed,
or cannot reach Redis), or holds a valid value naming another run (the worker was restarted under the
same id).  A value the ring does not verify, or signed too long ago, proves nothing: the task is left
as it is (``liveness_forged`` counts them).

So that stopped runs are found without reading every task, the sorted set ``<prefix>:tasks:runs`` holds
``<worker>/<run>`` scored by the time of its last liveness write, and ``<prefix>:tasks:running:<worker>/
<run>`` the ids of that run's tasks that have not ended; both are kept :data:`RUN_KEEP` seconds after
the last write.  What they hold only says where to look: every task is judged on its own record.
"""

from __future__ import annotations

import re
from typing import Literal

import mcp_types as mt

from .._app.tasks import STOPPED_MESSAGE, TaskRecord
from .._protocol.cluster import WORKER_ID, ClusterKeys, ForgedMessage

__all__ = [
    "BEAT",
    "CANDIDATES",
    "FORGET_RUN",
    "LIVENESS_MAX_AGE",
    "RELEASE",
    "RUN_KEEP",
    "RUN_TASKS",
    "SETTLE",
    "STOPPED_MESSAGE",
    "judge",
    "liveness_key",
    "may_stop",
    "open_alive",
    "parse_run",
    "run_member",
    "running_key",
    "runs_key",
    "seal_alive",
    "stopped",
]

LIVENESS_MAX_AGE = 60.0
"""Seconds (either way) a signed liveness value may be away from now and still count: a value is
rewritten every ``heartbeat_interval``, so an older one was put back by something else."""

_MAGIC = b"mta1"
_LABEL = b"task worker alive"
_HEX = re.compile(rb"[0-9a-f]+")
_INSTANCE = re.compile(rb"[0-9A-Za-z_-]{1,64}")
RUN_KEEP = 86_400.0
"""Seconds a run's entry in ``<prefix>:tasks:runs`` and its set of running tasks are kept after its last
liveness write (by then the tasks of a stopped run have long been recorded failed, or expired)."""

BEAT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
return 1
"""
"""A run's liveness write: its key (KEYS[1] = ARGV[1], for ARGV[2] ms), its entry ARGV[4] in the runs
(KEYS[2], scored ARGV[3], the time in ms; entries older than ARGV[5] dropped) and its set of running
tasks (KEYS[3]) kept ARGV[6] ms more."""
CANDIDATES = """
local n = redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[1])
if n == 0 then return {} end
local want = tonumber(ARGV[2])
local offset = 0
if n > want then offset = math.floor((n - want + 1) * tonumber(ARGV[3])) end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', offset, want)
"""
"""Up to ARGV[2] runs (KEYS[1]) whose last liveness write is older than ARGV[1] (ms), from a random
place among them (ARGV[3], in [0, 1)): runs that cannot be settled yet do not hide the others."""
RUN_TASKS = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {} end
if kind ~= 'set' then return -1 end
return redis.call('SRANDMEMBER', KEYS[1], ARGV[1])
"""
"""Up to ARGV[1] ids of a run's set of running tasks (KEYS[1]); -1 if the key is not a set."""
FORGET_RUN = """
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind == 'set' and redis.call('SCARD', KEYS[2]) > 0 then return 0 end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"""
"""Forget a run (ARGV[1] in KEYS[1]) that has no running task left (KEYS[2]) and still has not written
its liveness since ARGV[2] (ms)."""

SETTLE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local alive = redis.call('GET', KEYS[2])
if ARGV[2] == 'absent' then
  if alive then return 0 end
elseif alive ~= ARGV[3] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL')
redis.call('SREM', KEYS[3], ARGV[5])
return 1
"""
"""Replace a task's record (KEYS[1]) by ARGV[4], its expiry kept, only if it still holds exactly the
value read (ARGV[1]) and the worker's liveness key (KEYS[2]) is still as it was judged: gone
(ARGV[2] ``absent``) or holding exactly ARGV[3]; the task (ARGV[5]) then leaves its run's set of
running tasks (KEYS[3]).  1 replaced, 0 something changed meanwhile."""
RELEASE = """
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, -string.len(ARGV[1])) == ARGV[1] then
  redis.call('ZADD', KEYS[2], 'XX', 0, ARGV[2])
  return redis.call('DEL', KEYS[1])
end
return 0
"""
"""Delete a liveness key (KEYS[1]) only if it still names this run (ARGV[1]: `` <instance>``), and
date the run (ARGV[2] in KEYS[2]) back, so that the other workers' next sweep looks at its tasks."""


def liveness_key(prefix: str, worker: str) -> str:
    return f"{prefix}:tasks:alive:{worker}"


def runs_key(prefix: str) -> str:
    return f"{prefix}:tasks:runs"


def run_member(worker: str, instance: str) -> str:
    """A run's entry in :func:`runs_key`."""
    return f"{worker}/{instance}"


def running_key(prefix: str, worker: str, instance: str) -> str:
    """The set of the ids of a run's tasks that have not ended."""
    return f"{prefix}:tasks:running:{run_member(worker, instance)}"


def parse_run(member: object) -> tuple[str, str] | None:
    """The worker and the run of an entry read from :func:`runs_key` (None if it is not one)."""
    if isinstance(member, str):
        member = member.encode()
    if not isinstance(member, bytes):
        return None
    worker, _, instance = member.partition(b"/")
    if not _INSTANCE.fullmatch(instance) or not WORKER_ID.fullmatch(worker.decode("ascii", "replace")):
        return None
    return worker.decode(), instance.decode()


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
