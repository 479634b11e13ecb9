"""Containment: a failure of one handler, request or connection ends that one thing, never its owner.

Every task root of the server (a session's request task, a 2026 request, a connection of
``serve_h11``, a stdio line handler) runs user code that may raise anything: an ``Exception``, a
``BaseExceptionGroup`` from a nursery of its own (``InputRequired`` from two child tasks is one), even a
``BaseException`` subclass.  What must go on up is Trio's cancellation (the scope that cancelled will
catch it) and ``KeyboardInterrupt``; everything else is contained where it happened, logged at ERROR.
"""

from __future__ import annotations

import logging
from types import TracebackType

import trio

from .peerlog import RateLimitedLog

__all__ = ["contained", "split_fatal"]

logger = logging.getLogger(__name__)

FATAL = (trio.Cancelled, KeyboardInterrupt, GeneratorExit)
"""What containment never swallows."""


def split_fatal(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    """``(what must propagate, what may be contained)`` of an exception or exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(FATAL)
    if isinstance(exc, FATAL):
        return exc, None
    return None, exc


class contained:
    """Run a block whose failure must end only itself: cancellation propagates, anything else is
    logged at ERROR (as ``"{what} failed"``, ``what`` formatted only then, through ``log`` where given
    so that a flood of failures is not a flood of tracebacks) and kept in :attr:`caught`.  With
    ``report=False`` nothing is logged: the caller reports ``caught`` its own way (a lost Redis
    connection is one WARNING per outage, not a traceback per attempt).

    A class rather than a ``@contextmanager`` generator: it runs around every request's handler, and a
    generator-based context manager costs several times as much to enter and leave."""

    __slots__ = ("_log", "_report", "_what", "caught")

    def __init__(self, what: object, log: RateLimitedLog | None = None, *, report: bool = True) -> None:
        self._what = what
        self._log = log
        self._report = report
        self.caught: BaseException | None = None
        """What the block raised that was contained (None while nothing failed)."""

    def __enter__(self) -> contained:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if exc is None:
            return False
        fatal, rest = split_fatal(exc)
        if rest is not None:
            self.caught = rest
            if not self._report:
                pass  # the caller reports self.caught
            elif self._log is None:
                logger.error("%s failed", self._what, exc_info=rest)
            else:
                self._log.log(logging.ERROR, "%s failed", self._what, exc_info=rest)
        if fatal is None:
            return True
        if fatal is exc:
            return False
        raise fatal from None
