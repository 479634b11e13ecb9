"""How the answer to one 2026-07-28 HTTP request goes out: a :class:`Responder` that decides late
between one JSON body and an SSE stream, and what a client disconnect does to it.

The handler runs in the request task, under the request's cancel scope: on mcp_trio's own servers the
server cancels that scope when the client disconnects (the ``mcp_trio.disconnect_callback`` scope
extension, see :func:`disconnected`); elsewhere a sibling task watches ``receive()`` for
``http.disconnect`` (:func:`watch_disconnect`).  Either way a disconnect cancels the handler (JSON and
SSE answers alike) and nothing is sent afterwards.
"""

from __future__ import annotations

from typing import Any

import trio

from .._protocol import jsonrpc, sse
from .streams import GuardedSend, content_length
from .wire import JSON_HEADERS, SSE_HEADERS, Receive, Send

__all__ = ["Responder", "disconnected", "watch_disconnect"]


class Responder:
    """One HTTP answer whose kind is decided late: the first notification makes it an SSE stream; a
    final message with no notification before it is sent as one JSON body (with a fitting status)."""

    __slots__ = ("_json_only", "gone", "send", "streaming")

    def __init__(self, send: Send, *, json_only: bool) -> None:
        self.send = send
        self._json_only = json_only
        self.streaming = False
        self.gone = False

    async def notify(self, message: dict[str, Any]) -> None:
        if self.gone or self._json_only:
            return  # nobody listens, or a JSON answer cannot carry notifications
        if not self.streaming:
            self.streaming = True
            await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await self._event(message)

    async def _event(self, message: dict[str, Any]) -> None:
        data = sse.encode_event(jsonrpc.encode(message).decode())
        await self.send({"type": "http.response.body", "body": data, "more_body": True})

    async def finish(self, message: dict[str, Any], status: int = 200, *, shield: bool = True) -> None:
        """Send the final message (``shield``: see :meth:`GuardedSend.whole`)."""
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
