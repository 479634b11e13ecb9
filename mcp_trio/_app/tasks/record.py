"""A task as stored: :class:`TaskRecord`, and what the tasks extension names on the wire."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ...errors import RPCError
from ..inputs import MISSING_REQUIRED_CLIENT_CAPABILITY

__all__ = [
    "TASKS_EXTENSION",
    "TASK_METHODS",
    "TERMINAL",
    "TaskRecord",
    "TaskSupport",
    "declares_tasks",
    "missing_extension",
]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TaskSupport = Literal["forbidden", "optional", "required"]
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")


def missing_extension() -> RPCError:
    """-32021 naming the tasks extension (the client did not declare it on this request)."""
    return RPCError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: extension {TASKS_EXTENSION}",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def declares_tasks(client_capabilities: Mapping[str, Any]) -> bool:
    """Whether the request's client capabilities declare the tasks extension."""
    extensions = client_capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class TaskRecord:
    """What a store keeps of one task: its state as ``tasks/get`` shows it, and whose it is."""

    task_id: str
    owner: str
    created_at: float
    """Wall-clock seconds (``time.time()``)."""
    updated_at: float
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    status: str = "working"
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    worker: str | None = None
    """The worker whose nursery runs the task (None in a single process)."""
    instance: str | None = None
    """Which run of that worker runs it (a random id each time an app starts, so that a worker
    restarted under the same id is told apart from the one that ran the task; None for records
    written before it existed)."""

    @property
    def expires_at(self) -> float:
        """When the store may forget it (``math.inf`` for no TTL)."""
        return math.inf if self.ttl_ms is None else self.created_at + self.ttl_ms / 1000

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def task(self) -> dict[str, Any]:
        """The ``Task`` fields (a ``CreateTaskResult`` is these plus ``resultType``)."""
        wire: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _iso(self.created_at),
            "lastUpdatedAt": _iso(self.updated_at),
            "ttlMs": self.ttl_ms,
        }
        if self.poll_interval_ms is not None:
            wire["pollIntervalMs"] = self.poll_interval_ms
        if self.status_message is not None:
            wire["statusMessage"] = self.status_message
        return wire

    def detailed(self) -> dict[str, Any]:
        """The ``DetailedTask`` of ``tasks/get`` and ``notifications/tasks``: the task with what its
        status carries (``inputRequests``, ``result`` or ``error``)."""
        wire = self.task()
        if self.status == "input_required":
            wire["inputRequests"] = dict(self.input_requests)
        elif self.status == "completed" and self.result is not None:
            wire["result"] = self.result
        elif self.status == "failed" and self.error is not None:
            wire["error"] = self.error
        return wire

    def copy(self) -> TaskRecord:
        return dataclasses.replace(self, input_requests=dict(self.input_requests))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskRecord:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})
