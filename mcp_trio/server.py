"""The server's extension points and advanced serving names.

A server needs only the front door (``MCPServer``, ``MCPApp``, ``serve``, ...).  This module holds what
you replace or tune once it grows:

- the seams a deployment swaps: where a 2025 session's stream events are kept for resumption
  (:class:`EventStore`), where sessions live (:class:`SessionRegistry`), how notifications reach every
  peer (:class:`NotificationBus`), where tasks are kept (:class:`TaskStore`, :class:`TaskRecord`); each
  with its in-process default (``InMemoryEventStore``, ``LocalSessionRegistry``,
  ``LocalNotificationBus``, ``MemoryTaskStore``), and ``mcp_trio.redis`` with the ones shared by
  several workers;
- :class:`TaskStarter`, what a tool that may run as a task receives to say when it has started;
- :class:`HTTPRequestInfo`, what ``ServerConfig.authenticate`` is given about a request;
- :class:`RateLimit`, one of ``ServerConfig.rate_limits``, and :class:`RateLimitStore`, the seam of
  buckets shared by workers (``mcp_trio.redis.RedisRateLimiter``), which answers a :class:`Refusal`;
- :class:`ServerCard`, what the server card adds to the server's ``server/discover`` answer
  (``ServerConfig.server_card``; a draft, SEP-2127);
- :class:`AdminApp`, the operations listener's ASGI application (``/metrics``, ``/healthz``,
  ``/readyz``, ``/stats``) for a program that runs its own ASGI server (``serve(admin_bind=...)``
  serves it otherwise);
- :class:`Telemetry`, what ``MCPServer.telemetry`` records into (OpenTelemetry, the operations
  listener's Prometheus registry, the request log), and :class:`JSONFormatter`, logs as JSON lines;
- the HTTP servers' settings: :func:`hypercorn_config` (a hypercorn ``Config``) and :class:`H11Config`
  (the embedded h11 server), and :func:`wait_for_signal`, a ``shutdown_trigger`` for SIGINT/SIGTERM.

Names are imported on first use: importing this module loads neither hypercorn nor the transport.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "AdminApp": "._transport.admin",
    "EventStore": "._transport.eventstore",
    "H11Config": "._http.h11_server",
    "HTTPRequestInfo": "._transport.config",
    "InMemoryEventStore": "._transport.eventstore",
    "JSONFormatter": "._observe.logs",
    "LocalNotificationBus": "._app.bus",
    "LocalSessionRegistry": "._transport.registry",
    "MemoryTaskStore": "._app.tasks.store",
    "NotificationBus": "._app.bus",
    "RateLimit": "._protocol.ratelimits",
    "RateLimitStore": "._transport.ratelimit",
    "Refusal": "._protocol.ratelimits",
    "ServerCard": "._protocol.card",
    "SessionRegistry": "._transport.registry",
    "StoredEvent": "._transport.eventstore",
    "TaskRecord": "._app.tasks.record",
    "TaskStarter": "._app.tasks.starter",
    "TaskStore": "._app.tasks.store",
    "Telemetry": "._observe.telemetry",
    "hypercorn_config": "._http.hypercorn_server",
    "wait_for_signal": "._serve",
}

__all__ = [
    "AdminApp",
    "EventStore",
    "H11Config",
    "HTTPRequestInfo",
    "InMemoryEventStore",
    "JSONFormatter",
    "LocalNotificationBus",
    "LocalSessionRegistry",
    "MemoryTaskStore",
    "NotificationBus",
    "RateLimit",
    "RateLimitStore",
    "Refusal",
    "ServerCard",
    "SessionRegistry",
    "StoredEvent",
    "TaskRecord",
    "TaskStarter",
    "TaskStore",
    "Telemetry",
    "hypercorn_config",
    "wait_for_signal",
]

if TYPE_CHECKING:  # for type checkers and the docs: the real imports
    from ._app.bus import LocalNotificationBus as LocalNotificationBus
    from ._app.bus import NotificationBus as NotificationBus
    from ._app.tasks.record import TaskRecord as TaskRecord
    from ._app.tasks.starter import TaskStarter as TaskStarter
    from ._app.tasks.store import MemoryTaskStore as MemoryTaskStore
    from ._app.tasks.store import TaskStore as TaskStore
    from ._http.h11_server import H11Config as H11Config
    from ._http.hypercorn_server import hypercorn_config as hypercorn_config
    from ._observe.logs import JSONFormatter as JSONFormatter
    from ._observe.telemetry import Telemetry as Telemetry
    from ._protocol.card import ServerCard as ServerCard
    from ._protocol.ratelimits import RateLimit as RateLimit
    from ._protocol.ratelimits import Refusal as Refusal
    from ._serve import wait_for_signal as wait_for_signal
    from ._transport.admin import AdminApp as AdminApp
    from ._transport.config import HTTPRequestInfo as HTTPRequestInfo
    from ._transport.eventstore import EventStore as EventStore
    from ._transport.eventstore import InMemoryEventStore as InMemoryEventStore
    from ._transport.eventstore import StoredEvent as StoredEvent
    from ._transport.ratelimit import RateLimitStore as RateLimitStore
    from ._transport.registry import LocalSessionRegistry as LocalSessionRegistry
    from ._transport.registry import SessionRegistry as SessionRegistry

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
