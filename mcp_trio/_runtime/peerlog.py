"""Rate-limited logging for what peers do: a misbehaving client is one line at most, never a flood.

A server logs a peer's misbehaviour (a malformed handshake, an HTTP/2 connection flooding streams) so
that an operator can see it, but one line per offending connection would let any client write the log
as fast as it can open connections.  :class:`RateLimitedLog` lets ``burst`` lines through per
``interval`` seconds and counts the rest; the next line that gets through says how many were left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["PEER_LOG_BURST", "RateLimitedLog"]

PEER_LOG_BURST = 10
"""Lines a :class:`RateLimitedLog` lets through per interval by default."""


class RateLimitedLog:
    """At most ``burst`` lines per ``interval`` seconds through ``logger``; the others are counted."""

    __slots__ = ("_clock", "_logger", "_sent", "_suppressed", "_window", "burst", "interval")

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = PEER_LOG_BURST,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._window = -float("inf")
        self._sent = 0
        self._suppressed = 0

    def log(self, level: int, message: str, *args: object, exc_info: bool | BaseException = False) -> bool:
        """Log ``message % args`` at ``level`` if this interval has room (True), else count it (False)."""
        if not self._logger.isEnabledFor(level):
            return False
        now = self._clock()
        if now - self._window >= self.interval:
            self._window, self._sent = now, 0
        if self._sent >= self.burst:
            self._suppressed += 1
            return False
        self._sent += 1
        if self._suppressed:
            message += " (and %d more lines like it left out before this one)"
            args = (*args, self._suppressed)
            self._suppressed = 0
        self._logger.log(level, message, *args, exc_info=exc_info)
        return True
