"""The tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28 era) as the wire has it: a task
as a server describes it (the ``CreateTaskResult`` of ``tools/call``, the answer to ``tasks/get``), read
into a :class:`TaskInfo`.  Sans-IO: the waiting is the client's (:mod:`mcp_trio._client.tasks`); a
:class:`TaskError` carries the task as last seen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import TransportError

__all__ = ["TASKS_EXTENSION", "TERMINAL", "TaskInfo"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})

DEFAULT_POLL_INTERVAL = 1.0
"""Seconds between two ``tasks/get`` when the server suggests no ``pollIntervalMs``."""
MIN_POLL_INTERVAL = 0.05
MAX_POLL_INTERVAL = 60.0
"""The server's ``pollIntervalMs`` is honoured within these bounds (seconds)."""


@dataclass(frozen=True)
class TaskInfo:
    """A task as the server last described it: the ``CreateTaskResult`` of ``tools/call``, or the
    answer to ``tasks/get``.

    ``status`` is ``"working"``, ``"input_required"``, ``"completed"``, ``"failed"`` or ``"cancelled"``.
    What the status carries: ``input_requests`` (``input_required``: key -> ``{"method", "params"}``),
    ``result`` (``completed``: the ``CallToolResult`` as JSON) or ``error`` (``failed``: the JSON-RPC
    error, ``{"code", "message", "data"?}``).  ``raw`` is the object as it arrived."""

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        """Whether the task has ended (``completed``, ``failed`` or ``cancelled``)."""
        return self.status in TERMINAL

    @property
    def poll_interval(self) -> float:
        """Seconds until the next ``tasks/get``: the server's ``pollIntervalMs`` within 0.05 and 60
        seconds, else 1 second."""
        if self.poll_interval_ms is None:
            return DEFAULT_POLL_INTERVAL
        return min(MAX_POLL_INTERVAL, max(MIN_POLL_INTERVAL, self.poll_interval_ms / 1000))

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> TaskInfo:
        """A ``Task`` object of the wire; :class:`TransportError` if it has no ``taskId`` or
        ``status`` (the fields the client relies on).  Other fields of the wrong type are ignored."""
        task_id, status = data.get("taskId"), data.get("status")
        if not isinstance(task_id, str) or not task_id or not isinstance(status, str):
            raise TransportError(f"the server's task has no taskId or status: {dict(data)!r:.300}")
        requests = data.get("inputRequests")
        return cls(
            task_id=task_id,
            status=status,
            status_message=_typed(data, "statusMessage", str),
            created_at=_typed(data, "createdAt", str),
            last_updated_at=_typed(data, "lastUpdatedAt", str),
            ttl_ms=_integer(data.get("ttlMs")),
            poll_interval_ms=_integer(data.get("pollIntervalMs")),
            input_requests={
                key: request
                for key, request in (requests.items() if isinstance(requests, dict) else ())
                if isinstance(key, str) and isinstance(request, dict)
            },
            result=_typed(data, "result", dict),
            error=_typed(data, "error", dict),
            raw=dict(data),
        )


def _typed(data: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
    value = data.get(key)
    return value if isinstance(value, kind) else None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        return None
    return int(value) if abs(value) < 2**53 else None
