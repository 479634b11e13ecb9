"""Where a server finds its live 2025 sessions by id: :class:`SessionRegistry`, and the default,
:class:`LocalSessionRegistry`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .session import Session

__all__ = ["LocalSessionRegistry", "SessionRegistry"]


class SessionRegistry(Protocol):
    """Where a server finds its live 2025 sessions by id (``session.session_id``).  The default keeps
    them in this process; a
    deployment across workers can also record, say, which worker owns which id.  Sessions are added when
    their ``initialize`` is answered and removed (in a ``finally``) when they end."""

    def add(self, session: Session) -> None: ...

    def get(self, session_id: str) -> Session | None: ...

    def remove(self, session: Session) -> None:
        """Forget ``session`` (only if it is the one registered under its id)."""
        ...

    def __contains__(self, session_id: object) -> bool: ...

    def __iter__(self) -> Iterator[Session]: ...

    def __len__(self) -> int: ...


class LocalSessionRegistry:
    """The sessions of this process, in a dict."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def add(self, session: Session) -> None:
        self._sessions[session.session_id] = session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def remove(self, session: Session) -> None:
        if self._sessions.get(session.session_id) is session:
            del self._sessions[session.session_id]

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)
