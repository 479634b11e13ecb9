"""The tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28 era): long-running tool calls.

A task-capable tool called by a client that declared the extension runs as a *task*: the request is
answered with a ``CreateTaskResult`` once the task is in the store, and the handler goes on in a nursery
the app owns (:class:`TaskManager`), not the request's.  It outlives the request but not the server:
``tasks/cancel``, its TTL and shutdown cancel it, and how it ended is recorded.  While it runs, the
handler's ``ctx.elicit``/``ctx.sample``/``ctx.ask`` become ``inputRequests`` of the task, answered with
``tasks/update``.

Like :meth:`trio.Nursery.start`, a tool may take a ``task_status`` parameter and call
``task_status.started()`` itself: until then it runs in the request (input it asks for is gathered with
input-required results, and a result it returns is answered directly); from then on it is a task.  A
tool without that parameter becomes a task before it starts.

The records live in a :class:`TaskStore`: :class:`MemoryTaskStore` by default, or
:class:`mcp_trio.redis.RedisTaskStore` for tasks that any worker can answer ``tasks/get`` for.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import mcp_types as mt
import pydantic
import trio

from ..errors import RPCError, TaskStoreFull, TaskStoreUnavailable
from .inputs import MISSING_REQUIRED_CLIENT_CAPABILITY
from .principal import PrincipalKeys

if TYPE_CHECKING:
    from .context import Context

__all__ = [
    "TASKS_EXTENSION",
    "TASK_STATUS_IGNORED",
    "MemoryTaskStore",
    "TaskManager",
    "TaskRecord",
    "TaskStatus",
    "TaskStore",
    "TaskStoreFull",
    "TaskStoreUnavailable",
    "TaskSupport",
]

logger = logging.getLogger(__name__)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TaskSupport = Literal["forbidden", "optional", "required"]
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
_RESULT_MODELS: dict[str, type[pydantic.BaseModel]] = {
    "elicitation/create": mt.ElicitResult,
    "sampling/createMessage": mt.CreateMessageResult,
    "roots/list": mt.ListRootsResult,
}
MAX_TASK_ID_LENGTH = 256
"""Longest task id looked up (ours are 32 characters); a longer one is simply not found."""
SAVE_TIMEOUT = 5.0
"""How long the last write of a cancelled task (its ``cancelled`` status) may take."""


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


@runtime_checkable
class TaskStore(Protocol):
    """Where task records live.  Every method may raise :class:`~mcp_trio.TaskStoreUnavailable`
    (answered -32603); ``get`` returns None for a task that is unknown or past its TTL alike."""

    async def create(self, record: TaskRecord) -> None:
        """Store a new record; once this returns, ``get`` finds it (from any worker sharing the store).
        Raises :class:`~mcp_trio.TaskStoreFull` when no room is left."""
        ...

    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def put(self, record: TaskRecord) -> None:
        """Replace the record of a task that exists (a task already forgotten stays forgotten)."""
        ...

    async def delete(self, task_id: str) -> None: ...


class MemoryTaskStore:
    """The default store: records in this process's memory, forgotten after their TTL.

    ``max_tasks`` bounds how many it keeps: when full, the terminal task that expires first makes room;
    if every task is still running, :meth:`create` raises :class:`~mcp_trio.TaskStoreFull`.  Expired
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


class TaskStatus:
    """What a tool's ``task_status`` parameter gets (the way :meth:`trio.Nursery.start` hands one):
    ``task_status.started()`` turns the call into a task.  Outside a task-capable call (a client without
    the extension, a 2025 session) it does nothing and the call simply goes on."""

    __slots__ = ("_on_started",)

    def __init__(self, on_started: Callable[[], None] | None = None) -> None:
        self._on_started = on_started

    @property
    def is_task(self) -> bool:
        """Whether ``started()`` makes this call a task (False where it does nothing)."""
        return self._on_started is not None

    def started(self) -> None:
        """From here on the call is a task: the client gets its ``CreateTaskResult`` and the rest runs
        in the app's nursery.  Calling it again does nothing."""
        on_started, self._on_started = self._on_started, None
        if on_started is not None:
            on_started()


TASK_STATUS_IGNORED = TaskStatus()


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
        self.subscriptions: set[str] = set()
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


