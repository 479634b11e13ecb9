"""The python-sdk server's events (``ctx.notify_tools_changed()``, ``notify_resource_updated(uri)``) as
mcp_trio notifications: published on the transport's bus, so they reach every session (both eras; with a
:class:`mcp_trio.redis.RedisNotificationBus`, every worker's).

The SDK's bus calls its listeners synchronously; the bridge queues each event (bounded: a burst beyond
:data:`QUEUE` is dropped and logged, as a slow peer's notifications are) and a task of the server's
lifespan publishes them in order.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from .._app.bus import NotificationBus
from .._protocol import jsonrpc
from .._runtime.peerlog import RateLimitedLog

__all__ = ["QUEUE", "EventBridge"]

QUEUE = 1024
"""Most events waiting to be published."""

logger = logging.getLogger("mcp_trio.sdk")

_METHODS: dict[type[Any], str] = {
    ToolsListChanged: "notifications/tools/list_changed",
    PromptsListChanged: "notifications/prompts/list_changed",
    ResourcesListChanged: "notifications/resources/list_changed",
}


class EventBridge:
    """Subscribed to the SDK server's ``SubscriptionBus`` while :meth:`run` runs."""

    def __init__(self, events: Any, bus: NotificationBus) -> None:
        self._events = events
        self._bus = bus
        self._send, self._receive = trio.open_memory_channel[ServerEvent](QUEUE)
        self._dropped = RateLimitedLog(logger)

    def _take(self, event: ServerEvent) -> None:
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self._dropped.log(logging.WARNING, "python-sdk server event dropped: %d waiting already", QUEUE)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        unsubscribe = self._events.subscribe(self._take)
        try:
            task_status.started()
            async for event in self._receive:
                if isinstance(event, ResourceUpdated):
                    message = jsonrpc.notification("notifications/resources/updated", {"uri": event.uri})
                    await self._bus.publish(message, event.uri)
                else:
                    await self._bus.publish(jsonrpc.notification(_METHODS[type(event)], None))
        finally:
            unsubscribe()
