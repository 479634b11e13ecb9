"""Rate limits, sans-IO: what a limit is (:class:`RateLimit`, parsed from ``SCOPE=N/PERIOD``), the
token bucket's arithmetic (:func:`refill`), and the answer to a request refused by one, as the draft
SEP-3304 words it: HTTP 429 with ``Retry-After`` (seconds) and ``RateLimit-Limit`` /
``RateLimit-Remaining``, and the JSON-RPC error ``-32023`` whose ``data`` carries ``retryAfterMs``
(required), ``limit`` and ``remaining``.  The draft may change; so may this module.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..errors import RemoteProtocolError

__all__ = [
    "KINDS",
    "RATE_LIMITED",
    "RateLimit",
    "Refusal",
    "rate_limit_data",
    "refill",
    "refused",
]

RATE_LIMITED = -32023
"""The JSON-RPC error code of a request refused by a rate limit (``RateLimited``, draft SEP-3304)."""
KINDS = ("principal", "address", "session", "tool", "method")
"""The kinds of scope a limit counts by (``tool`` and ``method`` name one tool or method)."""
_PERIODS = {"s": 1.0, "min": 60.0, "h": 3600.0}
_SPEC = re.compile(r"(?P<scope>[^=\s]+)=(?P<count>[0-9]{1,9})/(?P<times>[0-9]{0,6})(?P<unit>s|min|h)")
MAX_NAME = 128
"""The longest tool or method name a scope may name."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``count`` requests per ``period`` seconds, for each value of ``scope``, with bursts of up to
    ``burst`` (``count`` by default): a token bucket that holds ``burst`` tokens and gains ``count``
    every ``period``; each request admitted takes one.

    ``scope``: ``principal`` (each authenticated principal; requests without one are not counted
    here), ``address`` (each client address: an IPv4 address, or the /64 of an IPv6 one),
    ``session`` (each 2025 session, WebSocket connection or stdio connection; a 2026 HTTP request
    by the client's own session id, ``Mcp-Client-Session-Id``, scoped by the principal), ``tool:NAME`` (the
    ``tools/call`` requests for tool NAME) or ``method:NAME`` (the requests of method NAME), the last
    two counted for all callers together.
    """

    scope: str
    count: int
    period: float
    burst: int | None = None

    def __post_init__(self) -> None:
        kind, _, name = self.scope.partition(":")
        if kind not in KINDS or bool(name) != (kind in ("tool", "method")):
            raise ValueError(
                f"rate limit scope {self.scope[:MAX_NAME]!r}: one of principal, address, session, "
                "tool:NAME, method:NAME"
            )
        if len(name) > MAX_NAME or not name.isprintable():
            raise ValueError(f"rate limit scope: a name of 1 to {MAX_NAME} printable characters")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or not 1 <= self.count <= 10**9:
            raise ValueError("rate limit count: an integer from 1 to 10**9")
        if not (isinstance(self.period, int | float) and 0.001 <= self.period <= 366 * 86400):
            raise ValueError("rate limit period: seconds, from 0.001 to a year")
        burst = self.burst
        if burst is not None and (
            isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= 10**9
        ):
            raise ValueError("rate limit burst: an integer from 1 to 10**9 (or None: the count)")

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """A limit from ``SCOPE=N/PERIOD`` (PERIOD ``s``, ``min`` or ``h``, optionally with a number
        before it: ``address=100/min``, ``tool:search=5/s``, ``principal=1000/10min``); ValueError
        for anything else."""
        match = _SPEC.fullmatch(text.strip())
        if match is None:
            raise ValueError(
                f"rate limit {text[:200]!r}: SCOPE=N/PERIOD, SCOPE one of principal, address, session, "
                "tool:NAME, method:NAME, PERIOD s, min or h (e.g. address=100/min, tool:search=5/s)"
            )
        times = int(match["times"] or "1")
        if times < 1:
            raise ValueError(f"rate limit {text[:200]!r}: the period must be at least 1{match['unit']}")
        return cls(match["scope"], int(match["count"]), times * _PERIODS[match["unit"]])

    @property
    def kind(self) -> str:
        """``principal``, ``address``, ``session``, ``tool`` or ``method``."""
        return self.scope.partition(":")[0]

    @property
    def name(self) -> str | None:
        """The tool or method a ``tool:`` or ``method:`` scope names."""
        return self.scope.partition(":")[2] or None

    @property
    def capacity(self) -> int:
        """The most tokens the bucket holds: ``burst``, else ``count``."""
        return self.burst if self.burst is not None else self.count

    @property
    def rate(self) -> float:
        """Tokens gained per second."""
        return self.count / self.period

    @property
    def ttl(self) -> float:
        """Seconds after which an untouched bucket is full again (and can be forgotten)."""
        return self.capacity / self.rate

    def __str__(self) -> str:
        for unit, seconds in sorted(_PERIODS.items(), key=lambda item: -item[1]):
            times = self.period / seconds
            if times >= 1 and times == int(times):
                text = f"{self.scope}={self.count}/{'' if times == 1 else int(times)}{unit}"
                return text if self.burst is None else f"{text} (burst {self.burst})"
        return f"{self.scope}={self.count}/{self.period:g}s" + (
            "" if self.burst is None else f" (burst {self.burst})"
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused: the limit whose bucket was empty (the one that asks the longest
    wait, when several are), and the seconds until it holds a token again."""

    limit: RateLimit
    retry_after: float

    @property
    def retry_after_ms(self) -> int:
        return max(1, math.ceil(self.retry_after * 1000))

    @property
    def retry_after_seconds(self) -> int:
        """``Retry-After``'s whole seconds: :attr:`retry_after_ms` rounded up, at least 1."""
        return max(1, math.ceil(self.retry_after_ms / 1000))


