"""The pieces the interop tests (official Python and TypeScript SDK clients) share.

* ``build_server()``: the test server of the 2025 interop tests (tools with progress, logs, sampling and
  elicitation; static and templated resources; a prompt).  Its tools, resources and prompt that the 2026
  interop server has as well are registered by ``add_basic_tools`` / ``add_basic_resources`` /
  ``add_greet_prompt``, so that server registers the same handlers, in the same order.
* ``serving(server)``: an ``MCPServer`` (or ``MCPApp``) served in-process with ``serve()`` on
  127.0.0.1:0 for the duration of the block; yields ``(app, url)``.
* ``wait_until(predicate)``: poll until something holds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import mcp_types as mt
import trio

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig, serve

SERVER_NAME = "interop"
SERVER_VERSION = "1.2.3"


def add_basic_tools(server: MCPServer) -> None:
    """``add`` and ``count`` (logs and progress on the way)."""

    @server.tool(description="Add two integers")
    async def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Count to n, logging and reporting progress on the way")
    async def count(ctx: Context, n: int) -> str:
        for i in range(1, n + 1):
            await ctx.info(f"step {i} of {n}", logger="count")
            await ctx.report_progress(i, n, f"step {i}")
        return f"counted to {n}"


def add_basic_resources(server: MCPServer) -> None:
    """``test://readme`` (static) and ``test://users/{user_id}/profile`` (templated)."""

    @server.resource("test://readme", name="readme", mime_type="text/plain", description="A text file")
    async def readme() -> str:
        return "hello from mcp_trio"

    @server.resource("test://users/{user_id}/profile", name="profile", mime_type="application/json")
    async def profile(user_id: str) -> str:
        return f'{{"user": "{user_id}"}}'


def add_greet_prompt(server: MCPServer) -> None:
    @server.prompt(description="Greet someone", argument_descriptions={"name": "who to greet"})
    async def greet(name: str) -> str:
        return f"Please greet {name} warmly."


def build_server() -> MCPServer:
    """The server of test_interop_python_sdk.py and test_interop_typescript_sdk.py."""
    server = MCPServer(SERVER_NAME, SERVER_VERSION, instructions="an interop test server")
    add_basic_tools(server)

    @server.tool(description="Ask the client's model a question")
    async def ask_model(ctx: Context, question: str) -> str:
        result = await ctx.sample(question, max_tokens=64, systemPrompt="be brief")
        content = result.content
        assert isinstance(content, mt.TextContent), content
        return f"{result.model}: {content.text}"

    @server.tool(description="Ask the user for their name")
    async def ask_name(ctx: Context) -> str:
        schema = {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "your name"}},
            "required": ["name"],
        }
        result = await ctx.elicit("What is your name?", schema)
        name = (result.content or {}).get("name")
        return f"{result.action}: {name}"

    add_basic_resources(server)
    add_greet_prompt(server)
    return server


@asynccontextmanager
async def serving(
    server: MCPServer | MCPApp, stop: trio.Event | None = None
) -> AsyncIterator[tuple[MCPApp, str]]:
    """``server`` on 127.0.0.1:0 for the duration of the block; stopped (and joined) after.

    An ``MCPServer`` is wrapped in an ``MCPApp`` with ``shutdown_grace=2``; an ``MCPApp`` is served as
    it is.  Yields the app and the endpoint's URL.  Setting ``stop`` (when given) stops the server
    before the block ends."""
    app = server if isinstance(server, MCPApp) else MCPApp(server, ServerConfig(shutdown_grace=2))
    stopped = trio.Event() if stop is None else stop
    async with trio.open_nursery() as nursery:

        async def run(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            await serve(app, "127.0.0.1", 0, shutdown_trigger=stopped.wait, task_status=task_status)

        urls: list[str] = await nursery.start(run)
        assert all(url.startswith("http://127.0.0.1:") for url in urls), urls
        try:
            yield app, urls[0]
        finally:
            stopped.set()


async def wait_until(predicate: Callable[[], bool], within: float = 5.0, what: str = "") -> None:
    """Poll ``predicate`` until it holds; fail after ``within`` seconds."""
    with trio.move_on_after(within):
        while True:
            if predicate():
                return
            await trio.sleep(0.01)
    raise AssertionError(f"{what or 'condition'} not met within {within} s")
