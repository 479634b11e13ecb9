"""``subscriptions/listen`` (2026-07-28 era, over HTTP): a long-lived request whose answer streams the
notifications asked for, as a :class:`Subscription`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ..errors import TransportError
from .bodies import MessageStream
from .core import SessionCore
from .http import HTTPTransport, _ErrorAnswer
from .observe import failed
from .wire import object_of, rpc_error

__all__ = ["ListenAPI", "Subscription"]


class ListenAPI(SessionCore):
    """:meth:`listen` of :class:`ClientSession`."""

    @asynccontextmanager
    async def listen(
        self,
        *,
        tools: bool = False,
        prompts: bool = False,
        resources: bool = False,
        resource_uris: Sequence[str] = (),
    ) -> AsyncIterator[Subscription]:
        """2026 era: ``subscriptions/listen``.  Yields a ``Subscription`` once the server has
        acknowledged it; iterate it for the notifications asked for.  Leaving the block closes the
        stream (which ends the subscription)."""
        transport = self._transport
        if not self.modern or not isinstance(transport, HTTPTransport):
            raise TransportError("subscriptions/listen needs a 2026-07-28 session over HTTP")
        wanted: dict[str, Any] = {}
        if tools:
            wanted["toolsListChanged"] = True
        if prompts:
            wanted["promptsListChanged"] = True
        if resources:
            wanted["resourcesListChanged"] = True
        if resource_uris:
            wanted["resourceSubscriptions"] = list(resource_uris)
        request_id = next(self._ids)
        params = {"notifications": wanted, "_meta": self._meta()}
        message = {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}
        # one operation from the request to the end of the stream (its span is not the block's current)
        operation = self._operation("subscriptions/listen", params, request_id, current=False)
        if operation is None:
            async with _subscribe(transport, message, request_id) as subscription:
                yield subscription
            return
        try:
            async with _subscribe(transport, operation.inject(message), request_id) as subscription:
                yield subscription
        except BaseException as exc:
            failed(operation, exc)
            raise
        operation.finish({"result": {}})


@asynccontextmanager
async def _subscribe(
    transport: HTTPTransport, message: dict[str, Any], request_id: int
) -> AsyncIterator[Subscription]:
    """POST ``subscriptions/listen`` and yield the subscription once it is acknowledged."""
    try:
        async with transport.open_stream(message) as stream:
            ack = await stream.next_message()
            if ack is None or ack.get("method") != "notifications/subscriptions/acknowledged":
                if ack is not None and "error" in ack:
                    raise rpc_error(ack["error"])
                raise TransportError(f"subscriptions/listen was not acknowledged: {ack!r}")
            notifications = object_of(object_of(ack.get("params")).get("notifications"))
            yield Subscription(request_id, notifications, stream)
    except _ErrorAnswer as exc:
        raise rpc_error(exc.body["error"]) from None


class Subscription:
    """An acknowledged ``subscriptions/listen`` stream: ``acknowledged`` is the filter the server
    honours; iterating yields each notification (``None`` ends it: the server closed the subscription,
    ``closed_gracefully`` tells whether with its completion result)."""

    def __init__(self, request_id: int, acknowledged: dict[str, Any], stream: MessageStream) -> None:
        self.id = request_id
        self.acknowledged = acknowledged
        self._stream = stream
        self.closed_gracefully = False

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        message = await self._stream.next_message()
        if message is None:
            raise StopAsyncIteration
        if "method" not in message and message.get("id") == self.id:
            self.closed_gracefully = "result" in message
            raise StopAsyncIteration
        return message
