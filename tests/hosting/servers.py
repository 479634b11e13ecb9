"""Small python-sdk servers the hosting tests serve, written with the SDK's own API (anyio only)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer


@dataclass
class AppState:
    ticks: int = 0
    exited: bool = False


@dataclass
class Ticker:
    """A lifespan that runs a ticker task, and what happened (``events``, in order).  ``release``: the
    lifespan waits for it before yielding; ``fail_on_enter``: it raises instead; ``crash_after``: its
    ticker raises after that many ticks, while serving."""

    release: anyio.Event | None = None
    fail_on_enter: bool = False
    crash_after: int | None = None
    events: list[str] = field(default_factory=list)
    state: AppState | None = None

    @asynccontextmanager
    async def lifespan(self, server: object) -> AsyncIterator[AppState]:
        self.events.append("enter")
        if self.fail_on_enter:
            raise ValueError("no database")
        if self.release is not None:
            await self.release.wait()
        state = self.state = AppState()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._tick, state)
            try:
                yield state
            finally:
                self.events.append("after yield")
                state.exited = True
                tasks.cancel_scope.cancel()
        self.events.append("cleaned up")

    async def _tick(self, state: AppState) -> None:
        while True:
            await anyio.sleep(0.01)
            state.ticks += 1
            if self.crash_after is not None and state.ticks >= self.crash_after:
                raise KeyError("tick crashed")

    def mcpserver(self) -> MCPServer:
        server = MCPServer("ticker", lifespan=self.lifespan)

        @server.tool()
        async def ticks(ctx: Context) -> str:
            state = ctx.request_context.lifespan_context
            assert isinstance(state, AppState)
            return f"{state.ticks} exited={state.exited}"

        @server.tool()
        async def slow(seconds: float, ctx: Context) -> str:
            self.events.append("slow call started")
            await anyio.sleep(seconds)
            self.events.append("slow call finished")
            return f"exited={ctx.request_context.lifespan_context.exited}"

        return server

    def lowlevel(self) -> Server[Any]:
        async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> mt.ListToolsResult:
            schema = {"type": "object", "properties": {}}
            return mt.ListToolsResult(tools=[mt.Tool(name="ticks", input_schema=schema)])

        async def call_tool(
            ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams
        ) -> mt.CallToolResult:
            state = ctx.lifespan_context
            assert isinstance(state, AppState)
            text = f"{state.ticks} exited={state.exited}"
            return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)])

        return Server(
            "ticker-lowlevel",
            version="2.0",
            lifespan=self.lifespan,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
