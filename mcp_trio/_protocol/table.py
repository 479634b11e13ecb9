"""A state machine's transition table (Rule 1, as in h11): every state change is a row, nothing else
changes state, and a change that is not a row is our bug."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Generic, TypeVar

from ..errors import LocalProtocolError

__all__ = ["StateEnum", "TransitionTable"]

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


class StateEnum(enum.Enum):
    """An enum of states or events: members hash by identity (they are singletons), in C.
    ``enum.Enum`` hashes by name in Python code, which a table lookup on every send paid for."""

    __hash__ = object.__hash__


class TransitionTable(Generic[S, E]):
    """Call it with ``(state, event)`` for the next state; :class:`LocalProtocolError` if not allowed."""

    __slots__ = ("_rows", "_what")

    def __init__(self, what: str, rows: Mapping[tuple[S, E], S]) -> None:
        self._what = what
        self._rows = dict(rows)

    def __call__(self, state: S, event: E) -> S:
        try:
            return self._rows[state, event]
        except KeyError:
            raise LocalProtocolError(f"{self._what} cannot {event.value} when {state.value}") from None
