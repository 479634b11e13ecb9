"""A 2025-era session: one Trio nursery that owns every task of the session.

The session's nursery holds its request handlers, the writer of every stream connection (the GET
stream and each POST's SSE or JSON response) and its expiry watcher.  Cancelling it (DELETE, idle
expiry, init timeout, server shutdown, :meth:`Session.close`) ends all of them; each ASGI request
task waiting on a writer then finishes its HTTP response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as mt
import trio

from .._protocol import jsonrpc, sse
from .._protocol.session import SessionEvent, SessionState, make_event_id, transition
from .._protocol.versions import Revision
from .._runtime.containment import split_fatal
from ..errors import RemoteProtocolError
from .eventstore import EventStore, InMemoryEventStore, StoredEvent
from .peer import SessionPeer
from .streams import CUT, END, TRANSPORT_ERRORS, Exchange, Outgoing, Stream, content_length
from .wire import JSON_HEADERS, SSE_HEADERS

if TYPE_CHECKING:
    from .manager import SessionManager

__all__ = ["LocalSessionRegistry", "Session", "SessionRegistry"]

logger = logging.getLogger(__name__)

GET_STREAM = 0


class SessionRegistry(Protocol):
    """Where a server finds its live 2025 sessions by id.  The default keeps them in this process; a
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
        self._sessions[session.id] = session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def remove(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)


class _Connection:
    """What :meth:`Session.connection` returns: its ``with`` block ends the exchange's membership."""

    __slots__ = ("_exchange", "_exchanges")

    def __init__(self, exchanges: set[Exchange], exchange: Exchange) -> None:
        self._exchanges = exchanges
        self._exchange = exchange

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc_info: object) -> None:
        self._exchanges.discard(self._exchange)


