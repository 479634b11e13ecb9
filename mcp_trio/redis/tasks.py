"""The task store that workers share through Redis: :class:`RedisTaskStore`."""

from __future__ import annotations

import functools
import json
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import mcp_types as mt
import trio

from .._app.tasks import ENDED_ELSEWHERE, TaskManager, TaskRecord
from .._protocol.cluster import (
    WORKER_ID,
    ClusterKeys,
    ForgedMessage,
    ReplayedMessage,
    ReplayGuard,
    check_channel_prefix,
    check_worker_id,
    open_bus_message,
    open_task_record,
    seal_bus_message,
    seal_task_record,
)
from .._runtime.peerlog import RateLimitedLog
from ..errors import RPCError, TaskStoreFull, TaskStoreUnavailable
from .connection import (
    MALFORMED_LOG_INTERVAL,
    CallFailed,
    RedisLink,
    closing_connections,
    describe,
    get_value,
    load_coredis,
    logger,
    new_client,
    probe,
    redact,
)
from .task_liveness import RUN_KEEP, running_key
from .task_records import CREATE, DELETE, PUT, SIGNAL_LIMIT, decode_record, decode_signal
from .task_workers import TaskWorkers

if TYPE_CHECKING:
    import coredis

__all__ = ["SIGNAL_LIMIT", "RedisTaskStore"]

_T = TypeVar("_T")


