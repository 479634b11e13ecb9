"""The session registry and the nursery that owns every session."""

from __future__ import annotations

import heapq
import logging
import re
from collections.abc import Awaitable, Callable
from math import inf
from typing import Any

import trio

from .._protocol.custody import ENDING, Custody
from .._protocol.session import END, Outgoing
from .._protocol.versions import Revision
from .._runtime.containment import contained
from ..errors import SessionError
from .config import LAST_WORDS, ServerConfig
from .core import ServerCore
from .eventstore import InMemoryEventStore
from .peer import SessionPeer
from .queues import KeepAliveClock
from .quotas import Quotas
from .registry import SessionRegistry
from .session import Session
from .streams import Stream

__all__ = ["SessionManager"]

_VALID_ID = re.compile(r"[\x21-\x7e]{1,256}")
"""A usable session id: visible ASCII (what clients may send back), not absurdly long."""

logger = logging.getLogger(__name__)


class SessionManager:
    """Owns the sessions of one app: each runs as a task of the manager's nursery (see :meth:`run`)."""

    def __init__(self, server: ServerCore, config: ServerConfig) -> None:
        self.server = server
        self.config = config
        factory = config.event_store_factory
        self.event_store = (
            InMemoryEventStore(max_bytes=config.max_event_store_bytes)
            if factory is InMemoryEventStore
            else factory()
        )
        self.quotas = Quotas(config.max_sessions_per_principal, config.max_sessions_per_address)
        """Live sessions per principal and per client address (WebSocket connections count too)."""
        self._sessions: SessionRegistry = config.session_registry_factory()
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self.started = False
        """Whether :meth:`run` has ever started (an app never started is not one shutting down)."""
        self.sessions_created = 0
        self.refusing = False
        """Draining: no new session is made here (``initialize`` gets 503); adoption is refused too."""
        self._deferred: dict[Stream, tuple[float, Session]] = {}
        self._starter_parked: trio.Event | None = None
        self._expiries: list[list[Any]] = []
        """The expiry clock's heap of ``[deadline, order, session]`` (``session`` None once it ended)."""
        self._expiry_order = 0
        self._expiries_ended = 0
        self._expiry_sleep: trio.CancelScope | None = None
        self.keepalives = KeepAliveClock(config.keepalive_interval)
        """The one clock of every session's SSE writers: a comment on a connection silent that long."""
        self.on_forget: Callable[[Session], None] | None = None
        """Called with each session removed from the registry (the app's worker link uses it)."""
        self.on_change: Callable[[SessionPeer], None] | None = None
        """Given to each session as its ``on_change`` (the app's worker link keeps its record)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; sessions live inside.  On the way out every session is closed."""
        self._closing = False
        self.started = True
        try:
            async with trio.open_nursery() as outer:
                outer.start_soon(self._start_deferred_writers, name="mcp deferred SSE starts")
                outer.start_soon(self._expire_sessions, name="mcp session expiry")
                outer.start_soon(self.keepalives.run, name="mcp SSE keep-alives")
                async with trio.open_nursery() as nursery:  # the sessions' own
                    self._nursery = nursery
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            self._nursery = None
            self._closing = True
            self._deferred.clear()
            self._expiries.clear()
            self._expiries_ended = 0

    # -- deferred SSE starts -------------------------------------------------------------------

    def defer(self, session: Session, stream: Stream) -> None:
        """Start the writer of ``stream`` in ``sse_start_delay`` unless it has started by then."""
        if self._starter_parked is not None:  # it parks only when nothing is deferred
            self._starter_parked.set()
        self._deferred[stream] = (trio.current_time() + self.config.sse_start_delay, session)

    def undefer(self, stream: Stream) -> None:
        self._deferred.pop(stream, None)

    async def _start_deferred_writers(self) -> None:
        """One timer for every deferred stream of every session (a timer per request would cost as
        much as the writer task it saves).  It parks when no stream has been deferred for a while."""
        idle_ticks = 0
        while True:
            if self._deferred:
                idle_ticks = 0
                deadline, _ = next(iter(self._deferred.values()))  # insertion order is deadline order
                await trio.sleep_until(deadline)
                now = trio.current_time()
                for stream, (due, session) in list(self._deferred.items()):
                    if due > now:
                        break
                    del self._deferred[stream]
                    session.start_deferred(stream)
            elif idle_ticks < 20 and self.config.sse_start_delay > 0:
                idle_ticks += 1
                await trio.sleep(self.config.sse_start_delay)
            else:
                idle_ticks = 0
                self._starter_parked = trio.Event()
                await self._starter_parked.wait()
                self._starter_parked = None

    # -- session expiry ----------------------------------------------------------------------

    def _watch(self, session: Session) -> None:
        """Put a new session on the expiry clock."""
        deadline = session.expires_at(trio.current_time())
        self._expiry_order += 1
        entry = session.expiry = [deadline, self._expiry_order, session]
        heapq.heappush(self._expiries, entry)
        sleep = self._expiry_sleep
        if sleep is not None and deadline < sleep.deadline:
            sleep.deadline = deadline

    def _unwatch(self, session: Session) -> None:
        """An ended session leaves the clock: its entry is emptied at once (the session is not kept
        alive by it), and the heap is rebuilt once ended entries outnumber the live ones."""
        entry, session.expiry = session.expiry, None
        if entry is None:
            return
        entry[2] = None
        self._expiries_ended += 1
        heap = self._expiries
        if self._expiries_ended > 32 and self._expiries_ended * 2 > len(heap):
            heap[:] = [e for e in heap if e[2] is not None]
            heapq.heapify(heap)
            self._expiries_ended = 0

    async def _expire_sessions(self) -> None:
        """One clock for every session's idle and init timeouts (a timer per session cost each one a
        cancel scope, an event and a task frame): it sleeps until the earliest deadline, then ends the
        sessions whose time has come and puts the others back at their new deadline."""
        heap = self._expiries
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else inf) as self._expiry_sleep:
                await trio.sleep_forever()
            self._expiry_sleep = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                entry = heapq.heappop(heap)
                session: Session | None = entry[2]
                if session is None:
                    self._expiries_ended -= 1
                    continue
                with contained(f"expiry of session {session.session_id}"):  # never the clock's end
                    deadline = session.expires_at(now)
                    if deadline <= now:
                        entry[2] = session.expiry = None
                        logger.info("session %s expired", session.session_id)
                        session.close()
                    else:
                        entry[0] = deadline
                        heapq.heappush(heap, entry)

    @property
    def shared_events(self) -> bool:
        """Whether the event store shares the events with other workers (one that may adopt a session
        asks it where the session's streams stand)."""
        return hasattr(self.event_store, "positions")

    @property
    def running(self) -> bool:
        return self._nursery is not None and not self._closing

    async def create(self, revision: Revision, *, owner: str = "", address: str | None = None) -> Session:
        """Start and register a new session (after its ``initialize`` was validated) for the principal
        whose owner key is ``owner``, from client ``address`` (see :class:`Quotas`: over quota is
        :class:`~mcp_trio._transport.quotas.QuotaExceeded`)."""
        if self._nursery is None or self._closing:
            raise SessionError("the server is not running")
        if len(self._sessions) >= self.config.max_sessions or self.refusing:
            raise SessionError("too many sessions, or handing sessions over")
        session_id = self.config.session_id_factory()
        if self.config.worker_id is not None:  # the owner first: "<worker>.<id>" (see cluster.session_owner)
            session_id = f"{self.config.worker_id}.{session_id}"
        if not _VALID_ID.fullmatch(session_id) or session_id in self._sessions:
            logger.error("session_id_factory returned an unusable id %r", session_id[:80])
            raise SessionError("the session id factory returned an unusable id")
        quota = self.quotas.take(owner, address)  # given back by forget(), whatever ends the session
        return self._start(Session(self, session_id, revision), owner, quota)

    def adopt(self, session_id: str, revision: Revision, *, owner: str, address: str | None) -> Session:
        """Start and register a session that another worker made (see ``ownership``): its id and
        owner key come from its record; it counts against the quotas without being refused by them."""
        if self._nursery is None or self._closing:
            raise SessionError("the server is not running")
        if len(self._sessions) >= self.config.max_sessions:
            raise SessionError("too many sessions")
        if session_id in self._sessions or self.refusing:
            raise SessionError("the session is here already, or this worker hands sessions over")
        quota = self.quotas.take(owner, address, force=True)
        return self._start(Session(self, session_id, revision), owner, quota)

    def _start(self, session: Session, owner: str, quota: tuple[str | None, str | None]) -> Session:
        assert self._nursery is not None
        session.owner = owner
        session.quota = quota
        session.on_change = self.on_change
        # start_soon, not start: no round trip to the session's task; what the session is given to run
        # before its task has opened the nursery starts there first (Session._spawn).
        self._nursery.start_soon(session.run, name=f"mcp session {session.session_id[:8]}")
        self._watch(session)
        self._sessions.add(session)  # its task's ``finally`` removes it, whatever happens
        self.sessions_created += 1
        try:
            self.server.attach(session)  # ... and detaches it
        except BaseException:
            session.close()
            raise
        return session

    def sessions(self) -> list[Session]:
        return list(self._sessions)

    def spawn(self, fn: Callable[[Session], Awaitable[None]], session: Session) -> None:
        """Run ``fn(session)`` in the sessions' nursery (a hand-over: it outlives the request that
        asked for it, and ends with the app)."""
        if self._nursery is not None:
            self._nursery.start_soon(fn, session)

    def get(self, session_id: str) -> Session | None:
        """The session, unless it is ending here (its requests are not its any more)."""
        session = self._sessions.get(session_id)
        return None if session is None or session.custody in ENDING else session

    def registered(self, session_id: str) -> Session | None:
        """The session, even while it ends (until its task's ``finally`` forgets it)."""
        return self._sessions.get(session_id)

    def forget(self, session: Session) -> None:
        self._sessions.remove(session)
        self._unwatch(session)
        quota, session.quota = session.quota, None
        if quota is not None:
            self.quotas.give_back(quota)
        if self.on_forget is not None:
            self.on_forget(session)

    @property
    def stopping(self) -> bool:
        """The app stops: a new session, or a new request of a session, is refused (503, -32000)."""
        return self._closing

    def stop(self) -> None:
        """Stop admitting (see :attr:`stopping`): what the sessions' clients send besides requests
        (notifications, answers to the server's requests) is still taken while they end."""
        self._closing = True

    async def aclose(self, grace: float | None = None) -> None:
        """End every session by the shutdown rule (:meth:`_shut_down`): new sessions and
        requests are refused; the requests in flight get ``grace`` seconds (``shutdown_grace``) to
        finish, then are cancelled and answered -32000; every stream ends cleanly; the sessions end."""
        self.stop()
        grace = self.config.shutdown_grace if grace is None else grace
        async with trio.open_nursery() as nursery:
            for session in list(self._sessions):
                nursery.start_soon(self._shut_down, session, grace)

    async def _shut_down(self, session: Session, grace: float) -> None:
        """One session by the shutdown rule: its requests in flight finish or are answered -32000
        (:meth:`Session.settle`), every live stream ends once what is queued for it is sent (the GET
        stream too), then the session ends.  Bounded: ``grace`` plus three times ``LAST_WORDS``."""
        await session.settle(grace)
        await self.end_streams(session, END)
        session.close()
        with trio.move_on_after(LAST_WORDS):
            await session.closed.wait()

    async def end_streams(self, session: Session, last: Outgoing) -> None:
        """End every live SSE connection of ``session`` with ``last`` (:data:`END`, or a ``retry``
        hint) once what is queued before it is sent; wait up to ``LAST_WORDS`` for their writers (a
        client that stopped reading is cut when the session closes)."""
        connected = session.end_connections(last)
        with trio.move_on_after(LAST_WORDS):
            for exchange in [stream.exchange for stream in connected if stream.exchange is not None]:
                await exchange.done.wait()

    async def forget_events(self, session: Session) -> None:
        """A session ended: its events go from the store (a session handed over to another worker
        keeps them where the store shares them, and only this worker's copy goes)."""
        store = self.event_store
        if store is None:
            return
        if session.custody is not Custody.CLOSING:  # handed over, or lost: another worker's
            release = getattr(store, "release", None)
            if release is not None:
                release(session.session_id)
            return
        if isinstance(store, InMemoryEventStore) and (
            type(store).forget_session is InMemoryEventStore.forget_session
        ):
            store.forget_session_nowait(session.session_id)  # no await, no shielded scope
        else:
            with trio.CancelScope(shield=True), trio.move_on_after(self.config.shutdown_grace):
                await store.forget_session(session.session_id)

    def __len__(self) -> int:
        return len(self._sessions)

    def statistics(self) -> dict[str, Any]:
        per_session = [s.statistics() for s in self._sessions]
        return {
            "sessions": len(self._sessions),
            "sessions_created": self.sessions_created,
            "streams": sum(s["streams"] for s in per_session),
            "connections": sum(s["connections"] for s in per_session),
            "inflight": sum(s["inflight"] for s in per_session),
            "pending_responses": sum(s["pending_responses"] for s in per_session),
            **self.quotas.statistics(),
            "session_tasks": _count_tasks(self._nursery) if self._nursery is not None else 0,
            "process_tasks": _count_all_tasks(),
        }


def _count_all_tasks() -> int:
    """Every live task of this Trio run (the HTTP server's connection tasks included)."""
    root = trio.lowlevel.current_root_task()
    return 1 + sum(_count_tasks(n) for n in root.child_nurseries) if root is not None else 0


def _count_tasks(nursery: trio.Nursery) -> int:
    """Tasks alive below ``nursery`` (its children and everything they started)."""
    count = 0
    stack = [nursery]
    while stack:
        for task in stack.pop().child_tasks:
            count += 1
            stack.extend(task.child_nurseries)
    return count
