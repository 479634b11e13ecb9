"""A 2025-era session: one Trio nursery that owns every task of the session.

The session's nursery holds its request handlers and the writer of every stream connection (the GET
stream and each POST's SSE or JSON response).  Cancelling it (DELETE, idle expiry or init timeout by
the manager's clock, server shutdown once :meth:`Session.settle` is over, :meth:`Session.close`) ends
all of them; each ASGI request task waiting on a writer then finishes its HTTP response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import mcp_types as mt
import trio

from .._observe.telemetry import HTTP
from .._protocol import custody
from .._protocol.session import (
    CUT,
    END,
    GET_STREAM,
    INITIALIZE_STREAM,
    Outgoing,
    Route,
    SessionEvent,
    SessionState,
    SessionStreams,
    transition,
)
from .._protocol.versions import Revision
from .._runtime.containment import contained
from .eventstore import EventStore, StoredEvent
from .inflight import InFlight
from .peer import SessionPeer
from .queues import StreamQueue
from .streams import (
    TRANSPORT_ERRORS,
    Exchange,
    ExchangeMembership,
    Stream,
    content_length,
    pump_sse,
    send_whole,
)
from .wire import JSON_HEADERS, SSE_HEADERS

if TYPE_CHECKING:
    from .manager import SessionManager

__all__ = ["Session"]

logger = logging.getLogger(__name__)


_NO_EXCHANGES: frozenset[Exchange] = frozenset()
"""A session's open exchanges while it has none (an idle session keeps no empty set: 216 bytes)."""


