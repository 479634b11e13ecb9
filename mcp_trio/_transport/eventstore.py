"""Event stores: where SSE events wait so a client can resume a stream with ``Last-Event-ID``."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

__all__ = ["EventStore", "InMemoryEventStore", "StoredEvent"]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    stream_id: int
    seq: int
    data: bytes
    """The JSON-RPC message, serialized."""


class EventStore(Protocol):
    """The pluggable store.  Keys are ``(session_id, stream_id)``: no lookup can cross sessions.

    Methods are async so an implementation may use the network; the in-memory one never blocks.
    """

    async def store(self, session_id: str, event: StoredEvent) -> None: ...

    async def replay_after(self, session_id: str, stream_id: int, seq: int) -> list[StoredEvent]:
        """Events of that stream with a larger ``seq``, oldest first."""
        ...

    async def forget_session(self, session_id: str) -> None: ...


_MIB = 1024 * 1024
_GET_STREAM = 0
"""The standalone GET stream's id (its events are not tied to a request)."""


class _Session:
    """What the in-memory store keeps of one session."""

    __slots__ = ("bytes", "streams")

    def __init__(self) -> None:
        self.streams: dict[int, list[StoredEvent]] = {}
        """Each stream's kept events, oldest first; the least recently written stream first.  Plain
        ``dict`` and ``list``, not ``OrderedDict`` and ``deque``: far smaller for an idle session (see
        docs/performance.md), and the bounds keep both small, so moving a stream to the end and
        dropping a list's first event are cheap."""
        self.bytes = 0
        """The size of the data of every kept event."""


