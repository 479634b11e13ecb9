"""Sending again what a server refused for now: a 503 (unavailable: a worker draining or restarting, a
balancer with no live worker) or a 429 (too many requests) says the server processed nothing of the
message, so the same message can be sent again, whatever it was.  The client waits as the answer's
``Retry-After`` asks (seconds or an HTTP date; without one, a short backoff), plus a little jitter so
that the clients of a restarted worker do not all come back at once, and gives up, with
:class:`~mcp_trio.errors.ServerBusy`, after a number of attempts or once the next wait would end past
its budget of time."""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from dataclasses import dataclass

import trio

from ..errors import ServerBusy

__all__ = [
    "DEFAULT_RETRY_ATTEMPTS",
    "DEFAULT_RETRY_BUDGET",
    "RETRY_STATUSES",
    "Retries",
    "RetryPolicy",
    "retry_after",
]

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
        wait before its next send, or raise :class:`ServerBusy` if it is not to be sent again."""
        after = retry_after(header)
        left = self.deadline - trio.current_time()
        said = "" if after is None else f" (Retry-After {after:g} s)"
        why = None
        if self.attempts >= self.policy.attempts:
            why = f"still refused after {self.attempts} attempts"
        elif after is not None and after > left:
            why = f"asks for a longer wait than the {max(left, 0):.3g} s left of the retry budget"
        elif after is None and left <= 0:
            why = f"still refused when the retry budget ({self.policy.budget:g} s) ran out"
        if why is not None:
            raise ServerBusy(
                f"{what}: HTTP {status}{said} {why}: {body[:200]}",
                status=status,
                body=body,
                retry_after=after,
                attempts=self.attempts,
            )
        base = after if after is not None else min(FIRST_BACKOFF * 2 ** (self.attempts - 1), MAX_BACKOFF)
        delay = base + random.uniform(0, JITTER * base + 0.05)
        await trio.sleep(min(delay, left))  # never sooner than asked (after <= left), never past the budget
        self.attempts += 1