class Session(SessionPeer):
    """One client session.  Created only by an accepted ``initialize``; see :class:`SessionManager`."""

    def __init__(self, manager: SessionManager, session_id: str, revision: Revision) -> None:
        self.id = session_id
        self.revision = revision
        self.state = SessionState.INITIALIZING
        self.closing = False
        self._closed: trio.Event | None = None
        self._ended = False
        self._manager = manager
        self.server = manager.server
        self._config = manager.config
        self._store: EventStore | None = manager.event_store
        self.session_id: str | None = session_id
        self.principal: object = None
        """Who created the session (``ServerConfig.authenticate`` or ``oauth``); only they may use it."""
        self.owner = ""
        """The owner key of :attr:`principal` (see :class:`~mcp_trio._app.principal.PrincipalKeys`):
        a request is the session's when its principal has this key."""
        self.quota: tuple[str | None, str | None] | None = None
        """What the session counts against the manager's quotas, given back when it ends."""
        self.protocol_version = revision.name
        self._init_session()
        self._streams: dict[int, Stream] = {GET_STREAM: Stream(GET_STREAM)}
        self._next_stream_id = 1
        self._request_streams: dict[mt.RequestId, Stream] = {}
        self._inflight: dict[mt.RequestId, trio.CancelScope] = {}
        self._exchanges: set[Exchange] = set()
        """Every exchange (HTTP response) of the session not yet done: closing aborts their sends."""
        self._nursery: trio.Nursery | None = None
        self._early: list[tuple[Callable[..., Awaitable[object]], tuple[Any, ...], str | None]] | None = []
        """Tasks offered before :meth:`run` opened the nursery (None once it has): started there first."""
        self._busy = 0
        self._created = self._idle_since = trio.current_time()
        self._wake = trio.Event()
        """Set by :meth:`close`: the expiry watcher returns and the session ends."""

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The session's life, as a task of the manager's nursery.  Never raises but Cancelled.

        The manager starts it with ``start_soon`` (no round trip through ``Nursery.start``): tasks the
        session is offered before its nursery is open wait in :attr:`_early` and start first in it,
        and a session closed before this task ran ends at once (its early tasks start cancelled)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                early, self._early = self._early, None
                if self.closing:
                    nursery.cancel_scope.cancel()
                for fn, args, name in early or ():
                    nursery.start_soon(fn, *args, name=name)
                task_status.started()
                await self._watch_expiry()
                self.closing = True  # before the nursery can close: no new task is offered to it
                nursery.cancel_scope.cancel()
        except BaseException as exc:  # containment (see .containment.contained), inline: cheaper
            fatal, rest = split_fatal(exc)
            if rest is not None:
                logger.error("session %s failed", self.id, exc_info=rest)
            if fatal is not None:
                if fatal is exc:
                    raise
                raise fatal from None
        finally:
            self.closing = True
            self._manager.server.detach(self)
            self.state = transition(self.state, SessionEvent.CLOSE)
            for stream in self._streams.values():
                self._manager.undefer(stream)
                stream.detach_current()
            self._manager.forget(self)
            self._ended = True
            if self._closed is not None:
                self._closed.set()
            store = self._store
            if store is not None:
                if isinstance(store, InMemoryEventStore) and (
                    type(store).forget_session is InMemoryEventStore.forget_session
                ):
                    store.forget_session_nowait(self.id)  # no await, no shielded scope
                else:
                    with trio.CancelScope(shield=True), trio.move_on_after(self._config.shutdown_grace):
                        await store.forget_session(self.id)

    def close(self) -> None:
        """End the session now: cancels its nursery, so every stream and handler of it ends; a send
        stuck on a client that stopped reading is cut rather than waited for.  A session with no task
        but its expiry watcher is not cancelled: the watcher is woken and returns (cheaper than
        delivering ``Cancelled``); a task started after that is cancelled when the watcher returns."""
        self.closing = True
        nursery = self._nursery
        if nursery is not None and nursery.child_tasks:
            nursery.cancel_scope.cancel()
        self._wake.set()
        for exchange in self._exchanges:
            if exchange.guard is not None:
                exchange.guard.abort()

    @property
    def closed(self) -> trio.Event:
        """Set once the session has ended (made when first asked for: an idle session keeps none)."""
        event = self._closed
        if event is None:
            event = self._closed = trio.Event()
            if self._ended:
                event.set()
        return event

    async def aclose(self) -> None:
        self.close()
        await self.closed.wait()

    def activity(self) -> Session:
        """Held (``with session.activity():``) by each HTTP request of the session while it is open:
        pauses idle expiry.  The session is its own context manager for this (a class's ``__enter__``
        and ``__exit__`` cost a quarter of a generator's, and nothing is allocated)."""
        return self

    def __enter__(self) -> None:
        self._busy += 1  # the expiry watcher is not woken: its deadline can only move later

    def __exit__(self, *exc_info: object) -> None:
        self._busy -= 1
        if not self._busy:
            self._idle_since = trio.current_time()

    async def _watch_expiry(self) -> None:
        """Return when the session is closed (:meth:`close` sets :attr:`_wake`) or expires."""
        config = self._config
        wake = self._wake
        while not wake.is_set():
            # While busy the session cannot expire before a whole idle timeout from now: the watcher
            # sleeps until then and looks again (requests never need to wake it, nor does
            # ``notifications/initialized``: a deadline only ever moves later).
            now = trio.current_time()
            if self._busy:
                deadline = now + max(config.idle_timeout, 0.01)
            else:
                deadline = self._idle_since + config.idle_timeout
            if self.state is SessionState.INITIALIZING:
                deadline = min(deadline, self._created + config.init_timeout)
            if now >= deadline:
                logger.info("session %s expired", self.id)
                return
            with trio.move_on_at(deadline):
                await wake.wait()

    @property
    def nursery(self) -> trio.Nursery:
        assert self._nursery is not None, "session not running"
        return self._nursery

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None:
        """Start a task of the session: in its nursery, or first thing in it once :meth:`run` opens it."""
        if self._early is not None:
            self._early.append((fn, args, name))
        else:
            self.nursery.start_soon(fn, *args, name=name)

    # -- incoming ---------------------------------------------------------------------------

    def _initialized(self) -> None:
        self.state = transition(self.state, SessionEvent.INITIALIZED)

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
        stream = self._request_streams.get(related) if related is not None else self._streams[GET_STREAM]
        if stream is not None and not stream.json_mode and self._store is not None:
            self._queue(stream, CUT)  # without a store the client could not resume: then nothing

    def open_post_stream(self, requests: tuple[mt.JSONRPCRequest, ...], *, batch: bool) -> Stream:
        stream = Stream(self._next_stream_id, json_mode=self._config.json_response, batch=batch)
        self._next_stream_id += 1
        self._streams[stream.id] = stream
        for request in requests:
            stream.pending.add(request.id)
            self._request_streams[request.id] = stream
        return stream

    def check_request_ids(self, requests: tuple[mt.JSONRPCRequest, ...]) -> None:
        """400 for a request whose id is already in flight in this session (or repeated in its batch):
        its answer could not be told apart.  Nothing of the session changes."""
        seen: set[mt.RequestId] = set()
        for request in requests:
            if request.id in self._request_streams or request.id in self._inflight or request.id in seen:
                raise RemoteProtocolError(
                    f"Invalid Request: request id {request.id!r} is already in use in this session",
                    request_id=request.id,
                )
            seen.add(request.id)

    def start_request(self, request: mt.JSONRPCRequest) -> None:
        self._spawn(self._run_request, request, name=f"mcp request {request.id!r}")

    async def _run_request(self, request: mt.JSONRPCRequest) -> None:
        with trio.CancelScope() as scope:
            self._inflight[request.id] = scope
            try:
                message = await self.answer(request)
            finally:
                del self._inflight[request.id]
        if not scope.cancelled_caught:  # (notifications/cancelled: no response is sent)
            try:
                await self.send_message(message, request.id)
                return
            except BaseException as exc:  # contained (see .containment.contained), inline: cheaper
                fatal, rest = split_fatal(exc)
                if rest is not None:
                    logger.error("answer to %s failed", request.method, exc_info=rest)
                if fatal is not None:
                    if fatal is exc:
                        raise
                    raise fatal from None
        await self._flush_json(self._forget_request(request.id))

    async def answer_now(self, request_id: mt.RequestId, message: dict[str, Any]) -> None:
        """Send a response computed without a handler task (``initialize``)."""
        await self.send_message(message, request_id)

    # -- outgoing ---------------------------------------------------------------------------

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None:
        """Send a message on exactly one stream: the related request's own SSE stream if it has one,
        else the standalone GET stream."""
        stream = self._request_streams.get(related) if related is not None else None
        if related is not None and stream is not None and "method" not in message:
            if stream.json_mode:
                # A response on a JSON-mode stream: no queue and no writer task; the task that queues
                # a stream's last response sends the whole body (the common one-request POST: one task).
                stream.bodies.append(jsonrpc.encode(message))
                await self._flush_json(self._forget_request(related))
                return
            if stream.deferred is not None and stream.pending == {related}:
                # The last response of an SSE stream whose writer has not started: this task sends
                # the whole stream (head, priming event, response, end) itself.
                await self._send_whole_sse(stream, related, message)
                return
        event = self._route(message, related)
        if event is not None and self._store is not None:
            await self._store.store(self.id, event)

    def notify_nowait(self, message: dict[str, Any]) -> None:
        """A server notification (from the notification bus): queued on the GET stream now; stored with
        ``store_nowait`` when the event store has one, else by a task of the session."""
        if self.closing or message.get("method") == "notifications/tasks":  # for listen streams only
            return
        event = self._route(message, None)
        if event is None or self._store is None:
            return
        store_nowait = getattr(self._store, "store_nowait", None)
        if store_nowait is not None:
            store_nowait(self.id, event)
        else:
            self._spawn(self._store.store, self.id, event)

    def _route(self, message: dict[str, Any], related: mt.RequestId | None) -> StoredEvent | None:
        """Queue a message for its SSE stream (a response on a JSON-mode stream goes through
        :meth:`send_message` instead)."""
        is_response = "id" in message and "method" not in message
        stream = self._request_streams.get(related) if related is not None else None
        if stream is None or stream.json_mode:
            stream = self._streams[GET_STREAM]
        data = jsonrpc.encode(message)
        item = Outgoing(stream.allocate_seq(), data)
        self._queue(stream, item)
        if is_response and related is not None:
            self._forget_request(related)
        return StoredEvent(stream.id, item.seq, data)

    def _queue(self, stream: Stream, item: Outgoing) -> None:
        if stream.deferred is not None:  # its first message: the writer starts now (the stream stays
            self._start_writer(stream)  # with the timer, which rouses its request task when due)
        stream.push(item)

    def _forget_request(self, request_id: mt.RequestId) -> Stream | None:
        """The request will get no more messages; returns its JSON-mode stream if that is now
        complete (the caller sends it with :meth:`_flush_json`)."""
        stream = self._request_streams.pop(request_id, None)
        if stream is None:
            return None
        stream.pending.discard(request_id)
        if not stream.complete:
            return None
        if stream.json_mode:
            self._forget_stream(stream)
            return stream
        self._queue(stream, END)
        if stream.exchange is None:
            self._forget_stream(stream)
        return None

    def _forget_stream(self, stream: Stream) -> None:
        if self._streams.get(stream.id) is stream:
            del self._streams[stream.id]

    async def _flush_json(self, stream: Stream | None) -> None:
        """Send a complete JSON-mode stream as one HTTP response, unless its client has gone."""
        if stream is None or stream.exchange is None:
            return
        self._manager.undefer(stream)
        exchange, stream.exchange = stream.exchange, None
        bodies = stream.bodies
        if not bodies:  # every request of it was cancelled
            await self._send_whole(exchange, 204, [], b"")
            return
        body = b"[" + b",".join(bodies) + b"]" if stream.batch else bodies[0]
        await self._send_whole(exchange, 200, [*JSON_HEADERS, content_length(body)], body)

    async def _send_whole(
        self, exchange: Exchange, status: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        """Send a whole response from the task that completed it (no writer task), unless its client
        has gone (the exchange was abandoned: client disconnect, session closed)."""
        if not exchange.claim():
            return
        try:
            await exchange.whole(status, headers, body)
        except TRANSPORT_ERRORS as exc:
            logger.debug("response of session %s: send failed: %r", self.id, exc)
        except Exception:
            logger.exception("response of session %s: send failed", self.id)
        finally:
            exchange.writer_done()

    # -- stream connections -----------------------------------------------------------------

    def connection(self, stream: Stream, exchange: Exchange, replay_after: int | None = None) -> _Connection:
        """While its request task waits (``with session.connection(...):``): ``exchange`` carries
        ``stream`` (see :meth:`connect`), and the session's end cuts a send of it that is stuck."""
        self._exchanges.add(exchange)
        try:
            self.connect(stream, exchange, replay_after)
        except BaseException:
            self._exchanges.discard(exchange)
            raise
        return _Connection(self._exchanges, exchange)

    def connect(self, stream: Stream, exchange: Exchange, replay_after: int | None = None) -> None:
        """Start the writer of ``exchange`` in the session's nursery (the caller waits on it); a
        JSON-mode stream has no writer: the task that completes it sends it."""
        quick = replay_after is None and stream.id != GET_STREAM and self._config.sse_start_delay > 0
        if stream.json_mode:
            stream.attach_json(exchange)
            if quick:  # the timer rouses its request task (which parks first: see asgi._wait)
                self._manager.defer(self, stream)
            return
        if replay_after is not None:
            first = replay_after
        elif self.revision.priming_event and self._store is not None:
            first = -stream.allocate_seq() - 2  # the priming event's id comes before any message
        else:
            first = -1
        if quick:
            stream.detach_current()
            stream.attach_deferred(exchange, first)
            self._manager.defer(self, stream)
            return
        receive = stream.attach(exchange, self._config.stream_buffer)
        self._spawn(self._write_sse, stream, exchange, receive, first)

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
        receive = stream.open_queue(self._config.stream_buffer)
        self._spawn(self._write_sse, stream, exchange, receive, first)

    async def _send_whole_sse(self, stream: Stream, related: mt.RequestId, message: dict[str, Any]) -> None:
        """Send a deferred stream's only remaining message, its last response, as the whole stream."""
        exchange, first = stream.exchange, stream.deferred
        assert exchange is not None and first is not None
        self._manager.undefer(stream)
        stream.deferred = None
        stream.exchange = None
        del self._request_streams[related]
        stream.pending.discard(related)
        self._forget_stream(stream)
        data = jsonrpc.encode(message)
        seq = stream.allocate_seq()
        if self._store is not None:  # if the client has gone, the response stays in the event store
            await self._store.store(self.id, StoredEvent(stream.id, seq, data))
        body = self._sse_event(stream.id, seq, data)
        if first <= -2:
            body = self._priming_event(stream.id, -first - 2) + body
        await self._send_whole(exchange, 200, [*SSE_HEADERS, content_length(body)], body)

    def _priming_event(self, stream_id: int, seq: int) -> bytes:
        retry = self._config.sse_retry_ms
        if type(retry) is int and retry >= 0:  # what sse.encode_event writes, without its checks
            return b"id: %d-%d\nretry: %d\ndata:\n\n" % (stream_id, seq, retry)
        return sse.encode_event("", id=make_event_id(stream_id, seq), retry=retry)

    def _sse_event(self, stream_id: int, seq: int, data: bytes) -> bytes:
        """A message as an SSE event: with its id when there is an event store to resume from."""
        text = data.decode()
        if not text or "\n" in text or "\r" in text:  # never for a message we serialized
            event_id = make_event_id(stream_id, seq) if self._store is not None else None
            return sse.encode_event(text, id=event_id)
        # one ``data`` line: what sse.encode_event writes, without its checks (an id of two ints
        # holds nothing they refuse)
        if self._store is not None:
            return f"id: {stream_id}-{seq}\ndata: {text}\n\n".encode()
        return f"data: {text}\n\n".encode()

    def stream_for_resume(self, stream_id: int) -> Stream | None:
        """The live SSE stream a ``Last-Event-ID`` names (a JSON-mode answer is never resumed: its
        request keeps it)."""
        stream = self._streams.get(stream_id)
        return None if stream is None or stream.json_mode else stream

    @property
    def get_stream(self) -> Stream:
        return self._streams[GET_STREAM]

    async def _write_sse(
        self, stream: Stream, exchange: Exchange, receive: trio.MemoryReceiveChannel[Outgoing], first: int
    ) -> None:
        try:
            if not exchange.claim():
                return  # abandoned before this task could run
            with trio.CancelScope() as exchange.writer_scope:
                await self._pump_sse(stream, exchange, receive, first)
        except TRANSPORT_ERRORS as exc:  # the connection is gone, or was cut
            logger.debug("stream %s of session %s: send failed: %r", stream.id, self.id, exc)
        except Exception:
            logger.exception("stream %s of session %s: writer failed", stream.id, self.id)
        finally:
            stream.detach(exchange)
            if stream.complete:
                self._forget_stream(stream)
            exchange.writer_done()

    async def _pump_sse(
        self, stream: Stream, exchange: Exchange, receive: trio.MemoryReceiveChannel[Outgoing], first: int
    ) -> None:
        """Send the stream: replay or priming event first, then live messages and keep-alives.

        ``first``: replay stored events with a larger seq (>= 0), prime with seq ``-first - 2``
        (<= -2), or neither (-1).  Whatever is queued when the writer gets to run goes out in one
        body chunk, and the chunk that holds the stream's end also ends the response: a request
        answered while the head was being written costs two sends (head, then events and end).
        """
        await exchange.start(200, SSE_HEADERS)
        out: list[bytes] = []
        last = -1
        if first >= 0:
            last = first
            for event in await self._replay(stream.id, first):
                out.append(self._sse_event(stream.id, event.seq, event.data))  # replays need a store
                last = event.seq
            if self._streams.get(stream.id) is not stream:
                await exchange.body(b"".join(out), more=False)
                return  # resumed a finished (or unknown) stream: the replay was all of it
        elif first <= -2:
            last = -first - 2
            out.append(self._priming_event(stream.id, last))
        if not out:  # nothing to send yet: an empty body makes servers that hold a head for one send it
            await exchange.body(b"")
        keepalive = self._config.keepalive_interval
        while True:
            try:
                item: Outgoing | None = receive.receive_nowait()
            except trio.WouldBlock:
                item = None
            except (trio.EndOfChannel, trio.ClosedResourceError):
                item = END  # replaced by a newer connection, or cut for falling behind
            if item is None:
                if out:  # nothing more is queued: send what is
                    await exchange.body(b"".join(out))
                    out.clear()
                    continue
                with trio.move_on_after(keepalive):
                    try:
                        item = await receive.receive()
                    except (trio.EndOfChannel, trio.ClosedResourceError):
                        item = END
                if item is None:
                    out.append(sse.encode_comment("keep-alive"))
                    continue
            if item is END or item is CUT:
                await exchange.body(b"".join(out), more=False)
                return
            if item.seq > last:
                out.append(self._sse_event(stream.id, item.seq, item.data))
                last = item.seq

    async def _replay(self, stream_id: int, after: int) -> list[StoredEvent]:
        if self._store is None:
            return []
        return await self._store.replay_after(self.id, stream_id, after)

    def statistics(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "streams": len(self._streams),
            "connections": sum(s.exchange is not None for s in self._streams.values()),
            "inflight": len(self._inflight),
            "pending_responses": len(self._request_streams),
        }
