"""Where task records live: the :class:`TaskStore` protocol and :class:`MemoryTaskStore`."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import trio

from ...errors import TaskStoreFull
from .record import TaskRecord

__all__ = ["MemoryTaskStore", "TaskStore"]


@runtime_checkable
class TaskStore(Protocol):
    """Where task records live.  Every method may raise :class:`~mcp_trio.errors.TaskStoreUnavailable`
    (answered -32603); ``get`` returns None for a task that is unknown or past its TTL alike."""

    async def create(self, record: TaskRecord) -> None:
        """Store a new record; once this returns, ``get`` finds it (from any worker sharing the store).
        Raises :class:`~mcp_trio.errors.TaskStoreFull` when no room is left."""
        ...

    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def put(self, record: TaskRecord) -> None:
        """Replace the record of a task that exists (a task already forgotten stays forgotten)."""
        ...

    async def delete(self, task_id: str) -> None: ...


class MemoryTaskStore:
    """The default store: records in this process's memory, forgotten after their TTL.

    ``max_tasks`` bounds how many it keeps: when full, the terminal task that expires first makes room;
    if every task is still running, :meth:`create` raises :class:`~mcp_trio.errors.TaskStoreFull`.  Expired
    records go at the next call that touches the store (each call forgets those due, oldest first).
    """

    def __init__(self, *, max_tasks: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        if max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        self.max_tasks = max_tasks
        self._clock = clock
        self._records: dict[str, TaskRecord] = {}
        self._expiries: list[tuple[float, str]] = []
        """A heap of (expiry, task id): what to forget next."""

    def __len__(self) -> int:
        return len(self._records)

    def evict_expired(self) -> None:
        """Forget every record past its TTL."""
        now = self._clock()
        while self._expiries and self._expiries[0][0] <= now:
            _, task_id = heapq.heappop(self._expiries)
            record = self._records.get(task_id)
            if record is not None and record.expires_at <= now:
                del self._records[task_id]

    async def create(self, record: TaskRecord) -> None:
        self.evict_expired()
        if len(self._records) >= self.max_tasks:
            done = [rec for rec in self._records.values() if rec.terminal]
            if not done:
                raise TaskStoreFull(f"{self.max_tasks} tasks are running")
            del self._records[min(done, key=lambda rec: rec.expires_at).task_id]
        self._records[record.task_id] = record.copy()
        if record.ttl_ms is not None:
            heapq.heappush(self._expiries, (record.expires_at, record.task_id))
        if len(self._expiries) > 2 * self.max_tasks:  # ids of records gone another way
            self._expiries = [(at, tid) for at, tid in self._expiries if tid in self._records]
            heapq.heapify(self._expiries)
        await trio.lowlevel.checkpoint()

    async def get(self, task_id: str) -> TaskRecord | None:
        self.evict_expired()
        record = self._records.get(task_id)
        await trio.lowlevel.checkpoint()
        return None if record is None else record.copy()

    async def put(self, record: TaskRecord) -> None:
        if record.task_id in self._records:
            self._records[record.task_id] = record.copy()
        await trio.lowlevel.checkpoint()

    async def delete(self, task_id: str) -> None:
        self._records.pop(task_id, None)
        await trio.lowlevel.checkpoint()

    def statistics(self) -> dict[str, int]:
        self.evict_expired()
        return {"tasks_stored": len(self._records)}
