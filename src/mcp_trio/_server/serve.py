"""Serving an :class:`MCPApp` with hypercorn's trio worker."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import hypercorn.config
import hypercorn.trio
import trio

from .asgi import MCPApp
from .hypercorn_fast_path import apply_hypercorn_fast_path
from .hypercorn_patch import apply_hypercorn_close_wait_fix

__all__ = ["hypercorn_config", "serve", "wait_for_signal"]


def hypercorn_config(bind: Sequence[str] = ("127.0.0.1:8000",), **options: object) -> hypercorn.config.Config:
    """A hypercorn ``Config`` for an MCP endpoint: the given binds, quiet access log, and options."""
    config = hypercorn.config.Config()
    config.bind = list(bind)
    config.accesslog = None
    for name, value in options.items():
        setattr(config, name, value)
    return config


async def wait_for_signal(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Return when the process receives one of ``signals`` (SIGINT, SIGTERM by default)."""
    with trio.open_signal_receiver(*signals) as received:
        async for _ in received:
            return


async def serve(
    app: MCPApp,
    config: hypercorn.config.Config | None = None,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    hypercorn_fast_path: bool = True,
) -> None:
    """Serve ``app`` with hypercorn until ``shutdown_trigger`` returns (or the task is cancelled).

    Reports the bound URLs through ``task_status``.  On shutdown the app's sessions are closed first,
    so every open stream ends cleanly before hypercorn's own graceful period starts.  Applies the
    hypercorn close-wait fix (see :func:`apply_hypercorn_close_wait_fix`) and, unless
    ``hypercorn_fast_path`` is false, the request-path patches of :func:`apply_hypercorn_fast_path`
    (both process-wide, both only on the hypercorn 0.18 code they were written for).
    """
    apply_hypercorn_close_wait_fix()
    if hypercorn_fast_path:
        apply_hypercorn_fast_path()
    config = config or hypercorn_config()

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        await app.aclose()

    asgi: Any = app  # MCPApp speaks ASGI 3 with plain dicts; hypercorn's signature wants its TypedDicts
    await hypercorn.trio.serve(asgi, config, shutdown_trigger=trigger, task_status=task_status)
