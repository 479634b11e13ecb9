"""The notification bus: how the server's own notifications (list changes, resource updates) reach every
connected peer.

A peer is a 2025 session, a 2026 ``subscriptions/listen`` stream or a stdio connection.  Delivery never
waits on a peer: each one takes the message with :meth:`Subscriber.notify_nowait` (queued for its own
writer), all of them before :meth:`NotificationBus.publish` yields, so a slow peer cannot hold the
others back and a caller cancelled at ``await publish(...)`` has already reached everyone.  The
in-process :class:`LocalNotificationBus` is the default; a bus spanning processes
(:class:`mcp_trio.redis.RedisNotificationBus`) implements the same protocol and hands what arrives from
elsewhere to its local subscribers.
"""

from __future__ import annotations

from typing import Any, Protocol

import trio

__all__ = ["LocalNotificationBus", "NotificationBus", "Subscriber"]


class Subscriber(Protocol):
    """What the bus needs of a peer."""

    subscriptions: set[str] | frozenset[str]
    """The resource URIs it subscribed to (``notifications/resources/updated`` goes only there)."""

    def notify_nowait(self, message: dict[str, Any]) -> None:
        """Take a server notification without blocking (queue it, or drop it if it cannot keep up)."""
        ...


class NotificationBus(Protocol):
    """What the server needs of a bus.

    A bus may also have tasks of its own (a subscriber, a reconnect loop): it then has a method
    ``async run(*, task_status)``, which :meth:`MCPApp.run <mcp_trio.MCPApp.run>` starts in the app's
    nursery (under hypercorn's lifespan, ``serve``, ``serve_h11`` and ``open_asgi_client`` alike) and
    cancels with it.  A bus with a ``statistics()`` method (returning a JSON-ready dict) is reported by
    :meth:`MCPApp.statistics <mcp_trio.MCPApp.statistics>` as ``notification_bus``."""

    def subscribe(self, peer: Subscriber) -> None: ...

    def unsubscribe(self, peer: Subscriber) -> None: ...

    async def publish(self, message: dict[str, Any], uri: str | None = None) -> None:
        """Deliver ``message`` to every subscriber (with ``uri``: to those subscribed to it)."""
        ...


class LocalNotificationBus:
    """The subscribers of this process, each handed every message at once."""

    def __init__(self) -> None:
        self._subscribers: set[Subscriber] = set()

    def __len__(self) -> int:
        return len(self._subscribers)

    @property
    def subscribers(self) -> frozenset[Subscriber]:
        return frozenset(self._subscribers)

    def subscribe(self, peer: Subscriber) -> None:
        self._subscribers.add(peer)

    def unsubscribe(self, peer: Subscriber) -> None:
        self._subscribers.discard(peer)

    def deliver(self, message: dict[str, Any], uri: str | None = None) -> None:
        """Hand ``message`` to every local subscriber, now (no checkpoint)."""
        for peer in list(self._subscribers):
            if uri is None or uri in peer.subscriptions:
                peer.notify_nowait(message)

    async def publish(self, message: dict[str, Any], uri: str | None = None) -> None:
        self.deliver(message, uri)
        await trio.lowlevel.checkpoint()