def refill(limit: RateLimit, tokens: float, elapsed: float) -> float:
    """The tokens of ``limit``'s bucket that held ``tokens`` ``elapsed`` seconds ago (never more than
    its capacity, never less than none: a stored value out of range is taken as a full bucket's or
    an empty one's)."""
    capacity = limit.capacity
    if not tokens >= 0:  # NaN too
        tokens = 0.0
    return min(float(capacity), tokens + max(0.0, elapsed) * limit.rate)


def refused(refusal: Refusal, request_id: Any = None) -> RemoteProtocolError:
    """The answer to a request refused by ``refusal``: 429 with ``Retry-After`` (whole seconds, at
    least 1), ``RateLimit-Limit`` and ``RateLimit-Remaining``; the JSON-RPC error -32023 with
    ``retryAfterMs``, ``limit`` and ``remaining`` (for ``request_id``)."""
    limit = refusal.limit
    ms = refusal.retry_after_ms
    return RemoteProtocolError(
        f"Too Many Requests: rate limit {limit.scope} exceeded; retry after {ms} ms",
        http_status=429,
        code=RATE_LIMITED,
        request_id=request_id,
        data={"retryAfterMs": ms, "limit": limit.count, "remaining": 0},
        headers=(
            ("retry-after", str(refusal.retry_after_seconds)),
            ("ratelimit-limit", str(limit.count)),
            ("ratelimit-remaining", "0"),
        ),
    )


def rate_limit_data(error: object) -> tuple[float, int | None, int | None] | None:
    """From a JSON-RPC error object (``{"code": -32023, "data": {...}}``): (seconds to wait, ``limit``,
    ``remaining``); None unless it is a rate-limit error with a valid ``retryAfterMs``."""
    if not isinstance(error, dict) or error.get("code") != RATE_LIMITED:
        return None
    data = error.get("data")
    if not isinstance(data, dict):
        return None
    after = data.get("retryAfterMs")
    if isinstance(after, bool) or not isinstance(after, int | float) or not 0 <= after < math.inf:
        return None

    def count(value: object) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    return after / 1000, count(data.get("limit")), count(data.get("remaining"))