class InMemoryEventStore:
    """A bounded in-memory store.  Each bound drops the oldest first, so what is kept of a stream is its
    newest events (less any event too large to keep):

    - ``max_events_per_stream`` (100): the newest events of each stream;
    - ``max_streams_per_session`` (32): the most recently written streams of a session; writing a new
      stream beyond it drops the session's least recently written stream, except stream 0 (the standalone
      GET stream: it lives as long as the session and carries whatever is not tied to a request, while
      a POST stream is finished once its response is written), which the byte bound trims instead;
    - ``max_bytes_per_session`` (16 MiB of event data): beyond it the oldest events of the session's least
      recently written streams (stream 0 included) are dropped until it fits; a single event larger than
      the bound is not stored at all (a client that resumes its stream misses it);
    - ``max_sessions`` (10 000): the least recently written session is dropped first;
    - ``max_bytes`` (128 MiB of event data, for the whole store: every session of the process): beyond
      it the idle streams go first.  A stream is idle from its last stored event, and a session from
      the last event stored for any of its streams; the store drops whole streams of the session idle
      the longest (its least recently written stream first, stream 0 included), then of the next one,
      until the store fits.  The session being written loses only its own oldest events, and only when
      it is the one session left.  An event larger than ``max_bytes`` by itself is not stored.

    Whatever a bound dropped, a client resuming that stream gets what is left of it (possibly nothing):
    every bound gives the same answer.  Storing an event costs O(1) amortized, and so do
    :meth:`statistics`: counts are kept as events come and go.
    """

    def __init__(
        self,
        *,
        max_events_per_stream: int = 100,
        max_streams_per_session: int = 32,
        max_bytes_per_session: int = 16 * _MIB,
        max_sessions: int = 10_000,
        max_bytes: int = 128 * _MIB,
    ) -> None:
        for name, value in (
            ("max_events_per_stream", max_events_per_stream),
            ("max_streams_per_session", max_streams_per_session),
            ("max_bytes_per_session", max_bytes_per_session),
            ("max_sessions", max_sessions),
            ("max_bytes", max_bytes),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self._per_stream = max_events_per_stream
        self._max_streams = max_streams_per_session
        self._max_bytes = max_bytes_per_session
        self._max_sessions = max_sessions
        self._max_total = max_bytes
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        """Least recently written first."""
        self._bytes = 0
        self._events = 0
        self._streams = 0
        self._evicted_streams = 0
        self._evicted_bytes = 0

    @property
    def max_bytes(self) -> int:
        """The bound on the event data of the whole store."""
        return self._max_total

    async def store(self, session_id: str, event: StoredEvent) -> None:
        self.store_nowait(session_id, event)

    def store_nowait(self, session_id: str, event: StoredEvent) -> None:
        """Keep ``event``, then drop what the bounds no longer allow (never ``event`` itself, unless
        it alone is larger than ``max_bytes_per_session`` or ``max_bytes``: then it is not kept)."""
        size = len(event.data)
        if size > self._max_bytes or size > self._max_total:
            return
        session = self._session(session_id)
        events = self._stream(session, event.stream_id)
        if len(events) >= self._per_stream:
            self._dropped(session, len(events.pop(0).data))
        events.append(event)
        session.bytes += size
        self._bytes += size
        self._events += 1
        while session.bytes > self._max_bytes:
            self._trim_oldest(session)
        while self._bytes > self._max_total:
            self._evict(session)

    def _dropped(self, session: _Session, size: int, events: int = 1) -> None:
        session.bytes -= size
        self._bytes -= size
        self._events -= events

    def _session(self, session_id: str) -> _Session:
        """The session's record, now the most recently written (the least recent one goes if too many)."""
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session()
            while len(self._sessions) > self._max_sessions:
                self._forget(self._sessions.popitem(last=False)[1])
        else:
            self._sessions.move_to_end(session_id)
        return session

    def _forget(self, session: _Session) -> None:
        """Count out a session's record (removed from ``_sessions`` by the caller)."""
        self._bytes -= session.bytes
        self._events -= sum(len(events) for events in session.streams.values())
        self._streams -= len(session.streams)

    def _stream(self, session: _Session, stream_id: int) -> list[StoredEvent]:
        """The stream's events, now the most recently written (the least recent one goes if too many)."""
        streams = session.streams
        events = streams.pop(stream_id, None)
        if events is None:
            events = streams[stream_id] = []
            self._streams += 1
            if len(streams) > self._max_streams:
                self._drop_stream(session, keep=stream_id)
        else:
            streams[stream_id] = events  # moved to the end
        return events

    def _drop_stream(self, session: _Session, *, keep: int) -> None:
        """Drop the least recently written stream other than stream 0 and ``keep`` (stream 0 only if it
        is the one other stream, which takes ``max_streams_per_session=1``)."""
        victim = next((s for s in session.streams if s not in (_GET_STREAM, keep)), _GET_STREAM)
        self._remove_stream(session, victim)

    def _remove_stream(self, session: _Session, stream_id: int) -> int:
        """Drop a whole stream; the bytes it held."""
        events = session.streams.pop(stream_id)
        size = sum(len(e.data) for e in events)
        self._dropped(session, size, len(events))
        self._streams -= 1
        return size

    def _trim_oldest(self, session: _Session) -> None:
        """Drop the oldest event of the least recently written stream (and the stream, if emptied)."""
        stream_id, events = next(iter(session.streams.items()))
        self._dropped(session, len(events.pop(0).data))
        if not events:
            del session.streams[stream_id]
            self._streams -= 1

    def _evict(self, writing: _Session) -> None:
        """One step of the process-wide bound: the least recently written stream of the session idle the
        longest goes (its record too, once empty); ``writing`` (the most recently written session) is
        reached only when it is the one left, and then loses its oldest event instead."""
        session_id, session = next(iter(self._sessions.items()))
        if not session.streams:  # a record with nothing left (never made so, but never kept)
            del self._sessions[session_id]
            return
        if session is writing:
            self._evicted_bytes += len(next(iter(session.streams.values()))[0].data)
            self._trim_oldest(session)
            return
        self._evicted_bytes += self._remove_stream(session, next(iter(session.streams)))
        self._evicted_streams += 1
        if not session.streams:
            del self._sessions[session_id]

    async def replay_after(self, session_id: str, stream_id: int, seq: int) -> list[StoredEvent]:
        session = self._sessions.get(session_id)
        events = session.streams.get(stream_id, ()) if session is not None else ()
        return [e for e in events if e.seq > seq]

    def holds(self, session_id: str) -> bool:
        """Whether the store keeps events of ``session_id``."""
        return session_id in self._sessions

    def last_seqs(self, session_id: str) -> dict[int, int]:
        """Each stream of ``session_id`` that the store keeps events of -> the largest seq kept."""
        session = self._sessions.get(session_id)
        if session is None:
            return {}
        return {
            stream_id: max(e.seq for e in events) for stream_id, events in session.streams.items() if events
        }

    async def forget_session(self, session_id: str) -> None:
        self.forget_session_nowait(session_id)

    def forget_stream_nowait(self, session_id: str, stream_id: int) -> None:
        """Drop one stream's events (a session's ``initialize`` answer once the client said
        ``notifications/initialized``), and the session's record if nothing is left in it."""
        session = self._sessions.get(session_id)
        if session is None or stream_id not in session.streams:
            return
        self._remove_stream(session, stream_id)
        if not session.streams:
            del self._sessions[session_id]

    def forget_session_nowait(self, session_id: str) -> None:
        """:meth:`forget_session` without an await (what a closing session calls when its store's
        ``forget_session`` is this class's own)."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._forget(session)

    def statistics(self) -> dict[str, int]:
        """Sessions, streams and events kept and the bytes of event data they hold (``bytes``), the
        bound on those (``max_bytes``), and what that bound dropped so far (``evicted_streams``, whole
        streams of idle sessions, and ``evicted_bytes``).  O(1): counts are kept as events come and go."""
        return {
            "sessions": len(self._sessions),
            "streams": self._streams,
            "events": self._events,
            "bytes": self._bytes,
            "max_bytes": self._max_total,
            "evicted_streams": self._evicted_streams,
            "evicted_bytes": self._evicted_bytes,
        }
