"""The event store that workers share through Redis: :class:`RedisEventStore`."""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from .._protocol.cluster import (
    EVENT_ENTRY_HEADER,
    EVENT_SEQ_LIMIT,
    SESSION_TAG,
    ClusterKeys,
    check_channel_prefix,
    events_key,
    seal_event_entry,
)
from .._runtime.containment import split_fatal
from .._runtime.peerlog import RateLimitedLog
from .._transport.eventstore import InMemoryEventStore, StoredEvent
from .connection import (
    MALFORMED_LOG_INTERVAL,
    RedisLink,
    closing_connections,
    describe,
    leaf_of,
    logger,
    new_client,
    probe,
    redact,
    response_error,
)
from .eventreads import EventReads
from .eventscripts import MAX_EVENTS_PER_STREAM, MAX_STREAMS_PER_SESSION, WRITE

if TYPE_CHECKING:
    import coredis

__all__ = ["RedisEventStore"]

_MIB = 1024 * 1024
_BATCH_OPS = 256
"""Operations (events to write, sessions to delete) written by one script call at most."""
_BATCH_BYTES = 4 * _MIB
"""Event data written by one script call at most (a larger event goes alone)."""
_IDLE_PING = 5.0
"""Seconds between two PINGs of an idle writer (so that a Redis gone away is noticed, and reported)."""


_Op = tuple[str, StoredEvent | str]
"""A session id and the event to write, or what to do with the session's events: ``d`` delete them,
``t`` refresh their TTL."""


