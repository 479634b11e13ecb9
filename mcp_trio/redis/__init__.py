"""Workers that share Redis: :class:`RedisNotificationBus` and :class:`RedisTaskStore`.

Install the extra first: ``pip install 'mcp_trio[redis]'`` (it brings `coredis
<https://coredis.readthedocs.io>`_, an async Redis client that runs on Trio through AnyIO).  Only this
package imports it, and only once a bus or a store is made: ``import mcp_trio`` never does.  Redis 6
or later.

The package by job: :mod:`~mcp_trio.redis.connection` (coredis, and the connection a bus and a store
keep), :mod:`~mcp_trio.redis.bus` (the notification bus), :mod:`~mcp_trio.redis.workers` (a worker's
heartbeat, session hash, inbox and forwarding), :mod:`~mcp_trio.redis.tasks` (the task store).
"""

from __future__ import annotations

from .bus import RedisNotificationBus
from .tasks import RedisTaskStore

__all__ = ["RedisNotificationBus", "RedisTaskStore"]
