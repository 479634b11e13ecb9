"""A worker's heartbeat in Redis, and what it tells the worker of its own leases.

The heartbeat key ``<prefix>:worker:<id>`` holds the worker instance's signed heartbeat (see
``_protocol.cluster.leases``), renewed every ``interval`` with a TTL of ``ttl``.  Another worker takes
a session whose lease names this instance only once the heartbeat is gone (or stale) and stays so for
an interval and a half; so while the last renewal is recent (less than :data:`SURE` of the TTL ago, on
the monotonic clock) no other worker can have taken this worker's sessions.  Past that (a long pause,
a lost connection), or when a renewal finds that the heartbeat it replaced is not one it wrote (it
expired, or someone else wrote it), a new *term* begins: each session is confirmed again before it is
served (:class:`~mcp_trio.redis.sessions.SessionLeases`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Literal

import trio

from .._protocol.cluster import ClusterKeys, heartbeat_key, seal_heartbeat

__all__ = ["SURE", "Heartbeat"]

SURE = 0.5
"""The fraction of the heartbeat TTL after its last renewal for which the worker's leases are sure."""


class Heartbeat:
    """One worker instance's heartbeat: its value, its renewals, and whether its leases are sure."""

    def __init__(self, keys: ClusterKeys, prefix: str, instance_id: str, interval: float, ttl: float) -> None:
        self.keys = keys
        self.prefix = prefix
        self.instance_id = instance_id
        self.interval = interval
        self.ttl = ttl
        self.worker_id: str | None = None
        """Set when the bus is made a worker's link."""
        self.draining = False
        """The worker hands its sessions over: its heartbeat says so from the next beat on."""
        self.term = 0
        """Grows each time the worker's leases may have lapsed."""
        self.on_changed: Callable[[], None] | None = None
        """Called when a renewal found another heartbeat than this worker's (a new term began)."""
        self.outage_safe = True
        """Whether the link to Redis went down while the leases were sure (a Redis that stopped: no
        worker can take a session until it is back) rather than after they had lapsed (a worker that
        finds its connection gone after a pause: another may have taken them)."""
        self.doubts = 0
        """How many times the leases lapsed while the link was up (a pause, a stalled loop) or before
        it went down: a session held since before the last doubt and not confirmed since is in doubt
        (another worker may have taken it meanwhile)."""
        self._sure_until = float("-inf")
        self._lapsed = True
        self._written: deque[bytes] = deque(maxlen=4)
        self.changes = 0
        """Renewals that found another heartbeat than this worker's."""

    @property
    def key(self) -> str:
        assert self.worker_id is not None
        return heartbeat_key(self.prefix, self.worker_id)

    def value(self, now: float) -> bytes:
        """The heartbeat, signed at ``now`` (seconds since the epoch)."""
        state: Literal["live", "draining"] = "draining" if self.draining else "live"
        return seal_heartbeat(self.keys, self.key, self.instance_id, state, now)

    def ttl_ms(self) -> int:
        return max(1, int(self.ttl * 1000))

    def renewed(self, started: float, written: bytes, previous: bytes | None) -> None:
        """The heartbeat was renewed (``written``) by a command sent at ``started`` (monotonic);
        ``previous`` is what it replaced (None: nothing, or unknown)."""
        if started >= self._sure_until and not self.outage_safe:
            self._distrust()  # a lapse that no outage begun while sure explains: a pause, say
        # Gone (expired or deleted; nothing is before the first beat), or written by someone else:
        # what was sure may not be, every session is confirmed again.
        if previous not in self._written if previous is not None else self._written:
            self.changes += 1
            self.term += 1
            if self.on_changed is not None:
                self.on_changed()
        self.confirmed(started, written)

    def confirmed(self, started: float, written: bytes) -> None:
        """The heartbeat was written (``written``) by a command sent at ``started`` that also found
        this worker's lease in place: the leases are sure again."""
        self._written.append(written)
        self._sure_until = max(self._sure_until, started + self.ttl * SURE)
        self._lapsed = False
        self.outage_safe = False  # until the link goes down while sure

    def sure(self) -> bool:
        """Whether no other worker can have taken this worker's sessions (a term begins when not)."""
        if trio.current_time() < self._sure_until:
            return True
        if not self._lapsed:
            self._lapsed = True
            self.term += 1
            if not self.outage_safe:
                self._distrust()
        return False

    def link_lost(self) -> None:
        """The link's connection is gone."""
        self.outage_safe = trio.current_time() < self._sure_until

    def _distrust(self) -> None:
        """The leases lapsed while the link was up (a pause, a stalled loop) or before it went down:
        another worker may have taken a session meanwhile.  For a session in doubt, a lease Redis no
        longer has (or has older) is no proof of anything: the session is let go, not written back."""
        self.doubts += 1
        if self.on_changed is not None:
            self.on_changed()
