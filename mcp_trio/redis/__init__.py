"""Workers that share Redis: :class:`RedisNotificationBus`, :class:`RedisTaskStore`,
:class:`RedisEventStore` and :class:`RedisRateLimiter`.

Install the extra first: ``pip install 'mcp_trio[redis]'`` (it brings `coredis
<https://coredis.readthedocs.io>`_, an async Redis client that runs on Trio through AnyIO).  Only this
package imports it, and only once a bus or a store is made: ``import mcp_trio`` never does.  Redis 6
or later.

The package by job: ``connection`` (coredis, and the connection a bus and a store keep), ``bus`` (the
notification bus), ``workers`` (a worker's heartbeat, session hash, inbox and forwarding), ``tasks``
(the task store), ``task_records`` (its records, scripts and signals), ``task_liveness`` (a worker's
liveness key and how a stopped worker's task is judged), ``task_workers`` (the store's part that
keeps the key, records the tasks of stopped workers failed and sweeps for them), ``events`` (the event
store, with ``eventreads`` and ``eventscripts``), ``ratelimits`` (the rate limits' buckets) and
``sessions`` (the records and leases of a worker's sessions, for adoption and hand-over).
"""

from __future__ import annotations

# The four classes are the API; the other names below were importable from mcp_trio.redis before it
# became a package, and stay so.
from .bus import RedisNotificationBus
from .connection import MALFORMED_LOG_INTERVAL as MALFORMED_LOG_INTERVAL
from .connection import State as State
from .connection import redact as redact
from .events import RedisEventStore
from .ratelimits import RedisRateLimiter
from .tasks import SIGNAL_LIMIT as SIGNAL_LIMIT
from .tasks import RedisTaskStore
from .workers import Deliver as Deliver
from .workers import Forwarded as Forwarded

__all__ = ["RedisEventStore", "RedisNotificationBus", "RedisRateLimiter", "RedisTaskStore"]
