"""The part of :class:`~mcp_trio.redis.RedisTaskStore` that deals with workers that stop: it keeps
this worker's liveness key (:mod:`.task_liveness`), records ``failed`` a task read whose worker's run
stopped, and sweeps the runs that stopped for tasks nobody reads."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import trio

from .._app.tasks import TaskManager, TaskRecord
from .._runtime.peerlog import RateLimitedLog
from ..errors import TaskStoreUnavailable
from .connection import get_value, logger
from .task_liveness import (
    BEAT,
    CANDIDATES,
    FORGET_RUN,
    RELEASE,
    RUN_KEEP,
    RUN_TASKS,
    SETTLE,
    judge,
    liveness_key,
    may_stop,
    parse_run,
    run_member,
    running_key,
    runs_key,
    seal_alive,
    stopped,
)

if TYPE_CHECKING:
    import coredis

    from .._protocol.cluster import ClusterKeys

__all__ = ["SWEEP_RUNS", "SWEEP_TASKS", "TIDY_EVERY", "TaskWorkers"]

_T = TypeVar("_T")

SWEEP_RUNS = 4
"""Stopped runs a sweep looks at per round."""
SWEEP_TASKS = 32
"""Tasks of each run a sweep reads per round."""
TIDY_EVERY = 30
"""Every this many rounds, a sweep also tidies this run's own set of running tasks."""
MAX_TASK_ID_LENGTH = 256


