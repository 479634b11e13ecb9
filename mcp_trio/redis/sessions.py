"""The 2025 sessions a worker keeps in Redis so that another worker can adopt them: their signed
records and their leases.

:class:`SessionLeases` is part of :class:`~mcp_trio.redis.RedisNotificationBus` (with
:class:`~mcp_trio.redis.workers.WorkerLink`, once the bus links a worker).  Each live session of this
worker has a record (``<prefix>:session:<tag>``: what ``initialize`` agreed, its log level and
subscriptions, its owner key; signed by the key ring for its key) and a lease (``<prefix>:lease:<tag>``
= ``"<worker id> <instance id>"``), both expiring ``session_ttl`` after they were last written or
refreshed.  A lease is valid while the instance it names beats (its heartbeat key holds its instance
id; ``"<instance id> draining"`` while it hands its sessions over): a worker adopts a session whose
lease is absent or names an instance that no longer beats, atomically (a Lua script), so that one
worker's nursery owns a session at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from .._protocol.cluster import (
    SESSION_TAG,
    Adoption,
    ClusterKeys,
    Peek,
    lease_key,
    open_session_record,
    record_key,
    seal_session_record,
)
from .connection import State, as_bytes, leaf_of, logger

if TYPE_CHECKING:
    import coredis

__all__ = ["SessionLeases"]

_PEEK = """
local record = redis.call('GET', KEYS[1])
if not record then return {0} end
local cur = redis.call('GET', KEYS[2])
if cur and cur ~= ARGV[1] then
  local w, inst = string.match(cur, '^([%w_-]+) ([%w_.-]+)$')
  if w then
    local hb = redis.call('GET', ARGV[2] .. ':worker:' .. w)
    if hb == inst then return {-1, record, w} end
    if hb == inst .. ' draining' then return {-2, record, w} end
  end
