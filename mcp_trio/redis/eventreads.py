"""The reads of :class:`~mcp_trio.redis.RedisEventStore`: a stream's entries and a session's positions,
each entry checked against the cluster's key ring."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._protocol.cluster import (
    EVENT_ENTRY_HEADER,
    EVENT_SEQ_LIMIT,
    SESSION_TAG,
    ClusterKeys,
    ForgedMessage,
    events_key,
    open_event_entry,
)
from .._runtime.peerlog import RateLimitedLog
from .._transport.eventstore import StoredEvent
from .connection import CallFailed, State, logger
from .eventscripts import POSITIONS, REPLAY

if TYPE_CHECKING:
    import coredis

__all__ = ["UNAVAILABLE", "EventReads", "Unavailable"]


_T = TypeVar("_T")


class Unavailable:
    """What a read returns when Redis could not answer."""


UNAVAILABLE = Unavailable()


class EventReads:
    """The reads of a :class:`~mcp_trio.redis.RedisEventStore` (this part of it)."""

    # What the store provides:
    url: str
    prefix: str
    timeout: float
    max_events_per_stream: int
    max_streams_per_session: int
    max_bytes_per_session: int
    _keys: ClusterKeys
    _live: coredis.Redis[bytes] | None
    _state: State
    _last_error: str | None
    _counts: dict[str, int]
    _forged_log: RateLimitedLog

    if TYPE_CHECKING:  # RedisLink's (a stub here would come first in the store's bases)

        async def _call(self, call: Callable[[coredis.Redis[bytes]], Awaitable[_T]]) -> _T: ...

    def _session_keys(self, session_id: str) -> list[str]:
        """The session's key under each key of the ring, the current key's first."""
        return [events_key(self.prefix, tag) for tag in self._keys.tags(SESSION_TAG, session_id.encode())]

    async def _read_stream(self, session_id: str, stream_id: int) -> list[StoredEvent] | None:
        keys = self._session_keys(session_id)
        args = [
            str(stream_id),
            str(self.max_events_per_stream),
            str(EVENT_ENTRY_HEADER + self.max_bytes_per_session),
        ]
        reply = await self._read("replay", lambda c: c.eval(REPLAY, keys=keys, args=args))
        if isinstance(reply, Unavailable):
            return None
        key, values = self._chosen(keys, reply)
        events = []
        for value in values:
            opened = self._open(key, stream_id, value)
            if opened is not None:
                events.append(StoredEvent(stream_id, *opened))
        return events

    async def _read_positions(self, session_id: str) -> dict[int, int] | None:
        keys = self._session_keys(session_id)
        limit = EVENT_ENTRY_HEADER + self.max_bytes_per_session
        args = [str(self.max_events_per_stream), str(self.max_streams_per_session), str(limit)]
        reply = await self._read("positions", lambda c: c.eval(POSITIONS, keys=keys, args=args))
        if isinstance(reply, Unavailable):
            return None
        key, values = self._chosen(keys, reply)
        found: dict[int, int] = {}
        for raw_id, value in zip(values[::2], values[1::2], strict=False):
            raw = raw_id.encode() if isinstance(raw_id, str) else raw_id
            if not isinstance(raw, bytes) or not raw.isdigit() or len(raw) > 16:
                continue
            stream_id = int(raw)
            if not 0 <= stream_id < EVENT_SEQ_LIMIT:
                continue
            opened = self._open(key, stream_id, value)
            if opened is not None:
                found[stream_id] = max(opened[0], found.get(stream_id, -1))
        return found

    def _chosen(self, keys: list[str], reply: object) -> tuple[str, list[object]]:
        """The key a read script chose and the values it returned (none for a reply of another shape)."""
        if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
            return "", []
        index = reply[0]
        if not 1 <= index <= len(keys):
            return "", []
        return keys[index - 1], reply[1:]

    def _open(self, key: str, stream_id: int, value: object) -> tuple[int, bytes] | None:
        try:
            return open_event_entry(self._keys, key, stream_id, value)
        except ForgedMessage as exc:
            self._counts["forged"] += 1
            self._forged_log.log(
                logging.WARNING,
                "Redis event store: dropped an entry of %s, stream %d, not signed by the key ring for it "
                "(%s; %d so far)",
                key[:300],
                stream_id,
                exc,
                self._counts["forged"],
            )
            return None

    async def _read(self, what: str, call: Callable[[coredis.Redis[bytes]], Awaitable[Any]]) -> Any:
        """``call`` through the store's ``_call`` (the writer's client, or while :meth:`run` is not
        running or not yet connected a connection of its own, within ``timeout``); :data:`UNAVAILABLE`
        on any failure, and at once while the writer retries (Redis is down)."""
        if self._live is None and self._state == "disconnected":
            self._counts["unavailable"] += 1  # the writer is retrying: Redis is down
            return UNAVAILABLE
        try:
            return await self._call(call)
        except CallFailed:
            logger.debug("Redis event store: %s failed (%s)", what, self._last_error)
            return UNAVAILABLE
