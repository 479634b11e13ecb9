"""Server-to-client requests of a 2025-era connection (HTTP session or stdio): where the client's answer
lands, and how a handler's input requests are sent at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as mt
import trio

from .._protocol import jsonrpc
from ..errors import RPCError

__all__ = ["PendingRequests", "Reply", "ask_concurrently"]

SendRequest = Callable[[str, "dict[str, Any] | None", "mt.RequestId | None"], Awaitable[dict[str, Any]]]


class Reply:
    """Where the client's answer to one server-to-client request lands."""

    __slots__ = ("arrived", "message")

    def __init__(self) -> None:
        self.arrived = trio.Event()
        self.message: mt.JSONRPCResponse | mt.JSONRPCError | None = None

    def deliver(self, message: mt.JSONRPCResponse | mt.JSONRPCError) -> None:
        self.message = message
        self.arrived.set()

    def result(self) -> dict[str, Any]:
        """The answer's result; :class:`RPCError` if the client answered an error."""
        message = self.message
        if isinstance(message, mt.JSONRPCError):
            raise RPCError(message.error.code, message.error.message, message.error.data)
        assert isinstance(message, mt.JSONRPCResponse)
        return message.result


class PendingRequests:
    """The server-to-client requests of one connection that wait for the client's answer."""

    __slots__ = ("_next_id", "_waiting")

    def __init__(self) -> None:
        self._next_id = 0
        self._waiting: dict[mt.RequestId, Reply] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        on_cancel: Callable[[dict[str, Any]], object],
    ) -> dict[str, Any]:
        """Send a request with ``send`` and wait for its answer.  If the waiter is cancelled, the
        ``notifications/cancelled`` for it goes to ``on_cancel`` (which drops it if the connection is
        closing)."""
        self._next_id += 1
        request_id = self._next_id
        reply = self._waiting[request_id] = Reply()
        try:
            await send(jsonrpc.request(request_id, method, params))
            await reply.arrived.wait()
        except trio.Cancelled:
            on_cancel(jsonrpc.notification("notifications/cancelled", {"requestId": request_id}))
            raise
        finally:
            del self._waiting[request_id]
        return reply.result()

    def deliver(self, message: mt.JSONRPCResponse | mt.JSONRPCError) -> bool:
        """Hand a client's answer to the request waiting for it; False if none waits."""
        reply = self._waiting.get(message.id) if message.id is not None else None
        if reply is None:
            return False
        reply.deliver(message)
        return True


async def ask_concurrently(
    request: SendRequest, requests: Mapping[str, dict[str, Any]], related: mt.RequestId | None
) -> dict[str, Any]:
    """Send a handler's input requests as server-to-client requests, at once; their answers by key.
    Several run in a nursery of the handler's own task, so they end with it."""
    answers: dict[str, Any] = {}

    async def one(key: str, wire: dict[str, Any]) -> None:
        answers[key] = await request(wire["method"], wire["params"], related)

    if len(requests) == 1:
        ((key, wire),) = requests.items()
        await one(key, wire)
    else:
        async with trio.open_nursery() as nursery:
            for key, wire in requests.items():
                nursery.start_soon(one, key, wire)
    return answers