class RedisEventStore(EventReads, RedisLink):
    """An :class:`~mcp_trio.server.EventStore` whose events are kept in this worker's memory **and** in
    Redis, so that a session adopted by another worker can be resumed there with ``Last-Event-ID``.
    Give each app its own store::

        ServerConfig(event_store_factory=lambda: RedisEventStore(url), worker_id="w1")

    :meth:`store` (the sessions' hot path) never waits for Redis: it keeps the event in an
    :class:`~mcp_trio.server.InMemoryEventStore` (``max_events_per_stream``, ``max_streams_per_session``,
    ``max_bytes_per_session``, ``max_sessions``, ``max_bytes``: its bounds) and queues it for
    :meth:`run`, which the app starts (:meth:`MCPApp.run <mcp_trio.MCPApp.run>`) and which writes the
    queue to Redis in batches, one script call each.  The queue holds at most ``outbox`` events and
    ``outbox_bytes`` bytes of data: beyond, an event stays in this worker only (counted as ``dropped``,
    logged at most once every 10 s).  The worker's own sessions are replayed from its memory.

    In Redis, a session's events are one hash, ``<prefix>:events:<tag>`` (the tag a keyed hash of the
    session id, as in a worker's session record: no session id is stored in Redis), whose bounds are
    the per-session ones above, enforced by the script that writes, oldest first; it expires ``ttl``
    seconds after its last write.  Each entry is signed with the cluster's key ring (``secret``, else
    ``MCP_TRIO_REQUEST_STATE_SECRET``) for its key, stream and seq: an entry the ring does not verify
    (unsigned, altered, another ring's, copied from another session or stream) is dropped when read,
    counted (``forged``) and logged at most once every 10 s.

    A worker that adopts a session calls :meth:`positions` (where to go on numbering its events); from
    then on :meth:`replay_after` for that session reads Redis too.  A worker that hands a session over
    calls :meth:`flush`, then :meth:`release`.  Reads are bounded by ``timeout`` seconds; a Redis that
    is down or too slow is counted (``unavailable``) and the replay answers from memory.  :meth:`run`
    reconnects with exponential backoff (``retry_initial`` doubling up to ``retry_max`` seconds, with
    jitter) and logs an outage once; events queued meanwhile are written once it is back.

    ``url``: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or ``unix://path``.
    """

    _name = "Redis event store"
    _outage_effect = "events are kept in this worker and queued for Redis"
    _back_effect = "; writing the queued events"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "mcp_trio",
        ttl: float = 3600.0,
        max_events_per_stream: int = 100,
        max_streams_per_session: int = 32,
        max_bytes_per_session: int = 16 * _MIB,
        max_sessions: int = 10_000,
        max_bytes: int = 128 * _MIB,
        outbox: int = 10_000,
        outbox_bytes: int = 64 * _MIB,
        timeout: float = 5.0,
        retry_initial: float = 0.1,
        retry_max: float = 2.0,
        secret: bytes | Sequence[bytes] | None = None,
    ) -> None:
        super().__init__(url, retry_initial, retry_max)
        if not ttl > 0 or not timeout > 0 or outbox < 1 or outbox_bytes < 1:
            raise ValueError("ttl and timeout must be positive, outbox and outbox_bytes at least 1")
        if max_events_per_stream > MAX_EVENTS_PER_STREAM or max_streams_per_session > MAX_STREAMS_PER_SESSION:
            raise ValueError(
                f"max_events_per_stream and max_streams_per_session are at most {MAX_EVENTS_PER_STREAM} "
                f"and {MAX_STREAMS_PER_SESSION}"
            )
        self._local = InMemoryEventStore(
            max_events_per_stream=max_events_per_stream,
            max_streams_per_session=max_streams_per_session,
            max_bytes_per_session=max_bytes_per_session,
            max_sessions=max_sessions,
            max_bytes=max_bytes,
        )
        self.prefix = check_channel_prefix(prefix)
        self.ttl = ttl
        self.max_events_per_stream = max_events_per_stream
        self.max_streams_per_session = max_streams_per_session
        self.max_bytes_per_session = max_bytes_per_session
        self.outbox = outbox
        self.outbox_bytes = outbox_bytes
        self.timeout = timeout
        self._keys = ClusterKeys.of(secret)
        self.instance_id = secrets.token_hex(8)
        self._live: coredis.Redis[bytes] | None = None
        self._lost = trio.Event()
        """Set by a read whose connection failed: :meth:`run` then reconnects."""
        self.fence: Callable[[str], tuple[str, bytes] | None] | None = None
        """Given a session id, the key of its lease and the lease this worker holds (or held) it under,
        when the app's notification bus keeps sessions' leases in the same Redis (it sets this): a
        write of a session whose lease is another worker's now is fenced off (``fenced``)."""
        self._queue: deque[_Op] = deque()
        self._queue_bytes = 0
        self._queued = 0
        """Operations accepted in the queue so far (what :meth:`flush` waits for)."""
        self._done = 0
        """Operations taken out of the queue for good so far (written, or refused by Redis)."""
        self._wake = trio.Event()
        """Set when the queue gets an operation (or a read lost the connection): the writer looks."""
        self._progress = trio.Event()
        """Set (and made anew) whenever :attr:`_done` moves, or the writer stops or loses Redis."""
        self._max_tracked = max_sessions
        self._adopted: OrderedDict[str, None] = OrderedDict()
        """Sessions whose earlier events are in Redis only (:meth:`positions` was called)."""
        self._released: OrderedDict[str, None] = OrderedDict()
        """Sessions handed over (:meth:`release`): their end here deletes nothing in Redis."""
        self._dropped_log = RateLimitedLog(logger, burst=1, interval=MALFORMED_LOG_INTERVAL)
        self._forged_log = RateLimitedLog(logger, burst=1, interval=MALFORMED_LOG_INTERVAL)
        self._error_log = RateLimitedLog(logger, burst=1, interval=MALFORMED_LOG_INTERVAL)
        self._counts = dict.fromkeys(
            (
                "stored",
                "written",
                "stale",
                "dropped",
                "write_errors",
                "resets",
                "fenced",
                "forged",
                "replays_local",
                "replays_redis",
                "unavailable",
                "batches",
                "connects",
                "failures",
            ),
            0,
        )

    # -- the EventStore protocol ----------------------------------------------------------------

    async def store(self, session_id: str, event: StoredEvent) -> None:
        """Keep ``event`` here and queue it for Redis (never waits for Redis)."""
        self.store_nowait(session_id, event)

    def store_nowait(self, session_id: str, event: StoredEvent) -> None:
        self._local.store_nowait(session_id, event)
        self._counts["stored"] += 1
        self._released.pop(session_id, None)  # it is this worker's again
        size = len(event.data)
        if size > self.max_bytes_per_session or not (
            0 <= event.stream_id < EVENT_SEQ_LIMIT and 0 <= event.seq < EVENT_SEQ_LIMIT
        ):
            return  # never kept (the memory store refuses it too)
        self._enqueue((session_id, event), size)

    async def replay_after(self, session_id: str, stream_id: int, seq: int) -> list[StoredEvent]:
        """The stream's events after ``seq``, oldest first: from this worker's memory when it holds the
        session's events (it stored them, and did not adopt the session), else from Redis (only
        entries signed for this session and stream) merged with what this worker stored since."""
        local = await self._local.replay_after(session_id, stream_id, seq)
        if self._local.holds(session_id) and session_id not in self._adopted:
            self._counts["replays_local"] += 1
            return local
        if not 0 <= stream_id < EVENT_SEQ_LIMIT:
            return local
        remote = await self._read_stream(session_id, stream_id)
        if remote is None:
            return local
        self._counts["replays_redis"] += 1
        merged = {event.seq: event for event in remote if event.seq > seq}
        merged.update((event.seq, event) for event in local)
        return [merged[key] for key in sorted(merged)]

    async def forget_session(self, session_id: str) -> None:
        """The session has ended: forget its events here, and queue the deletion of its events in
        Redis (unless it was :meth:`released <release>` and not stored here since)."""
        self.forget_session_nowait(session_id)

    def forget_session_nowait(self, session_id: str) -> None:
        self._local.forget_session_nowait(session_id)
        self._adopted.pop(session_id, None)
        if session_id in self._released:
            del self._released[session_id]
            return  # it lives on with another worker
        self._enqueue((session_id, "d"), 0)

    def touch(self, session_id: str) -> None:
        """Queue a refresh of the TTL of the session's events in Redis (they expire ``ttl`` after the
        last write otherwise): for a session that stays in use without new events.  Synchronous."""
        self._enqueue((session_id, "t"), 0)

    # -- handing sessions over --------------------------------------------------------------------

    def release(self, session_id: str) -> None:
        """The session moved to another worker: forget the events kept here, and nothing in Redis
        (events of it still queued are written).  Its end here (:meth:`forget_session`) then deletes
        nothing in Redis, unless this worker stores an event of it again.  Synchronous."""
        self._local.forget_session_nowait(session_id)
        self._adopted.pop(session_id, None)
        self._track(self._released, session_id)

    async def positions(self, session_id: str) -> dict[int, int]:
        """Each stream of the session that has events -> the largest seq stored (here or in Redis):
        what a worker adopting the session calls, to go on numbering its events after the last one its
        client could have seen.  From then on :meth:`replay_after` for this session reads Redis too.
        Raises :class:`ConnectionError` if Redis cannot be read within ``timeout``."""
        self._released.pop(session_id, None)
        self._track(self._adopted, session_id)
        found = self._local.last_seqs(session_id)
        remote = await self._read_positions(session_id)
        if remote is None:
            raise ConnectionError(
                f"Redis event store: cannot read the events' positions ({self._last_error})"
            )
        for stream_id, seq in remote.items():
            found[stream_id] = max(seq, found.get(stream_id, -1))
        return found

    async def flush(self, timeout: float) -> bool:  # noqa: ASYNC109 (the answer says whether it was all written)
        """Wait until every event queued before this call is in Redis (written by :meth:`run`, or
        refused by Redis), at most ``timeout`` seconds; whether it is.  False at once while :meth:`run`
        is not running and something is queued."""
        target = self._queued
        with trio.move_on_after(timeout):
            while self._done < target:
                if not self._running:
                    return False
                await self._progress.wait()
        return self._done >= target

    def statistics(self) -> dict[str, Any]:
        """What the memory store keeps (``sessions``, ``streams``, ``events``, ``bytes``, ``max_bytes``,
        ``evicted_streams``, ``evicted_bytes``), then: the Redis ``state``, events ``stored``, written
        to Redis (``written``; ``stale``: already there), ``dropped`` (the queue was full),
        ``write_errors`` (refused by Redis), ``resets`` (session hashes found not to hold together,
        deleted), ``fenced`` (operations of a session another worker holds now, not written),
        ``forged`` entries read, replays from memory and from Redis, reads that could not
        reach Redis (``unavailable``), the queue (``outbox``, ``outbox_bytes``), ``batches`` written,
        ``connects``, ``failures`` and ``last_error``."""
        stats: dict[str, Any] = self._local.statistics()
        stats.update(
            state=self._state,
            url=redact(self.url),
            prefix=self.prefix,
            outbox=len(self._queue),
            outbox_bytes=self._queue_bytes,
            last_error=self._last_error,
            **self._counts,
        )
        return stats

    # -- the queue ----------------------------------------------------------------------------------

    def _track(self, tracked: OrderedDict[str, None], session_id: str) -> None:
        tracked[session_id] = None
        tracked.move_to_end(session_id)
        if len(tracked) > self._max_tracked:
            tracked.popitem(last=False)

    def _enqueue(self, op: _Op, size: int) -> None:
        if len(self._queue) >= self.outbox or self._queue_bytes + size > self.outbox_bytes:
            self._counts["dropped"] += 1
            self._dropped_log.log(
                logging.WARNING,
                "Redis event store: %d operations (%d bytes) wait for Redis; this one stays in this "
                "worker only (%d dropped so far)",
                len(self._queue),
                self._queue_bytes,
                self._counts["dropped"],
            )
            return
        self._queue.append(op)
        self._queue_bytes += size
        self._queued += 1
        self._wake.set()

    def _live_lost(self) -> None:
        self._lost.set()  # the writer reconnects
        self._wake.set()

    def _take_batch(self) -> list[_Op]:
        batch: list[_Op] = []
        size = 0
        queue = self._queue
        while queue and len(batch) < _BATCH_OPS:
            event = queue[0][1]
            grows = len(event.data) if isinstance(event, StoredEvent) else 0
            if batch and size + grows > _BATCH_BYTES:
                break
            batch.append(queue.popleft())
            size += grows
        self._queue_bytes -= size
        return batch

    def _put_back(self, batch: list[_Op]) -> None:
        self._queue.extendleft(reversed(batch))
        self._queue_bytes += sum(len(event.data) for _, event in batch if isinstance(event, StoredEvent))

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    def _disconnected(self) -> None:
        self._progressed()  # flush() looks whether the writer still runs

    def _script_args(self, batch: list[_Op]) -> tuple[list[str], list[str | bytes]]:
        """The keys and arguments of :data:`WRITE` for ``batch`` (its entries signed here)."""
        keys: list[str] = []
        index: dict[str, str] = {}
        args: list[str | bytes] = [
            str(max(1, int(self.ttl * 1000))),
            str(self.max_events_per_stream),
            str(self.max_streams_per_session),
            str(self.max_bytes_per_session),
            str(EVENT_ENTRY_HEADER),
        ]
        leases: dict[str, tuple[str, bytes]] = {}
        for session_id, event in batch:
            position = index.get(session_id)
            if position is None:
                keys.append(events_key(self.prefix, self._keys.tag(SESSION_TAG, session_id.encode())))
                position = index[session_id] = str(len(keys))
                fence = None if self.fence is None else self.fence(session_id)
                if fence is not None:
                    keys.append(fence[0])
                    leases[session_id] = (str(len(keys)), fence[1])
            fenced = leases.get(session_id, ("", b""))
            if isinstance(event, str):
                args += [position, event, "", "", "", *fenced]
            else:
                entry = seal_event_entry(
                    self._keys, keys[int(position) - 1], event.stream_id, event.seq, event.data
                )
                args += [position, "e", str(event.stream_id), str(event.seq), entry, *fenced]
        return keys, args

    # -- the writer ---------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the queued events to Redis until cancelled, reconnecting as needed.  Reports started at
        once (the app does not wait for Redis).  One app runs a store."""
        if self._running:
            raise RuntimeError("this RedisEventStore is already running (give each app its own store)")
        await self._keep_connected(lambda: self._contain_attempt(self._serve), task_status)

    async def _serve(self) -> None:
        lost = self._lost = trio.Event()
        await probe(self.url, self.timeout)
        client = self._client()
        async with client:
            with trio.fail_after(self.timeout):
                await client.ping()
            self._connected(client, "")
            await self._write(client, lost)

    async def _write(self, client: coredis.Redis[bytes], lost: trio.Event) -> None:
        """Write the queue, a batch at a time, until the connection fails (then raise).  By EVALSHA
        (coredis loads the script when Redis does not know it)."""
        script = client.register_script(WRITE)
        while True:
            if lost.is_set():
                raise ConnectionError(self._last_error or "a read failed")
            if not self._queue:
                wake = self._wake = trio.Event()
                with trio.move_on_after(_IDLE_PING):
                    await wake.wait()
                if not wake.is_set():
                    with trio.fail_after(self.timeout):
                        await client.ping()
                continue
            batch = self._take_batch()
            try:
                keys, args = self._script_args(batch)
            except ValueError as exc:  # never for what store() queues; never retried either
                self._refused(batch, exc)
                continue
            try:
                with trio.fail_after(self.timeout):
                    reply: object = await script(keys=keys, args=args)
            except BaseException as exc:
                fatal, rest = split_fatal(exc)
                if fatal is not None or rest is None or not isinstance(leaf_of(rest), response_error()):
                    self._put_back(batch)
                    raise
                self._refused(batch, leaf_of(rest))
                continue
            self._counts["batches"] += 1
            if isinstance(reply, list) and len(reply) == 4 and all(isinstance(n, int) for n in reply):
                for name, count in zip(("written", "stale", "resets", "fenced"), reply, strict=True):
                    self._counts[name] += count
            self._done += len(batch)
            self._progressed()

    def _refused(self, batch: list[_Op], error: BaseException) -> None:
        """Redis answered the batch with an error (out of memory, say), or it could not be made: its
        events stay in memory only."""
        self._counts["write_errors"] += sum(isinstance(event, StoredEvent) for _, event in batch)
        self._last_error = describe(error, self.timeout)
        self._error_log.log(
            logging.WARNING,
            "Redis event store: Redis refused a batch of %d operations (%s); its events stay in this worker "
            "only (%d so far)",
            len(batch),
            self._last_error,
            self._counts["write_errors"],
        )
        self._done += len(batch)
        self._progressed()

    def _client(self) -> coredis.Redis[bytes]:
        return closing_connections(new_client(self.url, self.timeout, self.timeout, self.instance_id))

    def _describe_failure(self, leaf: BaseException) -> str:
        return describe(leaf, self.timeout)
