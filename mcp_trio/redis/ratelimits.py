"""Rate limit buckets shared by the workers of a deployment: :class:`RedisRateLimiter` (following the
draft SEP-3304, which may change)."""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from .._protocol.cluster import check_channel_prefix
from .._protocol.ratelimits import RateLimit, Refusal
from .connection import (
    CallFailed,
    RedisLink,
    closing_connections,
    describe,
    new_client,
    probe,
    redact,
)

if TYPE_CHECKING:
    import coredis
    from coredis.commands.script import Script

__all__ = ["TAKE", "RedisRateLimiter"]

IDLE_PING = 5.0
"""Seconds between two pings of an idle connection (so that an outage is noticed without a request)."""

TAKE = """
-- Take ARGV's cost from each bucket of KEYS, or nothing if one of them lacks it.
-- ARGV, for each key: capacity, tokens gained per millisecond, cost, TTL in milliseconds.
-- A bucket is a hash {t: tokens, at: milliseconds}; none is a full one.  Values out of range (a
-- writer's) are read as a full bucket's, or an empty one's, never as more than the capacity.
-- Returns {0, 0} when the tokens were taken, else {the index of the bucket that asks the longest
-- wait, that wait in milliseconds}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local worst, wait = 0, 0
local after = {}
for i = 1, #KEYS do
  local base = (i - 1) * 4
  local capacity = tonumber(ARGV[base + 1])
  local rate = tonumber(ARGV[base + 2])
  local cost = tonumber(ARGV[base + 3])
  local held = redis.call('HMGET', KEYS[i], 't', 'at')
  local tokens, at = tonumber(held[1]), tonumber(held[2])
  if tokens == nil or at == nil or tokens ~= tokens or at ~= at then
    tokens, at = capacity, now
  end
  if tokens < 0 then tokens = 0 end
  if at > now then at = now end
  tokens = math.min(capacity, tokens + (now - at) * rate)
  if tokens < cost then
    local needs = (cost - tokens) / rate
    if needs > wait then worst, wait = i, needs end
  end
  after[i] = tokens - cost
end
if worst > 0 then
  return {worst, math.ceil(wait)}
end
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], 't', tostring(after[i]), 'at', tostring(now))
  redis.call('PEXPIRE', KEYS[i], ARGV[(i - 1) * 4 + 4])
end
return {0, 0}
"""


