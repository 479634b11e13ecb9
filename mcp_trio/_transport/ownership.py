"""2025 sessions that outlive their worker: adopted by the worker that gets their next request, handed
over by a worker that drains or that the session's home asks for it back (see docs/deploy/workers).

With a worker link that keeps session records (the Redis bus), each session of this worker has a
signed record and a lease in Redis (``redis.sessions``).  A request for a session that this worker does
not have finds it there:

- its lease is free (no owner, or an owner that no longer beats): this worker takes the lease and
  adopts the session (a new :class:`~mcp_trio._transport.session.Session` of the same id, with what its
  record holds, in this worker's nursery);
- a draining worker owns it: the request waits (bounded) until that worker has handed it over;
- a live worker owns it, and this worker is the session's home (its id names this worker: the balancer
  routes it here again): this worker asks the owner to hand it back, and waits (bounded);
- a live worker owns it and this worker is not its home: a POST of answers is forwarded to the owner's
  inbox; anything else gets 503 (the balancer sends it on).

Handing a session over (:meth:`Ownership.hand_over`): its new requests get 503, the requests in flight
finish (within ``shutdown_grace``), its events reach the shared store, the GET stream ends with a
``retry`` hint, the last record is written and the lease given up in one step; then the session ends
here without taking its record or events with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal, Protocol

import trio

from .._app.principal import PrincipalKeys, principal_identity
from .._protocol import http, sse
from .._protocol.admission import handing_over, lives_elsewhere, unconfirmed
from .._protocol.cluster import Peek, SessionRecord, encode_session_record, session_owner
from .._protocol.custody import RECORDED, Custody, CustodyEvent
from .._protocol.custody import transition as custody_transition
from .._protocol.session import GET_STREAM, Outgoing, SessionEvent, SessionState, transition
from .._protocol.versions import revision
from .config import DRAIN_DELAY, ServerConfig
from .forwarding import RELEASE_BODY, Forwarding, WorkerLink
from .manager import SessionManager
from .peer import SessionPeer
from .session import Session
from .streams import GuardedSend, respond

__all__ = ["Ownership", "SessionLink", "close_sessions", "drain", "record_of"]

logger = logging.getLogger(__name__)

_POLL = 0.1
"""Seconds between two looks at a session being handed over."""
_CONFIRMS = 3
"""Confirmations of a session's lease one request makes at most (each after a pause is found)."""


Confirmed = Literal["mine", "lost", "unavailable", "outage"]
"""Whether a session's lease is still this worker's (see :meth:`SessionLink.confirm_session`)."""


class SessionLink(Protocol):
    """What keeps a worker's session records and leases, beside its worker link (the Redis bus's
    ``session_leases``)."""

    session_ttl: float
    draining: bool
    on_lost: Callable[[str], None] | None

    def session_recorded(self, session_id: str, record: bytes) -> None: ...

    async def session_recorded_now(self, session_id: str, record: bytes) -> None: ...

    def session_dropped(self, session_id: str) -> None: ...

    def start_draining(self) -> None: ...

    async def peek_session(self, session_id: str) -> Peek: ...

    async def take_session(self, peek: Peek) -> bool: ...

    async def release_session(self, session_id: str, record: bytes) -> bool: ...

    def must_confirm(self, session_id: str) -> bool: ...

    async def confirm_session(self, session_id: str) -> Confirmed: ...

    def epoch_of(self, session_id: str) -> int | None: ...

    def fence(self, session_id: str) -> tuple[str, bytes] | None: ...


def record_of(session: Session) -> bytes:
    """The session's record as its worker writes it to Redis."""
    return encode_session_record(
        SessionRecord(
            revision=session.protocol_version,
            initialized=session.state is SessionState.ACTIVE,
            owner=session.owner,
            client_info=session.client_info,
            client_capabilities=session.client_capabilities,
            log_level=session.log_level,
            subscriptions=tuple(sorted(session.subscriptions)),
        )
    )


