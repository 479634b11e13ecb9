"""How the answer to one 2026-07-28 HTTP request goes out: a :class:`Responder` that decides late
between one JSON body and an SSE stream, and what a client disconnect does to it.

The handler runs in the request task, under the request's cancel scope: on mcp_trio's own servers the
server cancels that scope when the client disconnects (the ``mcp_trio.disconnect_callback`` scope
extension, see :func:`disconnected`); elsewhere a sibling task watches ``receive()`` for
``http.disconnect`` (:func:`watch_disconnect`).  Either way a disconnect cancels the handler (JSON and
SSE answers alike) and nothing is sent afterwards.

A handler that stays silent would leave its answer silent too, and a proxy's read timeout (HAProxy's
``timeout server``, nginx's ``proxy_read_timeout``) would cut it: :class:`KeepAlive` turns an answer
silent for ``keepalive_interval`` into an SSE stream and sends it a comment every interval while the
handler is silent (not in JSON-only mode: one JSON body cannot carry comments).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from .._protocol import jsonrpc, sse
from .streams import KEEPALIVE_COMMENT, TRANSPORT_ERRORS, GuardedSend, content_length
from .wire import JSON_HEADERS, SSE_HEADERS, Receive, Send

__all__ = ["KeepAlive", "Responder", "disconnected", "watch_disconnect"]

logger = logging.getLogger(__name__)

BEAT_GRACE = 1.0
"""How long a request that ends (cancelled) waits for a keep-alive comment still being sent on its
answer (seconds): a healthy write takes far less, and a cut one (the client went) ends at once."""


class Responder:
    """One HTTP answer whose kind is decided late: the first notification (or :class:`KeepAlive`'s first
    comment) makes it an SSE stream; a final message with nothing sent before it is sent as one JSON
    body (with a fitting status)."""

    __slots__ = ("_json_only", "answered", "beat", "gone", "send", "sending", "streaming")

    def __init__(self, send: Send, *, json_only: bool) -> None:
        self.send = send
        self._json_only = json_only
        self.streaming = False
        self.gone = False
        self.answered = False
        """The handler is done: its answer goes out whatever happens now (the shutdown leaves it be)."""
        self.sending = 0
        """Notifications being sent (a keep-alive comment is not sent meanwhile)."""
        self.beat: trio.Event | None = None
        """While :class:`KeepAlive` sends a comment on this answer: the request's own sends wait for it."""

    async def notify(self, message: dict[str, Any]) -> None:
        while self.beat is not None:  # a keep-alive comment goes out first (it may find the client gone)
            await self.beat.wait()
        if self.gone or self._json_only:
            return  # nobody listens, or a JSON answer cannot carry notifications
        self.sending += 1
        try:
            if not self.streaming:
                self.streaming = True
                await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await self._event(message)
        finally:
            self.sending -= 1

    async def _event(self, message: dict[str, Any]) -> None:
        data = sse.encode_event(jsonrpc.encode(message).decode())
        await self.send({"type": "http.response.body", "body": data, "more_body": True})

    async def finish(self, message: dict[str, Any], status: int = 200, *, shield: bool = True) -> None:
        """Send the final message (``shield``: see :meth:`GuardedSend.whole`), once a keep-alive comment
        being sent is out (the caller stopped :class:`KeepAlive` from starting another)."""
        while self.beat is not None:
            await self.beat.wait()
        if self.gone:
            return
        if self.streaming:
            await self._event(message)
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = jsonrpc.encode(message)
        start = {
            "type": "http.response.start",
            "status": status,
            "headers": [*JSON_HEADERS, content_length(body)],
        }
        end = {"type": "http.response.body", "body": body, "more_body": False}
        if isinstance(self.send, GuardedSend):  # one shielded scope for the two sends (or none)
            await self.send.whole(start, end, shield=shield)
        else:
            await self.send(start)
            await self.send(end)

    async def last_words(self, message: dict[str, Any]) -> None:
        """Send ``message`` (the -32000 answer of a request the server's shutdown cancelled) as the
        final message, within :data:`BEAT_GRACE` though the request is cancelled, unless the client has
        gone (on mcp_trio's servers a send still under way then is cut: its connection closes)."""
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + BEAT_GRACE
            try:
                await self.finish(message, shield=False)
            except TRANSPORT_ERRORS as exc:
                logger.debug("the shutdown answer of a 2026 request was not sent: %r", exc)

    async def settle(self) -> None:
        """Wait (within :data:`BEAT_GRACE`, even when cancelled) for a keep-alive comment being sent on
        this answer: the request does not end with a send of its own under way."""
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + BEAT_GRACE
            while self.beat is not None:
                await self.beat.wait()


class KeepAlive:
    """Keep-alive comments on the 2026 answers of an app whose handlers are silent.

    One task (:meth:`run`) for every request: a request is watched (:meth:`watch`, :meth:`unwatch`)
    while its handler runs, which costs a dictionary entry, no task and no cancel scope.  An answer
    silent for ``interval`` becomes an SSE stream (its head goes out) and gets a comment; then one
    every ``interval`` until the handler is done.  Each comment is sent by a short task of its own, so
    that a client that stopped reading holds up only its own answer.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._due: dict[Responder, float] = {}
        """The watched answers and when each gets its next comment (in that order: every entry is
        added, or moved to the end, with ``now + interval``)."""
        self.comments = 0
        """Comments sent (for statistics)."""

    def __len__(self) -> int:
        return len(self._due)

    def watch(self, responder: Responder) -> None:
        """Its handler starts: a comment in ``interval`` unless it is done by then."""
        self._due[responder] = trio.current_time() + self.interval

    def unwatch(self, responder: Responder) -> None:
        """Its handler is done (or cancelled): no more comments (one being sent may still be under way:
        :meth:`Responder.finish` and :meth:`Responder.settle` wait for it)."""
        self._due.pop(responder, None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send the comments that are due, until cancelled (with the app)."""
        due = self._due
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                now = trio.current_time()
                wake = now + self.interval  # a request watched from now on is due after this
                while due:
                    responder, when = next(iter(due.items()))
                    if when > now:
                        wake = when
                        break
                    del due[responder]
                    due[responder] = now + self.interval
                    if not (responder.sending or responder.gone or responder.beat is not None):
                        nursery.start_soon(self._comment, responder)
                await trio.sleep_until(wake)

    async def _comment(self, responder: Responder) -> None:
        done = responder.beat = trio.Event()
        try:
            if not responder.streaming:  # the answer becomes an SSE stream
                responder.streaming = True
                await responder.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await responder.send({"type": "http.response.body", "body": KEEPALIVE_COMMENT, "more_body": True})
            self.comments += 1
        except TRANSPORT_ERRORS:
            responder.gone = True  # the client went: its disconnect cancels the handler
        except Exception:  # nothing of one answer may end the app's keep-alives
            logger.exception("keep-alive comment of a 2026 answer: send failed")
            responder.gone = True
        finally:
            responder.beat = None
            done.set()


async def watch_disconnect(receive: Receive, scope: trio.CancelScope, responder: Responder) -> None:
    """The sibling of a 2026 request on a server without a
    :class:`~mcp_trio._runtime.contract.DisconnectHook`: a client disconnect cancels the request's
    scope (and cuts a send stuck on it)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            disconnected(scope, responder)
            return


def disconnected(scope: trio.CancelScope, responder: Responder) -> None:
    """The client of a 2026 request went: nothing more is sent, a send under way is cut (where the
    server allows), the request is cancelled."""
    responder.gone = True
    if isinstance(responder.send, GuardedSend):
        responder.send.abort()
    scope.cancel()
