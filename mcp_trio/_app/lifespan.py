"""The lifespan of a server: the app's own state and tasks, entered before serving and left after it.

``MCPServer(name, lifespan=fn)``: ``fn(server)`` returns an async context manager.  What it yields is
the *lifespan value*, which every handler reaches as :attr:`Context.lifespan_context`; it may open a
nursery for the app's own tasks (a ticker, a connection pool's keeper), which then run as long as the
server serves.  Whatever runs the server (an :class:`~mcp_trio.MCPApp` while it runs, ``serve_stdio``)
enters it through :meth:`Lifespan.open` before it accepts anything and leaves it after it has stopped.

How it ends:

- after a graceful stop (the body returns, or is cancelled once the runner has begun its graceful
  close), the code after ``yield`` is not cancelled for up to ``grace`` seconds (the runner's
  ``shutdown_grace``), then it is (a lifespan that forgot to cancel its nursery after ``yield`` stops
  the server late, never hangs it; a WARNING says so);
- when the run is cancelled otherwise, it runs cancelled, as any Trio cleanup does;
- when the app's tasks crash (or entering it raises), the server stops and its runner raises that
  exception, not the exception groups of the nurseries it crossed: a *lifespan failure*.

One lifespan runs once at a time: a second runner of the same server while it runs is refused with
``RuntimeError`` (the app state would otherwise exist twice, or be shared by runners that end at
different times).  A server without ``lifespan=`` has nothing to enter and may be run by any number of
runners at once.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic

import trio
from typing_extensions import TypeVar

__all__ = ["Lifespan", "LifespanFn", "LifespanT"]

logger = logging.getLogger("mcp_trio.lifespan")

LifespanT = TypeVar("LifespanT", default=Any)
"""The type of a server's lifespan value (what its lifespan yields)."""

LifespanFn = Callable[[Any], AbstractAsyncContextManager[LifespanT]]
"""A lifespan: called with the server, it returns the async context manager that yields the value."""


class Phase(enum.Enum):
    """Where a server's lifespan is; the only transitions: STOPPED -> STARTING -> RUNNING ->
    STOPPING -> STOPPED, and STARTING -> STOPPED when entering fails."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


class Lifespan(Generic[LifespanT]):
    """One server's lifespan: its function, its phase, and its value while it runs."""

    def __init__(self, owner: str, fn: LifespanFn[LifespanT] | None) -> None:
        self.owner = owner
        """Who it belongs to, for messages (``MCPServer 'name'``)."""
        self.fn = fn
        self.phase = Phase.STOPPED
        self._value: Any = None
        self.failure: BaseException | None = None
        """Why the lifespan last failed (entering it raised, or its tasks crashed), if it did."""

    @property
    def value(self) -> LifespanT:
        """What the lifespan yielded (None for a server without one).  RuntimeError while it does not
        run: a handler asked for it outside of a running server."""
        if self.fn is not None and self.phase is not Phase.RUNNING:
            raise RuntimeError(
                f"the lifespan of {self.owner} is {self.phase.value}: its value exists only while an "
                "MCPApp (app.run, app.running(), serve, the ASGI lifespan) or serve_stdio runs the server"
            )
        value: LifespanT = self._value
        return value

    @asynccontextmanager
    async def open(
        self, server: object, *, grace: float, graceful: Callable[[], bool] = lambda: False
    ) -> AsyncIterator[LifespanT]:
        """Enter the lifespan (``fn(server)``), run the body, leave it (see the module docstring).

        ``grace``: seconds the code after ``yield`` runs uncancelled after a graceful stop;
        ``graceful()``: whether a cancellation of the run comes after the runner began a graceful
        close (then it is one).  Raises the lifespan's own exception when it fails (entering, or its
        tasks crashing), and ``RuntimeError`` if the lifespan already runs."""
        fn = self.fn
        if fn is None:
            yield self._value
            return
        if self.phase is not Phase.STOPPED:
            raise RuntimeError(
                f"the lifespan of {self.owner} is already running: one server's lifespan runs once at a "
                "time, so serve it with one MCPApp (or one serve_stdio), or give each its own MCPServer"
            )
        self.phase, self.failure = Phase.STARTING, None
        outcome = _Outcome()
        try:
            async with trio.open_nursery() as watch:  # the caller's cancellation, forwarded
                with trio.CancelScope(shield=True) as guarded:
                    body = trio.CancelScope()
                    watch.start_soon(_forward_cancellation, body, guarded, graceful, name="mcp lifespan")
                    async with fn(server) as value:
                        self._value, self.phase = value, Phase.RUNNING
                        try:
                            with body:
                                yield value
                        except BaseException as exc:
                            outcome.body = exc
                            raise
                        finally:
                            self.phase = Phase.STOPPING
                            guarded.deadline = trio.current_time() + grace
                if guarded.cancelled_caught and trio.current_time() >= guarded.deadline:
                    logger.warning(
                        "the lifespan of %s did not end within %s s of the server's stop and was "
                        "cancelled (does it cancel its nursery after its yield?)",
                        self.owner,
                        grace,
                    )
                watch.cancel_scope.cancel()
        except BaseException as exc:
            failure = outcome.failure(exc)
            if failure is not outcome.body and not isinstance(failure, (trio.Cancelled, BaseExceptionGroup)):
                self.failure = failure
            if failure is exc:
                raise
            raise failure from failure.__cause__  # not from the groups it was found in
        finally:
            self.phase, self._value = Phase.STOPPED, None

    def failure_in(self, exc: BaseException) -> BaseException | None:
        """The lifespan's failure if ``exc`` (what a runner or a server raised) holds it: inside its
        exception groups, or as the context of an exception raised while handling it (hypercorn's
        ``LifespanFailureError``, raised when the app reports ``lifespan.startup.failed``)."""
        failure = self.failure
        if failure is None:
            return None
        seen: set[int] = set()
        stack = [exc]
        while stack:
            found = stack.pop()
            if found is failure:
                return failure
            if id(found) in seen:
                continue
            seen.add(id(found))
            if isinstance(found, BaseExceptionGroup):
                stack.extend(found.exceptions)
            stack.extend(e for e in (found.__cause__, found.__context__) if e is not None)
        return None


class _Outcome:
    """How the body of a lifespan ended, to tell the lifespan's own failure from the body's."""

    body: BaseException | None = None

    def failure(self, exc: BaseException) -> BaseException:
        """The exception to raise for ``exc`` (what left the lifespan): the body's own exception or the
        lifespan's failure, out of the groups of one exception that the nurseries wrapped them in;
        cancellation as it was."""
        if isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None:
            return exc  # only cancellation: for the cancel scopes outside to catch
        inner = exc
        while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1 and inner is not self.body:
            inner = inner.exceptions[0]
        if isinstance(inner, (BaseExceptionGroup, trio.Cancelled)):
            return exc
        return inner


async def _forward_cancellation(
    body: trio.CancelScope, guarded: trio.CancelScope, graceful: Callable[[], bool]
) -> None:
    """Wait until cancelled (the caller's cancellation, which the shield keeps from the body), then
    cancel the body; unless it comes after a graceful close, the lifespan's exit too."""
    try:
        await trio.sleep_forever()
    finally:
        body.cancel()
        if not graceful():
            guarded.cancel()
