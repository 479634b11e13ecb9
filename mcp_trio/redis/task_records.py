"""What :class:`~mcp_trio.redis.RedisTaskStore` stores and sends: the records (their JSON checked
field by field), the scripts that create, replace and delete them, and the signals between workers."""

from __future__ import annotations

import math
from typing import Any

from .._app.tasks import TERMINAL, TaskRecord
from .._protocol import safejson

__all__ = ["CREATE", "DELETE", "PUT", "SIGNAL_LIMIT", "decode_record", "decode_signal"]

CREATE = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -1 end
local stored
if ARGV[2] == '' then
  stored = redis.call('SET', KEYS[1], ARGV[1], 'NX')
else
  stored = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
end
if not stored then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
if KEYS[3] then
  redis.call('SADD', KEYS[3], ARGV[6])
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
return 1
"""
"""Create a task's key (SET NX, with its TTL) and count it in the index, unless the index (pruned of
expired ids first) already holds ``max_tasks`` ids: 1 created, 0 the key exists, -1 full.  A task of a
worker's run is also added to that run's set of running tasks (KEYS[3], kept ARGV[7] ms)."""
PUT = """
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local data = string.match(current, '^mtr1 %x+ %x+ (.*)$')
if data then
  local ok, record = pcall(cjson.decode, data)
  if ok and type(record) == 'table' then
    local status = record['status']
    if status == 'completed' or status == 'failed' or status == 'cancelled' then return -1 end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
if KEYS[2] then redis.call('SREM', KEYS[2], ARGV[2]) end
return 1
"""
"""Replace a task's record (its expiry kept) unless it is gone (0) or already ends the task (-1: a
task's end is never overwritten, say by its worker back after it was judged stopped).  With KEYS[2],
the new record ends the task: its id leaves its run's set of running tasks."""
DELETE = """
redis.call('ZREM', KEYS[2], ARGV[1])
if KEYS[3] then redis.call('SREM', KEYS[3], ARGV[1]) end
return redis.call('DEL', KEYS[1])
"""
"""Delete a task's key, its id in the index and (KEYS[3]) in this run's set of running tasks."""
SIGNAL_LIMIT = 1024 * 1024
"""Largest signal (JSON, bytes) sent or accepted on a worker's task channel."""
_STATUSES = frozenset({"working", "input_required"}) | TERMINAL
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "task_id": (str,),
    "owner": (str,),
    "created_at": (int, float),
    "updated_at": (int, float),
    "ttl_ms": (int, type(None)),
    "poll_interval_ms": (int, type(None)),
    "status": (str,),
    "status_message": (str, type(None)),
    "result": (dict, type(None)),
    "error": (dict, type(None)),
    "input_requests": (dict,),
    "worker": (str, type(None)),
}
"""The JSON type of each field of a stored :class:`~mcp_trio.server.TaskRecord`."""
_OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {"instance": (str, type(None))}
"""Fields that records written by earlier versions lack."""


def decode_record(raw: object, task_id: str) -> TaskRecord:
    """The record stored for ``task_id``, or ValueError saying why the value is not one."""
    if not isinstance(raw, bytes | str):
        raise ValueError("the key does not hold a string")
    try:
        data = safejson.loads(raw)
    except ValueError as exc:
        raise ValueError("not JSON") from exc
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for name, types in _RECORD_TYPES.items():
        value = data.get(name)
        if name not in data or isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{name} is missing or of the wrong type")
    for name, types in _OPTIONAL_TYPES.items():
        if not isinstance(data.get(name), types):
            raise ValueError(f"{name} is of the wrong type")
    if data["task_id"] != task_id:
        raise ValueError("it names another task")
    if data["status"] not in _STATUSES:
        raise ValueError("unknown status")
    if not all(isinstance(k, str) and isinstance(v, dict) for k, v in data["input_requests"].items()):
        raise ValueError("input_requests is not an object of objects")
    if not all(math.isfinite(data[name]) for name in ("created_at", "updated_at")):
        raise ValueError("a timestamp is not finite")
    return TaskRecord.from_json(data)


def decode_signal(data: object, limit: int) -> tuple[str, dict[str, Any]]:
    """The task id and the message of a signal (its JSON, at most ``limit`` bytes), or ValueError."""
    if isinstance(data, str):
        data = data.encode()
    if not isinstance(data, bytes):
        raise ValueError(f"a {type(data).__name__}, not a string")
    if len(data) > limit:
        raise ValueError(f"{len(data)} bytes, over the limit of {limit}")
    try:
        message = safejson.loads(data)
    except ValueError as exc:
        raise ValueError("not JSON") from exc
    if not isinstance(message, dict):
        raise ValueError("not a JSON object")
    task_id = message.pop("taskId", None)
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("no taskId")
    return task_id, message
