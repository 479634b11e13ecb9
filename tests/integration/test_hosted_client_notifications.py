"""A hosted python-sdk server gets the client's notifications: a low-level ``Server``'s
``on_roots_list_changed`` handler runs (in a task of the session) when the official Python SDK client
sends ``notifications/roots/list_changed``, and may ask the client for its roots from there; a handler
that fails is contained (the session goes on)."""

from __future__ import annotations

from typing import Any

import mcp_types as mt
import pytest
import trio
from interop_server import serving, wait_until
from mcp.client import ClientRequestContext, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel.server import Server
from mcp.types import CallToolResult, ListRootsResult, ListToolsResult, TextContent, Tool

from mcp_trio import ServerConfig
from mcp_trio.sdk import hosted_app

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpx2\._(sse|models)\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpcore2\._async\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),  # roots, in the SDK
]


async def test_the_sdk_servers_notification_handler_runs_and_may_ask_the_client() -> None:
    seen: list[list[str]] = []
    fail = [True]

    async def roots_changed(ctx: Any, params: Any) -> None:
        if fail[0]:
            fail[0] = False
            raise RuntimeError("the first one fails")
        roots: ListRootsResult = await ctx.session.list_roots()
        seen.append([str(root.uri) for root in roots.roots])

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="echo", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="echo")])

    server: Server[Any] = Server(
        "notified", on_roots_list_changed=roots_changed, on_list_tools=list_tools, on_call_tool=call_tool
    )

    async def list_roots(context: ClientRequestContext) -> mt.ListRootsResult:
        return mt.ListRootsResult(roots=[mt.Root.model_validate({"uri": "file:///work", "name": "work"})])

    with trio.fail_after(20):
        async with serving(hosted_app(server, ServerConfig(shutdown_grace=2))) as (app, url):
            async with (
                streamable_http_client(url) as (read_stream, write_stream),
                ClientSession(read_stream, write_stream, list_roots_callback=list_roots) as session,
            ):
                await session.initialize()
                await session.send_roots_list_changed()  # its handler fails: contained
                await trio.sleep(0.2)
                assert seen == [] and not fail[0]
                await session.send_roots_list_changed()
                await wait_until(lambda: seen == [["file:///work"]], what="the handler asked for the roots")
                result = await session.call_tool("echo", {})
                assert isinstance(result.content[0], TextContent) and result.content[0].text == "echo"
            await wait_until(lambda: app.statistics()["sessions"] == 0, what="no session left")