class Ownership:
    """Adoption and hand-over of this worker's sessions, over a link that keeps their records."""

    def __init__(
        self,
        link: SessionLink,
        forwarding: Forwarding,
        manager: SessionManager,
        principals: PrincipalKeys,
        config: ServerConfig,
    ) -> None:
        self.link = link
        self.forwarding = forwarding
        self.worker_link: WorkerLink = forwarding.link
        self.worker = forwarding.worker
        self.manager = manager
        self.principals = principals
        self.config = config
        self._adopting: dict[str, trio.Event] = {}
        """Sessions this worker is adopting now (a second request for one waits for the first)."""
        self._checked_at = 0.0
        """The wall-clock time just before the last check :meth:`_current` passed: when the serving that
        follows it was decided (a pause of the process after the check moves the log record's time, not
        the decision; each serving follows its check with nothing awaited between)."""
        self.handover_wait = config.shutdown_grace + 5.0
        """How long a request waits for its session to be handed over by its owner."""
        link.session_ttl = config.idle_timeout + 60.0
        link.on_lost = self._lost
        manager.on_change = self._record
        manager.on_forget = self._forget
        if hasattr(manager.event_store, "fence"):  # a store in Redis: a stale owner's writes fenced off
            manager.event_store.fence = link.fence  # type: ignore[union-attr]
        forwarding.on_release = self._release_asked

    # -- this worker's sessions -----------------------------------------------------------------

    async def opened(self, session: Session) -> None:
        """A session made here: its record and lease are written before its ``initialize`` is
        answered (a worker killed right after does not lose it)."""
        self.worker_link.session_opened(session.session_id, principal_identity(session.principal))
        await self.link.session_recorded_now(session.session_id, record_of(session))

    def _record(self, session: SessionPeer) -> None:
        assert isinstance(session, Session)
        if session.custody not in RECORDED:  # its last record is the hand-over's, or another worker's
            return
        self.link.session_recorded(session.session_id, record_of(session))

    def _forget(self, session: Session) -> None:
        self.worker_link.session_closed(session.session_id)
        if session.custody is Custody.CLOSING:  # not handed over or lost: its record goes
            self.link.session_dropped(session.session_id)

    def _lost(self, session_id: str) -> None:
        session = self.manager.registered(session_id)  # ending here too
        if session is not None:
            session.custody = custody_transition(session.custody, CustodyEvent.LOSE)  # the new owner's
            session.close()

    # -- a request for a session this worker does not have -----------------------------------------

    async def find(
        self,
        facts: http.RequestFacts,
        send: GuardedSend,
        answers: bytes | None,
        principal: object,
        address: str | None,
    ) -> Session | None:
        """The session the request names, here (adopted if need be); None if the request was answered
        (``answers``, a POST of only responses and notifications, forwarded to the owner: 202).
        404 for no such session (or another principal's), 503 while it cannot be had yet."""
        session_id = http.check_session_header(facts)
        home = session_owner(session_id)
        if home is None:
            raise http.session_not_found()
        session = await self._here(session_id)
        if session is not None:
            return self._serving(session)
        http.check_protocol_version(facts)
        if answers is not None and answers == RELEASE_BODY:
            raise http.session_not_found()  # never from a client
        identity = principal_identity(principal)
        deadline = trio.current_time() + self.handover_wait
        asked = False
        while True:
            peek = await self.link.peek_session(session_id)
            record, owner = peek.record, peek.owner
            if record is None:
                if peek.state == "unavailable":
                    raise lives_elsewhere(home) if home != self.worker else unconfirmed()
                raise http.session_not_found()  # unknown, or a forged record
            if not self.principals.owns(record.owner, principal):
                raise http.session_not_found()
            session = await self._here(session_id)  # adopted by another request meanwhile
            if session is not None:
                return self._serving(session)
            if peek.state == "taken":
                if self.manager.refusing:
                    raise handing_over()
                adopting = self._adopting[session_id] = trio.Event()
                try:
                    if await self.link.take_session(peek):
                        session = await self._adopt(session_id, record, principal, address)
                        if (current := await self._current(session)) is not None:
                            return self._serving(current)
                finally:
                    del self._adopting[session_id]
                    adopting.set()
            elif answers is not None and owner:
                outcome = await self.worker_link.forward_to_worker(owner, session_id, answers, identity)
                if outcome == "sent":
                    await respond(send, 202, b"", content_type=None)
                    return None
                if outcome in ("full", "unavailable"):
                    raise lives_elsewhere(owner)
            elif peek.state == "owned" and owner:
                if home != self.worker or self.manager.refusing:
                    raise lives_elsewhere(owner)  # not ours to take back: the balancer sends it on
                if not asked:
                    asked = True
                    await self.worker_link.forward_to_worker(owner, session_id, RELEASE_BODY, identity)
            if trio.current_time() >= deadline:
                raise lives_elsewhere(owner or home)
            await trio.sleep(_POLL)

    async def _here(self, session_id: str) -> Session | None:
        """The session if this worker has it (waiting for an adoption of it under way here); 503 while
        it is being handed over."""
        adopting = self._adopting.get(session_id)
        if adopting is not None:
            await adopting.wait()
        session = self.manager.get(session_id)
        return None if session is None else await self._current(session)

    async def _current(self, session: Session) -> Session | None:
        """``session`` if this worker may serve it now: 503 while it is being handed over; None if it
        is lost (let go) or ending.  A worker that may have been paused, or cut off from Redis, long
        enough for another worker to adopt the session serves nothing from its copy before its lease
        is confirmed, and checks again after the confirmation (a pause can fall during it); while
        Redis is down, sessions are served where they are (none can be adopted then)."""
        for _ in range(_CONFIRMS):
            if session.custody in (Custody.MOVING, Custody.LEAVING):
                raise handing_over()
            if session.custody is not Custody.SERVING or self.manager.get(session.session_id) is not session:
                return None
            self._checked_at = time.time()
            if not self.link.must_confirm(session.session_id):
                return session  # sure now, and nothing awaited between this and its serving
            confirmed = await self.link.confirm_session(session.session_id)
            if confirmed == "unavailable":
                raise unconfirmed()
            if confirmed == "outage" and session.custody is Custody.SERVING:
                return session
            if confirmed == "lost":  # let go by now (or ending here: its lease already dropped)
                current = session.custody is Custody.SERVING and self.manager.get(session.session_id)
                return session if current is session else None
        raise unconfirmed()

    def _serving(self, session: Session) -> Session:
        """``session`` is served here now, under its current epoch (logged at DEBUG)."""
        if logger.isEnabledFor(logging.DEBUG):
            epoch = self.link.epoch_of(session.session_id) or 0
            extra = {
                "mcp_session": session.session_id,
                "mcp_epoch": epoch,
                "mcp_worker": self.worker,
                "mcp_decided": self._checked_at,
            }
            logger.debug("serving session %s under epoch %d", session.session_id, epoch, extra=extra)
        return session

    async def _adopt(
        self, session_id: str, record: SessionRecord, principal: object, address: str | None
    ) -> Session:
        """Start the session here from its record, after this worker took its lease."""
        found = revision(record.revision)
        assert found is not None  # the record's decoder checked it
        store = self.manager.event_store
        positions: dict[int, int] = {}
        shared_positions = getattr(store, "positions", None)  # a store that shares its events
        try:
            if shared_positions is not None:  # (from now on it replays this session from Redis)
                positions = await shared_positions(session_id)
            session = self.manager.adopt(session_id, found, owner=record.owner, address=address)
        except Exception as exc:  # SessionError (full, draining), or the store failing
            logger.warning("adopting session %.12s… failed: %s", session_id, exc)
            await self.link.release_session(session_id, encode_session_record(record))
            raise handing_over() from None
        session.principal = principal
        session.client_info = dict(record.client_info)
        session.client_capabilities = dict(record.client_capabilities)
        session.log_level = record.log_level  # type: ignore[assignment]
        session.subscriptions = set(record.subscriptions)
        if record.initialized:
            session.state = transition(session.state, SessionEvent.INITIALIZED)
        streams = session.streams
        if GET_STREAM in positions:
            streams.get_stream.next_seq = max(streams.get_stream.next_seq, positions[GET_STREAM] + 1)
        streams.skip_to(max(positions, default=0) + 1)
        self.worker_link.session_opened(session_id, principal_identity(principal))
        self.link.session_recorded(session_id, record_of(session))
        logger.info("adopted session %.12s… from another worker", session_id)
        return session

    # -- handing sessions over ----------------------------------------------------------------------

    def _release_asked(self, session: Session) -> None:
        """The session's home asks for it back (through this worker's inbox)."""
        if session.custody is Custody.SERVING:
            self.manager.spawn(self.hand_over, session)

    async def hand_over(self, session: Session) -> None:
        """Hand ``session`` over to whichever worker gets its next request."""
        if session.custody is not Custody.SERVING:  # handed over, or ending, already
            return
        session.custody = custody_transition(session.custody, CustodyEvent.HAND_OVER)
        await session.settle(self.config.shutdown_grace)  # finished, or answered -32000 (kept as events)
        store = self.manager.event_store
        flush = getattr(store, "flush", None)
        if flush is not None:
            await flush(self.config.shutdown_grace)
        if session.custody is Custody.LOST:  # another worker took it meanwhile: nothing to give up
            return
        record = record_of(session)
        session.custody = custody_transition(session.custody, CustodyEvent.RELEASE)  # no record from here
        with trio.CancelScope(shield=True), trio.move_on_after(self.config.shutdown_grace):
            released = await self.link.release_session(session.session_id, record)
            if not released:
                logger.warning(
                    "session %.12s… could not be handed over (Redis): its lease expires with this "
                    "worker's heartbeat",
                    session.session_id,
                )
        await self.manager.end_streams(session, Outgoing(-3, sse.encode_retry(self.config.sse_retry_ms)))
        session.close()

    async def hand_over_all(self) -> None:
        """Hand every session of this worker over."""
        async with trio.open_nursery() as nursery:
            for session in self.manager.sessions():
                nursery.start_soon(self.hand_over, session)


async def drain(manager: SessionManager, ownership: Ownership | None, config: ServerConfig) -> None:
    """The first part of an app's graceful end (the app has turned its readiness: a GET without a
    session, what the shipped balancer configurations check, gets 503): the heartbeat says so, then for
    ``drain_delay`` seconds everything is served as before (the balancer notices meanwhile); then no new
    session is made (the app stops admitting requests too, and a worker that keeps its sessions in Redis
    hands each of them over: see :func:`close_sessions`)."""
    if ownership is not None:
        ownership.link.start_draining()
    delay = config.drain_delay
    if delay is None:
        delay = DRAIN_DELAY if ownership is not None else 0.0
    if delay > 0 and manager.running:
        await trio.sleep(delay)
    manager.refusing = True


async def close_sessions(manager: SessionManager, ownership: Ownership | None) -> None:
    """The sessions' part of an app's graceful end, once it has drained: a worker that keeps its
    sessions in Redis hands each of them over (its requests in flight get the grace, then are answered
    -32000; its events and record stay for the worker that adopts it); then every session left ends by
    the shutdown rule (:meth:`SessionManager.aclose`)."""
    if ownership is not None and manager.running:
        await ownership.hand_over_all()
    await manager.aclose()
