"""The demo server behind ``mcp-trio demo``: a few tools that show what a handler can do."""

from __future__ import annotations

import trio

from . import Context, MCPServer

__all__ = ["build_demo_server"]


def build_demo_server() -> MCPServer:
    server = MCPServer("mcp-trio-demo", "0.1.0", instructions="A demo server of mcp_trio.")

    @server.tool(description="Echo the given text back.")
    async def echo(text: str) -> str:
        return text

    @server.tool(description="Add two numbers.")
    async def add(a: float, b: float) -> dict[str, float]:
        return {"sum": a + b}

    @server.tool(description="Count to `steps`, reporting progress and logging each step.")
    async def count(ctx: Context, steps: int = 3, delay: float = 0.01) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await ctx.info(f"step {step} of {steps}")
            await trio.sleep(delay)
        return f"counted to {steps}"

    @server.tool(description="Sleep for `seconds` (cancellable: try notifications/cancelled).")
    async def sleep(seconds: float) -> str:
        await trio.sleep(seconds)
        return f"slept {seconds}s"

    return server
