"""A python-sdk server (``mcp.server.mcpserver.MCPServer``) that the tests host on mcp_trio's transport.

Written only with the SDK's own API (anyio, never asyncio), as a python-sdk user writes one.  Its tools
carry the names of the demo's (``echo``, ``add``, ``count``, ``sleep``, ...) so the tests that drive the
demo (hostile input, fuzzing, leaks) can drive it too: ``mcp-trio serve
tests.integration.sdk_servers:build_server`` (see ``mcp_http.HOSTED_COMMAND``), or in-process through
``mcp_trio.sdk.hosted_app(build_server())``.

- ``echo``, ``hello``, ``add``, ``test_simple_text``, ``test_error_handling``: answers at once;
- ``count``: reports progress ``steps`` times (``delay`` seconds apart); ``sleep``: sleeps (cancellable);
- ``flood``: ``count`` progress notifications of 256 KiB each (a client that stops reading);
- ``test_elicitation``: asks the user (a server-to-client request in a 2025 session, an input-required
  result at 2026-07-28);
- ``group_failure``: two child tasks of the handler raise a ``BaseException`` (not an ``Exception``);
- a resource ``test://static-text``, a template ``test://template/{id}/data``, a prompt
  ``test_simple_prompt``.

``build_lowlevel_server``: the same ``echo`` on the SDK's low-level ``Server``, which (unlike
``MCPServer``) can serve ``resources/subscribe`` and ``resources/unsubscribe``.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as mt
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

__all__ = ["CHUNK", "Misbehaving", "build_lowlevel_server", "build_server"]

CHUNK = 256 * 1024
"""The message size of one of ``flood``'s progress notifications."""


class Misbehaving(BaseException):
    """Not an Exception: user code can raise anything."""


class Identity(BaseModel):
    """What ``test_elicitation`` asks the user for."""

    name: str


def build_server() -> MCPServer[Any]:
    """A new server with the tools, resource, template and prompt above."""
    server: MCPServer[Any] = MCPServer("sdk-hosted", version="1.0.0", instructions="A python-sdk server.")
    _add_plain_tools(server)
    _add_slow_tools(server)
    _add_asking_tools(server)

    @server.resource("test://static-text", mime_type="text/plain")
    def static_text() -> str:
        return "This is the content of the static text resource."

    @server.resource("test://template/{id}/data", mime_type="application/json")
    def template(id: str) -> str:
        return f'{{"id": "{id}"}}'

    @server.prompt()
    def test_simple_prompt() -> str:
        """A prompt without arguments."""
        return "This is a simple prompt for testing."

    return server


def _add_plain_tools(server: MCPServer[Any]) -> None:
    @server.tool(description="Echo the given text back.")
    async def echo(text: str) -> str:
        return text

    @server.tool(description="Greet `name`.")
    async def hello(name: str) -> str:
        return f"hello {name}"

    @server.tool(description="Add two numbers.")
    async def add(a: float, b: float) -> dict[str, float]:
        return {"sum": a + b}

    @server.tool(description="Returns simple text.")
    async def test_simple_text() -> str:
        return "This is a simple text response for testing."

    @server.tool(description="Always fails: a tool error result.")
    async def test_error_handling() -> str:
        raise ToolError("This tool intentionally returns an error for testing")

    @server.tool(description="Two child tasks raise a BaseException.")
    async def group_failure() -> str:
        async def fail() -> None:
            raise Misbehaving("from a child task")

        async with anyio.create_task_group() as group:
            group.start_soon(fail)
            group.start_soon(fail)
        return "unreachable"


def _add_slow_tools(server: MCPServer[Any]) -> None:
    @server.tool(description="Count to `steps`, reporting progress at each.")
    async def count(ctx: Context, steps: int = 3, delay: float = 0.01) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await anyio.sleep(delay)
        return f"counted to {steps}"

    @server.tool(description="Sleep for `seconds` (cancellable).")
    async def sleep(seconds: float) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds}s"

    @server.tool(description="`count` progress notifications of 256 KiB each.")
    async def flood(ctx: Context, count: int) -> str:
        for i in range(count):
            await ctx.report_progress(i, count, "x" * CHUNK)
        return "flooded"


def _add_asking_tools(server: MCPServer[Any]) -> None:
    @server.tool(description="Asks the user's name, then greets them.")
    async def test_elicitation(ctx: Context, message: str = "Who are you?") -> str | mt.InputRequiredResult:
        if ctx.protocol_version is not None and ctx.protocol_version >= "2026":
            answer = (ctx.input_responses or {}).get("who")
            if answer is None:
                schema = Identity.model_json_schema()
                ask = mt.ElicitRequest(
                    params=mt.ElicitRequestFormParams(message=message, requested_schema=schema)
                )
                return mt.InputRequiredResult(input_requests={"who": ask})
            content = getattr(answer, "content", None) or {}
            return f"hello {content.get('name')}"
        result = await ctx.elicit(message, Identity)
        if result.action == "accept":
            return f"hello {result.data.name}"
        return f"no name ({result.action})"


def build_lowlevel_server() -> Server[Any]:
    """A low-level ``Server``: ``echo``, one resource, and resource subscriptions (kept by the client's
    session on mcp_trio's side; the handlers only accept them)."""
    echo = mt.Tool(
        name="echo",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    )

    async def list_tools(ctx: Any, params: mt.PaginatedRequestParams | None) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=[echo])

    async def call_tool(ctx: Any, params: mt.CallToolRequestParams) -> mt.CallToolResult:
        if params.name != "echo":
            error = mt.TextContent(type="text", text=f"no such tool: {params.name}")
            return mt.CallToolResult(content=[error], is_error=True)
        text = str((params.arguments or {}).get("text"))
        return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)])

    async def list_resources(ctx: Any, params: mt.PaginatedRequestParams | None) -> mt.ListResourcesResult:
        return mt.ListResourcesResult(resources=[mt.Resource(uri="test://watched", name="watched")])

    async def subscribe(ctx: Any, params: mt.SubscribeRequestParams) -> mt.EmptyResult:
        return mt.EmptyResult()

    async def unsubscribe(ctx: Any, params: mt.UnsubscribeRequestParams) -> mt.EmptyResult:
        return mt.EmptyResult()

    return Server(
        "sdk-hosted-lowlevel",
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
    )
