"""A worker's link through Redis: its heartbeat, the hash of its live sessions, its inbox, and the
forwarding of a session's messages to the worker that has the session.

A :class:`~mcp_trio.redis.RedisNotificationBus` has one (``worker_link``), beside its session
leases (:mod:`.sessions`) and its heartbeat (:mod:`.heartbeat`), the collaborators it hands its
connection to: :meth:`~WorkerLink.attach_worker` turns it on, and the bus's connection runs
:meth:`~WorkerLink.run` while it is connected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import trio

from .._protocol.cluster import (
    INBOX_FIELDS,
    INBOX_MESSAGE_LIMIT,
    PRINCIPAL_TAG,
    SESSION_TAG,
    ClusterKeys,
    ForgedMessage,
    ReplayedMessage,
    ReplayGuard,
    check_worker_id,
    decode_inbox_entry,
    encode_inbox_entry,
    heartbeat_key,
    inbox_bytes_key,
    inbox_key,
    sessions_key,
)
from .connection import as_bytes, leaf_of, load_coredis, logger, stream_id
from .inboxscripts import FORWARD, KNOWN, TAKE

if TYPE_CHECKING:
    import coredis

    from .heartbeat import Heartbeat
    from .sessions import SessionLeases

__all__ = ["Deliver", "Forwarded", "WorkerLink"]

Forwarded = Literal["sent", "unknown", "full", "gone", "unavailable"]
Deliver = Callable[[str, bytes, str], bool]
"""What the app gives :meth:`RedisNotificationBus.attach_worker`: hand a forwarded POST body to the
session it names, sent by the principal of the given tag; False if this worker has no such session or
it belongs to another principal (the message is dropped and counted)."""

_RELEASE = """
local beat = redis.call('GET', KEYS[1])
if beat and string.match(beat, '^(%S+) ') == ARGV[1] then return redis.call('DEL', KEYS[1], KEYS[2]) end
return 0
"""
"""Delete a heartbeat key and the session hash only if the heartbeat is still this instance's."""
_PUBLISH_SESSIONS = """
if #ARGV > 1 then redis.call('HSET', KEYS[2], unpack(ARGV, 2)) end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
else
  redis.call('DEL', KEYS[1])
end
return 1
"""
"""Replace a worker's session hash at once by the one built in KEYS[2] (plus the field/value pairs
ARGV[2..]), with the TTL ARGV[1] ms."""
_SESSION_CHUNK = 512
"""Session records written per command when the whole hash is written again (after a reconnection)."""
_INBOX_BATCH = 16
"""Inbox entries read per XREAD (each up to 4 MiB)."""


LogMalformed = Callable[..., None]
"""The bus's rate-limited log of a malformed message: ``(what, reason, so_far, *, forged, replayed)``."""


