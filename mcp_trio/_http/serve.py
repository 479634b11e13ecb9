"""Serving an :class:`MCPApp` with hypercorn's trio worker."""

from __future__ import annotations

import copy
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence

import hypercorn.config
import trio

from .._transport.asgi import MCPApp
from .hypercorn_server import serve_hypercorn

__all__ = ["hypercorn_config", "serve", "wait_for_signal"]


def hypercorn_config(bind: Sequence[str] = ("127.0.0.1:8000",), **options: object) -> hypercorn.config.Config:
    """A hypercorn ``Config`` for an MCP endpoint: the given binds, no access log, hypercorn's messages
    through Python logging (the ``hypercorn.error`` logger, once, as your logging configuration says;
    hypercorn's default also writes them to stderr itself), and ``options`` set as attributes."""
    config = hypercorn.config.Config()
    config.bind = list(bind)
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
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
    allow_stock_hypercorn: bool = False,
) -> None:
    """Serve ``app`` with hypercorn until ``shutdown_trigger`` returns (or the task is cancelled).

    Reports the bound URLs through ``task_status``.  On shutdown the app's sessions are closed first,
    so every open stream ends cleanly before hypercorn's own graceful period starts.  The server runs
    hypercorn's trio worker with mcp_trio's fixes, for this server only (no request can kill it,
    closed idle connections are released at once, each socket write is bounded by the app's
    ``config.write_timeout``) and, unless ``hypercorn_fast_path`` is false, the fast path; see
    docs/hypercorn.md.  WebSocket connections get hypercorn's pings every ``keepalive_interval`` (unless
    ``config`` sets ``websocket_ping_interval``) and messages are bounded by ``max_body_size``.  Other
    hypercorn servers in the process are not affected.  A ``config`` with
    ``certfile`` and ``keyfile`` serves HTTPS, and HTTP/2 to clients that offer it (docs/deploy/tls.md).

    The fixes are written for hypercorn 0.18.0's code: when the installed hypercorn differs (in its
    code, not in comments or formatting), ``serve`` raises ``RuntimeError``
    (``HypercornGuardError``) before binding anything, saying what differs.  With
    ``allow_stock_hypercorn=True`` it serves with hypercorn as shipped instead, without any of the
    fixes or the fast path (a WARNING in the log says so and what is given up; docs/hypercorn.md).
    """
    config = copy.copy(config or hypercorn_config())
    # WebSocket connections: a ping as often as SSE keep-alives, and hypercorn closes a message longer
    # than the app accepts (1009) before buffering it whole.
    if config.websocket_ping_interval is None:
        config.websocket_ping_interval = app.config.keepalive_interval
    config.websocket_max_message_size = min(config.websocket_max_message_size, app.config.max_body_size)

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        await app.aclose()

    await serve_hypercorn(
        app,
        config,
        shutdown_trigger=trigger,
        task_status=task_status,
        fast_path=hypercorn_fast_path,
        write_timeout=app.config.write_timeout,
        allow_stock=allow_stock_hypercorn,
    )
