"""The 2025 sessions a worker keeps in Redis so that another worker can adopt them: their signed
records, their signed leases and their epochs (fencing tokens).

:class:`SessionLeases` is a collaborator of :class:`~mcp_trio.redis.RedisNotificationBus`
(``session_leases``, with the bus's :class:`~mcp_trio.redis.heartbeat.Heartbeat` and
:class:`~mcp_trio.redis.workers.WorkerLink`, once the bus links a worker).  Each live session of this
worker has a record (``<prefix>:session:<tag>``: what ``initialize`` agreed, its log level and
subscriptions, its owner key) and a lease (``<prefix>:lease:<tag>``: the session's epoch, held by this
worker instance), both signed by the key ring (see ``_protocol.cluster.leases``) and both expiring
``session_ttl`` after they were last written or refreshed.

A lease is valid while the instance it names beats (its signed heartbeat, see ``workers``).  A worker
adopts a session whose lease is free (handed over) or names an instance seen not beating twice, a
heartbeat interval apart, the second time in the same Lua script that takes the lease (so an owner
that beats again meanwhile keeps it); taking it raises the epoch by one and writes the record again
under the new epoch.  Every later write of the owner compares its lease, epoch included, with what
Redis holds, so a write of an older owner is refused and that owner lets the session go.  An owner
whose heartbeat may have lapsed (its last renewal older than a fraction of the heartbeat TTL, on the
monotonic clock: a long pause, a lost connection) or was found changed by someone else confirms a
session's lease before it serves the session again (:meth:`SessionLeases.must_confirm`,
:meth:`SessionLeases.confirm_session`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

import trio

from .._protocol.cluster import (
    SESSION_TAG,
    Claim,
    ClusterKeys,
    ForgedMessage,
    Lease,
    Peek,
    SessionRecord,
    heartbeat_key,
    lease_key,
    open_heartbeat,
    open_lease,
    open_session_record,
    record_key,
    seal_lease,
    seal_session_record,
)
from .connection import as_bytes, leaf_of, logger
from .heartbeat import Heartbeat
from .leasescripts import CHUNK, CONFIRM, DROP, PEEK, PUT, REFRESH, RELEASE, TAKE

if TYPE_CHECKING:
    import coredis

__all__ = ["Confirmed", "SessionLeases"]

_FORMER = 4096
"""Leases of sessions handed over or lost that a worker keeps (to fence off their late writes)."""

Confirmed = Literal["mine", "lost", "unavailable", "outage"]


class SessionLeases:
    """Records, leases and epochs of a worker's sessions: the part of a worker's link to Redis that
    hands sessions over (:attr:`RedisNotificationBus.session_leases
    <mcp_trio.redis.RedisNotificationBus.session_leases>`)."""

    def __init__(
        self,
        keys: ClusterKeys,
        prefix: str,
        heart: Heartbeat,
        live: Callable[[], coredis.Redis[bytes] | None],
        command_timeout: float,
    ) -> None:
        self._keys = keys
        self.prefix = prefix
        self.heart = heart
        """The worker's heartbeat: whether its leases are sure."""
        self._live = live
        """The connected client, or None while the link has none."""
        self.command_timeout = command_timeout
        self.session_ttl = 3600.0
        """Seconds a record and a lease live after they were last written or refreshed (the app sets
        it from its ``idle_timeout``)."""
        self._records: dict[str, bytes] = {}
        """The record (JSON, unsigned) of each live session of this worker."""
        self._held: dict[str, tuple[int, bytes]] = {}
        """The epoch and the sealed lease of each session this worker holds."""
        self._record_changes: dict[str, bytes | None] = {}
        """Records to write (None: the session ended here, its keys go)."""
        self._ended: set[str] = set()
        """Sessions that ended here whose keys are not gone from Redis yet: no session to adopt."""
        self._records_changed = trio.Event()
        self._sweep = False
        """Confirm every lease at once (the heartbeat was found lapsed or changed by someone else)."""
        self.on_lost: Callable[[str], None] | None = None
        """Called with a session of this worker that another worker holds the lease of now (adopted
        while this worker could not reach Redis, or was paused): this worker lets it go."""
        self._former: OrderedDict[str, bytes] = OrderedDict()
        """The leases of the last sessions this worker handed over or lost (what fences off a late
        write of theirs: see :meth:`fence`)."""
        self._trusted: dict[str, int] = {}
        """For each session held, the heartbeat's count of doubts when it was last taken, made or
        found in place in Redis: fewer than the current count, the session is in doubt."""
        self._confirmed: dict[str, int] = {}
        """The heartbeat's term in which each session of this worker was last confirmed (or taken)."""
        self._lease_counts = dict.fromkeys(
            (
                "adopted",
                "released",
                "lost",
                "records_forged",
                "heartbeats_forged",
                "adopt_unknown",
                "adopt_unavailable",
                "confirmed",
                "confirm_lost",
            ),
            0,
        )
        heart.on_changed = self._heartbeat_changed

    @property
    def draining(self) -> bool:
        return self.heart.draining

    @property
    def worker_id(self) -> str | None:
        return self.heart.worker_id

    @property
    def instance_id(self) -> str:
        return self.heart.instance_id

    def _tags(self, session_id: str) -> tuple[str, ...]:
        return self._keys.tags(SESSION_TAG, session_id.encode())

    def _session_keys(self, tag: str) -> list[str]:
        return [record_key(self.prefix, tag), lease_key(self.prefix, tag)]

    def _seal_lease(self, key: str, epoch: int, state: Literal["held", "free"]) -> bytes:
        assert self.worker_id is not None
        return seal_lease(self._keys, key, Lease(epoch, state, self.worker_id, self.instance_id))

    def _hold(self, session_id: str, epoch: int) -> bytes:
        """This worker holds ``session_id`` under ``epoch`` from now on: its sealed lease."""
        lease = self._seal_lease(lease_key(self.prefix, self._tags(session_id)[0]), epoch, "held")
        self._held[session_id] = (epoch, lease)
        self._confirmed[session_id] = self.heart.term
        self._trusted[session_id] = self.heart.doubts
        return lease

    def fence(self, session_id: str) -> tuple[str, bytes] | None:
        """The key of the lease of ``session_id`` and the lease this worker holds it under (or held,
        if it handed the session over or lost it lately): a write for the session is made only if
        Redis holds no other lease there (the event store's writes are fenced so)."""
        held = self._held.get(session_id)
        lease = held[1] if held is not None else self._former.get(session_id)
        return None if lease is None else (lease_key(self.prefix, self._tags(session_id)[0]), lease)

    def _unhold(self, session_id: str) -> tuple[int, bytes] | None:
        """Forget what this worker kept of ``session_id``'s lease; its epoch and lease if it held it."""
        self._confirmed.pop(session_id, None)
        self._trusted.pop(session_id, None)
        return self._held.pop(session_id, None)

    def _forget_lease(self, session_id: str) -> None:
        """This worker does not hold ``session_id`` any more (handed over, or lost)."""
        held = self._unhold(session_id)
        if held is not None:
            self._former[session_id] = held[1]
            while len(self._former) > _FORMER:
                self._former.popitem(last=False)

    def _in_doubt(self, session_id: str) -> bool:
        """Whether the leases lapsed (not in an outage) since ``session_id`` was last found in place."""
        return self._trusted.get(session_id, -1) < self.heart.doubts

    def epoch_of(self, session_id: str) -> int | None:
        """The epoch under which this worker holds ``session_id`` (None: it does not)."""
        held = self._held.get(session_id)
        return None if held is None else held[0]

    # -- what the app tells -------------------------------------------------------------------

    def session_recorded(self, session_id: str, record: bytes) -> None:
        """A session of this worker, new or changed: its record is written soon (in order)."""
        if session_id not in self._held:
            self._hold(session_id, 1)
        self._records[session_id] = record
        self._record_changes[session_id] = record
        self._records_changed.set()

    async def session_recorded_now(self, session_id: str, record: bytes) -> None:
        """A new session of this worker (epoch 1): its record and lease written before it is answered
        (so that a worker killed right after cannot lose it), or, if Redis cannot be reached now, soon
        after."""
        self._hold(session_id, 1)
        self._records[session_id] = record
        client = self._live()
        if client is not None:
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
        elif session_id not in self._ended:
            self._unhold(session_id)

    def start_draining(self) -> None:
        """This worker hands its sessions over: its heartbeat says so from the next beat on (other
        workers then wait for its sessions instead of answering 503)."""
        self.heart.draining = True

    # -- the heartbeat's part: are this worker's leases sure? ------------------------------------

    def _heartbeat_changed(self) -> None:
        """A renewal found another heartbeat than this worker's: every lease is confirmed now."""
        self._sweep = True
        self._records_changed.set()
        if self._records:
            logger.warning(
                "this worker's heartbeat in Redis had lapsed or was changed by someone else; "
                "confirming its %d sessions before serving them",
                len(self._records),
            )

    def must_confirm(self, session_id: str) -> bool:
        """Whether the lease of ``session_id`` (a session of this worker) is to be confirmed before the
        session is served: the heartbeat's last renewal is too old to be sure of it (then every session
        is, until the heartbeat is renewed), or the session was last confirmed before it was."""
        return not self.heart.sure() or self._confirmed.get(session_id) != self.heart.term

    async def confirm_session(self, session_id: str) -> Confirmed:
        """Whether the lease of ``session_id`` is still this worker's (``mine``: its heartbeat is
        renewed in the same step), another's (``lost``: this worker lets the session go), or cannot be
        told now: ``outage`` while this worker's link to Redis is down and went down while its leases
        were sure (no worker can take a session then), ``unavailable`` otherwise (not served
        meanwhile)."""
        held = self._held.get(session_id)
        client = self._live()
        if held is None:
            return "lost"
        if client is None or self.worker_id is None:
            return "outage" if self.heart.outage_safe else "unavailable"
        term, doubts = self.heart.term, self.heart.doubts
        started = trio.current_time()
        beat = self.heart.value(time.time())
        keys = [lease_key(self.prefix, self._tags(session_id)[0]), self.heart.key]
        args: list[bytes | str] = [held[1], beat, str(self.heart.ttl_ms()), str(held[0])]
        try:
            with trio.fail_after(self.command_timeout):
                mine = await client.eval(CONFIRM, keys=keys, args=args)
        except Exception as exc:
            logger.debug("Redis: confirming a session's lease failed (%s)", leaf_of(exc))
            return "unavailable"
        if mine not in (1, 2) or (mine == 2 and self._in_doubt(session_id)):  # taken, or no proof left
            self._lease_counts["confirm_lost"] += 1
            self._lost(session_id)
            return "lost"
        if mine == 2 and session_id in self._records:  # gone from Redis, or older there
            self._record_changes.setdefault(session_id, self._records[session_id])
            self._records_changed.set()
        self._lease_counts["confirmed"] += 1
        self.heart.confirmed(started, beat)
        if session_id in self._held and self.heart.term == term:
            self._confirmed[session_id] = term
        if session_id in self._held and mine == 1:
            self._trusted[session_id] = max(self._trusted.get(session_id, -1), doubts)
        return "mine"

    # -- adoption and release -------------------------------------------------------------------

    async def peek_session(self, session_id: str) -> Peek:
        """Where the session ``session_id`` stands (see :class:`Peek`).  ``unknown`` too for a session
        of this worker that is ending or ended here (DELETE, expiry) while its keys are still in Redis:
        there is nothing to adopt."""
        client = self._live()
        if client is None:
            self._lease_counts["adopt_unavailable"] += 1
            return Peek("unavailable")
        mine = session_id in self._records or session_id in self._ended  # before Redis is asked
        for tag in self._tags(session_id):
            keys = self._session_keys(tag)
            try:
                with trio.fail_after(self.command_timeout):
                    found = await client.eval(PEEK, keys=keys, args=[self.prefix])
            except Exception as exc:
                logger.debug("Redis: looking up a session failed (%s)", leaf_of(exc))
                self._lease_counts["adopt_unavailable"] += 1
                return Peek("unavailable")
            if not isinstance(found, list) or len(found) != 4 or found[0] != 1:
                continue
            raw, raw_lease, raw_beat = (as_bytes(value) for value in found[1:])
            try:
                record, epoch, data = open_session_record(self._keys, keys[0], raw)
                lease = open_lease(self._keys, keys[1], raw_lease)
                if lease.epoch != epoch:
                    raise ForgedMessage("a record of another epoch than its lease")
            except ValueError:  # ForgedMessage too
                self._lease_counts["records_forged"] += 1
                return Peek("forged")
            seen = Claim(session_id, tag, raw, data, raw_lease, epoch, None)
            if lease.worker == self.worker_id and lease.instance == self.instance_id:
                if mine:
                    break  # this worker's own session, ending or ended here (DELETE, expiry): gone
                return Peek("taken", record, None, seen)
            if lease.state == "free":
                return Peek("taken", record, None, seen)
            return self._judge(seen, record, lease, raw_beat)
        self._lease_counts["adopt_unknown"] += 1
        return Peek("unknown")

    def _judge(self, seen: Claim, record: SessionRecord, lease: Lease, raw_beat: bytes) -> Peek:
        """Where a session held by another worker instance stands, by that worker's heartbeat."""
        beat_key = heartbeat_key(self.prefix, lease.worker)
        claim = replace(seen, heartbeat_key=beat_key, heartbeat=raw_beat)
        if not raw_beat:
            return Peek("taken", record, None, claim)
        try:
            beat = open_heartbeat(self._keys, beat_key, raw_beat)
        except ValueError:
            self._lease_counts["heartbeats_forged"] += 1
            self._lease_counts["adopt_unavailable"] += 1
            return Peek("unavailable")  # no proof of anything: not taken, not waited for
        age = time.time() - beat.millis / 1000
        if beat.instance != lease.instance or age > self.heart.ttl:
            return Peek("taken", record, None, claim)
        return Peek("draining" if beat.state == "draining" else "owned", record, lease.worker)

    async def take_session(self, peek: Peek) -> bool:
        """Take the lease of a session that :meth:`peek_session` found free, under the next epoch, if
        nothing changed since.  A lease that named an instance not beating is taken only if that
        instance still does not beat a heartbeat interval later (it was not merely slow, and its
        heartbeat was not merely deleted or written back by someone else)."""
        claim = peek.token
        if not isinstance(claim, Claim) or peek.record is None:
            return False
        if claim.heartbeat_key is not None:
            await trio.sleep(self.heart.interval * 1.5)
        client = self._live()
        if client is None or self.worker_id is None:
            return False
        keys = self._session_keys(claim.tag)
        epoch = claim.epoch + 1
        lease = self._seal_lease(keys[1], epoch, "held")
        sealed = seal_session_record(self._keys, keys[0], claim.data, epoch)
        if claim.heartbeat_key is not None:
            keys.append(claim.heartbeat_key)
        args: list[bytes | str] = [lease, sealed, claim.record, claim.lease, claim.heartbeat]
        args.append(str(self._session_ttl_ms()))
        try:
            with trio.fail_after(self.command_timeout):
                taken = await client.eval(TAKE, keys=keys, args=args)
        except Exception as exc:
            logger.debug("Redis: taking a session's lease failed (%s)", leaf_of(exc))
            return False
        if taken != 1:
            return False
        self._lease_counts["adopted"] += 1
        self._held[claim.session_id] = (epoch, lease)
        self._confirmed[claim.session_id] = self.heart.term
        self._trusted[claim.session_id] = self.heart.doubts
        self._ended.discard(claim.session_id)
        return True

    async def release_session(self, session_id: str, record: bytes) -> bool:
        """Hand a session of this worker over: its last record written, its lease made free.  False
        if Redis could not be told (the lease then expires with its TTL, or is taken once this worker's
        heartbeat stops)."""
        self._records.pop(session_id, None)
        self._record_changes.pop(session_id, None)
        held = self._held.get(session_id)
        self._forget_lease(session_id)
        client = self._live()
        if held is None or client is None:
            return False
        epoch, lease = held
        keys = self._session_keys(self._tags(session_id)[0])
        sealed = seal_session_record(self._keys, keys[0], record, epoch)
        free = self._seal_lease(keys[1], epoch, "free")
        try:
            with trio.fail_after(self.command_timeout):
                released = await client.eval(
                    RELEASE, keys=keys, args=[lease, sealed, free, str(self._session_ttl_ms())]
                )
        except Exception as exc:
            logger.debug("Redis: releasing a session failed (%s)", leaf_of(exc))
            return False
        self._lease_counts["released"] += 1
        return released == 1

    def _session_ttl_ms(self) -> int:
        return max(1000, int(self.session_ttl * 1000))

    # -- the writer (a task of the worker link's connection) -------------------------------------

    async def record_writer(self, client: coredis.Redis[bytes]) -> None:
        """Write every record of this worker again (a new connection: Redis may have lost them), then
        each change as it comes, and refresh the TTLs of them all every third of ``session_ttl`` (and
        at once when the heartbeat was found lapsed: the refresh confirms every lease)."""
        self._record_changes = {**dict.fromkeys(self._ended), **self._records}
        self._records_changed.set()
        refresh_at = trio.current_time() + self.session_ttl / 3
        while True:
            with trio.move_on_at(refresh_at):
                await self._records_changed.wait()
            self._records_changed = trio.Event()
            changes, self._record_changes = self._record_changes, {}
            for session_id, record in changes.items():
                await self._write(client, session_id, record)
            if trio.current_time() >= refresh_at or self._sweep:
                self._sweep = False
                await self._refresh(client)
                refresh_at = trio.current_time() + self.session_ttl / 3

    async def _write(self, client: coredis.Redis[bytes], session_id: str, record: bytes | None) -> None:
        keys = self._session_keys(self._tags(session_id)[0])
        held = self._held.get(session_id)
        if held is None:  # ended here, or handed over, meanwhile
            self._ended.discard(session_id)
            return
        epoch, lease = held
        with trio.fail_after(self.command_timeout):
            if record is None:
                await client.eval(DROP, keys=keys, args=[lease])
                self._ended.discard(session_id)
                self._unhold(session_id)
                return
            sealed = seal_session_record(self._keys, keys[0], record, epoch)
            trusted = "0" if self._in_doubt(session_id) else "1"
            args: list[bytes | str] = [lease, sealed, str(self._session_ttl_ms()), str(epoch), trusted]
            put = await client.eval(PUT, keys=keys, args=args)
        if put != 1:
            self._lost(session_id)

    async def _refresh(self, client: coredis.Redis[bytes]) -> None:
        """Refresh the TTLs of every record and lease of this worker; a session whose lease is not its
        own any more is let go, the others are confirmed (if the heartbeat was renewed since the term
        began: the refresh runs after it)."""
        term, fresh = self.heart.term, self.heart.sure()
        doubts = self.heart.doubts
        ids = [sid for sid in self._records if sid in self._held]
        for at in range(0, len(ids), CHUNK):
            chunk = ids[at : at + CHUNK]
            keys = [key for sid in chunk for key in self._session_keys(self._tags(sid)[0])]
            leases = [self._held[sid][1] for sid in chunk]
            with trio.fail_after(self.command_timeout):
                lost = await client.eval(REFRESH, keys=keys, args=[str(self._session_ttl_ms()), *leases])
            found = {int(position) for position in lost} if isinstance(lost, list) else set()
            for index, session_id in enumerate(chunk, 1):
                if index in found or (-index in found and self._in_doubt(session_id)):
                    self._lost(session_id)  # taken, or in doubt with nothing left to show it is not
                elif -index in found and session_id in self._records:  # gone, or older: written again
                    self._record_changes.setdefault(session_id, self._records[session_id])
                    self._records_changed.set()
                elif session_id in self._held:
                    self._trusted[session_id] = max(self._trusted.get(session_id, -1), doubts)
                    if fresh and self.heart.term == term:
                        self._confirmed[session_id] = term

    def _lost(self, session_id: str) -> None:
        self._forget_lease(session_id)
        if self._records.pop(session_id, None) is None:
            return
        self._record_changes.pop(session_id, None)
        self._lease_counts["lost"] += 1
        logger.warning(
            "session %.12s… was adopted by another worker while this one could not reach Redis or was "
            "paused; letting it go here",
            session_id,
        )
        if self.on_lost is not None:
            self.on_lost(session_id)

    def statistics(self) -> dict[str, int]:
        return {
            "sessions_recorded": len(self._records),
            **self._lease_counts,
            "heartbeats_changed": self.heart.changes,
        }
