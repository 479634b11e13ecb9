"""Containment: a failure of one handler, request or connection ends that one thing, never its owner.

Every task root of the server (a session's request task, a 2026 request, a connection of
``serve_h11``, a stdio line handler) runs user code that may raise anything: an ``Exception``, a
``BaseExceptionGroup`` from a nursery of its own (``InputRequired`` from two child tasks is one), even a
``BaseException`` subclass.  What must go on up is Trio's cancellation (the scope that cancelled will
catch it) and ``KeyboardInterrupt``; everything else is contained where it happened, logged at ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from .peerlog import RateLimitedLog

__all__ = ["Failure", "contained", "split_fatal"]

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


class Failure:
    """What :func:`contained` caught (None while nothing failed)."""

    __slots__ = ("caught",)

    def __init__(self) -> None:
        self.caught: BaseException | None = None


@contextmanager
def contained(what: str, log: RateLimitedLog | None = None, *, report: bool = True) -> Iterator[Failure]:
    """Run a block whose failure must end only itself: cancellation propagates, anything else is
    logged at ERROR (as ``"{what} failed"``, through ``log`` where given so that a flood of failures
    is not a flood of tracebacks) and recorded in the yielded :class:`Failure`.  With
    ``report=False`` nothing is logged: the caller reports ``failure.caught`` its own way (a lost
    Redis connection is one WARNING per outage, not a traceback per attempt)."""
    failure = Failure()
    try:
        yield failure
    except BaseException as exc:
        fatal, rest = split_fatal(exc)
        if rest is not None:
            failure.caught = rest
            if not report:
                pass  # the caller reports failure.caught
            elif log is None:
                logger.error("%s failed", what, exc_info=rest)
            else:
                log.log(logging.ERROR, "%s failed", what, exc_info=rest)
        if fatal is not None:
            if fatal is exc:
                raise
            raise fatal from None
