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
        ``dict`` and ``list``: an idle session's one stream costs about 150 bytes, where an
        ``OrderedDict`` and a ``deque`` took over 1 KiB (the bounds keep both small, so moving a
        stream to the end and dropping a list's first event are cheap)."""
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
    - ``max_sessions`` (10 000): the least recently written session is dropped first.

    Storing an event costs O(1) amortized: byte counts are kept as events come and go.
    """

    def __init__(
        self,
        *,
        max_events_per_stream: int = 100,
        max_streams_per_session: int = 32,
        max_bytes_per_session: int = 16 * _MIB,
        max_sessions: int = 10_000,
    ) -> None:
        for name, value in (
            ("max_events_per_stream", max_events_per_stream),
            ("max_streams_per_session", max_streams_per_session),
            ("max_bytes_per_session", max_bytes_per_session),
            ("max_sessions", max_sessions),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self._per_stream = max_events_per_stream
        self._max_streams = max_streams_per_session
        self._max_bytes = max_bytes_per_session
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    async def store(self, session_id: str, event: StoredEvent) -> None:
        self.store_nowait(session_id, event)

    def store_nowait(self, session_id: str, event: StoredEvent) -> None:
        """Keep ``event``, then drop what the bounds no longer allow (never ``event`` itself, unless
        it alone is larger than ``max_bytes_per_session``: then it is not kept)."""
        size = len(event.data)
        if size > self._max_bytes:
            return
        session = self._session(session_id)
        events = self._stream(session, event.stream_id)
        if len(events) >= self._per_stream:
            session.bytes -= len(events.pop(0).data)
        events.append(event)
        session.bytes += size
        while session.bytes > self._max_bytes:
            self._trim_oldest(session)

    def _session(self, session_id: str) -> _Session:
        """The session's record, now the most recently written (the least recent one goes if too many)."""
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session()
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        return session

    def _stream(self, session: _Session, stream_id: int) -> list[StoredEvent]:
        """The stream's events, now the most recently written (the least recent one goes if too many)."""
        streams = session.streams
        events = streams.pop(stream_id, None)
        if events is None:
            events = streams[stream_id] = []
            if len(streams) > self._max_streams:
                self._drop_stream(session, keep=stream_id)
        else:
            streams[stream_id] = events  # moved to the end
        return events

    def _drop_stream(self, session: _Session, *, keep: int) -> None:
        """Drop the least recently written stream other than stream 0 and ``keep`` (stream 0 only if it
        is the one other stream, which takes ``max_streams_per_session=1``)."""
        victim = next((s for s in session.streams if s not in (_GET_STREAM, keep)), _GET_STREAM)
        session.bytes -= sum(len(e.data) for e in session.streams.pop(victim))

    def _trim_oldest(self, session: _Session) -> None:
        """Drop the oldest event of the least recently written stream (and the stream, if emptied)."""
        stream_id, events = next(iter(session.streams.items()))
        session.bytes -= len(events.pop(0).data)
        if not events:
            del session.streams[stream_id]

    async def replay_after(self, session_id: str, stream_id: int, seq: int) -> list[StoredEvent]:
        session = self._sessions.get(session_id)
        events = session.streams.get(stream_id, ()) if session is not None else ()
        return [e for e in events if e.seq > seq]

    async def forget_session(self, session_id: str) -> None:
        self.forget_session_nowait(session_id)

    def forget_session_nowait(self, session_id: str) -> None:
        """:meth:`forget_session` without an await (what a closing session calls when its store's
        ``forget_session`` is this class's own)."""
        self._sessions.pop(session_id, None)

    def statistics(self) -> dict[str, int]:
        """Sessions, streams and events kept, and the bytes of event data they hold."""
        sessions = self._sessions.values()
        return {
            "sessions": len(self._sessions),
            "streams": sum(len(s.streams) for s in sessions),
            "events": sum(len(e) for s in sessions for e in s.streams.values()),
            "bytes": sum(s.bytes for s in sessions),
        }