class RedisRateLimiter(RedisLink):
    """The buckets of ``ServerConfig.rate_limits`` shared by every worker that uses the same Redis (a
    :class:`~mcp_trio.server.RateLimitStore`)::

        ServerConfig(rate_limits=[RateLimit.parse("principal=100/min")],
                     rate_limit_store_factory=lambda: RedisRateLimiter(url))

    (``mcp-trio serve --redis URL --rate-limit ...`` does this.)  Each request the app's own buckets
    admit costs one round trip: one Lua script takes a token from each of its buckets at once, or
    none, on Redis's clock (the workers' clocks do not matter).  Each bucket is the hash
    ``<prefix>:rl:<sha-256 of the limit and what it counts>`` (no principal, address or session id is
    stored as it is), which Redis expires once the bucket would be full again, so the keys are
    bounded by the requests of the last period.

    While Redis cannot be reached (not yet connected, down, slower than ``timeout``), :meth:`take`
    answers None at once and each worker's own buckets decide alone: the limits then hold per worker,
    never not at all.  The same holds against a writer to Redis that has no business there: what it
    writes is read as no more than a full bucket, and deleting a bucket only refills it, so it can
    make the limits no looser than each worker's own; it can always make them stricter, to the point
    of refusing every request (as such a writer could deny service to the rest of the deployment too).
    Counters need no signature for that reason.  :meth:`run` (started by :meth:`MCPApp.run
    <mcp_trio.MCPApp.run>`) keeps the connection, reconnecting with backoff (``retry_initial`` doubling
    up to ``retry_max`` seconds), and logs an outage once.

    ``url``: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or ``unix://path``.
    """

    _name = "Redis rate limiter"
    _outage_effect = "rate limits count in each worker alone"
    _back_effect = "; rate limits are shared again"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "mcp_trio",
        timeout: float = 0.5,
        retry_initial: float = 0.1,
        retry_max: float = 2.0,
    ) -> None:
        super().__init__(url, retry_initial, retry_max)
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        self.prefix = check_channel_prefix(prefix)
        self.timeout = timeout
        self.instance_id = secrets.token_hex(8)
        self._live = None
        self._script: Script[bytes] | None = None
        """:data:`TAKE`, run by EVALSHA (and loaded again when Redis does not know it)."""
        self._lost = trio.Event()
        self._counts = dict.fromkeys(
            ("connects", "failures", "unavailable", "admitted", "refused", "not_connected"), 0
        )

    def key(self, limit: RateLimit, subject: str) -> str:
        """The Redis key of ``limit``'s bucket for ``subject``."""
        digest = hashlib.sha256(f"{limit}\0{subject}".encode("utf-8", "surrogatepass")).hexdigest()
        return f"{self.prefix}:rl:{digest[:40]}"

    async def take(self, keys: Mapping[tuple[RateLimit, str], int]) -> Refusal | None:
        """Take each bucket's cost in Redis, or none: the refusal of the bucket that asks the longest
        wait; None when admitted, and at once when Redis cannot answer now (``not_connected``, or
        ``unavailable`` for a command that failed)."""
        script = self._script
        if self._live is None or script is None:
            self._counts["not_connected"] += 1
            return None
        buckets = list(keys)
        names = [self.key(limit, subject) for limit, subject in buckets]
        args: list[str] = []
        for (limit, _), cost in keys.items():
            ttl = max(1, math.ceil(limit.ttl * 1000))
            args += [str(limit.capacity), repr(limit.rate / 1000), str(cost), str(ttl)]
        try:
            reply: object = await self._call(lambda client: script(keys=names, args=args, client=client))
        except CallFailed:
            return None
        if not (isinstance(reply, list) and len(reply) == 2 and all(isinstance(n, int) for n in reply)):
            self._counts["unavailable"] += 1
            return None
        index, wait_ms = reply
        if not 1 <= index <= len(buckets):
            self._counts["admitted"] += 1
            return None
        self._counts["refused"] += 1
        return Refusal(buckets[index - 1][0], max(wait_ms, 1) / 1000)

    # -- the connection -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the connection that :meth:`take` uses until cancelled.  Reports started at once (the
        app does not wait for Redis).  One app runs a limiter."""
        if self._running:
            raise RuntimeError("this RedisRateLimiter is already running (give each app its own)")
        await self._keep_connected(lambda: self._contain_attempt(self._serve), task_status)

    async def _serve(self) -> None:
        lost = self._lost = trio.Event()
        await probe(self.url, self.timeout)
        client = self._client()
        async with client:
            with trio.fail_after(self.timeout):
                await client.ping()
            self._script = client.register_script(TAKE)
            self._connected(client, "")
            while True:
                with trio.move_on_after(IDLE_PING):
                    await lost.wait()
                if lost.is_set():
                    raise ConnectionError(self._last_error or "a command failed")
                with trio.fail_after(self.timeout):
                    await client.ping()

    def _live_lost(self) -> None:
        self._lost.set()  # run() reconnects

    def _client(self) -> coredis.Redis[bytes]:
        return closing_connections(new_client(self.url, self.timeout, self.timeout, self.instance_id))

    def _describe_failure(self, leaf: BaseException) -> str:
        return describe(leaf, self.timeout)

    def statistics(self) -> dict[str, Any]:
        """The Redis ``state``, requests ``admitted`` and ``refused`` by the shared buckets, those left to
        the local ones (``not_connected``; ``unavailable``: a command failed), ``connects``,
        ``failures`` and ``last_error``."""
        return {
            "state": self._state,
            "url": redact(self.url),
            "prefix": self.prefix,
            "last_error": self._last_error,
            **self._counts,
        }
