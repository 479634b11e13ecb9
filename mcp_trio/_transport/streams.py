"""Response streams and the HTTP exchanges that carry them.

A :class:`Stream` is the logical SSE stream of the spec: the standalone GET stream, or the stream of
one POST.  It outlives any one connection (a client may resume it with ``Last-Event-ID``).  An
:class:`Exchange` is one HTTP response carrying a stream; its writer task runs in the session's
nursery, and the ASGI request task only waits for it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from .._protocol import jsonrpc, sse
from .._protocol.exchange import ExchangeEvent, ExchangeState, transition
from .._protocol.session import Outgoing, SessionStreams, StreamRecord
from .._runtime.peerlog import RateLimitedLog
from ..errors import RemoteProtocolError
from .eventstore import StoredEvent
from .queues import KeepAliveClock, StreamQueue
from .wire import SSE_HEADERS

__all__ = [
    "Exchange",
    "ExchangeMembership",
    "GuardedSend",
    "Stream",
    "content_length",
    "pump_sse",
    "reject",
    "respond",
    "send_whole",
]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)
"""What peers do wrong (or too slowly): one line each, at most ten a minute."""

ASGISend = Callable[[dict[str, Any]], Awaitable[None]]

ABORT_GRACE = 0.1
"""How long a send under way may still take once its exchange is abandoned (seconds): long enough for
a healthy write, far shorter than a write to a client that stopped reading."""

_NO_SCOPE: contextlib.nullcontext[None] = contextlib.nullcontext()
"""What :meth:`GuardedSend.whole` enters instead of a shielded scope (reusable: it holds nothing)."""

KEEPALIVE_COMMENT = sse.encode_comment("keep-alive")

TRANSPORT_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
"""What a send to a client that has gone may raise; anything else is a bug and is logged at ERROR."""


class GuardedSend:
    """The ASGI ``send`` of one HTTP request: every message is sent whole, even while its task is being
    cancelled, unless the exchange is abandoned (:meth:`abort`) on a server where that is safe.

    Cancellation (a DELETE, a disconnect, shutdown) reaches writers at any await.  Inside hypercorn's
    own ``send`` that is fatal: its ``http.response.start`` writes the head and only then records that
    the response started, so a cancel in between makes it send a 500 head into a response already
    under way, and h11's error ends the whole server.  So each send runs in a shielded scope.  A
    client that stops reading would then hold its writer (and its session) for as long as it likes:
    on servers that say cancelling a send is safe (mcp_trio's own, through the
    ``mcp_trio.cancellable_send`` scope extension), :meth:`abort` gives a send under way
    :data:`ABORT_GRACE` more, then cuts it; the server closes that connection and every later send
    raises ``BrokenResourceError``.  Elsewhere sends are never cut: the server's own write timeout
    (if any) is what ends them.
    """

    __slots__ = ("_in_progress", "_scope", "_send", "abortable", "broken", "since")

    def __init__(self, send: ASGISend, *, abortable: bool, in_progress: set[GuardedSend]) -> None:
        self._send = send
        self.abortable = abortable
        self.broken = False
        self.since = 0.0
        """When the send under way started (for statistics)."""
        self._scope: trio.CancelScope | None = None
        self._in_progress = in_progress

    async def __call__(self, message: dict[str, Any]) -> None:
        if self.broken:
            raise trio.BrokenResourceError("the connection was abandoned")
        with trio.CancelScope(shield=True) as scope:
            self._scope = scope
            self.since = trio.current_time()
            self._in_progress.add(self)
            try:
                await self._send(message)
            finally:
                self._scope = None
                self._in_progress.discard(self)
        if scope.cancelled_caught:
            self.broken = True
            raise trio.BrokenResourceError("a send was cut: the client does not read")

    async def whole(
        self,
        start: dict[str, Any],
        body: dict[str, Any],
        between: Callable[[], object] | None = None,
        *,
        shield: bool = True,
    ) -> None:
        """Send a response's head and its one body message in one shielded scope (one scope, not two:
        a scope costs about as much as the rest of a send), calling ``between`` once the head is sent.
        The guarantees are those of two calls, except that an :meth:`abort` during the head also
        bounds the body.

        ``shield=False``, on a server where cancelling a send is safe (:attr:`abortable`; elsewhere it
        is ignored): no scope at all, for a caller that nothing it owns can cancel any more (a 2026
        answer once its handler is done and the disconnect callback released); a cancellation from
        outside (the server's shutdown) then ends the response by closing its connection."""
        if self.broken:
            raise trio.BrokenResourceError("the connection was abandoned")
        guarded = shield or not self.abortable
        with trio.CancelScope(shield=True) if guarded else _NO_SCOPE as scope:
            self._scope = scope  # None unguarded: nothing for abort() to bound
            self.since = trio.current_time()
            self._in_progress.add(self)
            try:
                await self._send(start)
                if between is not None:
                    between()
                await self._send(body)
            finally:
                self._scope = None
                self._in_progress.discard(self)
        if scope is not None and scope.cancelled_caught:
            self.broken = True
            raise trio.BrokenResourceError("a send was cut: the client does not read")

    def abort(self) -> None:
        """The exchange is abandoned: a send under way gets :data:`ABORT_GRACE` more, then is cut."""
        scope = self._scope
        if self.abortable and scope is not None:
            scope.deadline = min(scope.deadline, trio.current_time() + ABORT_GRACE)


def content_length(body: bytes) -> tuple[bytes, bytes]:
    """The header of a response whose whole body is known: the HTTP server need not chunk it."""
    return (b"content-length", str(len(body)).encode())


class Exchange:
    """One HTTP response in progress, owned as ``_protocol.exchange`` says: a writer (a task of the
    session) claims it and sends through it; the request task waits until :attr:`done`, then ends the
    response if the writer could not."""

    __slots__ = ("_waiter", "done", "guard", "head", "send", "started", "state", "wait_scope", "writer_scope")

    def __init__(
        self,
        send: ASGISend,
        guard: GuardedSend | None = None,
        *,
        head: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        self.send = send
        self.guard = guard if guard is not None or not isinstance(send, GuardedSend) else send
        """The guarded send beneath ``send`` (``send`` itself when it is one): :meth:`cancel_writer`
        aborts a send under way."""
        self.head = head
        """Headers added to a successful (< 300) response head the writer sends (the session id of an
        ``initialize`` answer)."""
        self.state = ExchangeState.PENDING
        self.started = False
        """The head went out (by the writer, in ``STREAMING`` or after)."""
        self.done = trio.Event()
        """Set once the writer side is over: abandoned, or finished and its writer returned."""
        self.wait_scope: trio.CancelScope | None = None
        self.writer_scope: trio.CancelScope | None = None
        self._waiter: trio.lowlevel.Task | None = None
        """The request task in :meth:`park`, until :meth:`rouse`."""

    def _to(self, event: ExchangeEvent) -> None:
        self.state = transition(self.state, event)
        if self.state is ExchangeState.ABANDONED:
            self._wake()

    def _wake(self) -> None:
        """The writer side is over: the request task goes on."""
        if not self.done.is_set():
            self.done.set()
            self.rouse()
            if self.wait_scope is not None:
                self.wait_scope.cancel()

    async def park(self) -> None:
        """The request task waits until :attr:`done` or :meth:`rouse` (the session's ``sse_start_delay``
        timer rouses it: then it watches its client).  A plain park, where an ``Event.wait`` under a
        ``move_on_after`` cost a cancel scope per request; cancellable as any wait."""
        if self.done.is_set():
            await trio.lowlevel.checkpoint()
            return
        self._waiter = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._unpark)

    def _unpark(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def rouse(self) -> None:
        """End a :meth:`park` under way (none: nothing happens)."""
        task = self._waiter
        if task is not None:
            self._waiter = None
            trio.lowlevel.reschedule(task)

    @property
    def finished(self) -> bool:
        """Its writer sent (or began to send) the end of the response."""
        return self.state is ExchangeState.FINISHED

    def claim(self) -> bool:
        """Become its writer; False if it has one already or was abandoned (then send nothing)."""
        if self.state is not ExchangeState.PENDING:
            return False
        self._to(ExchangeEvent.CLAIM)
        return True

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The writer sends the head."""
        self._to(ExchangeEvent.START)
        self.started = True
        if self.head and status < 300:
            headers = [*headers, *self.head]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """The writer sends the whole response: :meth:`start` and the last :meth:`body` (through one
        shielded scope when ``send`` is a :class:`GuardedSend`)."""
        self._to(ExchangeEvent.START)
        self.started = True
        if self.head and status < 300:
            headers = [*headers, *self.head]
        start = {"type": "http.response.start", "status": status, "headers": headers}
        end = {"type": "http.response.body", "body": body, "more_body": False}
        send = self.send
        if isinstance(send, GuardedSend):
            await send.whole(start, end, self._finishing)
        else:
            await send(start)
            self._finishing()
            await send(end)

    def _finishing(self) -> None:
        self._to(ExchangeEvent.FINISH)

    async def body(self, data: bytes, *, more: bool = True) -> None:
        """The writer sends body bytes (``more=False``: the end of the response)."""
        if not more:
            self._to(ExchangeEvent.FINISH)
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    def writer_done(self) -> None:
        """The writer stopped (in its ``finally``): unless it finished, the request task ends the rest."""
        if self.state in (ExchangeState.CLAIMED, ExchangeState.STREAMING):
            self._to(ExchangeEvent.RELEASE)
        elif self.state is ExchangeState.PENDING:
            self._to(ExchangeEvent.ABANDON)
        else:  # FINISHED: woken only now, once the last send is over
            self._wake()

    def end(self) -> None:
        """The request task takes over what its writer left (to end it, or to answer 404)."""
        self._to(ExchangeEvent.END)

    def cancel_writer(self) -> None:
        """Stop writing: cancel the writer task (and cut a send it is stuck in), or, for an exchange
        that no task writes yet (a JSON answer still being computed), abandon it so that its request
        task stops waiting."""
        if self.guard is not None:
            self.guard.abort()
        if self.writer_scope is not None:
            self.writer_scope.cancel()
        elif self.state is ExchangeState.PENDING:
            self._to(ExchangeEvent.ABANDON)


class ExchangeMembership:
    """What ``Session.connection`` returns: its ``with`` block ends the exchange's membership of the
    session's open exchanges (``leave``)."""

    __slots__ = ("_exchange", "_leave")

    def __init__(self, leave: Callable[[Exchange], None], exchange: Exchange) -> None:
        self._leave = leave
        self._exchange = exchange

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc_info: object) -> None:
        self._leave(self._exchange)


@dataclass(eq=False, slots=True)
class Stream(StreamRecord):
    """A logical stream of a session (its bookkeeping: :class:`StreamRecord`) and the connection now
    carrying it, with the queue its writer reads."""

    exchange: Exchange | None = None
    queue: StreamQueue | None = None

    @classmethod
    def make(cls, stream_id: int, json_mode: bool, batch: bool) -> Stream:
        """The stream factory of :class:`SessionStreams`."""
        return cls(stream_id, json_mode, batch=batch)

    def attach_json(self, exchange: Exchange) -> None:
        """Make ``exchange`` the connection of this JSON-mode stream (no writer task, no queue)."""
        self.exchange = exchange

    def attach_deferred(self, exchange: Exchange, first: int) -> None:
        """Make ``exchange`` the connection of this stream, its writer (and queue) to come later."""
        self.exchange = exchange
        self.deferred = first

    def open_queue(self, buffer: int) -> StreamQueue:
        """The queue of a deferred connection, when its writer starts."""
        queue = self.queue = StreamQueue(buffer)
        self.deferred = None
        return queue

    def attach(self, exchange: Exchange, buffer: int) -> StreamQueue:
        """Make ``exchange`` the connection of this stream; a previous one is cancelled (replaced)."""
        self.detach_current()
        queue = self.queue = StreamQueue(buffer)
        self.exchange = exchange
        return queue

    def detach(self, exchange: Exchange) -> None:
        if self.exchange is exchange:
            self.detach_current()

    def detach_current(self) -> None:
        self.deferred = None
        if self.exchange is not None:
            self.exchange.cancel_writer()
        if self.queue is not None:
            self.queue.close()
        self.exchange = None
        self.queue = None

    def push(self, item: Outgoing) -> None:
        """Queue for the live connection, if there is one; never blocks.  A connection that has fallen
        ``buffer`` messages behind is cut: the client resumes from the event store."""
        if self.queue is None:
            return
        try:
            self.queue.put_nowait(item)
        except trio.WouldBlock:
            peer_log.log(logging.WARNING, "stream %s fell behind; closing its connection", self.id)
            self.detach_current()
        except trio.ClosedResourceError:  # pragma: no cover - detach clears the queue first
            self.queue = None


async def pump_sse(
    stream: Stream,
    exchange: Exchange,
    queue: StreamQueue,
    first: int,
    streams: SessionStreams[Stream],
    replay: Callable[[int, int], Awaitable[list[StoredEvent]]],
    clock: KeepAliveClock,
) -> None:
    """The writer of an SSE connection (a task of its session), once it has claimed ``exchange``:
    send ``stream``'s events as ``streams`` frames them: replay or priming event first, then live
    messages and keep-alives.

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
        for event in await replay(stream.id, first):
            out.append(streams.sse_event(stream.id, event.seq, event.data))  # replays need a store
            last = event.seq
        if not streams.is_live(stream):
            await exchange.body(b"".join(out), more=False)
            return  # resumed a finished (or unknown) stream: the replay was all of it
    elif first <= -2:
        last = -first - 2
        out.append(streams.priming_event(stream.id, last))
    if not out:  # nothing to send yet: an empty body makes servers that hold a head for one send it
        await exchange.body(b"")
    clock.rearm(queue)  # a comment if the connection stays silent for the clock's interval
    try:
        while True:
            item = queue.get_nowait()  # END once the queue is closed (replaced, or cut for falling behind)
            if item is None:
                if out:  # nothing more is queued: send what is
                    await exchange.body(b"".join(out))
                    out.clear()
                    clock.rearm(queue)
                    continue
                item = await queue.get()
                if item is None:  # the clock: silent for its interval
                    out.append(KEEPALIVE_COMMENT)
                    continue
            if item.seq < 0:  # END, CUT, or a connection's last words (a handover's ``retry`` hint)
                out.append(item.data)
                await exchange.body(b"".join(out), more=False)
                return
            if item.seq > last:
                out.append(streams.sse_event(stream.id, item.seq, item.data))
                last = item.seq
    finally:
        clock.unwatch(queue)


async def send_whole(
    exchange: Exchange, session_id: str, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """Send a whole response from the task that completed it (no writer task), unless its client has
    gone (the exchange was abandoned: client disconnect, session closed)."""
    if not exchange.claim():
        return
    try:
        await exchange.whole(status, headers, body)
    except TRANSPORT_ERRORS as exc:
        logger.debug("response of session %s: send failed: %r", session_id, exc)
    except Exception:
        logger.exception("response of session %s: send failed", session_id)
    finally:
        exchange.writer_done()


async def respond(
    send: ASGISend,
    status: int,
    body: bytes,
    *,
    content_type: bytes | None = b"application/json",
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Send a whole response that no stream carries (a refusal, a 202, a 204, a DELETE's 200), from the
    request's own task.  Nothing a session owns cancels that task, so on a server where cutting a send
    is safe the two sends need no shielded scope (:meth:`GuardedSend.whole` with ``shield=False``): the
    server's shutdown cuts it by closing the connection, and the server's write timeout bounds a client
    that stops reading.  Elsewhere they are shielded as every send is."""
    headers = [(b"content-type", content_type)] if content_type and body else []
    headers.extend(extra or ())
    if status != 204:
        headers.append(content_length(body))
    start = {"type": "http.response.start", "status": status, "headers": headers}
    end = {"type": "http.response.body", "body": body, "more_body": False}
    if isinstance(send, GuardedSend):
        await send.whole(start, end, shield=False)
    else:
        await send(start)
        await send(end)


async def reject(send: ASGISend, exc: RemoteProtocolError) -> None:
    """Answer a refused request: its HTTP status, headers and JSON-RPC error body."""
    headers = [(name.encode(), value.encode()) for name, value in exc.headers]
    await respond(send, exc.http_status, jsonrpc.error_body(exc), extra=headers)