class RedisTaskStore(TaskWorkers, RedisLink):
    """A :class:`~mcp_trio.server.TaskStore` in Redis, shared by the workers of a deployment: a task
    created on one worker is found by ``tasks/get`` on any other, and ``tasks/cancel`` or
    ``tasks/update`` sent to another worker reach the one that runs it.  Give each app its own store
    and its worker id::

        ServerConfig(task_store_factory=lambda: RedisTaskStore(url), worker_id="w1")

    Each task is the key ``<prefix>:task:<taskId>`` (its record as JSON, signed with the cluster's key
    ring for that key), which Redis expires after the task's TTL; the sorted set
    ``<prefix>:tasks:index`` counts the live tasks (by expiry) so that no more than ``max_tasks`` are
    stored: :meth:`create` then raises :class:`~mcp_trio.errors.TaskStoreFull` (tasks without a TTL count
    until they are deleted).  A stored value that the ring does not verify for its key (unsigned,
    altered, signed by another ring, or copied from another task's key) reads as no task and is counted
    (``records_forged``), as is a signed value that is not a valid record (``malformed_records``); both
    are logged, rate-limited.  Every command is bounded by ``timeout`` seconds: a Redis that is down or
    too slow raises :class:`~mcp_trio.errors.TaskStoreUnavailable` (answered -32603), never hangs.

    Signals between workers go through Redis pub/sub: :meth:`signal` publishes on the channel
    ``<prefix>:tasks:worker:<worker>`` of the worker that runs a task, and :meth:`run` (which
    :meth:`MCPApp.run <mcp_trio.MCPApp.run>` starts) subscribes to this worker's own channel and hands
    what arrives to the app's task manager.  Records and signals are signed with the cluster's key ring
    (``secret``, a key or a sequence of keys, else ``MCP_TRIO_REQUEST_STATE_SECRET``: without either
    the store refuses to be made), as the notification bus's messages are: a signal that the ring does
    not verify is dropped and counted (``signals_forged``), and so is a copy of one accepted before
    (``signals_replayed``: each signal carries a random nonce).  The ring's first key signs, any key of it
    verifies, so records outlive a key rotation as long as their key stays in the ring.  :meth:`run`
    also keeps the connections the commands use; while it is not connected (Redis down, or not
    running), each command opens a connection of its own.  It reconnects with exponential backoff
    (``retry_initial`` doubling up to ``retry_max`` seconds, with jitter), and logs an outage once.

    A task ends with its worker: while :meth:`run` is connected, it writes this worker's liveness key
    ``<prefix>:tasks:alive:<worker>`` (naming the run, its manager's ``instance_id``, signed) every
    ``heartbeat_interval`` seconds, expiring after ``heartbeat_ttl``, and deletes it when the app ends.
    A task that has not ended and whose worker's key is gone, or names another run, is recorded
    ``failed`` ("The worker running this task stopped before it ended") by the next :meth:`get` of it,
    and by :meth:`run`'s sweep of the runs that stopped, once this store has been connected for
    ``heartbeat_ttl + retry_max`` seconds (``tasks_stopped`` counts them).  :meth:`put` never replaces a
    record that ends its task.

    ``url``: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or ``unix://path``.
    """

    _name = "Redis task store"
    _outage_effect = "tasks cannot be stored or signalled"
    _back_effect = ""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "mcp_trio",
        max_tasks: int = 100_000,
        timeout: float = 5.0,
        retry_initial: float = 0.1,
        retry_max: float = 2.0,
        signal_limit: int = SIGNAL_LIMIT,
        secret: bytes | Sequence[bytes] | None = None,
        heartbeat_interval: float = 1.0,
        heartbeat_ttl: float = 3.0,
    ) -> None:
        super().__init__(url, retry_initial, retry_max)
        if max_tasks < 1 or not timeout > 0 or signal_limit < 1:
            raise ValueError("max_tasks and signal_limit must be at least 1, and timeout positive")
        if not 0 < heartbeat_interval < heartbeat_ttl:
            raise ValueError("0 < heartbeat_interval < heartbeat_ttl")
        self.prefix = check_channel_prefix(prefix)
        self.index_key = f"{self.prefix}:tasks:index"
        self.max_tasks = max_tasks
        self.timeout = timeout
        self.signal_limit = signal_limit
        self._keys = ClusterKeys.of(secret)
        """The cluster's key ring: signs the signals sent and the records written, verifies what is
        read."""
        self.instance_id = secrets.token_hex(8)
        self.worker_id: str | None = None
        """The worker whose signals :meth:`run` receives (the app's ``worker_id``), once it runs."""
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_ttl = heartbeat_ttl
        self.settle_after = heartbeat_ttl + retry_max
        """How long :meth:`run` must have been connected before this store judges another worker's
        tasks stopped (after a Redis outage, every live worker has written its liveness key again)."""
        self._manager: TaskManager | None = None
        self._instance: str | None = None
        """The run of this worker whose liveness :meth:`run` keeps (its manager's ``instance_id``)."""
        self._beaten = False
        """Whether this run's liveness key was written (once, before its first task is created)."""
        self._connected_since: float | None = None
        self._live: coredis.Redis[bytes] | None = None
        """The client :meth:`run` keeps connected, while it is (what the commands use)."""
        self._lost = trio.Event()
        """Set by a command whose connection failed: :meth:`run` then reconnects."""
        self._seen = ReplayGuard(time.time())
        """The nonces of the signals accepted (each is handed to the task manager once)."""
        self._malformed_logged = False
        self._forged_logged_at: float | None = None
        self._forged_records_log = RateLimitedLog(logger, burst=1, interval=MALFORMED_LOG_INTERVAL)
        self._counts = dict.fromkeys(
            (
                "created",
                "full",
                "malformed_records",
                "records_forged",
                "unavailable",
                "signals_sent",
                "signals_unheard",
                "signals_received",
                "signals_malformed",
                "signals_forged",
                "signals_replayed",
                "connects",
                "failures",
                "tasks_stopped",
                "liveness_forged",
                "writes_refused",
            ),
            0,
        )

    def task_key(self, task_id: str) -> str:
        return f"{self.prefix}:task:{task_id}"

    def channel(self, worker: str) -> str:
        """The channel of ``worker``'s signals."""
        return f"{self.prefix}:tasks:worker:{check_worker_id(worker)}"

    def statistics(self) -> dict[str, Any]:
        """Under ``task_store``: the state, tasks ``created`` here, creations refused as ``full``,
        ``malformed_records`` and ``records_forged`` (not signed by the key ring for their key) read as
        no task, commands that failed (``unavailable``), signals sent
        (``signals_sent``, and ``signals_unheard`` when no worker was subscribed), received,
        malformed, forged (not signed by the key ring) and replayed (``signals_replayed``: a copy of a
        signal accepted before, published again), ``connects`` and ``failures`` of
        :meth:`run`, tasks of a stopped worker recorded ``failed`` here (``tasks_stopped``), liveness
        values that proved nothing (``liveness_forged``: not signed by the ring, or stale), writes of a
        task that had already ended (``writes_refused``), and the ``last_error``."""
        stats: dict[str, Any] = {
            "state": self._state,
            "url": redact(self.url),
            "prefix": self.prefix,
            "max_tasks": self.max_tasks,
            "last_error": self._last_error,
            **self._counts,
        }
        if self.worker_id is not None:
            stats["worker_id"] = self.worker_id
        return {"task_store": stats}

    # -- the TaskStore protocol ---------------------------------------------------------------

    async def create(self, record: TaskRecord) -> None:
        """Store a new record (SET NX, expiring with its TTL) unless ``max_tasks`` live tasks are
        stored (:class:`~mcp_trio.errors.TaskStoreFull`).  Atomic across workers."""
        if not self._beaten and record.instance is not None and record.instance == self._instance:
            await self._command("create", self._beat)  # no task of this run before its liveness key
        value = self._encode(record, self.task_key(record.task_id))
        now = time.time()
        if record.ttl_ms is None:
            px, score = "", "+inf"
        else:
            expires = record.expires_at
            px, score = str(max(1, math.ceil((expires - now) * 1000))), str(math.ceil(expires * 1000))
        keys = [self.task_key(record.task_id), self.index_key]
        millis, cap = str(math.floor(now * 1000)), str(self.max_tasks)
        args: list[str | bytes] = [value, px, score, millis, cap, record.task_id]
        running = self.running_key_of(record)
        if running is not None and not record.terminal:  # the sweep's index of the run's tasks
            keys.append(running)
            args.append(str(int(RUN_KEEP * 1000)))
        created = await self._command("create", lambda c: c.eval(CREATE, keys=keys, args=args))
        if created == -1:
            self._counts["full"] += 1
            raise TaskStoreFull(f"{self.max_tasks} tasks are stored")
        if created != 1:
            raise RuntimeError(f"task {record.task_id} is already stored")
        self._counts["created"] += 1

    async def get(self, task_id: str) -> TaskRecord | None:
        """The record of ``task_id``; a task whose worker stopped (see :meth:`run`) is recorded
        ``failed`` first, atomically, and the change is published."""
        found = await self._read(task_id)
        if found is None:
            return None
        record, raw = found
        if not self._may_settle(record):
            return record
        return await self._settle(record, raw)

    async def _read(self, task_id: str) -> tuple[TaskRecord, bytes] | None:
        """The record of ``task_id`` and the value it was read from (None: unknown, forged, malformed)."""
        key = self.task_key(task_id)
        raw = await self._command("get", lambda c: get_value(c, key))
        if raw is None:
            return None
        try:
            data = open_task_record(self._keys, key, raw)
        except ForgedMessage as exc:
            self._counts["records_forged"] += 1
            self._forged_records_log.log(
                logging.WARNING,
                "Redis task store: the value of %s is not signed by the key ring for it (%s); read as no "
                "task (%d so far)",
                key[:300],
                exc,
                self._counts["records_forged"],
            )
            return None
        except ValueError as exc:  # not a string: a key of another type
            self._malformed(key, exc)
            return None
        try:
            record = decode_record(data, task_id)
        except ValueError as exc:
            self._malformed(key, exc)
            return None
        return record, raw if isinstance(raw, bytes) else str(raw).encode()

    def _malformed(self, key: str, exc: ValueError) -> None:
        """Count and log (once at WARNING, then DEBUG) a value under ``key`` that is no record."""
        self._counts["malformed_records"] += 1
        level = logging.DEBUG if self._malformed_logged else logging.WARNING
        self._malformed_logged = True
        logger.log(
            level,
            "Redis task store: the value of %s is not a task record (%s); read as no task "
            "(%d so far, logged once)",
            key[:300],
            exc,
            self._counts["malformed_records"],
        )

    async def put(self, record: TaskRecord) -> None:
        """Replace the record of a task still stored (its expiry kept): a task already forgotten stays
        forgotten, and a task's end is never replaced (a worker that could not reach Redis for longer
        than ``heartbeat_ttl`` may find its task recorded ``failed`` by another: its later writes are
        dropped, counted as ``writes_refused``, and the task is cancelled here)."""
        key = self.task_key(record.task_id)
        value = self._encode(record, key)
        running = self.running_key_of(record) if record.terminal else None
        keys = [key] if running is None else [key, running]
        done = await self._command("put", lambda c: c.eval(PUT, keys=keys, args=[value, record.task_id]))
        if done == -1:
            self._counts["writes_refused"] += 1
            logger.info(
                "Redis task store: task %s has already ended; a write of it was dropped", record.task_id
            )
            run = self._manager.runs.get(record.task_id) if self._manager is not None else None
            if run is not None:
                run.cancel(ENDED_ELSEWHERE)

    async def delete(self, task_id: str) -> None:
        """Forget a task (its worker does, when its TTL ran out)."""
        keys = [self.task_key(task_id), self.index_key]
        if self.worker_id is not None and self._instance is not None:
            keys.append(running_key(self.prefix, self.worker_id, self._instance))
        await self._command("delete", lambda c: c.eval(DELETE, keys=keys, args=[task_id]))

    def _encode(self, record: TaskRecord, key: str) -> bytes:
        """The value stored under ``key`` for ``record``: its JSON, signed for that key.  Every write
        (create's script, put's SET XX) stores a whole value made here; nothing edits a record inside
        Redis, so every stored record carries a signature over all of it."""
        data = json.dumps(record.to_json(), separators=(",", ":"), allow_nan=False).encode()
        return seal_task_record(self._keys, key, data)

    # -- signals between workers ------------------------------------------------------------------

    async def signal(self, record: TaskRecord, message: Mapping[str, Any]) -> bool:
        """Publish ``{"taskId": ..., **message}`` on the channel of the worker that runs ``record``;
        whether a subscriber got it (False for a record without a valid worker)."""
        worker = record.worker
        if worker is None or not WORKER_ID.fullmatch(worker):
            return False
        data = json.dumps({"taskId": record.task_id, **message}, separators=(",", ":")).encode()
        if len(data) > self.signal_limit:
            raise RPCError(mt.INVALID_PARAMS, f"Too large to pass on to the worker of task {record.task_id}")
        channel = self.channel(worker)
        sealed = seal_bus_message(self._keys, channel, data, time.time())
        receivers = await self._command("signal", lambda c: c.publish(channel, sealed))
        self._counts["signals_sent"] += 1
        if not receivers:
            self._counts["signals_unheard"] += 1
        return bool(receivers)

    async def run(
        self, manager: TaskManager, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep connected to Redis until cancelled, with the connections the commands use and, when
        ``manager`` (the app's task manager) has a worker id, subscribed to that worker's channel: each
        valid signal goes to ``manager.on_signal``; a malformed one is logged and ignored.  Reports
        started at once (the app does not wait for Redis); reconnects as needed.  One app runs a
        store."""
        if self._running:
            raise RuntimeError("this RedisTaskStore is already running (give each app its own store)")
        worker = manager.worker_id
        if worker is not None:
            check_worker_id(worker)
            self._instance = manager.instance_id
        self.worker_id = worker
        self._manager = manager
        try:
            await self._keep_connected(
                functools.partial(self._connect_and_serve, manager, worker), task_status
            )
        finally:
            self._connected_since = None
            await self._release()

    async def _connect_and_serve(self, manager: TaskManager, worker: str | None) -> bool:
        """One connection, until it fails (never raises but cancellation); whether it got connected."""
        return await self._contain_attempt(functools.partial(self._serve, manager, worker))

    async def _serve(self, manager: TaskManager, worker: str | None) -> None:
        lost = self._lost = trio.Event()
        await probe(self.url, self.timeout)
        client = self._client()
        async with client, trio.open_nursery() as nursery:
            if worker is not None:
                await nursery.start(self._subscriber, client, manager, worker)
                with trio.fail_after(self.timeout):
                    await self._beat(client)
                nursery.start_soon(self._heartbeat, client)
            else:
                with trio.fail_after(self.timeout):
                    await client.ping()
            nursery.start_soon(self._sweeper)
            self._connected(client, f" ({self.channel(worker)})" if worker is not None else "")
            self._connected_since = trio.current_time()
            try:
                await lost.wait()
            finally:
                self._connected_since = None
            raise ConnectionError(self._last_error or "a command failed")

    async def _subscriber(
        self,
        client: coredis.Redis[bytes],
        manager: TaskManager,
        worker: str,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        retry = load_coredis().retry.NoRetryPolicy()
        channel = self.channel(worker)
        with trio.fail_after(self.timeout) as subscribing:
            async with client.pubsub(
                channels=[channel], ignore_subscribe_messages=True, retry_policy=retry
            ) as pubsub:
                subscribing.deadline = math.inf  # subscribed in time; from here on it only reads
                task_status.started()
                async for item in pubsub:
                    await self._on_item(item, manager, channel)
        raise ConnectionError("the subscription ended")

    async def _on_item(self, item: Any, manager: TaskManager, channel: str) -> None:
        if not isinstance(item, dict) or item.get("type") != "message":
            return  # subscription acknowledgements and the like
        data = item.get("data")
        try:
            now = time.time()
            inner = open_bus_message(self._keys, channel, data, now, self.signal_limit, seen=self._seen)
            task_id, message = decode_signal(inner, self.signal_limit)
        except ReplayedMessage as exc:
            self._counts["signals_replayed"] += 1
            level = logging.WARNING if self._counts["signals_replayed"] == 1 else logging.DEBUG
            logger.log(level, "Redis task store: dropped a replayed signal on %s (%s)", channel, exc)
            return
        except ForgedMessage as exc:
            self._counts["signals_forged"] += 1
            now = trio.current_time()
            if self._forged_logged_at is None or now - self._forged_logged_at >= MALFORMED_LOG_INTERVAL:
                self._forged_logged_at = now
                logger.warning(
                    "Redis task store: dropped an unauthenticated signal on %s (%s; %d so far)",
                    channel,
                    exc,
                    self._counts["signals_forged"],
                )
            return
        except ValueError as exc:
            self._counts["signals_malformed"] += 1
            level = logging.WARNING if self._counts["signals_malformed"] == 1 else logging.DEBUG
            logger.log(level, "Redis task store: ignored a malformed signal on %s (%s)", channel, exc)
            return
        self._counts["signals_received"] += 1
        try:
            await manager.on_signal(task_id, message)
        except Exception:
            logger.exception("Redis task store: the signal for task %s failed", task_id)

    # -- commands ---------------------------------------------------------------------------------

    async def _command(self, what: str, call: Callable[[coredis.Redis[bytes]], Awaitable[_T]]) -> _T:
        """``call`` through :meth:`~mcp_trio.redis.connection.RedisLink._call`; any failure is
        :class:`~mcp_trio.errors.TaskStoreUnavailable`."""
        try:
            return await self._call(call)
        except CallFailed:
            logger.debug("Redis task store: %s failed (%s)", what, self._last_error)
            raise TaskStoreUnavailable(f"Redis task store: {what} failed ({self._last_error})") from None

    def _live_lost(self) -> None:
        self._lost.set()  # run() reconnects

    def _client(self) -> coredis.Redis[bytes]:
        return closing_connections(new_client(self.url, self.timeout, self.timeout, self.instance_id))

    def _describe_failure(self, leaf: BaseException) -> str:
        return describe(leaf, self.timeout)
