"""Event stores: where SSE events wait so a client can resume a stream with ``Last-Event-ID``."""

from __future__ import annotations

from collections import OrderedDict, deque
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


class InMemoryEventStore:
    """A bounded in-memory store: the newest ``max_events_per_stream`` events of each stream, for at most
    ``max_sessions`` sessions (the least recently written session is dropped first)."""

    def __init__(self, *, max_events_per_stream: int = 100, max_sessions: int = 10_000) -> None:
        self._per_stream = max_events_per_stream
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, dict[int, deque[StoredEvent]]] = OrderedDict()

    async def store(self, session_id: str, event: StoredEvent) -> None:
        self.store_nowait(session_id, event)

    def store_nowait(self, session_id: str, event: StoredEvent) -> None:
        streams = self._sessions.get(session_id)
        if streams is None:
            streams = self._sessions[session_id] = {}
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        events = streams.get(event.stream_id)
        if events is None:
            events = streams[event.stream_id] = deque(maxlen=self._per_stream)
        events.append(event)

    async def replay_after(self, session_id: str, stream_id: int, seq: int) -> list[StoredEvent]:
        events = self._sessions.get(session_id, {}).get(stream_id, ())
        return [e for e in events if e.seq > seq]

    async def forget_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def statistics(self) -> dict[str, int]:
        streams = sum(len(s) for s in self._sessions.values())
        events = sum(len(e) for s in self._sessions.values() for e in s.values())
        return {"sessions": len(self._sessions), "streams": streams, "events": events}