class WorkerLink:
    """A worker's heartbeat, session hash, inbox and forwarding: the part of a notification bus that
    :meth:`attach_worker` turns on (:attr:`RedisNotificationBus.worker_link
    <mcp_trio.redis.RedisNotificationBus.worker_link>`)."""

    def __init__(
        self,
        keys: ClusterKeys,
        prefix: str,
        heart: Heartbeat,
        leases: SessionLeases,
        connected: Callable[[], coredis.Redis[bytes] | None],
        new_client: Callable[[], coredis.Redis[bytes]],
        log_malformed: LogMalformed,
        command_timeout: float,
        heartbeat_interval: float,
        heartbeat_ttl: float,
        inbox_maxlen: int,
        inbox_max_bytes: int,
        inbox_ttl: float,
    ) -> None:
        self._keys = keys
        self.prefix = prefix
        self.instance_id = heart.instance_id
        self.heart = heart
        self.session_leases = leases
        self._connected = connected
        """The bus's connected client, or None while it has none."""
        self._client = new_client
        """A client of its own (the inbox reader's blocking reads)."""
        self._log_malformed = log_malformed
        self.command_timeout = command_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_ttl = heartbeat_ttl
        self.inbox_maxlen = inbox_maxlen
        self.inbox_max_bytes = inbox_max_bytes
        self.inbox_ttl = inbox_ttl
        self.worker_id: str | None = None
        self._deliver: Deliver | None = None
        self._inbox_last: bytes | None = None
        """The id of the last inbox entry read (kept across reconnections)."""
        self._sessions: dict[str, str] = {}
        """This worker's live sessions (their ids) and their principals' identities hashed (see
        :meth:`session_opened`), as published in its session hash."""
        self._session_changes: dict[str, bool] = {}
        """Sessions opened (True) or closed (False) here and not yet written to the session hash (kept
        only while the hash is being kept: a new connection writes it whole)."""
        self._recording = False
        self._sessions_changed = trio.Event()
        self._worker_counts = dict.fromkeys(
            (
                "forwarded",
                "forward_unknown",
                "forward_full",
                "forward_gone",
                "forward_unavailable",
                "inbox_received",
                "inbox_delivered",
                "inbox_dropped",
                "inbox_malformed",
                "inbox_forged",
                "inbox_replayed",
            ),
            0,
        )
        self._inbox_seen = ReplayGuard(time.time())
        """The nonces of the inbox entries accepted (each is delivered once)."""

    def statistics(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "sessions_published": len(self._sessions), **self._worker_counts}

    def attach_worker(self, worker_id: str, deliver: Deliver) -> None:
        """Turn this link on for the worker ``worker_id`` (see
        :meth:`RedisNotificationBus.attach_worker <mcp_trio.redis.RedisNotificationBus.attach_worker>`):
        ``deliver`` gets each forwarded body of its inbox."""
        check_worker_id(worker_id)
        if self.worker_id is not None and self.worker_id != worker_id:
            raise RuntimeError("this RedisNotificationBus already serves another worker")
        self.worker_id = self.heart.worker_id = worker_id
        self._deliver = deliver

    def session_opened(self, session_id: str, principal: bytes) -> None:
        """Record a session of this worker in its session hash (written soon after, in order),
        with the identity of its principal."""
        self._sessions[session_id] = self._keys.tag(PRINCIPAL_TAG, principal)
        if self._recording:
            self._session_changes[session_id] = True
            self._sessions_changed.set()

    def session_closed(self, session_id: str) -> None:
        """Remove a session of this worker from its session hash."""
        if self._sessions.pop(session_id, None) is not None and self._recording:
            self._session_changes[session_id] = False
            self._sessions_changed.set()

    def principal_matches(self, principal: bytes, tag: str) -> bool:
        """Whether ``tag`` (what came with a forwarded body) stands for the principal identity
        ``principal`` (a session's owner) under a key of the ring."""
        return self._keys.matches(PRINCIPAL_TAG, principal, tag)

    async def worker_alive(self, worker: str) -> bool | None:
        """Whether ``worker``'s heartbeat key exists; None if Redis cannot tell now."""
        client = self._connected()
        if client is None:
            return None
        try:
            with trio.fail_after(self.command_timeout):
                found = await client.exists([heartbeat_key(self.prefix, worker)])
        except Exception as exc:
            logger.debug("Redis: EXISTS failed (%s)", leaf_of(exc))
            return None
        return bool(found)

    def _known_args(self, worker: str, session_id: str, principal: bytes) -> tuple[list[str], list[str]]:
        """The keys and arguments of :data:`KNOWN` (and the start of :data:`FORWARD`'s): the
        session's and the principal's tags under each key of the ring, the current key's first."""
        keys = self._keys
        pairs: list[str] = []
        for session_tag, principal_tag in zip(
            keys.tags(SESSION_TAG, session_id.encode()), keys.tags(PRINCIPAL_TAG, principal), strict=True
        ):
            pairs += [session_tag, principal_tag]
        return [heartbeat_key(self.prefix, worker), sessions_key(self.prefix, worker)], pairs

    async def has_session(self, worker: str, session_id: str, principal: bytes) -> bool | None:
        """Whether ``worker`` is alive and has the session ``session_id`` of the principal of identity
        ``principal`` (in its session hash); None if Redis cannot tell now."""
        client = self._connected()
        if client is None:
            return None
        redis_keys, pairs = self._known_args(worker, session_id, principal)
        try:
            with trio.fail_after(self.command_timeout):
                known = await client.eval(KNOWN, keys=redis_keys, args=pairs)
        except Exception as exc:
            logger.debug("Redis: looking up a session of worker %s failed (%s)", worker, leaf_of(exc))
            return None
        return bool(known == 1)

    async def forward_to_worker(
        self, worker: str, session_id: str, body: bytes, principal: bytes
    ) -> Forwarded:
        """Add ``body`` (responses and notifications of the session ``session_id``, sent by the
        principal of identity ``principal``), signed, to ``worker``'s inbox, if that worker is alive
        and has that session with that principal (decided in Redis, before anything is written):
        ``sent``; ``unknown`` (no such session there, or another principal's); ``full`` (the inbox
        holds ``inbox_maxlen`` entries or ``inbox_max_bytes`` bytes); ``gone`` (no heartbeat);
        ``unavailable`` (Redis cannot be reached now).  Nothing is added but when ``sent``."""
        client = self._connected()
        if client is None:
            self._worker_counts["forward_unavailable"] += 1
            return "unavailable"
        known_keys, pairs = self._known_args(worker, session_id, principal)
        redis_keys = [*known_keys, inbox_key(self.prefix, worker), inbox_bytes_key(self.prefix, worker)]
        try:
            with trio.fail_after(self.command_timeout):
                added = await client.eval(KNOWN, keys=known_keys, args=pairs)
                if added == 1:  # checked again, with the inbox's bounds, as the entry is added
                    tag = pairs[1]  # the principal's, under the key that signs
                    fields = encode_inbox_entry(self._keys, worker, session_id, body, tag, time.time())
                    limits = [self.inbox_maxlen, self.inbox_max_bytes, self._inbox_ttl_ms(), len(body)]
                    args: list[str | bytes] = [*map(str, limits), str(len(pairs) // 2), *pairs]
                    args += [str(INBOX_MESSAGE_LIMIT), *(fields[name] for name in INBOX_FIELDS)]
                    added = await client.eval(FORWARD, keys=redis_keys, args=args)
        except Exception as exc:
            logger.debug("Redis: forwarding to worker %s failed (%s)", worker, leaf_of(exc))
            self._worker_counts["forward_unavailable"] += 1
            return "unavailable"
        outcomes: dict[object, Forwarded] = {1: "sent", 0: "gone", -1: "unknown", -2: "full"}
        outcome = outcomes.get(added, "unavailable")
        self._worker_counts["forwarded" if outcome == "sent" else f"forward_{outcome}"] += 1
        return outcome

    async def run(
        self, client: coredis.Redis[bytes], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The heartbeat, the session hash and the inbox reader of one connection.  Started once the
        inbox's read position is known, the session hash written and the heartbeat key set, so that
        no entry added afterwards is missed."""
        assert self.worker_id is not None
        key = inbox_key(self.prefix, self.worker_id)
        with trio.fail_after(self.command_timeout):
            tail = await self._inbox_tail(client, key)
        tail_id = as_bytes(tail[0].identifier) if tail else b"0-0"
        last = self._inbox_last
        # Go on from the last entry read if the stream still has it (a lost connection: catch up);
        # otherwise (first connection, or a Redis that restarted empty) from the start: what is there
        # was not read (each entry read is deleted), and is read now, delivered or dropped, and deleted.
        start = last if last is not None and stream_id(last) <= stream_id(tail_id) else b"0-0"
        try:
            await self._publish_sessions(client)
            await self._beat(client)
            reader = self._client()
            async with reader, trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat, client)
                nursery.start_soon(self._session_writer, client)
                nursery.start_soon(self._inbox_reader, reader, key, start)
                nursery.start_soon(self.session_leases.record_writer, client)
                task_status.started()
        finally:
            self._recording = False  # the next connection writes the hash whole
            self._session_changes.clear()
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:  # a clean end: the other workers answer 404 at once, not after the TTL
                    await client.eval(
                        _RELEASE,
                        keys=[
                            heartbeat_key(self.prefix, self.worker_id),
                            sessions_key(self.prefix, self.worker_id),
                        ],
                        args=[self.instance_id],
                    )
                except Exception as exc:
                    logger.debug("Redis: releasing the heartbeat key failed (%s)", leaf_of(exc))

    def _ttl_ms(self) -> int:
        return max(1, int(self.heartbeat_ttl * 1000))

    def _inbox_ttl_ms(self) -> int:
        return max(1, int(self.inbox_ttl * 1000))

    async def _beat(self, client: coredis.Redis[bytes]) -> None:
        """Renew the heartbeat (signed, see ``sessions``), and learn what it replaced: another value
        than this worker's last ones means it lapsed or someone else wrote it."""
        assert self.worker_id is not None
        started = trio.current_time()
        beat = self.heart.value(time.time())
        with trio.fail_after(self.command_timeout):
            key = heartbeat_key(self.prefix, self.worker_id)
            previous = await client.set(key, beat, px=self._ttl_ms(), get=True)
            self.heart.renewed(started, beat, previous if isinstance(previous, bytes) else None)
            await client.pexpire(sessions_key(self.prefix, self.worker_id), self._ttl_ms())

    async def _heartbeat(self, client: coredis.Redis[bytes]) -> None:
        while True:
            await trio.sleep(self.heartbeat_interval)
            await self._beat(client)

    async def _publish_sessions(self, client: coredis.Redis[bytes]) -> None:
        """Write the whole session hash again (a new connection: Redis may have lost it, or missed
        changes): built aside in chunks, then put in place at once."""
        assert self.worker_id is not None
        target = sessions_key(self.prefix, self.worker_id)
        building = f"{target}:building:{self.instance_id}"
        self._session_changes.clear()  # all of them are in the snapshot; later ones are recorded
        self._recording = True
        snapshot = list(self._sessions.items())
        with trio.fail_after(self.command_timeout):
            await client.delete([building])
        for at in range(0, len(snapshot), _SESSION_CHUNK):
            chunk = {
                self._keys.tag(SESSION_TAG, sid.encode()): tag
                for sid, tag in snapshot[at : at + _SESSION_CHUNK]
            }
            with trio.fail_after(self.command_timeout):
                await client.hset(building, chunk)
                await client.pexpire(building, max(self._ttl_ms(), int(self.command_timeout * 2000)))
        with trio.fail_after(self.command_timeout):
            await client.eval(_PUBLISH_SESSIONS, keys=[target, building], args=[str(self._ttl_ms())])

    async def _session_writer(self, client: coredis.Redis[bytes]) -> None:
        """Write each session opened or closed here to the session hash, in batches."""
        assert self.worker_id is not None
        target = sessions_key(self.prefix, self.worker_id)
        while True:
            await self._sessions_changed.wait()
            self._sessions_changed = trio.Event()
            changes, self._session_changes = self._session_changes, {}
            added = {
                self._keys.tag(SESSION_TAG, sid.encode()): self._sessions[sid]
                for sid, opened in changes.items()
                if opened and sid in self._sessions
            }
            removed = [
                self._keys.tag(SESSION_TAG, sid.encode()) for sid, opened in changes.items() if not opened
            ]
            with trio.fail_after(self.command_timeout):
                if removed:
                    await client.hdel(target, removed)
                if added:
                    await client.hset(target, added)
                    await client.pexpire(target, self._ttl_ms())

    async def _inbox_tail(self, client: coredis.Redis[bytes], key: str) -> Any:
        """The last entry of this worker's inbox (XREVRANGE), once a value of another type under its
        key (no worker writes one) is deleted."""
        try:
            return await client.xrevrange(key, count=1)
        except load_coredis().exceptions.WrongTypeError:
            await self._clear_inbox(client, key)
            return await client.xrevrange(key, count=1)

    async def _clear_inbox(self, client: coredis.Redis[bytes], key: str) -> None:
        """Delete what is under the inbox's key if it is not a stream (what a writer without the key
        ring may put there, so that the inbox cannot be read), counted as ``inbox_forged``."""
        assert self.worker_id is not None
        counter = inbox_bytes_key(self.prefix, self.worker_id)
        args = ["0", str(INBOX_MESSAGE_LIMIT), str(self._inbox_ttl_ms())]
        await client.eval(TAKE, keys=[key, counter], args=args)
        self._worker_counts["inbox_forged"] += 1
        self._log_malformed("inbox", "not a stream", self._worker_counts["inbox_forged"], forged=True)

    async def _inbox_reader(self, reader: coredis.Redis[bytes], key: str, start: bytes) -> None:
        """XREAD BLOCK on this worker's inbox (on a connection of its own), a few entries at a time;
        each batch read is handled, then deleted (with its bytes taken off the inbox's counter).  What
        is left in the stream after a batch is unread, so each read after the first starts at the
        stream's beginning: an entry id far ahead (a writer without the key ring can add one) or a
        stream deleted and made again cannot make the reader skip entries.  (An entry handled but left
        in the stream by a lost connection is read again, and refused as a replay.)"""
        assert self.worker_id is not None
        counter = inbox_bytes_key(self.prefix, self.worker_id)
        last = start
        block_ms = max(1, int(min(1.0, self.command_timeout / 2) * 1000))
        while True:
            try:
                reply = await reader.xread({key: last}, count=_INBOX_BATCH, block=block_ms)
            except load_coredis().exceptions.WrongTypeError:
                with trio.fail_after(self.command_timeout):
                    await self._clear_inbox(reader, key)
                last = self._inbox_last = b"0-0"
                continue
            read: list[bytes] = []
            size = 0
            for entries in (reply or {}).values():
                for entry in entries:
                    last = as_bytes(entry.identifier)
                    self._inbox_last = last
                    read.append(last)
                    size += self._on_inbox_entry(entry.field_values)
            if read:
                bounds = (size, INBOX_MESSAGE_LIMIT, self._inbox_ttl_ms())
                args: list[str | bytes] = [*map(str, bounds), *read]
                with trio.fail_after(self.command_timeout):
                    await reader.eval(TAKE, keys=[key, counter], args=args)
                last = b"0-0"

    def _on_inbox_entry(self, fields: object) -> int:
        """Handle one inbox entry; the bytes it counted in the inbox (0 for one that was not signed,
        whose writer counted nothing)."""
        assert self.worker_id is not None and self._deliver is not None
        self._worker_counts["inbox_received"] += 1
        try:
            entry = decode_inbox_entry(fields, self.worker_id, self._keys, time.time(), seen=self._inbox_seen)
        except ReplayedMessage as exc:
            self._worker_counts["inbox_replayed"] += 1
            self._log_malformed("inbox entry", str(exc), self._worker_counts["inbox_replayed"], replayed=True)
            return 0
        except ForgedMessage as exc:
            self._worker_counts["inbox_forged"] += 1
            self._log_malformed("inbox entry", str(exc), self._worker_counts["inbox_forged"], forged=True)
            return 0
        except ValueError as exc:
            self._worker_counts["inbox_malformed"] += 1
            self._log_malformed("inbox entry", str(exc), self._worker_counts["inbox_malformed"])
            return 0
        if self._deliver(entry.session_id, entry.body, entry.principal):
            self._worker_counts["inbox_delivered"] += 1
        else:
            self._worker_counts["inbox_dropped"] += 1
            logger.info(
                "Redis inbox: dropped a forwarded message for session %.12s… (not here, or another "
                "principal's)",
                entry.session_id,
            )
        return len(entry.body)
