"""What the hypercorn-based baselines (``baseline_python_sdk.py``, ``baseline_bare_asgi.py``) share: the
same hypercorn as ``mcp-trio`` (default ``Config``, access log off, mcp_trio's CLOSE_WAIT fix and fast
path unless switched off), the ``serving on`` line the harness waits for, and SIGINT/SIGTERM to stop."""

from __future__ import annotations

import argparse
from typing import Any

import hypercorn.trio
import trio

from mcp_trio._http.hypercorn_server import serve_hypercorn
from mcp_trio.server import hypercorn_config, wait_for_signal


def add_hypercorn_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default="127.0.0.1:0")
    parser.add_argument(
        "--no-hypercorn-fix", action="store_true", help="do not apply mcp_trio's CLOSE_WAIT fix"
    )
    parser.add_argument(
        "--no-hypercorn-fast-path",
        action="store_true",
        help="do not apply mcp_trio's hypercorn request-path patches (as mcp-trio --no-hypercorn-fast-path)",
    )


async def serve_baseline(name: str, app: Any, args: argparse.Namespace) -> None:
    """Serve ``app`` with ``hypercorn.trio.serve`` until SIGINT or SIGTERM."""
    config = hypercorn_config([args.bind])

    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        if args.no_hypercorn_fix:  # hypercorn as shipped
            await hypercorn.trio.serve(app, config, shutdown_trigger=wait_for_signal, task_status=task_status)
        else:
            await serve_hypercorn(
                app,
                config,
                shutdown_trigger=wait_for_signal,
                task_status=task_status,
                fast_path=not args.no_hypercorn_fast_path,
            )

    async with trio.open_nursery() as nursery:
        urls = await nursery.start(run)
        for url in urls:
            print(f"{name}: serving on {url}/mcp", flush=True)
    print(f"{name}: stopped", flush=True)