@dataclass(slots=True)
class _Outcome:
    """How the part of a call before ``started()`` ended, as the request sees it."""

    run: TaskRun | None = None
    result: dict[str, Any] | None = None


ToolRunner = Callable[["Context", "TaskStatus"], Awaitable[dict[str, Any]]]
"""Runs a tool's handler with a ``task_status`` and returns its ``CallToolResult`` (raising
:class:`RPCError` for a JSON-RPC error)."""


class TaskManager:
    """Owns the running tasks of one app: their nursery, their records, ``tasks/*``."""

    def __init__(
        self,
        store: TaskStore | None = None,
        *,
        ttl: float | None = 3600.0,
        poll_interval: float = 1.0,
        worker_id: str | None = None,
        shutdown_grace: float = 5.0,
        principals: PrincipalKeys | None = None,
    ) -> None:
        self.store: TaskStore = store if store is not None else MemoryTaskStore()
        self.principals = principals if principals is not None else PrincipalKeys()
        """Owner keys of principals (a keyed hash: a record never holds a token); workers sharing a
        store must share its key ring."""
        self.ttl = ttl
        self.poll_interval = poll_interval
        self.worker_id = worker_id
        self.shutdown_grace = shutdown_grace
        self.runs: dict[str, TaskRun] = {}
        self.publish: Callable[[dict[str, Any]], Awaitable[None]] | None = None
        """Where ``notifications/tasks`` go (the server's notification bus), if anywhere."""
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._idle = trio.Event()
        self._idle.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the tasks' nursery until cancelled (cancelling it cancels every task)."""
        self._closing = False
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._nursery = None
                for run in list(self.runs.values()):
                    run.cancel("the server shut down")

    async def aclose(self) -> None:
        """Shutdown: no new task starts; every running one is cancelled and recorded as such (within
        ``shutdown_grace``)."""
        self._closing = True
        for run in list(self.runs.values()):
            run.cancel("the server shut down")
        with trio.move_on_after(self.shutdown_grace):
            await self._idle.wait()

    def statistics(self) -> dict[str, int]:
        stats = {"tasks_running": len(self.runs)}
        store_stats = getattr(self.store, "statistics", None)
        if callable(store_stats):
            stats.update(store_stats())
        return stats

    async def published(self, record: TaskRecord) -> None:
        if self.publish is not None:
            params = record.detailed()
            await self.publish({"jsonrpc": "2.0", "method": "notifications/tasks", "params": params})

    # -- tools/call as a task ---------------------------------------------------------------

    async def call_tool(self, ctx: Context, runner: ToolRunner) -> dict[str, Any]:
        """Run a task-capable tool for a client that declared the extension: its ``CreateTaskResult``
        once it is a task, or its result if it finished (or failed) before that."""
        nursery = self._nursery
        if nursery is None or self._closing:
            raise RPCError(mt.INTERNAL_ERROR, "Tasks are not available: the server is shutting down")
        now = time.time()
        record = TaskRecord(
            task_id=secrets.token_hex(16),  # 128 random bits: a task id is as good as a bearer token
            owner=self.principals.key(ctx.principal),
            created_at=now,
            updated_at=now,
            ttl_ms=None if self.ttl is None else int(self.ttl * 1000),
            poll_interval_ms=max(1, int(self.poll_interval * 1000)),
            worker=self.worker_id,
        )
        run = TaskRun(self, record, ctx.principal)
        outcome: _Outcome = await nursery.start(self._task, ctx, runner, run)
        if outcome.result is not None:
            return outcome.result
        seed = record.copy()  # the task as created (it may run on meanwhile)
        try:
            await self.store.create(seed.copy())
        except BaseException as exc:
            run.cancel("it could not be stored")
            run.created.set()
            if isinstance(exc, TaskStoreFull):
                raise RPCError(mt.INTERNAL_ERROR, "Too many tasks: try again later") from exc
            if isinstance(exc, TaskStoreUnavailable):
                raise RPCError(mt.INTERNAL_ERROR, "Task store unavailable: try again later") from exc
            raise
        run.created.set()
        # The task as created: a handler that already ended tells it on tasks/get (a CreateTaskResult
        # carries no result or error to end with).
        if seed.terminal:
            seed.status, seed.status_message = "working", None
        return {"resultType": "task", **seed.task()}

    async def _task(
        self, ctx: Context, runner: ToolRunner, run: TaskRun, *, task_status: trio.TaskStatus[_Outcome]
    ) -> None:
        started = final_saved = False
        request_peer = ctx.peer

        def on_started() -> None:
            nonlocal started
            started = True
            self.runs[run.record.task_id] = run
            self._idle = trio.Event() if self._idle.is_set() else self._idle
            ctx.peer = TaskPeer(run, request_peer.protocol_version, dict(request_peer.client_capabilities))
            task_status.started(_Outcome(run=run))

        status = TaskStatus(on_started)
        try:
            with run.scope:
                if run.record.ttl_ms is not None:
                    run.scope.deadline = trio.current_time() + run.record.ttl_ms / 1000
                try:
                    result = await runner(ctx, status)
                except RPCError as exc:
                    if not started:
                        raise
                    run.record.status = "failed"
                    run.record.error = {"code": exc.code, "message": exc.message}
                    if exc.data is not None:
                        run.record.error["data"] = exc.data
                    run.record.status_message = exc.message
                else:
                    if not started:
                        task_status.started(_Outcome(result=result))
                        return
                    run.record.status = "completed"
                    run.record.result = result
                run.record.input_requests.clear()
                await run.save()
                final_saved = True
            if not started:  # the TTL ran out before task_status.started(): no task was made
                raise RPCError(mt.INTERNAL_ERROR, "The tool did not start its task within the task TTL")
        except Exception:
            if not started:
                raise
            logger.exception("task %s failed", run.record.task_id)
            error = {"code": mt.INTERNAL_ERROR, "message": "Internal error"}
            await self._record_end(run, "failed", message="Internal error", error=error)
            final_saved = True
        finally:
            if started:
                if not run.record.terminal:  # cancelled: by the client, at shutdown, or past its TTL
                    await self._ended_by_cancel(run)
                elif not final_saved:  # it ended, but its last write was cut short
                    await self._save_final(run)
                self._forget(run)

    async def _ended_by_cancel(self, run: TaskRun) -> None:
        if run.cancel_reason is None and run.scope.cancelled_caught:  # its TTL ran out: forgotten too
            with trio.CancelScope(shield=True), trio.move_on_after(SAVE_TIMEOUT):
                await run.created.wait()
                await self.store.delete(run.record.task_id)
            return
        reason = run.cancel_reason or "the server shut down"  # else the app's nursery was cancelled
        await self._record_end(run, "cancelled", message=f"Cancelled: {reason}")

    async def _record_end(
        self, run: TaskRun, status: str, *, message: str | None = None, error: dict[str, Any] | None = None
    ) -> None:
        run.record.status = status
        run.record.status_message = message
        run.record.error = error
        run.record.input_requests.clear()
        await self._save_final(run)

    async def _save_final(self, run: TaskRun) -> None:
        """The last write of a task: shielded (it may end by cancellation), within ``SAVE_TIMEOUT``."""
        with trio.CancelScope(shield=True), trio.move_on_after(SAVE_TIMEOUT) as timeout:
            try:
                await run.save()
            except Exception:
                logger.exception("could not record the end of task %s", run.record.task_id)
        if timeout.cancelled_caught:
            logger.warning("could not record the end of task %s in time", run.record.task_id)

    def _forget(self, run: TaskRun) -> None:
        self.runs.pop(run.record.task_id, None)
        if not self.runs:
            self._idle.set()

    # -- tasks/get, tasks/update, tasks/cancel ---------------------------------------------

    async def _find(self, ctx: Context, params: Mapping[str, Any] | None) -> TaskRecord:
        if not declares_tasks(ctx.peer.client_capabilities):
            raise missing_extension()
        task_id = (params or {}).get("taskId")
        if not isinstance(task_id, str):
            raise RPCError(mt.INVALID_PARAMS, "Invalid params: taskId must be a string")
        running = task_id in self.runs  # before the lookup: a task may end (and be forgotten) meanwhile
        record = await self.lookup(task_id)
        # Unknown, expired, evicted or someone else's: the same answer.
        if record is None or not self.principals.owns(record.owner, ctx.principal):
            raise RPCError(mt.INVALID_PARAMS, "Failed to retrieve task: Task not found")
        if not record.terminal and record.worker == self.worker_id and not running:
            await self._orphaned(record)
        return record

    async def _orphaned(self, record: TaskRecord) -> None:
        """A task recorded as running here that is not (the process that ran it under this worker id
        stopped, or its last write failed): it failed, and is recorded so."""
        message = "The server running this task stopped before it ended"
        record.status, record.status_message = "failed", message
        record.error = {"code": mt.INTERNAL_ERROR, "message": message}
        record.input_requests.clear()
        record.updated_at = time.time()
        try:
            await self.store.put(record.copy())
        except TaskStoreUnavailable as exc:
            raise RPCError(mt.INTERNAL_ERROR, "Task store unavailable: try again later") from exc

    async def lookup(self, task_id: str) -> TaskRecord | None:
        """The record of ``task_id`` whoever owns it (None when unknown or expired)."""
        if len(task_id) > MAX_TASK_ID_LENGTH:
            return None
        try:
            return await self.store.get(task_id)
        except TaskStoreUnavailable as exc:
            raise RPCError(mt.INTERNAL_ERROR, "Task store unavailable: try again later") from exc

    async def get(self, ctx: Context, params: dict[str, Any] | None) -> dict[str, Any]:
        record = await self._find(ctx, params)
        return record.detailed()

    async def update(self, ctx: Context, params: dict[str, Any] | None) -> dict[str, Any]:
        record = await self._find(ctx, params)
        responses = (params or {}).get("inputResponses")
        if not isinstance(responses, dict):
            raise RPCError(mt.INVALID_PARAMS, "Invalid params: inputResponses must be an object")
        run = self.runs.get(record.task_id)
        if run is None:
            # Not running here: ended since it was read if it ran here, else it runs on another worker.
            if record.terminal or record.status != "input_required" or self._ran_here(record):
                raise RPCError(mt.INVALID_PARAMS, f"Task {record.task_id} is not waiting for input")
            await self._signal(record, {"inputResponses": responses})
            return {}
        try:
            await run.deliver(responses)
        except TaskStoreUnavailable as exc:
            raise RPCError(mt.INTERNAL_ERROR, "Task store unavailable: try again later") from exc
        return {}

    async def cancel(self, ctx: Context, params: dict[str, Any] | None) -> dict[str, Any]:
        record = await self._find(ctx, params)
        if record.terminal:
            return {}  # idempotent
        run = self.runs.get(record.task_id)
        if run is not None:
            run.cancel("the client cancelled it")
        elif not self._ran_here(record):  # one that ran here ended since it was read: nothing to cancel
            await self._signal(record, {"cancel": True})
        return {}

    def _ran_here(self, record: TaskRecord) -> bool:
        return record.worker is None or record.worker == self.worker_id

    async def _signal(self, record: TaskRecord, message: dict[str, Any]) -> None:
        """Reach the worker that runs ``record`` (a store shared between workers carries it)."""
        signal = getattr(self.store, "signal", None)
        if record.worker is None or record.worker == self.worker_id or signal is None:
            raise RPCError(mt.INTERNAL_ERROR, f"Task {record.task_id} is not running here")
        try:
            heard = await signal(record, message)
        except TaskStoreUnavailable as exc:
            raise RPCError(mt.INTERNAL_ERROR, "Task store unavailable: try again later") from exc
        if not heard:
            raise RPCError(mt.INTERNAL_ERROR, f"The worker running task {record.task_id} is unreachable")

    async def on_signal(self, task_id: str, message: Mapping[str, Any]) -> None:
        """A signal from another worker for a task this one runs (``cancel`` or ``inputResponses``)."""
        run = self.runs.get(task_id)
        if run is None:
            return
        if message.get("cancel"):
            run.cancel("the client cancelled it")
        responses = message.get("inputResponses")
        if isinstance(responses, dict):
            try:
                await run.deliver(responses)
            except RPCError as exc:
                logger.info("task %s: input from another worker refused: %s", task_id, exc.message)
