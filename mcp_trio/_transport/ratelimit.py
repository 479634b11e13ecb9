"""Rate limits at admission (following the draft SEP-3304): the token buckets of this process
(:class:`LocalBuckets`), and :class:`RateLimits`, which decides for each request which buckets it
takes a token from, takes them (here, then in a shared store such as
:class:`mcp_trio.redis.RedisRateLimiter` when there is one) and counts what it refuses.

A request is counted where the app decides who sent it: an HTTP POST once its body is parsed (both
eras; answered 429), a WebSocket or stdio message as it is read (answered with the JSON-RPC error
alone).  Only requests count, not notifications or answers.  The buckets of this process always
apply: a shared store adds the bound across workers on top of them, so a store that is unreachable,
or that a writer to Redis tampers with, never leaves the server unlimited.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import mcp_types as mt
import trio

from .._protocol import clientsession
from .._protocol.ratelimits import KINDS, RateLimit, Refusal, refill, refused

if TYPE_CHECKING:
    from .._app.principal import PrincipalKeys

__all__ = ["BucketKey", "LocalBuckets", "RateLimitStore", "RateLimits"]

logger = logging.getLogger(__name__)

BucketKey = tuple[RateLimit, str]
"""One bucket: its limit and what it counts for (a principal's key, an address, a session id, ...)."""
MAX_BUCKETS = 100_000
"""The most buckets :class:`LocalBuckets` keeps; beyond it the one used least recently is forgotten
(it has had the longest to fill again)."""


@runtime_checkable
class RateLimitStore(Protocol):
    """Buckets shared by the workers of a deployment (:class:`mcp_trio.redis.RedisRateLimiter`).

    :meth:`take` takes ``cost`` tokens from each bucket of ``keys`` at once, or none if one of them
    lacks them; it answers the :class:`Refusal` then, None when the request is admitted, and None too
    when the store cannot answer now (the local limits then decide alone).  :meth:`run` keeps its
    connection while the app runs (started by :meth:`MCPApp.run <mcp_trio.MCPApp.run>`)."""

    async def take(self, keys: Mapping[BucketKey, int]) -> Refusal | None: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...

    def statistics(self) -> dict[str, Any]: ...


class LocalBuckets:
    """Token buckets in this process, ``(tokens, when)`` by :data:`BucketKey`, least recently used
    first.  A bucket that is full again by now is the same as none, so it is forgotten when met; and
    never more than ``max_buckets`` are kept."""

    __slots__ = ("_buckets", "max_buckets")

    def __init__(self, max_buckets: int = MAX_BUCKETS) -> None:
        self.max_buckets = max_buckets
        self._buckets: collections.OrderedDict[BucketKey, tuple[float, float]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, keys: Mapping[BucketKey, int], now: float) -> Refusal | None:
        """Take ``cost`` tokens from each bucket of ``keys``, or none if one lacks them: then the
        refusal of the one that asks the longest wait."""
        buckets = self._buckets
        after: dict[BucketKey, float] = {}
        worst: Refusal | None = None
        for key, cost in keys.items():
            limit = key[0]
            found = buckets.get(key)
            tokens = float(limit.capacity) if found is None else refill(limit, found[0], now - found[1])
            if tokens < cost:  # (a batch of more requests than the burst is always refused)
                wait = (cost - tokens) / limit.rate
                if worst is None or wait > worst.retry_after:
                    worst = Refusal(limit, wait)
            after[key] = tokens - cost
        if worst is not None:
            return worst
        for key, tokens in after.items():
            buckets[key] = (tokens, now)
            buckets.move_to_end(key)
        self._forget(now)
        return None

    def give_back(self, keys: Mapping[BucketKey, int], now: float) -> None:
        """Return the tokens :meth:`take` took for ``keys`` (the shared store refused the request)."""
        for key, cost in keys.items():
            found = self._buckets.get(key)
            if found is not None:
                limit = key[0]
                tokens = refill(limit, found[0], now - found[1]) + cost
                self._buckets[key] = (min(tokens, limit.capacity), now)

    def _forget(self, now: float) -> None:
        buckets = self._buckets
        while len(buckets) > self.max_buckets:
            buckets.popitem(last=False)
        for _ in range(2):  # a few of the oldest each time: those full again go (never the one just taken)
            key, (tokens, when) = next(iter(buckets.items()))
            if refill(key[0], tokens, now - when) < key[0].capacity:
                return
            del buckets[key]


class RateLimits:
    """The rate limits of an app (``ServerConfig.rate_limits``), applied at admission.

    ``store``: buckets shared with other workers (None: this process's only).  The subjects of the
    scopes: ``principal``, the principal's owner key (:class:`PrincipalKeys`: workers that share a
    key ring agree on it); ``address``, the client address (as the session quotas count it);
    ``session``, the 2025 session id (or the WebSocket or stdio connection), else the client's own
    session id (``Mcp-Client-Session-Id``) scoped by the principal, as ``Context.client_session_key``
    is (a 2026 request over HTTP; one without either is not counted by session); ``tool:`` and
    ``method:``, the tool or method itself: one bucket for all its callers (with a ``principal`` or
    ``address`` limit beside it, so that no caller can spend it all)."""

    def __init__(
        self,
        limits: Sequence[RateLimit],
        principals: PrincipalKeys,
        store: RateLimitStore | None = None,
        *,
        max_buckets: int = MAX_BUCKETS,
    ) -> None:
        self.limits = tuple(dict.fromkeys(limits))  # (a limit given twice is one limit)
        self.principals = principals
        self.store = store
        self.local = LocalBuckets(max_buckets)
        self.admitted = 0
        self.refused: dict[str, int] = dict.fromkeys(KINDS, 0)
        """Requests refused, by the kind of the limit that refused them."""
        self._tools = {limit.name: limit for limit in self.limits if limit.kind == "tool"}
        self._by_kind = {kind: tuple(lim for lim in self.limits if lim.kind == kind) for kind in KINDS}
        self._by_principal = any(lim.kind in ("principal", "session") for lim in self.limits)

    def __bool__(self) -> bool:
        return bool(self.limits)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the shared store's connection (if there is a store); else nothing to run."""
        if self.store is None:
            task_status.started()
            return
        await self.store.run(task_status=task_status)

    def keys(
        self,
        requests: Iterable[mt.JSONRPCRequest],
        principal: object,
        address: str | None,
        session: str | None,
    ) -> dict[BucketKey, int]:
        """The buckets ``requests`` (of one POST or one message) take a token from, with how many each."""
        by_kind = self._by_kind
        owner = self.principals.key(principal) if principal is not None and self._by_principal else ""
        found: dict[BucketKey, int] = {}

        def count(limits: Iterable[RateLimit], subject: str | None) -> None:
            if subject:
                for limit in limits:
                    found[(limit, subject)] = found.get((limit, subject), 0) + 1

        for request in requests:
            count(by_kind["principal"], owner)
            count(by_kind["address"], address)
            if session is not None or not by_kind["session"]:
                count(by_kind["session"], session)
            elif (client_session := clientsession.from_meta(_meta(request))) is not None:
                count(by_kind["session"], f"cs:{owner}/{client_session}")  # (the key handlers get)
            count((lim for lim in by_kind["method"] if lim.name == request.method), "*")
            if request.method == "tools/call" and self._tools:
                name = (request.params or {}).get("name")
                count((lim for lim in by_kind["tool"] if lim.name == name), "*")
        return found

    async def check(
        self,
        requests: Sequence[mt.JSONRPCRequest],
        principal: object,
        address: str | None,
        session: str | None,
    ) -> Refusal | None:
        """Take the tokens of ``requests`` (see :meth:`keys`): None if they are admitted, else why not.
        One round trip to the shared store, if there is one and the local buckets admit them."""
        if not self.limits or not requests:
            return None
        keys = self.keys(requests, principal, address, session)
        if not keys:
            return None
        refusal = self.local.take(keys, trio.current_time())
        if refusal is None and self.store is not None:
            refusal = await self.store.take(keys)
            if refusal is not None:
                self.local.give_back(keys, trio.current_time())
        if refusal is None:
            self.admitted += len(requests)
        else:
            self.refused[refusal.limit.kind] += len(requests)
        return refusal

    async def admit(
        self,
        requests: Sequence[mt.JSONRPCRequest],
        principal: object,
        address: str | None,
        session: str | None,
        *,
        batch: bool = False,
    ) -> None:
        """:meth:`check`, raising the refusal's 429 (:func:`~mcp_trio._protocol.ratelimits.refused`;
        for the request's id, none for a batch)."""
        refusal = await self.check(requests, principal, address, session)
        if refusal is not None:
            raise refused(refusal, None if batch else requests[0].id)

    def statistics(self) -> dict[str, Any]:
        if not self.limits:
            return {}
        found: dict[str, Any] = {
            "rate_limited": dict(self.refused),
            "rate_limit_admitted": self.admitted,
            "rate_limit_buckets": len(self.local),
        }
        if self.store is not None:
            found["rate_limit_store"] = self.store.statistics()
        return found


def _meta(request: mt.JSONRPCRequest) -> dict[str, Any] | None:
    meta = request.params.get("_meta") if request.params else None
    return meta if type(meta) is dict else None
