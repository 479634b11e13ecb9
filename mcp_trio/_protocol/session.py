"""Session state and stream bookkeeping of the 2025-era transport, as data (sans-IO).

:class:`SessionStreams` is the bookkeeping of one session's streams, in the style of h11 and wsproto:
the Trio driver (``_transport.session.Session``) tells it what happened (a POST opened a stream, a
handler sends a message, a request was answered or cancelled, a client resumes) and it answers what
to do (queue this event on that stream, send this JSON body, end that stream); it does no I/O and
owns no task.  What it keeps: the session's streams by id, which stream owes each request's answer,
every stream's sequence numbers (the SSE event ids), the responses of a JSON-mode stream until its
body is complete, and how events are framed (with ids only when an event store can replay them).
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import mcp_types as mt

from ..errors import RemoteProtocolError
from . import jsonrpc, sse
from .table import StateEnum, TransitionTable
from .versions import Revision

__all__ = [
    "CUT",
    "END",
    "GET_STREAM",
    "INITIALIZE_STREAM",
    "Outgoing",
    "Route",
    "SessionEvent",
    "SessionState",
    "SessionStreams",
    "StreamRecord",
    "check_batch",
    "make_event_id",
    "new_session_id",
    "parse_event_id",
    "transition",
]


class SessionState(StateEnum):
    INITIALIZING = "initializing"
    """``initialize`` was answered; waiting for ``notifications/initialized``."""
    ACTIVE = "active"
    CLOSED = "closed"


class SessionEvent(StateEnum):
    INITIALIZED = "initialized"
    CLOSE = "close"


transition = TransitionTable[SessionState, SessionEvent](
    "session",
    {
        (SessionState.INITIALIZING, SessionEvent.INITIALIZED): SessionState.ACTIVE,
        (SessionState.ACTIVE, SessionEvent.INITIALIZED): SessionState.ACTIVE,
        (SessionState.INITIALIZING, SessionEvent.CLOSE): SessionState.CLOSED,
        (SessionState.ACTIVE, SessionEvent.CLOSE): SessionState.CLOSED,
        (SessionState.CLOSED, SessionEvent.INITIALIZED): SessionState.CLOSED,
        (SessionState.CLOSED, SessionEvent.CLOSE): SessionState.CLOSED,
    },
)
"""The session's state after an event (every state change is a row of this table)."""


def new_session_id() -> str:
    """A cryptographically random session id of visible ASCII (URL-safe base64, 256 bits)."""
    return secrets.token_urlsafe(32)


def make_event_id(stream_id: int, seq: int) -> str:
    """Event ids encode their stream, so ``Last-Event-ID`` names the stream to resume."""
    return f"{stream_id}-{seq}"


_EVENT_ID = re.compile(r"([0-9]+)-([0-9]+)")


def parse_event_id(event_id: str) -> tuple[int, int] | None:
    """``(stream, seq)`` of an event id made by :func:`make_event_id`; None for anything else (ASCII
    digits only, at most 40 characters)."""
    found = _EVENT_ID.fullmatch(event_id) if len(event_id) <= 40 else None
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2))


GET_STREAM = 0
"""The id of a session's standalone GET stream (POST streams count up from 1)."""
INITIALIZE_STREAM = 1
"""The stream of a session's ``initialize`` answer: its first POST stream."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One serialized message queued for a stream; ``seq`` orders it within the stream."""

    seq: int
    data: bytes


END = Outgoing(-1, b"")
"""Queued after a stream's last message: the writer ends the HTTP response."""

CUT = Outgoing(-2, b"")
"""Queued to end the current connection (once what is queued before it is sent) but not the stream."""


@dataclass(eq=False, slots=True)
class StreamRecord:
    """What the bookkeeping knows of one logical stream (the transport's ``Stream`` adds the
    connection carrying it and its queue)."""

    id: int
    json_mode: bool = False
    pending: set[mt.RequestId] = field(default_factory=set)
    """Requests whose responses this stream still owes (empty for the GET stream)."""
    bodies: list[bytes] = field(default_factory=list)
    """The responses of a JSON-mode stream, sent in one body by whoever queues the last one."""
    deferred: int | None = None
    """An SSE connection whose writer has not started yet: the ``first`` it will be given (see
    :meth:`SessionStreams.first_event`)."""
    batch: bool = False
    next_seq: int = 0

    def allocate_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    @property
    def complete(self) -> bool:
        """A POST stream whose every response has been queued."""
        return self.id != GET_STREAM and not self.pending


