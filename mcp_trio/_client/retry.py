"""Sending again what a server refused for now: a 503 (unavailable: a worker draining or restarting, a
balancer with no live worker) or a 429 (too many requests) says the server processed nothing of the
message, so the same message can be sent again, whatever it was; so does the JSON-RPC error -32023
of a rate limit (the draft SEP-3304) over WebSocket and stdio.  The client waits as the answer asks
(a rate limit's ``data.retryAfterMs``, else ``Retry-After``: seconds or an HTTP date; without either,
a short backoff), plus a little jitter so that the clients of a restarted worker do not all come back
at once, and gives up, with :class:`~mcp_trio.errors.ServerBusy` (:class:`~mcp_trio.errors.RateLimited`
for a rate limit), after a number of attempts or once the next wait would end past its budget of
time."""

from __future__ import annotations

import datetime
import email.utils
import json
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import trio

from .._protocol.ratelimits import RATE_LIMITED, rate_limit_data
from ..errors import RateLimited, RPCError, ServerBusy

__all__ = [
    "DEFAULT_RETRY_ATTEMPTS",
    "DEFAULT_RETRY_BUDGET",
    "RETRY_STATUSES",
    "Retries",
    "RetryPolicy",
    "retry_after",
    "until_admitted",
]

_T = TypeVar("_T")

RETRY_STATUSES = frozenset({429, 503})
"""The statuses that say "not processed, try again later"."""
DEFAULT_RETRY_ATTEMPTS = 10
"""How many times one message is sent at most (the first time included)."""
DEFAULT_RETRY_BUDGET = 30.0
"""Seconds: the longest one message's retries may wait in all."""
FIRST_BACKOFF = 0.5
"""Seconds before the first retry of an answer without ``Retry-After`` (doubled each time after)."""
MAX_BACKOFF = 8.0
"""Seconds: the longest wait before a retry of an answer without ``Retry-After``."""
JITTER = 0.2
"""Each wait is lengthened by a random part of up to this fraction of it (plus up to 50 ms)."""


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` header value asks to wait: a number of seconds, or an HTTP date
    (less the time ``now``, the wall clock by default; a date past is 0).  None if there is no value,
    or one that is neither."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text) if len(text) <= 12 else math.inf
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, said without a zone
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    """How one message refused with 503 or 429 is retried: at most ``attempts`` sends, waiting at most
    ``budget`` seconds in all."""

    attempts: int = DEFAULT_RETRY_ATTEMPTS
    budget: float = DEFAULT_RETRY_BUDGET

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"retry_attempts must be an integer of at least 1, not {self.attempts!r:.100}")
        if (
            isinstance(self.budget, bool)
            or not isinstance(self.budget, int | float)
            or not math.isfinite(self.budget)
            or self.budget < 0
        ):
            raise ValueError(f"retry_budget must be a number of seconds, 0 or more, not {self.budget!r:.100}")


class Retries:
    """The retries of one message under a :class:`RetryPolicy`, counted from its first send."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.attempts = 1
        self.deadline = trio.current_time() + policy.budget

    async def wait(self, what: str, status: int, header: str | None, body: str) -> None:
        """The message ``what`` was answered ``status`` (with ``Retry-After: header``, and ``body``):
        wait before its next send, or raise :class:`ServerBusy` (:class:`RateLimited` for a 429) if it
        is not to be sent again.  A 429's ``data.retryAfterMs`` counts before its ``Retry-After``."""
        found = rate_limit_data(_error_of(body)) if status == 429 else None
        after = found[0] if found is not None else retry_after(header)
        limit, remaining = found[1:] if found is not None else (None, None)
        said = "" if after is None else f" (Retry-After {after:g} s)"
        await self._wait(f"{what}: HTTP {status}{said}", status, after, body, status == 429, limit, remaining)

    async def wait_rate_limited(self, what: str, error: RPCError) -> None:
        """The request ``what`` was answered the JSON-RPC error -32023 (a rate limit, where there is
        no HTTP status: WebSocket, stdio): wait as its ``data.retryAfterMs`` asks, or raise
        :class:`RateLimited`."""
        found = rate_limit_data({"code": error.code, "data": error.data})
        after, limit, remaining = found if found is not None else (None, None, None)
        said = "" if after is None else f" (retryAfterMs {after * 1000:g})"
        body = f"{error.code} {error.message}"
        await self._wait(f"{what}: error {error.code}{said}", None, after, body, True, limit, remaining)

    async def _wait(
        self,
        what: str,
        status: int | None,
        after: float | None,
        body: str,
        rate_limited: bool,
        limit: int | None,
        remaining: int | None,
    ) -> None:
        left = self.deadline - trio.current_time()
        why = None
        if self.attempts >= self.policy.attempts:
            why = f"still refused after {self.attempts} attempts"
        elif after is not None and after > left:
            why = f"asks for a longer wait than the {max(left, 0):.3g} s left of the retry budget"
        elif after is None and left <= 0:
            why = f"still refused when the retry budget ({self.policy.budget:g} s) ran out"
        if why is not None:
            message = f"{what} {why}: {body[:200]}"
            if rate_limited:
                raise RateLimited(
                    message,
                    status=status,
                    body=body,
                    retry_after=after,
                    attempts=self.attempts,
                    limit=limit,
                    remaining=remaining,
                )
            assert status is not None
            raise ServerBusy(message, status=status, body=body, retry_after=after, attempts=self.attempts)
        base = after if after is not None else min(FIRST_BACKOFF * 2 ** (self.attempts - 1), MAX_BACKOFF)
        delay = base + random.uniform(0, JITTER * base + 0.05)
        await trio.sleep(min(delay, left))  # never sooner than asked (after <= left), never past the budget
        self.attempts += 1


def _error_of(body: str) -> object:
    """The JSON-RPC ``error`` of an HTTP error answer's body, if it is one."""
    try:
        found = json.loads(body) if body.startswith("{") else None
    except ValueError:
        return None
    return found.get("error") if isinstance(found, dict) else None


async def until_admitted(what: str, send: Callable[[], Awaitable[_T]], policy: RetryPolicy | None) -> _T:
    """``send()`` (a request), sent again while the server refuses it with its rate limit: the
    JSON-RPC error -32023 (over WebSocket and stdio; over HTTP the 429 is retried by the transport),
    as ``policy`` allows (the default one when None); then :class:`RateLimited`."""
    retries: Retries | None = None
    while True:
        try:
            return await send()
        except RPCError as exc:
            if exc.code != RATE_LIMITED:
                raise
            if retries is None:
                retries = Retries(policy or RetryPolicy())
            await retries.wait_rate_limited(what, exc)
