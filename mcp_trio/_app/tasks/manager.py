"""The running tasks of one app: :class:`TaskManager` (their nursery, ``tools/call`` as a task, and
``tasks/get``, ``tasks/update``, ``tasks/cancel``)."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types as mt
import trio

from ...errors import RPCError, TaskStoreFull, TaskStoreUnavailable
from ..principal import PrincipalKeys
from .record import TaskRecord, declares_tasks, missing_extension
from .run import ENDED_ELSEWHERE, TaskPeer, TaskRun, answers_to
from .starter import TaskStarter
from .store import MemoryTaskStore, TaskStore

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["ENDED_ELSEWHERE", "SHUTDOWN_MESSAGE", "STOPPED_MESSAGE", "TaskManager", "ToolRunner"]

logger = logging.getLogger("mcp_trio._app.tasks")

MAX_TASK_ID_LENGTH = 256
"""Longest task id looked up (ours are 32 characters); a longer one is simply not found."""
APPLIED_WAIT = 2.0
"""Seconds a ``tasks/update`` passed on to the worker that runs the task waits for its answers to
leave the stored ``inputRequests`` before it is acknowledged (so a ``tasks/get`` after the
acknowledgement, on any worker, sees them applied); past it the acknowledgement goes anyway."""
SAVE_TIMEOUT = 5.0
"""How long the last write of a task that ended by cancellation (its ``cancelled`` or ``failed``
status) may take."""
SHUTDOWN_MESSAGE = "The server shut down before this task ended"
"""The ``statusMessage`` (and error message) of a task that was still running when its server shut
down: it is recorded ``failed``."""
STOPPED_MESSAGE = "The worker running this task stopped before it ended"
"""The ``statusMessage`` (and error message) of a task whose worker stopped (was killed, or restarted
under the same worker id) before it ended: it is recorded ``failed`` by whichever worker finds out."""
_SHUTDOWN = "the server shut down"
"""The cancel reason of a task ended by shutdown."""


@dataclass(slots=True)
class _Outcome:
    """How the part of a call before ``started()`` ended, as the request sees it."""

    run: TaskRun | None = None
    result: dict[str, Any] | None = None


ToolRunner = Callable[["Context", "TaskStarter"], Awaitable[dict[str, Any]]]
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
        self.instance_id = secrets.token_hex(8)
        """This run of the worker (each record it creates names it: a worker restarted under the same id
        has another, so the tasks of the earlier run are known to have stopped)."""
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
                    run.cancel(_SHUTDOWN)

    async def aclose(self) -> None:
        """Shutdown: no new task starts; the running ones get ``shutdown_grace`` to end as they would,
        then those still running are cancelled and recorded ``failed`` (:data:`SHUTDOWN_MESSAGE`),
        their last writes within :data:`SAVE_TIMEOUT`."""
        self._closing = True
        with trio.move_on_after(self.shutdown_grace):
            await self._idle.wait()
        for run in list(self.runs.values()):
            run.cancel(_SHUTDOWN)
        with trio.move_on_after(SAVE_TIMEOUT):
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
            instance=self.instance_id if self.worker_id is not None else None,
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

        status = TaskStarter(on_started)
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
        if run.cancel_reason == ENDED_ELSEWHERE:
            return
        if run.cancel_reason is None and run.scope.cancelled_caught:  # its TTL ran out: forgotten too
            with trio.CancelScope(shield=True), trio.move_on_after(SAVE_TIMEOUT):
                await run.created.wait()
                await self.store.delete(run.record.task_id)
            return
        if run.cancel_reason in (None, _SHUTDOWN):  # shutdown, or the app's nursery was cancelled
            error = {"code": mt.INTERNAL_ERROR, "message": SHUTDOWN_MESSAGE}
            await self._record_end(run, "failed", message=SHUTDOWN_MESSAGE, error=error)
            return
        await self._record_end(run, "cancelled", message=f"Cancelled: {run.cancel_reason}")

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
        record.status, record.status_message = "failed", STOPPED_MESSAGE
        record.error = {"code": mt.INTERNAL_ERROR, "message": STOPPED_MESSAGE}
        record.input_requests.clear()
        record.updated_at = time.time()
        try:
            await self.store.put(record.copy())
        except TaskStoreUnavailable as exc:
            raise RPCError(mt.INTERNAL_ERROR, "Task store unavailable: try again later") from exc
        await self.published(record.copy())

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
            applied = answers_to(record.input_requests, responses)  # (-32602 here, as on its worker)
            if applied:
                await self._signal(record, {"inputResponses": applied})
                await self._until_applied(record, set(applied))
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

    async def _until_applied(self, record: TaskRecord, keys: set[str]) -> None:
        """Wait (at most :data:`APPLIED_WAIT`) until the store shows the task's input requests ``keys``
        answered, or the task no longer waiting for input."""
        delay = 0.005
        with trio.move_on_after(APPLIED_WAIT):
            while True:
                try:
                    fresh = await self.store.get(record.task_id)
                except TaskStoreUnavailable:
                    return
                waiting = fresh.input_requests.keys() if fresh and fresh.status == "input_required" else ()
                if not keys.intersection(waiting):
                    return
                await trio.sleep(delay)
                delay = min(2 * delay, 0.05)
        logger.info("task %s: answers passed on to its worker, not yet applied", record.task_id)

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