end
return {1, record, cur or ''}
"""
"""What a session's keys say: 0 no record; -1 a live worker owns it (its id third); -2 a draining
worker does; 1 free (no lease, a lease of this instance, or of an instance that no longer beats).  The
record second."""
_TAKE = """
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
local cur = redis.call('GET', KEYS[2]) or ''
if cur ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""
"""Take the lease (ARGV[1]) if the record is still ARGV[2] and the lease still what :data:`_PEEK` saw
(ARGV[3], '' for none): 1 taken, 0 changed meanwhile."""
_PUT = """
local cur = redis.call('GET', KEYS[2])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return 1
"""
"""Write a session's record and lease, unless another instance holds its lease (0: the session was
adopted elsewhere, this worker must let it go)."""
_DROP = """
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[1], KEYS[2]) end
return 1
"""
"""A session that ended: its record and lease go, if its lease is still this instance's."""
_RELEASE = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
return 1
"""
"""Hand a session over: its last record written, its lease given up (if still this instance's)."""
_REFRESH = """
local lost = {}
for i = 1, #KEYS, 2 do
  if redis.call('GET', KEYS[i + 1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[2])
  else
    table.insert(lost, (i + 1) / 2)
  end
end
return lost
"""
"""Refresh the TTLs of records and leases still this instance's; the positions of the others."""
_CHUNK = 256


class SessionLeases:
    """Records and leases of this worker's sessions (the part of the bus that hands sessions over)."""

    # What the bus provides:
    _keys: ClusterKeys
    _live: coredis.Redis[bytes] | None
    _state: State
    prefix: str
    instance_id: str
    command_timeout: float
    worker_id: str | None

    def _init_session_leases(self) -> None:
        self.session_ttl = 3600.0
        """Seconds a record and a lease live after they were last written or refreshed (the app sets
        it from its ``idle_timeout``)."""
        self._records: dict[str, bytes] = {}
        """The record (JSON, unsigned) of each live session of this worker."""
        self._record_changes: dict[str, bytes | None] = {}
        """Records to write (None: the session ended here, its keys go)."""
        self._ended: set[str] = set()
        """Sessions that ended here whose keys are not gone from Redis yet: no session to adopt."""
        self._records_changed = trio.Event()
        self.draining = False
        self.on_lost: Callable[[str], None] | None = None
        """Called with a session of this worker that another worker holds the lease of now (adopted
        while this worker could not reach Redis): this worker lets it go."""
        self._lease_counts = dict.fromkeys(
            ("adopted", "released", "lost", "records_forged", "adopt_unknown", "adopt_unavailable"), 0
        )

    def _lease_value(self) -> str:
        return f"{self.worker_id} {self.instance_id}"

    def _tags(self, session_id: str) -> tuple[str, ...]:
        return self._keys.tags(SESSION_TAG, session_id.encode())

    def _session_keys(self, tag: str) -> list[str]:
        return [record_key(self.prefix, tag), lease_key(self.prefix, tag)]

    # -- what the app tells -------------------------------------------------------------------

    def session_recorded(self, session_id: str, record: bytes) -> None:
        """A session of this worker, new or changed: its record is written soon (in order)."""
        self._records[session_id] = record
        self._record_changes[session_id] = record
        self._records_changed.set()

    async def session_recorded_now(self, session_id: str, record: bytes) -> None:
        """A new session of this worker: its record and lease written before it is answered (so that
        a worker killed right after cannot lose it), or, if Redis cannot be reached now, soon after."""
        self._records[session_id] = record
        client = self._live
        if client is not None and self._state == "connected":
            try:
                await self._write(client, session_id, record)
                return
            except Exception as exc:
                logger.debug("Redis: writing a new session's record failed (%s)", leaf_of(exc))
        self._record_changes[session_id] = record
        self._records_changed.set()

    def session_dropped(self, session_id: str) -> None:
        """A session of this worker ended: its record and lease go."""
        if self._records.pop(session_id, None) is not None:
            self._ended.add(session_id)
            self._record_changes[session_id] = None
            self._records_changed.set()

    def start_draining(self) -> None:
        """This worker hands its sessions over: its heartbeat says so from the next beat on (other
        workers then wait for its sessions instead of answering 503)."""
        self.draining = True

    def _heartbeat_value(self) -> str:
        return f"{self.instance_id} draining" if self.draining else self.instance_id

    # -- adoption and release -------------------------------------------------------------------

    async def peek_session(self, session_id: str) -> Peek:
        """Where the session ``session_id`` stands (see :class:`Peek`).  ``unknown`` too for a session
        of this worker that is ending or ended here (DELETE, expiry) while its keys are still in Redis:
        there is nothing to adopt."""
        client = self._live
        if client is None or self._state != "connected":
            self._lease_counts["adopt_unavailable"] += 1
            return Peek("unavailable")
        mine = session_id in self._records or session_id in self._ended  # before Redis is asked
        for tag in self._tags(session_id):
            keys = self._session_keys(tag)
            try:
                with trio.fail_after(self.command_timeout):
                    found = await client.eval(_PEEK, keys=keys, args=[self._lease_value(), self.prefix])
            except Exception as exc:
                logger.debug("Redis: looking up a session failed (%s)", leaf_of(exc))
                self._lease_counts["adopt_unavailable"] += 1
                return Peek("unavailable")
            if not isinstance(found, list) or not found or found[0] == 0:
                continue
            raw = as_bytes(found[1])
            try:
                record = open_session_record(self._keys, keys[0], raw)
            except ValueError:  # ForgedMessage too
                self._lease_counts["records_forged"] += 1
                return Peek("forged")
            owner = as_bytes(found[2]).decode(errors="replace")
            if mine and owner == self._lease_value():
                break  # this worker's own session, ending or ended here (DELETE, expiry): gone
            state: Adoption = {1: "taken", -1: "owned", -2: "draining"}.get(found[0], "unavailable")  # type: ignore[assignment]
            if state == "taken":
                return Peek(state, record, None, (tag, raw, owner))
            return Peek(state, record, owner)
        self._lease_counts["adopt_unknown"] += 1
        return Peek("unknown")

    async def take_session(self, peek: Peek) -> bool:
        """Take the lease of a session that :meth:`peek_session` found free, if nothing changed since."""
        client = self._live
        if peek.token is None or client is None or self._state != "connected":
            return False
        tag, raw, lease = peek.token
        try:
            with trio.fail_after(self.command_timeout):
                taken = await client.eval(
                    _TAKE,
                    keys=self._session_keys(tag),
                    args=[self._lease_value(), raw, lease, str(self._session_ttl_ms())],
                )
        except Exception as exc:
            logger.debug("Redis: taking a session's lease failed (%s)", leaf_of(exc))
            return False
        if taken == 1:
            self._lease_counts["adopted"] += 1
            return True
        return False

    async def release_session(self, session_id: str, record: bytes) -> bool:
        """Hand a session of this worker over: its last record written, its lease given up.  False
        if Redis could not be told (the lease then expires with its TTL, or with this worker's
        heartbeat)."""
        self._records.pop(session_id, None)
        self._record_changes.pop(session_id, None)
        client = self._live
        if client is None or self._state != "connected":
            return False
        keys = self._session_keys(self._tags(session_id)[0])
        sealed = seal_session_record(self._keys, keys[0], record)
        try:
            with trio.fail_after(self.command_timeout):
                released = await client.eval(
                    _RELEASE, keys=keys, args=[self._lease_value(), sealed, str(self._session_ttl_ms())]
                )
        except Exception as exc:
            logger.debug("Redis: releasing a session failed (%s)", leaf_of(exc))
            return False
        self._lease_counts["released"] += 1
        return released == 1

    def _session_ttl_ms(self) -> int:
        return max(1000, int(self.session_ttl * 1000))

    # -- the writer (a task of the worker link's connection) -------------------------------------

    async def _record_writer(self, client: coredis.Redis[bytes]) -> None:
        """Write every record of this worker again (a new connection: Redis may have lost them), then
        each change as it comes, and refresh the TTLs of them all every third of ``session_ttl``."""
        self._record_changes = {**dict.fromkeys(self._ended), **self._records}
        self._records_changed.set()
        refresh_at = trio.current_time() + self.session_ttl / 3
        while True:
            with trio.move_on_at(refresh_at):
                await self._records_changed.wait()
            if trio.current_time() >= refresh_at:
                await self._refresh(client)
                refresh_at = trio.current_time() + self.session_ttl / 3
            self._records_changed = trio.Event()
            changes, self._record_changes = self._record_changes, {}
            for session_id, record in changes.items():
                await self._write(client, session_id, record)

    async def _write(self, client: coredis.Redis[bytes], session_id: str, record: bytes | None) -> None:
        keys = self._session_keys(self._tags(session_id)[0])
        with trio.fail_after(self.command_timeout):
            if record is None:
                await client.eval(_DROP, keys=keys, args=[self._lease_value()])
                self._ended.discard(session_id)
                return
            sealed = seal_session_record(self._keys, keys[0], record)
            put = await client.eval(
                _PUT, keys=keys, args=[self._lease_value(), sealed, str(self._session_ttl_ms())]
            )
        if put != 1:
            self._lost(session_id)

    async def _refresh(self, client: coredis.Redis[bytes]) -> None:
        ids = list(self._records)
        for at in range(0, len(ids), _CHUNK):
            chunk = ids[at : at + _CHUNK]
            keys = [key for sid in chunk for key in self._session_keys(self._tags(sid)[0])]
            with trio.fail_after(self.command_timeout):
                lost = await client.eval(
                    _REFRESH, keys=keys, args=[self._lease_value(), str(self._session_ttl_ms())]
                )
            for position in lost if isinstance(lost, list) else ():
                self._lost(chunk[int(position) - 1])

    def _lost(self, session_id: str) -> None:
        if self._records.pop(session_id, None) is None:
            return
        self._lease_counts["lost"] += 1
        logger.warning(
            "session %.12s… was adopted by another worker while this one could not reach Redis; "
            "letting it go here",
            session_id,
        )
        if self.on_lost is not None:
            self.on_lost(session_id)

    def lease_statistics(self) -> dict[str, int]:
        return {"sessions_recorded": len(self._records), **self._lease_counts}
