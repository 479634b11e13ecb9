"""The live side of one task in the process that runs it: :class:`TaskRun`, and :class:`TaskPeer`, the
peer its handler talks to (input requests become the task's ``inputRequests``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as mt
import pydantic
import trio

from ...errors import RPCError
from .record import TaskRecord

if TYPE_CHECKING:
    from .manager import TaskManager

__all__ = ["ENDED_ELSEWHERE", "TaskPeer", "TaskRun"]

ENDED_ELSEWHERE = "its end was already recorded by another worker"
"""The cancel reason a shared store gives a task whose record another worker ended (it took this worker
for stopped): nothing more of it is written or published."""

_RESULT_MODELS: dict[str, type[pydantic.BaseModel]] = {
    "elicitation/create": mt.ElicitResult,
    "sampling/createMessage": mt.CreateMessageResult,
    "roots/list": mt.ListRootsResult,
}


def answers_to(outstanding: Mapping[str, dict[str, Any]], responses: Mapping[str, Any]) -> dict[str, Any]:
    """The answers among ``responses`` to ``outstanding`` input requests (others are ignored); an
    answer of the wrong shape is -32602 (RPCError), and then none of them counts."""
    applied: dict[str, Any] = {}
    for key, answer in responses.items():
        request = outstanding.get(key)
        if request is None:
            continue
        model = _RESULT_MODELS.get(request.get("method", ""))
        if model is not None:
            try:
                model.model_validate(answer)
            except pydantic.ValidationError as exc:
                raise RPCError(
                    mt.INVALID_PARAMS, f"Invalid input response {key!r} to {request['method']}"
                ) from exc
        applied[key] = answer
    return applied


class TaskPeer:
    """A running task as its handler's peer: input requests become the task's ``inputRequests``;
    notifications (progress, log) are not sent for tasks."""

    session_id: str | None = None
    log_level: mt.LoggingLevel | None = None

    def __init__(self, run: TaskRun, protocol_version: str, client_capabilities: dict[str, Any]) -> None:
        self._run = run
        self.protocol_version = protocol_version
        self.client_info: dict[str, Any] = {}
        self.client_capabilities = client_capabilities
        self.subscriptions: set[str] | frozenset[str] = set()
        self.principal = run.principal

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None:
        """Progress and log notifications are not delivered for tasks (the extension has no channel)."""

    async def request(
        self, method: str, params: dict[str, Any] | None, related: mt.RequestId | None = None
    ) -> dict[str, Any]:
        raise RPCError(mt.INTERNAL_ERROR, f"{method}: a task asks the client with Context.ask")

    async def ask(
        self, requests: Mapping[str, dict[str, Any]], related: mt.RequestId | None
    ) -> dict[str, Any]:
        return await self._run.ask(requests)

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:
        """Tasks have no stream of their own."""


class TaskRun:
    """The live side of one task in the process that runs it: its cancel scope, the input requests
    its handler waits on, and the writes of its record (one at a time, newest state last)."""

    def __init__(self, manager: TaskManager, record: TaskRecord, principal: object) -> None:
        self.manager = manager
        self.record = record
        self.principal = principal
        self.scope = trio.CancelScope()
        self.created = trio.Event()
        self.cancel_reason: str | None = None
        self._lock = trio.Lock()
        self._version = self._written = 0
        self._keys_used: set[str] = set()
        self._answers: dict[str, Any] = {}
        self._answered = trio.Event()

    async def save(self) -> None:
        """Write the state as it is now (once the record was created).  Writes never overtake each
        other: one whose state is older than the state already written is dropped, so the store (and
        the ``notifications/tasks`` sent) never go back, and each state is written at most once."""
        self.record.updated_at = max(self.record.updated_at, time.time())
        self._version += 1
        version, snapshot = self._version, self.record.copy()
        await self.created.wait()
        async with self._lock:
            if version <= self._written:
                return
            await self.manager.store.put(snapshot)
            self._written = version
            if self.cancel_reason != ENDED_ELSEWHERE:  # else the store kept another worker's end
                await self.manager.published(snapshot)

    async def ask(self, requests: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
        keys: dict[str, str] = {}
        for key, wire in requests.items():
            unique, n = key, 1
            while unique in self._keys_used:  # a key is never reused over a task's life
                n += 1
                unique = f"{key}-{n}"
            self._keys_used.add(unique)
            keys[key] = unique
            self.record.input_requests[unique] = dict(wire)
        self.record.status = "input_required"
        await self.save()
        while not all(unique in self._answers for unique in keys.values()):
            await self._answered.wait()
        return {key: self._answers.pop(unique) for key, unique in keys.items()}

    async def deliver(self, responses: Mapping[str, Any]) -> None:
        """``tasks/update``: answers to outstanding requests (others are ignored).  An answer of the
        wrong shape is -32602 and nothing is applied."""
        if self.record.status != "input_required":
            raise RPCError(mt.INVALID_PARAMS, f"Task {self.record.task_id} is not waiting for input")
        outstanding = self.record.input_requests
        applied = answers_to(outstanding, responses)
        if not applied:
            return
        for key, answer in applied.items():
            del outstanding[key]
            self._answers[key] = answer
        if not outstanding:
            self.record.status = "working"
        self._answered.set()
        self._answered = trio.Event()
        await self.save()

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.scope.cancel()
