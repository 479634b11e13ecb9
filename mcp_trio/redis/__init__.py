"""Workers that share Redis: :class:`RedisNotificationBus` and :class:`RedisTaskStore`.

Install the extra first: ``pip install 'mcp_trio[redis]'`` (it brings `coredis
<https://coredis.readthedocs.io>`_, an async Redis client that runs on Trio through AnyIO).  Only this
module imports it, and only once a bus or a store is made: ``import mcp_trio`` never does.  Redis 6 or
later.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import random
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import mcp_types as mt
import trio

from .._app.bus import LocalNotificationBus
from .._app.tasks import TERMINAL, TaskManager, TaskRecord
from .._protocol import safejson
from .._protocol.cluster import (
    INBOX_MESSAGE_LIMIT,
    PRINCIPAL_TAG,
    SESSION_TAG,
    WORKER_ID,
    ClusterKeys,
    ForgedMessage,
    check_channel_prefix,
    check_instance_id,
    check_worker_id,
    decode_bus_message,
    decode_inbox_entry,
    encode_bus_message,
    encode_inbox_entry,
    heartbeat_key,
    inbox_bytes_key,
    inbox_key,
    open_bus_message,
    open_task_record,
    seal_bus_message,
    seal_task_record,
    sessions_key,
)
from .._runtime.containment import split_fatal
from .._runtime.peerlog import RateLimitedLog
from ..errors import RPCError, TaskStoreFull, TaskStoreUnavailable

if TYPE_CHECKING:
    from types import ModuleType

    import coredis

__all__ = ["RedisNotificationBus", "RedisTaskStore"]

logger = logging.getLogger(__name__)

State = Literal["stopped", "connecting", "connected", "disconnected"]
Forwarded = Literal["sent", "unknown", "full", "gone", "unavailable"]
Deliver = Callable[[str, bytes, str], bool]
"""What the app gives :meth:`RedisNotificationBus.attach_worker`: hand a forwarded POST body to the
session it names, sent by the principal of the given tag; False if this worker has no such session or
it belongs to another principal (the message is dropped and counted)."""

_FORWARD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local pairs = tonumber(ARGV[5])
local found = false
for i = 0, pairs - 1 do
  local owner = redis.call('HGET', KEYS[2], ARGV[6 + 2 * i])
  if owner and owner == ARGV[7 + 2 * i] then found = true end
end
if not found then return -1 end
local size = tonumber(ARGV[4])
if redis.call('XLEN', KEYS[3]) >= tonumber(ARGV[1]) then return -2 end
if tonumber(redis.call('GET', KEYS[4]) or '0') + size > tonumber(ARGV[2]) then return -2 end
local f = 6 + 2 * pairs
redis.call('XADD', KEYS[3], '*', 'v', ARGV[f], 'kid', ARGV[f + 1], 'sig', ARGV[f + 2], 'ts', ARGV[f + 3],
  'session', ARGV[f + 4], 'principal', ARGV[f + 5], 'body', ARGV[f + 6])
redis.call('INCRBY', KEYS[4], size)
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
return 1
"""
"""Add an entry to a worker's inbox, atomically, only if the worker is alive (its heartbeat key), has
the session (its tag, under one of the forwarder's keys, is a field of the worker's session hash) with
the same principal (the field's value), and the inbox holds fewer than ARGV[1] entries and ARGV[2]
bytes with this one: 1 sent, 0 gone, -1 unknown session, -2 full.  The inbox and its byte counter
expire ARGV[3] ms after the last entry added."""
_KNOWN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 1, #ARGV, 2 do
  local owner = redis.call('HGET', KEYS[2], ARGV[i])
  if owner and owner == ARGV[i + 1] then return 1 end
end
return -1
"""
"""The first check of :data:`_FORWARD`, without the body: 1 known, 0 gone, -1 unknown.  (So that a
flood of bodies for made-up sessions does not even travel to Redis.)"""
_TAKE = """
local size = tonumber(ARGV[1])
if #ARGV > 1 then redis.call('XDEL', KEYS[1], unpack(ARGV, 2)) end
if redis.call('XLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
elseif size > 0 then
  redis.call('DECRBY', KEYS[2], size)
end
return 1
"""
"""Delete the inbox entries read (ids ARGV[2..]) and their bytes (ARGV[1]) from the counter; an empty
inbox is deleted with its counter (which also forgets bytes of entries that expired unread)."""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1], KEYS[2]) end
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
MALFORMED_LOG_INTERVAL = 10.0
"""Seconds between two log lines about malformed messages (the ones between are only counted)."""
_URL = re.compile(r"(rediss?|unix)://", re.IGNORECASE)
_USERINFO = re.compile(r"//[^/@]*@")


_IN_BUS: contextvars.ContextVar[bool] = contextvars.ContextVar("mcp_trio_redis_bus", default=False)
"""True in a bus's (and a task store's) tasks, and so in the tasks coredis starts for them."""


class _BusConnectionLogs(logging.Filter):
    """On the ``coredis`` logger: what coredis logs about a bus's connections (an error per failed
    attempt while Redis is down) becomes a DEBUG line of ``mcp_trio.redis``, which reports outages
    itself, once.  Records of other coredis clients pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _IN_BUS.get():
            return True
        logger.debug("coredis: %s", record.getMessage())
        return False


_FILTER = _BusConnectionLogs()


