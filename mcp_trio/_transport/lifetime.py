"""How an :class:`~mcp_trio.MCPApp` is run from outside: ``async with app.running():`` and the ASGI
lifespan protocol.  Both run :meth:`MCPApp.run` (which enters the server's lifespan first and leaves it
last) and end it with :meth:`MCPApp.aclose`; both report a failure of the server's lifespan as the
lifespan's own exception, not the exception groups of the nurseries between (see docs/lifespan.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from .wire import Receive, Send

if TYPE_CHECKING:
    from .asgi import MCPApp

__all__ = ["asgi_lifespan", "failure_message", "running"]


@asynccontextmanager
async def running(app: MCPApp) -> AsyncIterator[MCPApp]:
    """Run ``app`` for the time of the ``async with`` body, then end it gracefully.  What keeps it from
    starting is raised as it was raised, and so is a failure of the server's lifespan while the body
    runs (its tasks crashed: the body is cancelled)."""
    not_started: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(app.run)
            except BaseException as exc:
                not_started = exc
                raise
            try:
                yield app
            finally:
                await app.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        failure = app.server.lifespan.failure_in(group) or not_started
        if failure is None:
            raise
        raise failure from failure.__cause__


async def asgi_lifespan(app: MCPApp, receive: Receive, send: Send) -> None:
    """The ASGI lifespan: ``app`` runs from ``lifespan.startup`` to ``lifespan.shutdown``.  A failure to
    start (the server's lifespan raised) is ``lifespan.startup.failed``; a failure while serving (its
    tasks crashed) is ``lifespan.shutdown.failed`` at once, then the exception, so that the ASGI server
    stops (as Starlette does); each message says what failed."""
    message = await receive()
    assert message["type"] == "lifespan.startup"
    started, app.startup_failure = False, None
    try:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(app.run)
            except Exception as exc:
                app.startup_failure = exc
                await send({"type": "lifespan.startup.failed", "message": failure_message(app, exc)})
                return
            started = True
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            await app.aclose()
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the app stopped while serving: its lifespan's tasks crashed
        failure = app.server.lifespan.failure_in(group) if started else None
        if failure is None:
            raise
        try:
            raise failure from failure.__cause__
        except BaseException as exc:  # sent while handling it: what the server raises has it as context
            await send({"type": "lifespan.shutdown.failed", "message": failure_message(app, exc)})
            raise
    await send({"type": "lifespan.shutdown.complete"})


def failure_message(app: MCPApp, exc: BaseException) -> str:
    """What a ``lifespan.*.failed`` message says of ``exc``: one line naming the server."""
    lifespan = app.server.lifespan
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if lifespan.failure_in(exc) is not None:
        return f"the lifespan of {lifespan.owner} failed: {what}"
    return f"{lifespan.owner} could not start: {what}"
