"""Requests in flight, and what the shutdown rule does with them (docs/transport.md, "Shutdown").

A 2025 session's requests (by id) and the 2026 endpoint's (by answer) are each kept in an
:class:`InFlight`: the cancel scope each handler runs under.  When the server stops (or a session is
handed over to another worker), :meth:`InFlight.settle` lets them finish within the grace, then
cancels those still running; the task that ran each of those answers it -32000 ``Server shutting
down`` (it asks :meth:`InFlight.halted`), on the request's own stream.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, cast

import mcp_types as mt
import trio

from .._protocol.admission import shutdown_answer
from .config import LAST_WORDS

__all__ = ["InFlight"]

K = TypeVar("K", bound=Hashable)


class InFlight(dict[K, trio.CancelScope], Generic[K]):
    """The cancel scope of each request in flight, by key.  A dict (two slots more): a session keeps
    one whether or not it ever stops."""

    __slots__ = ("_halted", "_quiet")

    def __init__(self) -> None:
        super().__init__()
        self._halted: set[K] | None = None
        """The requests :meth:`settle` cancelled (each is answered -32000)."""
        self._quiet: trio.Event | None = None
        """While :meth:`settle` waits: set when the last request in flight ends."""

    def ended(self, key: K) -> None:
        """The request's handler is done (the caller routes its answer next, before any checkpoint)."""
        del self[key]
        if self._quiet is not None and not self:
            self._quiet.set()

    def halted(self, key: K) -> bool:
        """Whether :meth:`settle` cancelled the request (then it is answered -32000); true once."""
        halted = self._halted
        if halted is None or key not in halted:
            return False
        halted.discard(key)
        return True

    def last_words(self, key: K) -> dict[str, Any] | None:
        """The answer of a request (of an :class:`InFlight` keyed by request id) that :meth:`settle`
        cancelled: -32000 ``Server shutting down``; None for one its client cancelled (no answer)."""
        return shutdown_answer(cast("mt.RequestId", key)) if self.halted(key) else None

    async def settle(
        self,
        grace: float,
        busy: Callable[[], bool] | None = None,
        spare: Callable[[K], bool] | None = None,
    ) -> None:
        """Let the requests in flight finish (``busy``: until it says none is left, by default until
        this is empty) for up to ``grace`` seconds; then cancel those still running, each to be
        answered -32000 (not one the client cancelled already, nor one ``spare`` spares: an answer on
        its way), and wait up to :data:`~.config.LAST_WORDS` for them.  The caller has stopped new
        requests."""
        busy = busy or (lambda: bool(self))
        with trio.move_on_after(grace):
            await self._until_quiet(busy)
        if not self:
            return
        halted = self._halted = self._halted or set()
        for key, scope in self.items():
            if not scope.cancel_called and (spare is None or not spare(key)):
                halted.add(key)
                scope.cancel()
        with trio.move_on_after(LAST_WORDS):
            await self._until_quiet(busy)

    async def _until_quiet(self, busy: Callable[[], bool]) -> None:
        try:
            while busy():
                quiet = self._quiet = trio.Event()
                await quiet.wait()
        finally:
            self._quiet = None
