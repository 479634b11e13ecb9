"""A 2025-era HTTP session that renews itself: when the server answers 404 for the session (a restart, a
worker gone, an idle session reaped), the client opens a new one (``initialize`` again, with the same
options; the log level and the resource subscriptions set so far applied again; the GET stream
reopened) for the calls that follow, and the requests of the old session raise
:class:`~mcp_trio.errors.SessionExpired`.  However many calls meet the 404 at once, one renewal runs;
calls made meanwhile wait for it.  The old session's tasks (its GET stream, the answers to its
requests) end."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from ..errors import MCPTrioError, SessionExpired, TransportError

if TYPE_CHECKING:
    from .core import SessionCore
    from .http import HTTPTransport

__all__ = ["Renewal"]

logger = logging.getLogger(__name__)

MIN_RENEWAL_INTERVAL = 1.0
"""Seconds from the start of one renewal to the start of the next, at least: a server that forgets every
session at once (or answers 404 to every reopening of the GET stream) cannot make the client
``initialize`` in a loop."""


@dataclass(eq=False)
class _Attempt:
    """One renewal: done once it ended, with its failure if it failed."""

    done: trio.Event = field(default_factory=trio.Event)
    failure: BaseException | None = None


class Renewal:
    """The standalone GET stream of a 2025-era HTTP session, and the session's renewal after a 404
    (``enabled``: ``renew_on_expiry``; without it, a 404 only raises :class:`SessionExpired`)."""

    def __init__(
        self,
        session: SessionCore,
        transport: HTTPTransport,
        *,
        version: str,
        enabled: bool,
        get_stream: bool,
        get_stream_wait: float,
    ) -> None:
        self._session = session
        self._transport = transport
        self._version = version
        self.enabled = enabled
        self._get_stream = get_stream
        self._get_stream_wait = get_stream_wait
        self._scopes: set[trio.CancelScope] = set()  # the current session's tasks
        self._expired: str | None = None  # the session id the server answered 404 for, not yet replaced
        self._attempt: _Attempt | None = None  # the latest renewal
        self._task: trio.lowlevel.Task | None = None  # the renewal running: its messages are not held
        self.renewals = 0
        self._last = -math.inf  # when the latest renewal started

    @contextmanager
    def owned(self) -> Iterator[None]:
        """Run the block as a task of the current session: it is cancelled if the session is replaced."""
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)

    async def open_get_stream(self) -> None:
        """Start the current session's GET stream (in the session's nursery) and wait, at most
        ``get_stream_wait`` seconds, for its first answer."""
        if not self._get_stream:
            return
        ready = trio.Event()
        self._session._nursery.start_soon(self._listen, ready)
        with trio.move_on_after(self._get_stream_wait):
            await ready.wait()

    async def _listen(self, ready: trio.Event) -> None:
        with self.owned():
            try:
                await self._transport.listen_get(self._session._dispatch, ready)
            except SessionExpired as exc:
                self.expired(exc.session_id)

    def expired(self, session_id: str | None) -> None:
        """The server answered 404 for ``session_id``: if that is the current session, renew it (once,
        however many calls saw the 404)."""
        if (
            not self.enabled
            or session_id is None
            or session_id != self._transport.session_id
            or session_id == self._expired
            or self._session._closing
        ):
            return
        self._expired = session_id
        self._start()

    def _start(self) -> None:
        attempt = _Attempt()
        self._attempt = attempt
        self._session._nursery.start_soon(self._renew, attempt)

    async def ready(self) -> None:
        """Wait until the session can take a message: a renewal running is waited for, one needed (the
        last one failed) is started.  Raises :class:`TransportError` if the renewal this call waited
        for failed, or if the session ended meanwhile.  Returns with no checkpoint after its last
        check, so the message is sent with the session id it saw."""
        if trio.lowlevel.current_task() is self._task:
            return  # the renewal's own messages (initialize, ...)
        waited: _Attempt | None = None
        while True:
            if self._session._closing:
                raise TransportError("the session ended while it was being renewed")
            attempt = self._attempt
            if attempt is not None and not attempt.done.is_set():
                await attempt.done.wait()
                waited = attempt
                continue
            if self._expired is None:
                return
            if waited is not None and waited.failure is not None:
                raise TransportError(
                    f"session {self._expired} expired, and opening a new one failed: {waited.failure}"
                ) from waited.failure
            self._start()  # the last renewal failed (before this call): try again

    async def _renew(self, attempt: _Attempt) -> None:
        """Replace the expired session: its tasks end, a new ``initialize`` (which sets the log level
        again), the resource subscriptions again, and the new session's GET stream."""
        session, transport = self._session, self._transport
        self._task = trio.lowlevel.current_task()
        old = self._expired
        try:
            for scope in self._scopes:
                scope.cancel()
            transport.session_id = None
            session._set_era(None)
            await trio.sleep_until(self._last + MIN_RENEWAL_INTERVAL)
            self._last = trio.current_time()
            await session._initialize(self._version)
            for uri in sorted(session._subscribed):
                try:
                    await session.request("resources/subscribe", {"uri": uri})
                except MCPTrioError as exc:
                    session._subscribed.discard(uri)
                    logger.warning("resource %s could not be subscribed to again: %s", uri, exc)
            self._expired = None
            self._task = None
            await self.open_get_stream()
            self.renewals += 1
            logger.info("session %s expired; the client renewed it as %s", old, transport.session_id)
        except Exception as exc:
            attempt.failure = exc
            if isinstance(exc, MCPTrioError):
                logger.warning("session %s expired, and opening a new one failed: %s", old, exc)
            else:  # a bug of ours: with its traceback
                logger.exception("session %s expired, and opening a new one failed", old)
        finally:
            if self._task is trio.lowlevel.current_task():
                self._task = None
            if attempt.failure is None and self._expired is not None:  # cancelled halfway
                attempt.failure = TransportError("the renewal of the session was cancelled")
            attempt.done.set()
