"""The ticker app of docs/lifespan.md: the app's own task (a ticker) runs in the server's lifespan, and
the tools, the resource and the prompt read its state through ``ctx.lifespan_context``.

Serve it with ``mcp-trio serve ticker_app:server`` (every option of the command applies), or run
``python ticker_app.py [HOST:PORT]``: then ``main`` serves it next to a task of the program's own, and
Ctrl-C or SIGTERM ends both.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from mcp_trio import Context, MCPApp, MCPServer, serve
from mcp_trio.server import wait_for_signal

# start-app


@dataclass
class AppState:
    ticks: int = 0
    """Seconds the ticker has counted."""


async def ticker(state: AppState) -> None:
    while True:
        await trio.sleep(1)
        state.ticks += 1


@asynccontextmanager
async def lifespan(server: MCPServer) -> AsyncIterator[AppState]:
    state = AppState()
    async with trio.open_nursery() as nursery:  # the app's own tasks run here ...
        nursery.start_soon(ticker, state)
        yield state  # ... while the server serves
        nursery.cancel_scope.cancel()  # the server has stopped: so do they
    print(f"ticker stopped after {state.ticks} ticks", file=sys.stderr)


server = MCPServer("ticker", lifespan=lifespan)


@server.tool(description="How many seconds the ticker has counted.")
async def ticks(ctx: Context[AppState]) -> str:
    return str(ctx.lifespan_context.ticks)


@server.resource("ticker://ticks", mime_type="text/plain")
async def ticks_resource(ctx: Context[AppState]) -> str:
    return str(ctx.lifespan_context.ticks)


@server.prompt(description="Ask about the ticker.")
async def about_ticks(ctx: Context[AppState], question: str = "Is it still ticking?") -> str:
    return f"The ticker has counted {ctx.lifespan_context.ticks} seconds. {question}"


# end-app
# start-main


async def report() -> None:
    """A task of the program's own, next to the server: it never returns."""
    while True:
        await trio.sleep(60)
        print(f"{server.lifespan_context.ticks} ticks so far", file=sys.stderr)


async def main(bind: str) -> None:
    host, _, port = bind.rpartition(":")
    app = MCPApp(server)
    async with trio.open_nursery() as program:
        program.start_soon(report)

        async def serve_then_stop(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(app, host, int(port), shutdown_trigger=wait_for_signal, task_status=task_status)
            program.cancel_scope.cancel()  # serve returned (Ctrl-C, SIGTERM): end the program's tasks too

        urls = await program.start(serve_then_stop)
        print(f"serving on {urls[0]}", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8000")
# end-main
