"""Session state and stream bookkeeping of the 2025-era transport, as data (sans-IO)."""

from __future__ import annotations

import enum
import secrets

from .._exceptions import LocalProtocolError

__all__ = [
    "SessionEvent",
    "SessionState",
    "make_event_id",
    "new_session_id",
    "parse_event_id",
    "transition",
]


class SessionState(enum.Enum):
    INITIALIZING = "initializing"
    """``initialize`` was answered; waiting for ``notifications/initialized``."""
    ACTIVE = "active"
    CLOSED = "closed"


class SessionEvent(enum.Enum):
    INITIALIZED = "initialized"
    CLOSE = "close"


# Rule 1 (as in h11): every state change is a row of this table, nothing else changes state.
_TRANSITIONS: dict[tuple[SessionState, SessionEvent], SessionState] = {
    (SessionState.INITIALIZING, SessionEvent.INITIALIZED): SessionState.ACTIVE,
    (SessionState.ACTIVE, SessionEvent.INITIALIZED): SessionState.ACTIVE,
    (SessionState.INITIALIZING, SessionEvent.CLOSE): SessionState.CLOSED,
    (SessionState.ACTIVE, SessionEvent.CLOSE): SessionState.CLOSED,
    (SessionState.CLOSED, SessionEvent.INITIALIZED): SessionState.CLOSED,
    (SessionState.CLOSED, SessionEvent.CLOSE): SessionState.CLOSED,
}


def transition(state: SessionState, event: SessionEvent) -> SessionState:
    try:
        return _TRANSITIONS[state, event]
    except KeyError:
        raise LocalProtocolError(f"session cannot go from {state.value} on {event.value}") from None


def new_session_id() -> str:
    """A cryptographically random session id of visible ASCII (URL-safe base64, 256 bits)."""
    return secrets.token_urlsafe(32)


def make_event_id(stream_id: int, seq: int) -> str:
    """Event ids encode their stream, so ``Last-Event-ID`` names the stream to resume."""
    return f"{stream_id}-{seq}"


def parse_event_id(event_id: str) -> tuple[int, int] | None:
    stream, sep, seq = event_id.partition("-")
    if not sep or not stream.isdigit() or not seq.isdigit() or len(event_id) > 40:
        return None
    return int(stream), int(seq)
