"""Rate-limited logging for what peers do: a misbehaving client is one line at most, never a flood.

A server logs a peer's misbehaviour (a malformed handshake, an HTTP/2 connection flooding streams) so
that an operator can see it, but one line per offending connection would let any client write the log
as fast as it can open connections.  :class:`RateLimitedLog` lets ``burst`` lines through per
``interval`` seconds and counts the rest; the next line that gets through says how many were left out.

What a peer sends is written escaped (:func:`printable`): a name with a newline or a terminal escape
in it cannot start a log record of its own, nor rewrite a terminal's screen.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

__all__ = ["MAX_LOGGED_VALUE", "PEER_LOG_BURST", "RateLimitedLog", "line", "printable"]

MAX_LOGGED_VALUE = 256
"""Longest value from a peer (a method, tool, prompt or resource name) a log record carries, in
characters, before escaping: the bound telemetry puts on the same values as span attributes."""

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0x7F else f"\\u{code:04x}"


def printable(value: object, limit: int | None = None) -> str:
    """``str(value)`` as a log line may carry it: every C0 and C1 control character and DEL escaped
    (``\\n``, ``\\r``, ``\\t``, ``\\x1b``, ``\\x7f``, ``\\u0085``), and the line and paragraph
    separators (``\\u2028``, ``\\u2029``), so that the value stays on its record's line whatever reads
    the log.  With ``limit`` a longer value is cut to ``limit`` characters (before escaping), the last
    one ``…``.  Backslashes are kept as they are: the escapes are for reading, not for decoding."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return _CONTROLS.sub(_escape, text) if _CONTROLS.search(text) is not None else text


def line(message: str, args: tuple[object, ...]) -> str:
    """``message % args`` (``message`` alone without ``args``), escaped (:func:`printable`): one log
    line whatever ``args`` hold.  Arguments that do not fit the format are appended instead of raising
    (as logging reports them rather than failing the caller)."""
    if not args:
        return printable(message)
    try:
        return printable(message % args)
    except (TypeError, ValueError):
        return printable(f"{message} {args!r}")


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
        """Log ``message % args`` at ``level`` if this interval has room (True), else count it (False).
        The line is escaped (:func:`printable`): whatever a peer put in ``args`` stays on it."""
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
        self._logger.log(level, "%s", line(message, args), exc_info=exc_info)
        return True