def _coredis() -> ModuleType:
    try:
        import coredis
    except ImportError as exc:
        raise ImportError(
            "mcp_trio.redis needs coredis: install the extra with pip install 'mcp_trio[redis]'"
        ) from exc
    coredis_logger = logging.getLogger("coredis")
    if _FILTER not in coredis_logger.filters:
        coredis_logger.addFilter(_FILTER)
    return coredis


def redact(url: str) -> str:
    """``url`` without its password (what logs and statistics show)."""
    return _USERINFO.sub("//***@", url)


class RedisNotificationBus(LocalNotificationBus):
    """A :class:`~mcp_trio.NotificationBus` shared by every worker subscribed to one Redis channel.

    A notification published in this worker reaches its own peers at once (as with
    :class:`~mcp_trio.LocalNotificationBus`, without a round trip) and is published on the channel
    ``<channel_prefix>:notifications``; every other worker's bus hands it to that worker's peers (2025
    sessions, 2026 ``subscriptions/listen`` streams).  Each message names the ``instance_id`` of the bus
    that sent it, so a bus ignores its own echo: each worker delivers each notification once.  The bus
    carries list changes and resource updates; what a worker reads from the channel is validated as a
    message from a socket, and a malformed one is logged and dropped.

    Every message a bus writes to Redis is signed (HMAC-SHA256) with the cluster's key ring: ``secret``
    (a key, or a sequence of keys: the first signs, every one verifies), else the ring in
    ``MCP_TRIO_REQUEST_STATE_SECRET``, the one the workers already share for ``requestState``; without
    either the bus refuses to be made.  A message that the ring does not verify (written by anything
    without the secret, or older than five minutes) is dropped and counted as ``forged``.

    Its connection runs in :meth:`run`, which :meth:`MCPApp.run <mcp_trio.MCPApp.run>` (and so
    hypercorn's lifespan, ``serve`` and ``serve_h11``) starts in the app's nursery: it ends with the
    app.  While Redis cannot be reached, notifications reach this worker's peers only (those published
    meanwhile are not sent later), the outage is logged once, and the bus retries with exponential
    backoff (``retry_initial`` doubling up to ``retry_max`` seconds, with jitter).  :meth:`statistics`
    (``notification_bus`` in :meth:`MCPApp.statistics <mcp_trio.MCPApp.statistics>`) tells its state.

    ``url``: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or ``unix://path``.
    ``outbox``: notifications waiting to be published; past that many (Redis too slow) one is dropped
    for the other workers.  ``command_timeout``: a Redis command (a ``PUBLISH``, the subscriber's
    keep-alive ``PING``) that takes longer counts as a lost connection.  ``inbox_maxlen`` and
    ``inbox_max_bytes`` bound a worker's inbox (entries not yet read: forwarding past them is
    refused), and ``inbox_ttl`` is how long an inbox nobody reads is kept (see :meth:`attach_worker`).
    """

    def __init__(
        self,
        url: str,
        *,
        channel_prefix: str = "mcp-trio",
        instance_id: str | None = None,
        outbox: int = 1024,
        retry_initial: float = 0.1,
        retry_max: float = 2.0,
        connect_timeout: float = 5.0,
        command_timeout: float = 5.0,
        heartbeat_interval: float = 1.0,
        heartbeat_ttl: float = 5.0,
        inbox_maxlen: int = 1000,
        inbox_max_bytes: int = 64 * 1024 * 1024,
        inbox_ttl: float = 60.0,
        secret: bytes | Sequence[bytes] | None = None,
    ) -> None:
        super().__init__()
        _coredis()  # fail here, not in the app's nursery
        if not isinstance(url, str) or not _URL.match(url):
            raise ValueError("a Redis URL starts with redis://, rediss:// or unix://")
        if outbox < 1 or retry_initial <= 0 or retry_max < retry_initial:
            raise ValueError("outbox must be at least 1, and 0 < retry_initial <= retry_max")
        if not 0 < heartbeat_interval < heartbeat_ttl or inbox_maxlen < 1:
            raise ValueError("0 < heartbeat_interval < heartbeat_ttl, and inbox_maxlen at least 1")
        if inbox_max_bytes < INBOX_MESSAGE_LIMIT or not inbox_ttl >= heartbeat_ttl:
            raise ValueError(
                f"inbox_max_bytes must be at least {INBOX_MESSAGE_LIMIT} (one body), and inbox_ttl at "
                "least heartbeat_ttl"
            )
        self._keys = ClusterKeys.of(secret)
        """The cluster's key ring: signs what this bus writes, verifies what it reads."""
        self.url = url
        self.prefix = check_channel_prefix(channel_prefix)
        self.channel = f"{self.prefix}:notifications"
        self.instance_id = check_instance_id(instance_id or secrets.token_hex(8))
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self._outbox_send, self._outbox = trio.open_memory_channel[bytes](outbox)
        self._state: State = "stopped"
        self._running = False
        self._outage_logged = False
        self._outage_since: float | None = None
        self._warned_not_running = False
        self._malformed_logged_at: float | None = None
        self._last_error: str | None = None
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_ttl = heartbeat_ttl
        self.inbox_maxlen = inbox_maxlen
        self.inbox_max_bytes = inbox_max_bytes
        self.inbox_ttl = inbox_ttl
        self.worker_id: str | None = None
        self._deliver: Deliver | None = None
        self._live: coredis.Redis[bytes] | None = None
        """The connected client, while there is one (what :meth:`forward_to_worker` uses)."""
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
            ),
            0,
        )
        self._counts = dict.fromkeys(
            (
                "published",
                "received",
                "echoes",
                "malformed",
                "forged",
                "local_only",
                "dropped",
                "connects",
                "failures",
            ),
            0,
        )

    @property
    def state(self) -> State:
        """``stopped`` (not running), ``connecting`` (the first attempt), ``connected`` (subscribed to
        the channel) or ``disconnected`` (Redis unreachable: retrying)."""
        return self._state

    def statistics(self) -> dict[str, Any]:
        """The bus's state and counters: notifications ``published`` to Redis, ``received`` from other
        workers and delivered here, ``echoes`` (its own, ignored), ``malformed`` (dropped), ``forged``
        (dropped: not signed by the key ring), ``local_only`` (published while Redis was unreachable,
        or of a kind the bus does not carry), ``dropped`` (the outbox was full), ``connects``,
        ``failures`` (failed attempts and lost connections), ``key_id`` (of the key that signs) and the
        ``last_error``.  A worker's link adds its ``worker_id``, ``sessions_published``, what it
        forwarded (``forwarded``, ``forward_unknown``, ``forward_full``, ``forward_gone``,
        ``forward_unavailable``) and what its inbox got (``inbox_received``, ``inbox_delivered``,
        ``inbox_dropped``, ``inbox_malformed``, ``inbox_forged``)."""
        stats: dict[str, Any] = {
            "state": self._state,
            "url": redact(self.url),
            "channel": self.channel,
            "instance_id": self.instance_id,
            "key_id": self._keys.key_id,
            "subscribers": len(self),
            "last_error": self._last_error,
            **self._counts,
        }
        if self.worker_id is not None:
            stats["worker_id"] = self.worker_id
            stats["sessions_published"] = len(self._sessions)
            stats.update(self._worker_counts)
        return stats

    # -- workers: heartbeat, inbox, forwarding -------------------------------------------------

    def attach_worker(self, worker_id: str, deliver: Deliver) -> None:
        """Make this bus a worker's link (:class:`~mcp_trio.MCPApp` calls it when its config has a
        ``worker_id``).  While connected it keeps

        - the heartbeat key ``<prefix>:worker:<id>`` (TTL ``heartbeat_ttl``, refreshed every
          ``heartbeat_interval``);
        - the hash ``<prefix>:sessions:<id>`` of its live sessions (:meth:`session_opened`), with the
          same TTL: a keyed hash of each session id -> a keyed hash of its principal's identity, so
          that another worker forwards only what is for a session this one has, sent by that
          session's principal, and no session id or principal is stored in Redis;
        - and reads the stream ``<prefix>:inbox:<id>``, hands each entry signed by the key ring to
          ``deliver``, and deletes what it read.  The stream and its byte counter
          ``<prefix>:inbox-bytes:<id>`` expire ``inbox_ttl`` after the last entry added."""
        check_worker_id(worker_id)
        if self.worker_id is not None and self.worker_id != worker_id:
            raise RuntimeError("this RedisNotificationBus already serves another worker")
        self.worker_id = worker_id
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
        client = self._live
        if client is None or self._state != "connected":
            return None
        try:
            with trio.fail_after(self.command_timeout):
                found = await client.exists([heartbeat_key(self.prefix, worker)])
        except Exception as exc:
            logger.debug("Redis: EXISTS failed (%s)", _leaf(exc))
            return None
        return bool(found)

    def _known_args(self, worker: str, session_id: str, principal: bytes) -> tuple[list[str], list[str]]:
        """The keys and arguments of :data:`_KNOWN` (and the start of :data:`_FORWARD`'s): the
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
        client = self._live
        if client is None or self._state != "connected":
            return None
        redis_keys, pairs = self._known_args(worker, session_id, principal)
        try:
            with trio.fail_after(self.command_timeout):
                known = await client.eval(_KNOWN, keys=redis_keys, args=pairs)
        except Exception as exc:
            logger.debug("Redis: looking up a session of worker %s failed (%s)", worker, _leaf(exc))
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
        client = self._live
        if client is None or self._state != "connected":
            self._worker_counts["forward_unavailable"] += 1
            return "unavailable"
        known_keys, pairs = self._known_args(worker, session_id, principal)
        redis_keys = [*known_keys, inbox_key(self.prefix, worker), inbox_bytes_key(self.prefix, worker)]
        try:
            with trio.fail_after(self.command_timeout):
                added = await client.eval(_KNOWN, keys=known_keys, args=pairs)
                if added == 1:  # checked again, with the inbox's bounds, as the entry is added
                    tag = pairs[1]  # the principal's, under the key that signs
                    fields = encode_inbox_entry(self._keys, worker, session_id, body, tag, time.time())
                    limits = [self.inbox_maxlen, self.inbox_max_bytes, int(self.inbox_ttl * 1000), len(body)]
                    names = ("v", "kid", "sig", "ts", "session", "principal", "body")
                    args: list[str | bytes] = [*map(str, limits), str(len(pairs) // 2), *pairs]
                    args += [fields[name] for name in names]
                    added = await client.eval(_FORWARD, keys=redis_keys, args=args)
        except Exception as exc:
            logger.debug("Redis: forwarding to worker %s failed (%s)", worker, _leaf(exc))
            self._worker_counts["forward_unavailable"] += 1
            return "unavailable"
        outcomes: dict[object, Forwarded] = {1: "sent", 0: "gone", -1: "unknown", -2: "full"}
        outcome = outcomes.get(added, "unavailable")
        self._worker_counts["forwarded" if outcome == "sent" else f"forward_{outcome}"] += 1
        return outcome

    async def _worker_link(
        self, client: coredis.Redis[bytes], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The heartbeat, the session hash and the inbox reader of one connection.  Started once the
        inbox's read position is known, the session hash written and the heartbeat key set, so that
        no entry added afterwards is missed."""
        assert self.worker_id is not None
        key = inbox_key(self.prefix, self.worker_id)
        with trio.fail_after(self.command_timeout):
            tail = await client.xrevrange(key, count=1)
        tail_id = _as_bytes(tail[0].identifier) if tail else b"0-0"
        last = self._inbox_last
        # Go on from the last entry read if the stream still has it (a lost connection: catch up);
        # otherwise (first connection, or a Redis that restarted empty) from the start: what is there
        # was not read (each entry read is deleted), and is read now, delivered or dropped, and deleted.
        start = last if last is not None and _stream_id(last) <= _stream_id(tail_id) else b"0-0"
        try:
            await self._publish_sessions(client)
            await self._beat(client)
            reader = self._client()
            async with reader, trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat, client)
                nursery.start_soon(self._session_writer, client)
                nursery.start_soon(self._inbox_reader, reader, key, start)
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
                    logger.debug("Redis: releasing the heartbeat key failed (%s)", _leaf(exc))

    def _ttl_ms(self) -> int:
        return max(1, int(self.heartbeat_ttl * 1000))

    async def _beat(self, client: coredis.Redis[bytes]) -> None:
        assert self.worker_id is not None
        with trio.fail_after(self.command_timeout):
            await client.set(heartbeat_key(self.prefix, self.worker_id), self.instance_id, px=self._ttl_ms())
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

    async def _inbox_reader(self, reader: coredis.Redis[bytes], key: str, start: bytes) -> None:
        """XREAD BLOCK on this worker's inbox (on a connection of its own), a few entries at a time;
        each batch read is handled, then deleted (with its bytes taken off the inbox's counter)."""
        assert self.worker_id is not None
        counter = inbox_bytes_key(self.prefix, self.worker_id)
        last = start
        block_ms = max(1, int(min(1.0, self.command_timeout / 2) * 1000))
        while True:
            reply = await reader.xread({key: last}, count=_INBOX_BATCH, block=block_ms)
            read: list[bytes] = []
            size = 0
            for entries in (reply or {}).values():
                for entry in entries:
                    last = _as_bytes(entry.identifier)
                    self._inbox_last = last
                    read.append(last)
                    size += self._on_inbox_entry(entry.field_values)
            if read:
                with trio.fail_after(self.command_timeout):
                    await reader.eval(_TAKE, keys=[key, counter], args=[str(size), *read])

    def _on_inbox_entry(self, fields: object) -> int:
        """Handle one inbox entry; the bytes it counted in the inbox (0 for one that was not signed,
        whose writer counted nothing)."""
        assert self.worker_id is not None and self._deliver is not None
        self._worker_counts["inbox_received"] += 1
        try:
            entry = decode_inbox_entry(fields, self.worker_id, self._keys, time.time())
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

    # -- publishing ----------------------------------------------------------------------------

    async def publish(self, message: dict[str, Any], uri: str | None = None) -> None:
        self.deliver(message, uri)  # this worker's peers first, without waiting for Redis
        self._forward(message, uri)
        await trio.lowlevel.checkpoint()

    def _forward(self, message: dict[str, Any], uri: str | None) -> None:
        if self._state != "connected":
            self._counts["local_only"] += 1
            if not self._running and not self._warned_not_running:
                self._warned_not_running = True
                logger.warning(
                    "the Redis notification bus is not running (MCPApp.run runs it): notifications "
                    "reach this process's peers only"
                )
            return
        data = encode_bus_message(self.instance_id, message, uri)
        if data is None:
            self._counts["local_only"] += 1
            return
        try:
            self._outbox_send.send_nowait(seal_bus_message(self._keys, self.channel, data, time.time()))
        except trio.WouldBlock:
            self._counts["dropped"] += 1

    # -- the connection ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a connection to Redis (subscriber and publisher) until cancelled, reconnecting as
        needed.  Reports started at once: the app does not wait for Redis.  One app runs a bus."""
        if self._running:
            raise RuntimeError("this RedisNotificationBus is already running (one app runs a bus)")
        self._running = True
        self._state = "connecting"
        self._outage_logged = False
        in_bus = _IN_BUS.set(True)  # coredis's tasks for this one inherit it
        attempt = 0
        try:
            task_status.started()
            while True:
                connected = await self._connect_and_serve()
                self._state = "disconnected"
                self._discard_outbox()
                attempt = 1 if connected else attempt + 1
                delay = min(self.retry_max, self.retry_initial * 2 ** (attempt - 1))
                await trio.sleep(delay * random.uniform(0.5, 1.0))
        finally:
            _IN_BUS.reset(in_bus)
            self._running = False
            self._state = "stopped"
            self._discard_outbox()

    async def _connect_and_serve(self) -> bool:
        """One connection, until it fails (never raises but cancellation); whether it got connected."""
        connected = False
        try:
            await self._probe()
            client = self._client()
            async with client:
                retry = _coredis().retry.NoRetryPolicy()
                async with client.pubsub(
                    channels=[self.channel], ignore_subscribe_messages=True, retry_policy=retry
                ) as pubsub:
                    async with trio.open_nursery() as nursery:
                        if self.worker_id is not None:
                            await nursery.start(self._worker_link, client)
                        connected = True
                        self._live = client
                        self._on_connected()
                        nursery.start_soon(self._publisher, client)
                        async for item in pubsub:
                            self._on_item(item)
                        nursery.cancel_scope.cancel()
                    raise ConnectionError("the subscription ended")
        except BaseException as exc:
            self._live = None
            fatal, rest = split_fatal(exc)
            if fatal is not None:
                if fatal is exc:
                    raise
                raise fatal from None
            if trio.current_effective_deadline() == -math.inf:
                # The app is ending: coredis's cleanup can fail on a connection it is tearing down
                # (and its error hides the cancellation).  Not an outage: let the cancellation on.
                logger.debug("Redis notification bus: error while shutting down", exc_info=rest)
                await trio.lowlevel.checkpoint()
            assert rest is not None
            self._on_failure(rest, was_connected=connected)
        return connected

    async def _probe(self) -> None:
        await _probe(self.url, self.connect_timeout)

    def _client(self) -> coredis.Redis[bytes]:
        return _new_client(self.url, self.connect_timeout, self.command_timeout, self.instance_id)

    async def _publisher(self, client: coredis.Redis[bytes]) -> None:
        async for data in self._outbox:
            await client.publish(self.channel, data)
            self._counts["published"] += 1

    def _discard_outbox(self) -> None:
        """What was queued but not sent when the connection went: never sent late."""
        while True:
            try:
                self._outbox.receive_nowait()
            except trio.WouldBlock:
                return
            self._counts["local_only"] += 1

    def _on_connected(self) -> None:
        self._state = "connected"
        self._counts["connects"] += 1
        if self._outage_logged:
            down = trio.current_time() - (self._outage_since or trio.current_time())
            logger.warning(
                "Redis notification bus: connected to %s again after %.1f s; notifications reach the "
                "other workers again",
                redact(self.url),
                down,
            )
        else:
            logger.info("Redis notification bus: connected to %s (%s)", redact(self.url), self.channel)
        self._outage_logged = False
        self._outage_since = None

    def _on_failure(self, exc: BaseException, *, was_connected: bool) -> None:
        leaf = _leaf(exc)
        self._counts["failures"] += 1
        self._last_error = f"{type(leaf).__name__}: {leaf}"[:300]
        if self._outage_logged:
            logger.debug("Redis notification bus: still unreachable (%s)", self._last_error)
            return
        self._outage_logged = True
        self._outage_since = trio.current_time()
        what = "lost its connection to" if was_connected else "cannot reach"
        expected = isinstance(leaf, _expected_errors())
        logger.log(
            logging.WARNING if expected else logging.ERROR,
            "Redis notification bus %s %s (%s): notifications reach this worker's peers only until it "
            "is back; retrying",
            what,
            redact(self.url),
            self._last_error,
            exc_info=None if expected else exc,
        )

    # -- receiving -----------------------------------------------------------------------------

    def _on_item(self, item: Any) -> None:
        if not isinstance(item, dict) or item.get("type") != "message":
            return  # subscription acknowledgements and the like
        try:
            found = decode_bus_message(
                open_bus_message(self._keys, self.channel, item.get("data"), time.time())
            )
        except ForgedMessage as exc:
            self._counts["forged"] += 1
            self._log_malformed(f"message on {self.channel}", str(exc), self._counts["forged"], forged=True)
            return
        except ValueError as exc:
            self._counts["malformed"] += 1
            self._log_malformed(f"message on {self.channel}", str(exc), self._counts["malformed"])
            return
        if found.sender == self.instance_id:
            self._counts["echoes"] += 1
            return
        self._counts["received"] += 1
        self.deliver(found.message, found.uri)

    def _log_malformed(self, what: str, reason: str, so_far: int, *, forged: bool = False) -> None:
        """One WARNING line per :data:`MALFORMED_LOG_INTERVAL` at most (the others are only counted):
        what was dropped, why, and how many so far."""
        now = trio.current_time()
        last = self._malformed_logged_at
        if last is None or now - last >= MALFORMED_LOG_INTERVAL:
            self._malformed_logged_at = now
            kind = "an unauthenticated" if forged else "a malformed"
            logger.warning(
                "Redis notification bus: dropped %s %s (%s; %d so far)", kind, what, reason, so_far
            )


# -- tasks: RedisTaskStore ----------------------------------------------------------------------

_T = TypeVar("_T")

_CREATE = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -1 end
local stored
if ARGV[2] == '' then
  stored = redis.call('SET', KEYS[1], ARGV[1], 'NX')
else
  stored = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
end
if not stored then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
return 1
"""
"""Create a task's key (SET NX, with its TTL) and count it in the index, unless the index (pruned of
expired ids first) already holds ``max_tasks`` ids: 1 created, 0 the key exists, -1 full."""
_DELETE = """
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
"""
"""Delete a task's key and its id in the index."""
SIGNAL_LIMIT = 1024 * 1024
"""Largest signal (JSON, bytes) sent or accepted on a worker's task channel."""
_STATUSES = frozenset({"working", "input_required"}) | TERMINAL
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "task_id": (str,),
    "owner": (str,),
    "created_at": (int, float),
    "updated_at": (int, float),
    "ttl_ms": (int, type(None)),
    "poll_interval_ms": (int, type(None)),
    "status": (str,),
    "status_message": (str, type(None)),
    "result": (dict, type(None)),
    "error": (dict, type(None)),
    "input_requests": (dict,),
    "worker": (str, type(None)),
}
"""The JSON type of each field of a stored :class:`~mcp_trio.TaskRecord`."""