class TaskWorkers:
    """What :class:`~mcp_trio.redis.RedisTaskStore` does about workers that stop (a base class of the
    store: what it uses of the store is declared here)."""

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
    _sweeps: int = 0

    def task_key(self, task_id: str) -> str:
        raise NotImplementedError

    async def _command(self, what: str, call: Callable[[coredis.Redis[bytes]], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    async def _read(self, task_id: str) -> tuple[TaskRecord, bytes] | None:
        raise NotImplementedError

    def _encode(self, record: TaskRecord, key: str) -> bytes:
        raise NotImplementedError

    def running_key_of(self, record: TaskRecord) -> str | None:
        """The set of running tasks ``record``'s run is in (None for a record naming no run)."""
        if record.worker is None or record.instance is None:
            return None
        return running_key(self.prefix, record.worker, record.instance)

    # -- judging ----------------------------------------------------------------------------------

    def _judging(self) -> bool:
        """Whether :meth:`run` has been connected long enough to judge whether other workers run."""
        since = self._connected_since
        return (
            self._live is not None and since is not None and trio.current_time() - since >= self.settle_after
        )

    def _may_settle(self, record: TaskRecord) -> bool:
        return record.instance != self._instance and self._judging() and may_stop(record)

    async def _settle(self, record: TaskRecord, raw: bytes) -> TaskRecord | None:
        """``record`` (read as ``raw``), recorded ``failed`` if its worker's run stopped."""
        assert record.worker is not None and record.instance is not None
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
        keys = [key, alive_key, running_key(self.prefix, record.worker, record.instance)]
        args = [
            raw,
            "absent" if alive is None else "kept",
            alive if isinstance(alive, bytes) else b"",
            self._encode(ended, key),
            record.task_id,
        ]
        replaced = await self._command("settle", lambda c: c.eval(SETTLE, keys=keys, args=args))
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

    # -- this worker's liveness -------------------------------------------------------------------

    async def _beat(self, client: coredis.Redis[bytes]) -> None:
        """Write this run's liveness key (expiring after ``heartbeat_ttl``) and its entry in the runs."""
        assert self.worker_id is not None and self._instance is not None
        key = liveness_key(self.prefix, self.worker_id)
        now = time.time()
        value = seal_alive(self._keys, key, self._instance, now)
        keys = [key, runs_key(self.prefix), running_key(self.prefix, self.worker_id, self._instance)]
        millis, keep = int(now * 1000), int(RUN_KEEP * 1000)
        member = run_member(self.worker_id, self._instance)
        ttl = max(1, int(self.heartbeat_ttl * 1000))
        args: list[str | bytes] = [value, str(ttl), str(millis), member, str(millis - keep), str(keep)]
        await client.eval(BEAT, keys=keys, args=args)
        self._beaten = True

    async def _heartbeat(self, client: coredis.Redis[bytes]) -> None:
        """Write the liveness key every ``heartbeat_interval``."""
        while True:
            await trio.sleep(self.heartbeat_interval)
            with trio.fail_after(self.timeout):
                await self._beat(client)

    async def _sweeper(self) -> None:
        """Sweep every ``heartbeat_interval`` (once judging; apart from the heartbeat, which a slow
        sweep must not delay)."""
        while True:
            await trio.sleep(self.heartbeat_interval)
            if self._judging():
                try:
                    await self._sweep()
                except TaskStoreUnavailable:
                    pass  # the next round tries again (run() reconnects if the connection was lost)

    async def _release(self) -> None:
        """Delete this run's liveness key (the app is ending, its tasks are recorded): the tasks
        it could not record are known to have stopped at once, not after ``heartbeat_ttl``."""
        if self.worker_id is None or self._instance is None or not self._beaten:
            return
        keys = [liveness_key(self.prefix, self.worker_id), runs_key(self.prefix)]
        args = [f" {self._instance}", run_member(self.worker_id, self._instance)]
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            try:
                await self._command("release", lambda c: c.eval(RELEASE, keys=keys, args=args))
            except TaskStoreUnavailable:
                pass

    # -- the sweep --------------------------------------------------------------------------------

    async def _sweep(self) -> int:
        """One round: up to :data:`SWEEP_RUNS` runs that have not written their liveness for
        ``heartbeat_ttl``, up to :data:`SWEEP_TASKS` tasks each, each judged and recorded ``failed``
        as a read would; how many it recorded so.  Every :data:`TIDY_EVERY` rounds, the ids of this
        run's own tasks that are gone or ended (their last write failed) leave its set too."""
        self._sweeps += 1
        runs = runs_key(self.prefix)
        cutoff = str(int((time.time() - self.heartbeat_ttl) * 1000))
        args = [cutoff, str(SWEEP_RUNS), repr(random.random())]
        members = await self._command("sweep", lambda c: c.eval(CANDIDATES, keys=[runs], args=args))
        ended = 0
        own = None if self.worker_id is None or self._instance is None else (self.worker_id, self._instance)
        for member in members if isinstance(members, list) else ():
            run = parse_run(member)
            if run is None:  # not an entry a worker writes
                await self._command("sweep", lambda c: c.zrem(runs, [member]))  # noqa: B023 (awaited here)
            elif run != own:
                ended += await self._sweep_run(runs, run, cutoff, settle=True)
        if own is not None and self._sweeps % TIDY_EVERY == 0:
            await self._sweep_run(runs, own, cutoff, settle=False)
        return ended

    async def _sweep_run(self, runs: str, run: tuple[str, str], cutoff: str, *, settle: bool) -> int:
        """Up to :data:`SWEEP_TASKS` of ``run``'s running tasks: the ids of those gone, ended or not of
        this run leave its set; with ``settle``, the others are judged (and a run with none left is
        forgotten)."""
        member = run_member(*run)
        running = running_key(self.prefix, *run)
        ids = await self._command("sweep", lambda c: c.eval(RUN_TASKS, keys=[running], args=[SWEEP_TASKS]))
        if not isinstance(ids, list | tuple | set):  # not a set: what a worker writes is gone
            if settle:
                await self._command("sweep", lambda c: c.zrem(runs, [member]))
            return 0
        if not ids:
            if settle:
                args = [member, cutoff]
                await self._command("sweep", lambda c: c.eval(FORGET_RUN, keys=[runs, running], args=args))
            return 0
        ended = 0
        for raw_id in ids:
            task_id = raw_id.decode("utf-8", "replace") if isinstance(raw_id, bytes) else str(raw_id)
            found = await self._read(task_id) if len(task_id) <= MAX_TASK_ID_LENGTH else None
            if found is None or (found[0].worker, found[0].instance) != run or found[0].terminal:
                gone: list[bytes | str] = [raw_id]  # unknown, ended, or not this run's: not a running task
                await self._command("sweep", lambda c: c.srem(running, gone))  # noqa: B023 (awaited here)
            elif settle:
                after = await self._settle(*found)
                ended += after is not None and after.terminal
        return ended
