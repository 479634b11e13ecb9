"""Rate-limited log lines for what a peer did wrong.

A client that resets its connections, sends malformed requests or stops reading is not a bug of ours,
and a flood of such clients must not flood the log: each kind of misbehaviour is logged as one line
(never a traceback) at most once per ``interval``, the next line saying how many were left out meanwhile.
A traceback is for our own bugs only (see :mod:`.containment`).

The kinds are fixed strings of our code, so the state kept is bounded whatever peers do; the messages
must not carry what a peer sent (it may be a secret, or bytes meant to forge log lines).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["PEER_LOG_INTERVAL", "PeerLog"]

PEER_LOG_INTERVAL = 60.0
"""Seconds between two lines of the same kind of peer misbehaviour (per :class:`PeerLog`)."""


class PeerLog:
    """One log line per kind of peer misbehaviour per ``interval`` seconds, on ``logger`` at ``level``.

    ``peer_log("write-timeout", "a write took longer than %s s; closing the connection", 5.0)``
    logs that line now, drops the same kind of line for ``interval`` seconds, then logs the next one
    with `` (N more like it in the last S s)`` appended.
    """

    __slots__ = ("_clock", "_last", "_suppressed", "interval", "level", "logger")

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = PEER_LOG_INTERVAL,
        level: int = logging.INFO,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.level = level
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def __call__(self, kind: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless a line of ``kind`` went out less than ``interval`` ago;
        True if it was logged."""
        if not self.logger.isEnabledFor(self.level):
            return False
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        self._last[kind] = now
        left_out = self._suppressed.pop(kind, 0)
        if left_out:
            message = f"{message} ({left_out} more like it in the last {now - (last or now):.0f} s)"
        self.logger.log(self.level, message, *args)
        return True