def _decode_record(raw: object, task_id: str) -> TaskRecord:
    """The record stored for ``task_id``, or ValueError saying why the value is not one."""
    if not isinstance(raw, bytes | str):
        raise ValueError("the key does not hold a string")
    try:
        data = safejson.loads(raw)
    except ValueError as exc:
        raise ValueError("not JSON") from exc
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for name, types in _RECORD_TYPES.items():
        value = data.get(name)
        if name not in data or isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{name} is missing or of the wrong type")
    if data["task_id"] != task_id:
        raise ValueError("it names another task")
    if data["status"] not in _STATUSES:
        raise ValueError("unknown status")
    if not all(isinstance(k, str) and isinstance(v, dict) for k, v in data["input_requests"].items()):
        raise ValueError("input_requests is not an object of objects")
    if not all(math.isfinite(data[name]) for name in ("created_at", "updated_at")):
        raise ValueError("a timestamp is not finite")
    return TaskRecord.from_json(data)


class RedisTaskStore:
    """A :class:`~mcp_trio.TaskStore` in Redis, shared by the workers of a deployment: a task created on
    one worker is found by ``tasks/get`` on any other, and ``tasks/cancel`` or ``tasks/update`` sent to
    another worker reach the one that runs it.  Give each app its own store and its worker id::

        ServerConfig(task_store_factory=lambda: RedisTaskStore(url), worker_id="w1")

    Each task is the key ``<prefix>:task:<taskId>`` (its record as JSON, signed with the cluster's key
    ring for that key), which Redis expires after the task's TTL; the sorted set
    ``<prefix>:tasks:index`` counts the live tasks (by expiry) so that no more than ``max_tasks`` are
    stored: :meth:`create` then raises :class:`~mcp_trio.TaskStoreFull` (tasks without a TTL count
    until they are deleted).  A stored value that the ring does not verify for its key (unsigned,
    altered, signed by another ring, or copied from another task's key) reads as no task and is counted
    (``records_forged``), as is a signed value that is not a valid record (``malformed_records``); both
    are logged, rate-limited.  Every command is bounded by ``timeout`` seconds: a Redis that is down or
    too slow raises :class:`~mcp_trio.TaskStoreUnavailable` (answered -32603), never hangs.

    Signals between workers go through Redis pub/sub: :meth:`signal` publishes on the channel
    ``<prefix>:tasks:worker:<worker>`` of the worker that runs a task, and :meth:`run` (which
    :meth:`MCPApp.run <mcp_trio.MCPApp.run>` starts) subscribes to this worker's own channel and hands
    what arrives to the app's task manager.  Records and signals are signed with the cluster's key ring
    (``secret``, a key or a sequence of keys, else ``MCP_TRIO_REQUEST_STATE_SECRET``: without either
    the store refuses to be made), as the notification bus's messages are: a signal that the ring does
    not verify is dropped and counted (``signals_forged``).  The ring's first key signs, any key of it
    verifies, so records outlive a key rotation as long as their key stays in the ring.  :meth:`run`
    also keeps the connections the commands use; while it is not connected (Redis down, or not
    running), each command opens a connection of its own.  It reconnects with exponential backoff
    (``retry_initial`` doubling up to ``retry_max`` seconds, with jitter), and logs an outage once.

    ``url``: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or ``unix://path``.
    """

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
    ) -> None:
        _coredis()  # fail here, not in the app's nursery
        if not isinstance(url, str) or not _URL.match(url):
            raise ValueError("a Redis URL starts with redis://, rediss:// or unix://")
        if max_tasks < 1 or not timeout > 0 or signal_limit < 1:
            raise ValueError("max_tasks and signal_limit must be at least 1, and timeout positive")
        if not 0 < retry_initial <= retry_max:
            raise ValueError("0 < retry_initial <= retry_max")
        self.url = url
        self.prefix = check_channel_prefix(prefix)
        self.index_key = f"{self.prefix}:tasks:index"
        self.max_tasks = max_tasks
        self.timeout = timeout
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.signal_limit = signal_limit
        self._keys = ClusterKeys.of(secret)
        """The cluster's key ring: signs the signals sent and the records written, verifies what is
        read."""
        self.instance_id = secrets.token_hex(8)
        self.worker_id: str | None = None
        """The worker whose signals :meth:`run` receives (the app's ``worker_id``), once it runs."""
        self._state: State = "stopped"
        self._running = False
        self._live: coredis.Redis[bytes] | None = None
        """The client :meth:`run` keeps connected, while it is (what the commands use)."""
        self._lost = trio.Event()
        """Set by a command whose connection failed: :meth:`run` then reconnects."""
        self._outage_logged = False
        self._outage_since: float | None = None
        self._malformed_logged = False
        self._forged_logged_at: float | None = None
        self._forged_records_log = RateLimitedLog(logger, burst=1, interval=MALFORMED_LOG_INTERVAL)
        self._last_error: str | None = None
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
                "connects",
                "failures",
            ),
            0,
        )

    def task_key(self, task_id: str) -> str:
        return f"{self.prefix}:task:{task_id}"

    def channel(self, worker: str) -> str:
        """The channel of ``worker``'s signals."""
        return f"{self.prefix}:tasks:worker:{check_worker_id(worker)}"

    @property
    def state(self) -> State:
        """``stopped`` (not running), ``connecting`` (the first attempt), ``connected`` (subscribed to
        this worker's channel) or ``disconnected`` (Redis unreachable: retrying)."""
        return self._state

    def statistics(self) -> dict[str, Any]:
        """Under ``task_store``: the state, tasks ``created`` here, creations refused as ``full``,
        ``malformed_records`` and ``records_forged`` (not signed by the key ring for their key) read as
        no task, commands that failed (``unavailable``), signals sent
        (``signals_sent``, and ``signals_unheard`` when no worker was subscribed), received,
        malformed and forged (not signed by the key ring), ``connects`` and ``failures`` of
        :meth:`run`, and the ``last_error``."""
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
        stored (:class:`~mcp_trio.TaskStoreFull`).  Atomic across workers."""
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
        created = await self._command("create", lambda c: c.eval(_CREATE, keys=keys, args=args))
        if created == -1:
            self._counts["full"] += 1
            raise TaskStoreFull(f"{self.max_tasks} tasks are stored")
        if created != 1:
            raise RuntimeError(f"task {record.task_id} is already stored")
        self._counts["created"] += 1

    async def get(self, task_id: str) -> TaskRecord | None:
        key = self.task_key(task_id)
        raw = await self._command("get", lambda c: _get_value(c, key))
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
            return _decode_record(data, task_id)
        except ValueError as exc:
            self._malformed(key, exc)
            return None

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
        """Replace the record of a task still stored (SET XX, its expiry kept): a task already
        forgotten stays forgotten."""
        key = self.task_key(record.task_id)
        value = self._encode(record, key)
        await self._command("put", lambda c: c.set(key, value, condition=_token("XX"), keepttl=True))

    async def delete(self, task_id: str) -> None:
        keys = [self.task_key(task_id), self.index_key]
        await self._command("delete", lambda c: c.eval(_DELETE, keys=keys, args=[task_id]))

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
        self._running = True
        self.worker_id = worker
        self._state = "connecting"
        self._outage_logged = False
        in_bus = _IN_BUS.set(True)  # coredis's tasks for this one inherit it (see _BusConnectionLogs)
        attempt = 0
        try:
            task_status.started()
            while True:
                connected = await self._connect_and_serve(manager, worker)
                self._state = "disconnected"
                attempt = 1 if connected else attempt + 1
                delay = min(self.retry_max, self.retry_initial * 2 ** (attempt - 1))
                await trio.sleep(delay * random.uniform(0.5, 1.0))
        finally:
            _IN_BUS.reset(in_bus)
            self._live = None
            self._running = False
            self._state = "stopped"

    async def _connect_and_serve(self, manager: TaskManager, worker: str | None) -> bool:
        """One connection, until it fails (never raises but cancellation); whether it got connected."""
        connected = False
        lost = self._lost = trio.Event()
        try:
            await _probe(self.url, self.timeout)
            client = self._client()
            async with client, trio.open_nursery() as nursery:
                if worker is not None:
                    await nursery.start(self._subscriber, client, manager, worker)
                else:
                    with trio.fail_after(self.timeout):
                        await client.ping()
                connected = True
                self._live = client
                self._on_connected(worker)
                await lost.wait()
                raise ConnectionError(self._last_error or "a command failed")
        except BaseException as exc:
            self._live = None
            fatal, rest = split_fatal(exc)
            if fatal is not None:
                if fatal is exc:
                    raise
                raise fatal from None
            if trio.current_effective_deadline() == -math.inf:
                logger.debug("Redis task store: error while shutting down", exc_info=rest)
                await trio.lowlevel.checkpoint()
            assert rest is not None
            self._on_failure(rest, was_connected=connected)
        return connected

    async def _subscriber(
        self,
        client: coredis.Redis[bytes],
        manager: TaskManager,
        worker: str,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        retry = _coredis().retry.NoRetryPolicy()
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
            inner = open_bus_message(self._keys, channel, data, time.time(), self.signal_limit)
            task_id, message = self._decode_signal(inner)
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

    def _decode_signal(self, data: object) -> tuple[str, dict[str, Any]]:
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, bytes):
            raise ValueError(f"a {type(data).__name__}, not a string")
        if len(data) > self.signal_limit:
            raise ValueError(f"{len(data)} bytes, over the limit of {self.signal_limit}")
        try:
            message = safejson.loads(data)
        except ValueError as exc:
            raise ValueError("not JSON") from exc
        if not isinstance(message, dict):
            raise ValueError("not a JSON object")
        task_id = message.pop("taskId", None)
        if not isinstance(task_id, str) or not task_id:
            raise ValueError("no taskId")
        return task_id, message

    # -- commands ---------------------------------------------------------------------------------

    async def _command(self, what: str, call: Callable[[coredis.Redis[bytes]], Awaitable[_T]]) -> _T:
        """``call`` on the connected client (or, while there is none, on a connection of its own),
        within ``timeout``; any failure is :class:`~mcp_trio.TaskStoreUnavailable`."""
        client = self._live
        in_store = _IN_BUS.set(True)  # what coredis logs of a connection of its own is ours to report
        try:
            with trio.fail_after(self.timeout):
                if client is not None:
                    return await call(client)
                await _probe(self.url, self.timeout)
                async with self._client() as own:
                    return await call(own)
        except BaseException as exc:
            fatal, rest = split_fatal(exc)
            if fatal is not None:
                raise
            assert rest is not None
            leaf = _leaf(rest)
            self._counts["unavailable"] += 1
            self._last_error = _describe(leaf, self.timeout)
            if client is not None and self._live is client and not isinstance(leaf, _response_error()):
                self._live = None  # the next commands connect on their own until run() is back
                self._lost.set()
            logger.debug("Redis task store: %s failed (%s)", what, self._last_error)
            raise TaskStoreUnavailable(f"Redis task store: {what} failed ({self._last_error})") from None
        finally:
            _IN_BUS.reset(in_store)

    def _client(self) -> coredis.Redis[bytes]:
        return _closing_connections(_new_client(self.url, self.timeout, self.timeout, self.instance_id))

    # -- connection state -------------------------------------------------------------------------

    def _on_connected(self, worker: str | None) -> None:
        self._state = "connected"
        self._counts["connects"] += 1
        if self._outage_logged:
            down = trio.current_time() - (self._outage_since or trio.current_time())
            logger.warning("Redis task store: connected to %s again after %.1f s", redact(self.url), down)
        else:
            where = f" ({self.channel(worker)})" if worker is not None else ""
            logger.info("Redis task store: connected to %s%s", redact(self.url), where)
        self._outage_logged = False
        self._outage_since = None

    def _on_failure(self, exc: BaseException, *, was_connected: bool) -> None:
        leaf = _leaf(exc)
        self._counts["failures"] += 1
        self._last_error = _describe(leaf, self.timeout)
        if self._outage_logged:
            logger.debug("Redis task store: still unreachable (%s)", self._last_error)
            return
        self._outage_logged = True
        self._outage_since = trio.current_time()
        what = "lost its connection to" if was_connected else "cannot reach"
        expected = isinstance(leaf, _expected_errors())
        logger.log(
            logging.WARNING if expected else logging.ERROR,
            "Redis task store %s %s (%s): tasks cannot be stored or signalled until it is back; retrying",
            what,
            redact(self.url),
            self._last_error,
            exc_info=None if expected else exc,
        )


async def _probe(url: str, seconds: float) -> None:
    """Open and close a plain connection first: a refused one raises OSError here.  (A coredis
    connection that fails to connect leaves memory streams unclosed behind it, a ResourceWarning
    each; a worker retrying while Redis is down would make one per attempt.)"""
    parts = urlsplit(url)
    try:
        with trio.fail_after(seconds):
            if parts.scheme.lower() == "unix":
                stream: trio.abc.Stream = await trio.open_unix_socket(parts.path)
            else:
                stream = await trio.open_tcp_stream(parts.hostname or "localhost", parts.port or 6379)
            await stream.aclose()
    except OSError as exc:  # trio's "all attempts failed" says less than its cause
        cause = _leaf(exc.__cause__) if exc.__cause__ is not None else exc
        raise OSError(str(cause if isinstance(cause, OSError) else exc)) from exc


def _new_client(
    url: str, connect_timeout: float, command_timeout: float, instance_id: str
) -> coredis.Redis[bytes]:
    module = _coredis()
    client: coredis.Redis[bytes] = module.Redis.from_url(
        url,
        retry_policy=module.retry.NoRetryPolicy(),
        connect_timeout=connect_timeout,
        stream_timeout=command_timeout,
        client_name=f"mcp-trio-{instance_id}",
    )
    return client


class _WrongType:
    """What :func:`_get_value` reads from a key that holds something else than a string."""


async def _get_value(client: coredis.Redis[bytes], key: str) -> object:
    try:
        return await client.get(key)
    except _coredis().exceptions.WrongTypeError:
        return _WrongType()


_CLOSING_CLASSES: dict[type, type] = {}


def _closing_connections(client: coredis.Redis[bytes]) -> coredis.Redis[bytes]:
    """``client``, whose pool makes connections that close their memory streams however they end.

    A coredis connection opens its buffers (AnyIO memory streams) when it is made, but closes them
    only once it is connected: one that fails to connect (refused, or cancelled by a timeout) leaves
    them to the garbage collector, a ResourceWarning each.  A store's commands may make a connection
    right when Redis goes away, so its pool's connections close them when they end."""
    pool = client.connection_pool
    base = pool.connection_class
    closing = _CLOSING_CLASSES.get(base)
    if closing is None:
        import anyio  # coredis's own dependency
        import anyio.streams.memory as memory

        streams = (memory.MemoryObjectSendStream, memory.MemoryObjectReceiveStream)

        async def run(self: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            try:
                await base.run(self, task_status=task_status)
            finally:
                for value in list(vars(self).values()):
                    if isinstance(value, streams):
                        value.close()

        closing = _CLOSING_CLASSES[base] = type(f"Closing{base.__name__}", (base,), {"run": run})
    pool.connection_class = closing
    return client


def _describe(error: BaseException, timeout: float) -> str:
    """A failure in a log line or ``last_error`` (a timeout of ours says what it waited for)."""
    if isinstance(error, trio.TooSlowError):
        return f"no answer within {timeout:g} s"
    return f"{type(error).__name__}: {error}"[:300]


def _token(name: str) -> Any:
    return getattr(_coredis().tokens.PureToken, name)


def _response_error() -> type[BaseException]:
    """An error Redis answered (not a lost connection)."""
    error: type[BaseException] = _coredis().exceptions.ResponseError
    return error


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _stream_id(value: bytes) -> tuple[int, int]:
    millis, _, seq = value.partition(b"-")
    try:
        return int(millis), int(seq or b"0")
    except ValueError:
        return (0, 0)


def _expected_errors() -> tuple[type[BaseException], ...]:
    """What a lost or refused connection raises (logged as a warning, without a traceback)."""
    import anyio  # coredis's own dependency

    redis_error: type[BaseException] = _coredis().exceptions.RedisError
    closed = (anyio.ClosedResourceError, anyio.BrokenResourceError)
    return (OSError, TimeoutError, trio.TooSlowError, redis_error, *closed)


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, for a short log line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