class Session(SessionPeer):
    """One client session.  Created only by an accepted ``initialize``; see :class:`SessionManager`.

    The driver of the session's :class:`SessionStreams` (which stream each message goes to, its
    event id, JSON bodies): it feeds it what happens and does what it answers, with the session's
    nursery, queues and exchanges."""

    # fmt: off
    __slots__ = (
        "_busy", "_closed", "_config", "_created", "_early", "_exchanges", "_idle_since", "_inflight",
        "_manager", "_nursery", "_parked", "_store", "custody", "expiry", "owner", "principal", "quota",
        "revision", "server", "session_id", "state", "streams",
    )
    # fmt: on
    """Slots: an idle session is mostly this object (a ``__dict__`` of this many attributes alone is
    over 1.5 KiB)."""

    session_id: str
    carrier = HTTP

    def __init__(self, manager: SessionManager, session_id: str, revision: Revision) -> None:
        self.session_id = session_id
        self.revision = revision
        self.state = SessionState.INITIALIZING
        self.custody = custody.Custody.SERVING  # changed only by the table: custody.transition
        self._closed: trio.Event | None = None
        self._manager = manager
        self.server = manager.server
        self._config = manager.config
        self._store: EventStore | None = manager.event_store
        self.principal: object = None
        """Who created the session (``ServerConfig.authenticate`` or ``oauth``); only they may use it."""
        self.owner = ""
        """The owner key of :attr:`principal` (see :class:`~mcp_trio._app.principal.PrincipalKeys`):
        a request is the session's when its principal has this key."""
        self.quota: tuple[str | None, str | None] | None = None
        """What the session counts against the manager's quotas, given back when it ends."""
        self.protocol_version = revision.name
        self._init_session()
        config = self._config
        self.streams = SessionStreams(
            Stream.make,
            json_mode=config.json_response,
            event_ids=self._store is not None,
            revision=revision,
            retry=config.sse_retry_ms,
        )
        self._inflight: InFlight[mt.RequestId] = InFlight()
        self._exchanges: set[Exchange] | frozenset[Exchange] = _NO_EXCHANGES
        """Every exchange (HTTP response) of the session not yet done: closing aborts their sends."""
        self._nursery: trio.Nursery | None = None
        self._early: list[tuple[Callable[..., Awaitable[object]], tuple[Any, ...], str | None]] | None = []
        """Tasks offered before :meth:`run` opened the nursery (None once it has): started there first."""
        self._busy = 0
        self._created = self._idle_since = trio.current_time()
        self._parked: trio.lowlevel.Task | None = None
        """The session's task while it waits for :meth:`close` (which wakes it: the session ends)."""
        self.expiry: list[Any] | None = None
        """Its entry in the manager's expiry clock (``[deadline, order, session]``), until it ends."""

    def __str__(self) -> str:
        return f"session {self.session_id}"  # what logs name it by (containment: "session ... failed")

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The session's life, as a task of the manager's nursery.  Never raises but Cancelled.

        The manager starts it with ``start_soon`` (no round trip through ``Nursery.start``): tasks the
        session is offered before its nursery is open wait in :attr:`_early` and start first in it,
        and a session closed before this task ran ends at once (its early tasks start cancelled)."""
        clock = self._manager.server.telemetry.session(HTTP)
        try:
            with contained(self):
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    early, self._early = self._early, None
                    if self.closing:
                        nursery.cancel_scope.cancel()
                    for fn, args, name in early or ():
                        nursery.start_soon(fn, *args, name=name)
                    task_status.started()
                    await self._until_closed()  # closed: no new task is offered to the nursery
                    nursery.cancel_scope.cancel()
        finally:
            if clock is not None:
                clock.end(self.protocol_version)
            self.custody = custody.transition(self.custody, custody.CustodyEvent.CLOSE)
            self._manager.server.detach(self)
            self.state = transition(self.state, SessionEvent.CLOSE)
            for stream in self.streams.streams.values():
                self._manager.undefer(stream)
                stream.detach_current()
            self._manager.forget(self)
            if self._closed is not None:
                self._closed.set()
            if self._store is not None:
                await self._manager.forget_events(self)

    def close(self) -> None:
        """End the session now: cancels its nursery, so every stream and handler of it ends; a send
        stuck on a client that stopped reading is cut rather than waited for.  A session with no task
        is not cancelled: its own task is woken and ends it (cheaper than delivering ``Cancelled``); a
        task started after that is cancelled then."""
        self.custody = custody.transition(self.custody, custody.CustodyEvent.CLOSE)
        nursery = self._nursery
        if nursery is not None and nursery.child_tasks:
            nursery.cancel_scope.cancel()
        task, self._parked = self._parked, None
        if task is not None:
            trio.lowlevel.reschedule(task)
        for exchange in self._exchanges:
            if exchange.guard is not None:
                exchange.guard.abort()

    @property
    def closing(self) -> bool:  # type: ignore[override]  # read-only: nothing writes it through a peer
        return self.custody in custody.ENDING  # ending here (closed, handed over or lost): no new work

    @property
    def closed(self) -> trio.Event:
        """Set once the session has ended (made when first asked for: an idle session keeps none)."""
        event = self._closed
        if event is None:
            event = self._closed = trio.Event()
            if self.state is SessionState.CLOSED:  # ended (its ``finally`` sets it, then the event, at once)
                event.set()
        return event

    async def aclose(self) -> None:
        self.close()
        await self.closed.wait()

    def activity(self) -> Session:
        """Held (``with session.activity():``) by each HTTP request of the session while it is open:
        pauses idle expiry.  The session is its own context manager for this (cheaper than a
        generator-based one, and nothing is allocated)."""
        return self

    def __enter__(self) -> None:
        self._busy += 1  # the expiry clock is not told: a deadline can only move later

    def __exit__(self, *exc_info: object) -> None:
        self._busy -= 1
        if not self._busy:
            self._idle_since = trio.current_time()

    async def _until_closed(self) -> None:
        """Wait until :meth:`close` (a DELETE, the manager's expiry clock, the server's shutdown): the
        task parks, with no timer or event of its own (the manager's one clock serves every session)."""
        if self.closing:  # closed before its task ran: nothing to wait for
            return
        self._parked = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._unpark)

    def _unpark(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._parked = None  # cancelled (the manager's nursery: shutdown)
        return trio.lowlevel.Abort.SUCCEEDED

    def expires_at(self, now: float) -> float:
        """When it expires if nothing happens before: ``idle_timeout`` after its last request ended (a
        whole ``idle_timeout`` from ``now`` while one is open: a deadline only ever moves later), and
        ``init_timeout`` after its creation until ``notifications/initialized``."""
        config = self._config
        if self._busy:
            deadline = now + max(config.idle_timeout, 0.01)
        else:
            deadline = self._idle_since + config.idle_timeout
        if self.state is SessionState.INITIALIZING:
            deadline = min(deadline, self._created + config.init_timeout)
        return deadline

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None:
        """Start a task of the session: in its nursery, or first thing in it once :meth:`run` opens it."""
        if self._early is not None:
            self._early.append((fn, args, name))
        else:
            assert self._nursery is not None
            self._nursery.start_soon(fn, *args, name=name)

    # -- incoming ---------------------------------------------------------------------------

    def _initialized(self) -> None:
        initializing = self.state is SessionState.INITIALIZING
        self.state = transition(self.state, SessionEvent.INITIALIZED)
        if initializing and self._store is not None:
            # The client has the initialize response: its stream (the session's first POST stream) need
            # not be resumable any more, and an idle session keeps no event (stores that can say so).
            forget = getattr(self._store, "forget_stream_nowait", None)
            if forget is not None:
                forget(self.session_id, INITIALIZE_STREAM)

    def _cancel_request(self, request_id: mt.RequestId) -> None:
        scope = self._inflight.get(request_id)
        if scope is not None:
            scope.cancel()

    async def _send_request(self, message: dict[str, Any], related: mt.RequestId | None) -> None:
        """A server-to-client request goes on the related request's stream."""
        await self.send_message(message, related)

    def _send_notice(self, notice: dict[str, Any], related: mt.RequestId | None) -> None:
        self._route(notice, related)

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:
        """Cut the live connection of a stream (the request's, or the GET stream); the stream goes on
        in the event store and the client resumes it with ``Last-Event-ID``."""
        stream = self.streams.close_target(related)
        if stream is not None:  # without a store the client could not resume: then nothing
            self._queue(stream, CUT)

    def open_post_stream(self, requests: tuple[mt.JSONRPCRequest, ...], *, batch: bool) -> Stream:
        """The stream of a POST's requests, once :meth:`check_request_ids` passed them."""
        return self.streams.open_post(requests, batch=batch)

    def check_request_ids(self, requests: tuple[mt.JSONRPCRequest, ...]) -> None:
        """400 for a request id already in flight in this session (or repeated in its batch)."""
        self.streams.check_request_ids(requests, self._inflight)

    def start_request(self, request: mt.JSONRPCRequest) -> None:
        self._spawn(self._run_request, request, name=f"mcp request {request.id!r}")

    async def _run_request(self, request: mt.JSONRPCRequest) -> None:
        with trio.CancelScope() as scope:
            self._inflight[request.id] = scope
            try:
                message: dict[str, Any] | None = await self.answer(request)
            finally:
                self._inflight.ended(request.id)
        if scope.cancelled_caught:  # notifications/cancelled: no answer; the shutdown rule's: -32000
            message = self._inflight.last_words(request.id)
        if message is not None:
            with contained(f"answer to {request.method}"):
                await self.send_message(message, request.id)
                return
        await self._answered(request.id)

    async def answer_now(self, request_id: mt.RequestId, message: dict[str, Any]) -> None:
        """Send a response computed without a handler task (``initialize``)."""
        await self.send_message(message, request_id)

    # -- outgoing ---------------------------------------------------------------------------

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None:
        """Send a message on exactly one stream: the related request's own SSE stream if it has one,
        else the standalone GET stream (see :meth:`SessionStreams.outgoing`)."""
        route, stream, item = self.streams.outgoing(message, related)
        if route is Route.QUEUE or route is Route.QUEUE_LAST:
            self._queue(stream, item)
            if route is Route.QUEUE_LAST:
                self._end(stream)
            if self._store is not None:
                await self._store.store(self.session_id, StoredEvent(stream.id, item.seq, item.data))
        elif route is Route.JSON_DONE:
            # The task that queues a JSON-mode stream's last response sends the whole body (the common
            # one-request POST: one task, no queue, no writer).
            await self._flush_json(stream)
        elif route is Route.WHOLE:
            # The last response of an SSE stream whose writer has not started: this task sends the
            # whole stream (head, priming event, response, end) itself.
            await self._send_whole_sse(stream, item)

    def notify_nowait(self, message: dict[str, Any]) -> None:
        """A server notification (from the notification bus): queued on the GET stream now; stored with
        ``store_nowait`` when the event store has one, else by a task of the session."""
        if self.custody in custody.ENDING or message.get("method") == "notifications/tasks":  # listen-only
            return
        event = self._route(message, None)
        if self._store is not None:
            self._keep(event)

    def _keep(self, event: StoredEvent) -> None:
        """Store an event without waiting: ``store_nowait`` when the event store has one, else by a task
        of the session."""
        assert self._store is not None
        store_nowait = getattr(self._store, "store_nowait", None)
        if store_nowait is not None:
            store_nowait(self.session_id, event)
        else:
            self._spawn(self._store.store, self.session_id, event)

    def _route(self, message: dict[str, Any], related: mt.RequestId | None) -> StoredEvent:
        """Queue a message that is not a response for its SSE stream; the event to store."""
        _, stream, item = self.streams.outgoing(message, related)
        self._queue(stream, item)
        return StoredEvent(stream.id, item.seq, item.data)

    def _queue(self, stream: Stream, item: Outgoing) -> None:
        if stream.deferred is not None:  # its first message: the writer starts now (the stream stays
            self._start_writer(stream)  # with the timer, which rouses its request task when due)
        stream.push(item)

    def _end(self, stream: Stream) -> None:
        """A complete SSE stream: its writer ends the response; the stream is forgotten now unless a
        connection still carries it (then its writer forgets it)."""
        self._queue(stream, END)
        if stream.exchange is None:
            self.streams.forget_stream(stream)

    async def _answered(self, request_id: mt.RequestId) -> None:
        """The request will get no answer (it was cancelled, or sending its answer failed)."""
        stream = self.streams.answered(request_id)
        if stream is None:
            return
        if stream.json_mode:
            await self._flush_json(stream)
        else:
            self._end(stream)

    async def _flush_json(self, stream: Stream) -> None:
        """Send a complete JSON-mode stream as one HTTP response, unless its client has gone."""
        if stream.exchange is None:
            return
        self._manager.undefer(stream)
        exchange, stream.exchange = stream.exchange, None
        body = self.streams.json_body(stream)
        if not body:  # every request of it was cancelled
            await send_whole(exchange, self.session_id, 204, [], b"")
            return
        await send_whole(exchange, self.session_id, 200, [*JSON_HEADERS, content_length(body)], body)

    # -- stream connections -----------------------------------------------------------------

    def connection(
        self, stream: Stream, exchange: Exchange, replay_after: int | None = None
    ) -> ExchangeMembership:
        """While its request task waits (``with session.connection(...):``): ``exchange`` carries
        ``stream`` (see :meth:`connect`), and the session's end cuts a send of it that is stuck."""
        exchanges = self._exchanges
        if not isinstance(exchanges, set):
            exchanges = self._exchanges = set()
        exchanges.add(exchange)
        try:
            self.connect(stream, exchange, replay_after)
        except BaseException:
            self._leave(exchange)
            raise
        return ExchangeMembership(self._leave, exchange)

    def _leave(self, exchange: Exchange) -> None:
        exchanges = self._exchanges
        if isinstance(exchanges, set):
            exchanges.discard(exchange)
            if not exchanges:
                self._exchanges = _NO_EXCHANGES

    def connect(self, stream: Stream, exchange: Exchange, replay_after: int | None = None) -> None:
        """Start the writer of ``exchange`` in the session's nursery (the caller waits on it); a
        JSON-mode stream has no writer: the task that completes it sends it."""
        quick = replay_after is None and stream.id != GET_STREAM and self._config.sse_start_delay > 0
        if stream.json_mode:
            stream.attach_json(exchange)
            if quick:  # the timer rouses its request task (which parks first: see asgi._wait)
                self._manager.defer(self, stream)
            return
        first = self.streams.first_event(stream, replay_after)
        if first <= -2 and stream.id == GET_STREAM and self._manager.shared_events:
            # A store shared between workers keeps the GET stream's priming event too: a worker that
            # adopts the session numbers its events after the last one the store has (``ownership``),
            # and the client may resume from this one.
            self._keep(StoredEvent(GET_STREAM, -first - 2, b""))
        if quick:
            stream.detach_current()
            stream.attach_deferred(exchange, first)
            self._manager.defer(self, stream)
            return
        queue = stream.attach(exchange, self._config.stream_buffer)
        self._spawn(self._write_sse, stream, exchange, queue, first)

    def start_deferred(self, stream: Stream) -> None:
        """``sse_start_delay`` has passed: start the stream if the handler has sent nothing, and rouse
        its request task (parked until now: from now on it watches its client too)."""
        if stream.deferred is not None and not self.closing:
            self._start_writer(stream)
        exchange = stream.exchange
        if exchange is not None:
            exchange.rouse()

    def _start_writer(self, stream: Stream) -> None:
        exchange, first = stream.exchange, stream.deferred
        assert exchange is not None and first is not None
        queue = stream.open_queue(self._config.stream_buffer)
        self._spawn(self._write_sse, stream, exchange, queue, first)

    async def _send_whole_sse(self, stream: Stream, item: Outgoing) -> None:
        """Send a deferred stream's only remaining message, its last response, as the whole stream
        (the bookkeeping has forgotten the request and the stream: ``Route.WHOLE``)."""
        exchange, first = stream.exchange, stream.deferred
        assert exchange is not None and first is not None
        self._manager.undefer(stream)
        stream.deferred = None
        stream.exchange = None
        if self._store is not None:  # if the client has gone, the response stays in the event store
            await self._store.store(self.session_id, StoredEvent(stream.id, item.seq, item.data))
        body = self.streams.whole_body(stream.id, first, item)
        await send_whole(exchange, self.session_id, 200, [*SSE_HEADERS, content_length(body)], body)

    async def settle(self, grace: float) -> None:
        """The shutdown rule for the requests in flight and those owed an answer (:class:`InFlight`)."""
        await self._inflight.settle(grace, lambda: bool(self._inflight or self.streams.requests))

    def end_connections(self, last: Outgoing) -> list[Stream]:
        """End every live SSE connection of the session with ``last`` (a ``retry`` hint, say)."""
        connected = [s for s in self.streams.streams.values() if s.exchange is not None and not s.json_mode]
        for stream in connected:
            self._queue(stream, last)
        return connected

    async def _write_sse(self, stream: Stream, exchange: Exchange, queue: StreamQueue, first: int) -> None:
        try:
            if not exchange.claim():
                return  # abandoned before this task could run
            with trio.CancelScope() as exchange.writer_scope:
                clock = self._manager.keepalives
                await pump_sse(stream, exchange, queue, first, self.streams, self._replay, clock)
        except TRANSPORT_ERRORS as exc:  # the connection is gone, or was cut
            logger.debug("stream %s of session %s: send failed: %r", stream.id, self.session_id, exc)
        except Exception:
            logger.exception("stream %s of session %s: writer failed", stream.id, self.session_id)
        finally:
            stream.detach(exchange)
            if stream.complete:
                self.streams.forget_stream(stream)
            exchange.writer_done()

    async def _replay(self, stream_id: int, after: int) -> list[StoredEvent]:
        if self._store is None:
            return []
        return await self._store.replay_after(self.session_id, stream_id, after)

    def statistics(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "streams": len(self.streams.streams),
            "connections": sum(s.exchange is not None for s in self.streams.streams.values()),
            "inflight": len(self._inflight),
            "pending_responses": len(self.streams.requests),
        }