class Route(enum.Enum):
    """What the driver does with a message :meth:`SessionStreams.outgoing` has placed."""

    QUEUE = "queue"
    """Queue the event on its stream (and store it, with an event store)."""
    QUEUE_LAST = "queue last"
    """Queue the event, then :data:`END`: it was the stream's last response."""
    JSON_WAIT = "json wait"
    """A JSON-mode response, kept: the stream owes more."""
    JSON_DONE = "json done"
    """A JSON-mode stream is complete: send :meth:`SessionStreams.json_body` as its response."""
    WHOLE = "whole"
    """The last response of an SSE stream whose writer has not started: send the whole stream
    (:meth:`SessionStreams.whole_body`) as one response."""


S = TypeVar("S", bound=StreamRecord)


class SessionStreams(Generic[S]):
    """The streams of one 2025 session, and where each message goes (see the module's docstring).

    ``stream``: makes a stream record (the driver's subclass) from its id, JSON mode and batch flag;
    ``json_mode``: POST streams answer with one JSON body (``ServerConfig.json_response``);
    ``event_ids``: events carry ids (there is an event store to resume from); ``priming``: an SSE
    stream begins with a priming event (the revision asks for one and ids are given);
    ``retry``: the priming event's ``retry`` field (milliseconds)."""

    __slots__ = ("_new", "_next_id", "event_ids", "json_mode", "priming", "requests", "retry", "streams")

    def __init__(
        self,
        stream: Callable[[int, bool, bool], S],
        *,
        json_mode: bool,
        event_ids: bool,
        revision: Revision,
        retry: int | None,
    ) -> None:
        self._new = stream
        self.json_mode = json_mode
        self.event_ids = event_ids
        self.priming = revision.priming_event and event_ids
        self.retry = retry
        self.streams: dict[int, S] = {GET_STREAM: stream(GET_STREAM, False, False)}
        self.requests: dict[mt.RequestId, S] = {}
        """The stream that owes each request's answer."""
        self._next_id = 1

    @property
    def get_stream(self) -> S:
        return self.streams[GET_STREAM]

    def skip_to(self, stream_id: int) -> None:
        """Number new POST streams from ``stream_id`` on (a session adopted from another worker: the
        client may resume streams numbered there)."""
        self._next_id = max(self._next_id, stream_id)

    # -- a POST ------------------------------------------------------------------------------

    def check_request_ids(
        self, requests: tuple[mt.JSONRPCRequest, ...], inflight: Container[mt.RequestId]
    ) -> None:
        """400 for a request whose id is already in flight in this session (owed an answer, or its
        handler running: ``inflight``) or repeated in its batch: its answer could not be told apart.
        Nothing changes."""
        seen: set[mt.RequestId] = set()
        for request in requests:
            if request.id in self.requests or request.id in inflight or request.id in seen:
                raise RemoteProtocolError(
                    f"Invalid Request: request id {request.id!r} is already in use in this session",
                    request_id=request.id,
                )
            seen.add(request.id)

    def open_post(self, requests: tuple[mt.JSONRPCRequest, ...], *, batch: bool) -> S:
        """A POST's stream, owing the answers of ``requests``."""
        stream = self._new(self._next_id, self.json_mode, batch)
        self._next_id += 1
        self.streams[stream.id] = stream
        for request in requests:
            stream.pending.add(request.id)
            self.requests[request.id] = stream
        return stream

    # -- outgoing ----------------------------------------------------------------------------

    def outgoing(self, message: dict[str, Any], related: mt.RequestId | None) -> tuple[Route, S, Outgoing]:
        """Place a message: a response on its request's stream, anything related to a request with an
        SSE stream on that stream, the rest on the GET stream.  Returns what to do, the stream, and the
        numbered event (:data:`END` for ``JSON_*``, whose bodies stay here)."""
        stream = self.requests.get(related) if related is not None else None
        if related is not None and stream is not None and "method" not in message:  # a response
            if stream.json_mode:
                # No queue and no writer task: the task that gives the last response sends the body.
                stream.bodies.append(jsonrpc.encode(message))
                return (Route.JSON_WAIT if self.answered(related) is None else Route.JSON_DONE), stream, END
            if stream.deferred is not None and stream.pending == {related}:
                del self.requests[related]
                stream.pending.discard(related)
                self.forget_stream(stream)
                return Route.WHOLE, stream, Outgoing(stream.allocate_seq(), jsonrpc.encode(message))
        if stream is None or stream.json_mode:
            stream = self.streams[GET_STREAM]
        item = Outgoing(stream.allocate_seq(), jsonrpc.encode(message))
        if related is not None and "id" in message and "method" not in message:
            last = self.answered(related)
            if last is not None and not last.json_mode:
                return Route.QUEUE_LAST, last, item
        return Route.QUEUE, stream, item

    def answered(self, request_id: mt.RequestId) -> S | None:
        """The request will get no more messages.  Returns its stream if that is now complete: a
        JSON-mode one is forgotten here (the caller sends :meth:`json_body`), an SSE one is left to the
        caller (it queues :data:`END`, and forgets the stream unless a connection still carries it)."""
        stream = self.requests.pop(request_id, None)
        if stream is None:
            return None
        stream.pending.discard(request_id)
        if not stream.complete:
            return None
        if stream.json_mode:
            self.forget_stream(stream)
        return stream

    def forget_stream(self, stream: S) -> None:
        if self.streams.get(stream.id) is stream:
            del self.streams[stream.id]

    def json_body(self, stream: S) -> bytes:
        """The body of a complete JSON-mode stream (empty: every request of it was cancelled, 204)."""
        bodies = stream.bodies
        if not bodies:
            return b""
        return b"[" + b",".join(bodies) + b"]" if stream.batch else bodies[0]

    def close_target(self, related: mt.RequestId | None) -> S | None:
        """The stream whose live connection ``close_sse_stream`` cuts (the request's, or the GET
        stream); None when there is none to cut or the client could not resume it (no event ids)."""
        stream = self.requests.get(related) if related is not None else self.streams[GET_STREAM]
        if stream is None or stream.json_mode or not self.event_ids:
            return None
        return stream

    # -- SSE framing -------------------------------------------------------------------------

    def first_event(self, stream: S, replay_after: int | None) -> int:
        """What a new connection of ``stream`` begins with: replay the stored events after
        ``replay_after`` (>= 0), a priming event of seq ``-first - 2`` (<= -2), or neither (-1)."""
        if replay_after is not None:
            return replay_after
        if self.priming:
            return -stream.allocate_seq() - 2  # the priming event's id comes before any message
        return -1

    def sse_event(self, stream_id: int, seq: int, data: bytes) -> bytes:
        """A message as an SSE event: with its id when there is an event store to resume from."""
        text = data.decode()
        if not text or "\n" in text or "\r" in text:  # never for a message we serialized
            event_id = make_event_id(stream_id, seq) if self.event_ids else None
            return sse.encode_event(text, id=event_id)
        # one ``data`` line: what sse.encode_event writes, without its checks (an id of two ints
        # holds nothing they refuse)
        if self.event_ids:
            return f"id: {stream_id}-{seq}\ndata: {text}\n\n".encode()
        return f"data: {text}\n\n".encode()

    def priming_event(self, stream_id: int, seq: int) -> bytes:
        retry = self.retry
        if type(retry) is int and retry >= 0:  # what sse.encode_event writes, without its checks
            return b"id: %d-%d\nretry: %d\ndata:\n\n" % (stream_id, seq, retry)
        return sse.encode_event("", id=make_event_id(stream_id, seq), retry=retry)

    def whole_body(self, stream_id: int, first: int, item: Outgoing) -> bytes:
        """A whole SSE stream of one event (``Route.WHOLE``), after its priming event if it has one."""
        body = self.sse_event(stream_id, item.seq, item.data)
        if first <= -2:
            body = self.priming_event(stream_id, -first - 2) + body
        return body

    # -- GET ---------------------------------------------------------------------------------

    def resume(self, last_event_id: str | None) -> tuple[S, int | None]:
        """The stream a GET connects to, and the seq to replay after (None: no replay): the GET
        stream, or the stream a valid ``Last-Event-ID`` names (a stream no longer live, or a
        JSON-mode one, which is never resumed, gets a fresh record: its stored events are replayed)."""
        parsed = parse_event_id(last_event_id) if last_event_id else None
        if parsed is None:
            return self.streams[GET_STREAM], None
        stream_id, after = parsed
        stream = self.streams.get(stream_id)
        if stream is None or stream.json_mode:
            stream = self._new(stream_id, False, False)
        # What the client has seen is never numbered again (a session adopted from another worker
        # numbers on from here): new POST streams after this one, the GET stream's events after it.
        self._next_id = max(self._next_id, stream_id + 1)
        stream.next_seq = max(stream.next_seq, after + 1)
        return stream, after

    def is_live(self, stream: S) -> bool:
        """Whether ``stream`` is still one of the session's (a resumed finished stream is not)."""
        return self.streams.get(stream.id) is stream

    def statistics(self) -> dict[str, int]:
        return {"streams": len(self.streams), "pending_responses": len(self.requests)}


def check_batch(batch: bool, size: int, revision: Revision, max_batch: int) -> None:
    """400 for a POST's batch that its session's revision does not allow, or that holds more than
    ``max_batch`` messages (each answer must fit in its stream's queue)."""
    if not batch:
        return
    if not revision.batches:
        raise RemoteProtocolError(f"Invalid Request: JSON-RPC batches are not supported in {revision.name}")
    if size > max_batch:
        raise RemoteProtocolError(f"Invalid Request: a batch may hold at most {max_batch} messages")
