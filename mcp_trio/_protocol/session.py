"""Session state and stream bookkeeping of the 2025-era transport, as data (sans-IO)."""

from __future__ import annotations

import re
import secrets

from .table import StateEnum, TransitionTable

__all__ = [
    "SessionEvent",
    "SessionState",
    "make_event_id",
    "new_session_id",
    "parse_event_id",
    "transition",
]


class SessionState(StateEnum):
    INITIALIZING = "initializing"
    """``initialize`` was answered; waiting for ``notifications/initialized``."""
    ACTIVE = "active"
    CLOSED = "closed"


class SessionEvent(StateEnum):
    INITIALIZED = "initialized"
    CLOSE = "close"


transition = TransitionTable[SessionState, SessionEvent](
    "session",
    {
        (SessionState.INITIALIZING, SessionEvent.INITIALIZED): SessionState.ACTIVE,
        (SessionState.ACTIVE, SessionEvent.INITIALIZED): SessionState.ACTIVE,
        (SessionState.INITIALIZING, SessionEvent.CLOSE): SessionState.CLOSED,
        (SessionState.ACTIVE, SessionEvent.CLOSE): SessionState.CLOSED,
        (SessionState.CLOSED, SessionEvent.INITIALIZED): SessionState.CLOSED,
        (SessionState.CLOSED, SessionEvent.CLOSE): SessionState.CLOSED,
    },
)
"""The session's state after an event (every state change is a row of this table)."""


def new_session_id() -> str:
    """A cryptographically random session id of visible ASCII (URL-safe base64, 256 bits)."""
    return secrets.token_urlsafe(32)


def make_event_id(stream_id: int, seq: int) -> str:
    """Event ids encode their stream, so ``Last-Event-ID`` names the stream to resume."""
    return f"{stream_id}-{seq}"


_EVENT_ID = re.compile(r"([0-9]+)-([0-9]+)")


def parse_event_id(event_id: str) -> tuple[int, int] | None:
    """``(stream, seq)`` of an event id made by :func:`make_event_id`; None for anything else (ASCII
    digits only, at most 40 characters)."""
    found = _EVENT_ID.fullmatch(event_id) if len(event_id) <= 40 else None
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2))
