"""The official Python SDK client in 2026-07-28 mode against a python-sdk server hosted by mcp_trio.

The server (``sdk_interop_server.build_sdk_server`` plus a few tools below) is written with the SDK's
own API; ``mcp_trio.sdk.hosted_app`` serves it with ``serve()`` on real hypercorn.  Discovery, tools,
resources and prompts; progress and opt-in logs on the request's own SSE answer; an input-required round
trip (the SDK's own ``requestState`` sealing); ``subscriptions/listen`` fed by the SDK server's
``ctx.notify_*``; and a client that aborts its call cancels the SDK's handler.  (The 2025 session mode
is in test_interop_python_sdk.py and test_interop_typescript_sdk.py.)
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as mt
import pytest
import trio
from interop_server import SERVER_NAME, wait_until
from mcp.server.mcpserver import Context
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from sdk_interop_server import build_sdk_server
from test_interop_python_sdk_2026 import (
    DEADLINE,
    META_LOG_LEVEL,
    MODERN,
    Callbacks,
    Wire,
    assert_server_idle,
    connect,
    running_server,
    text_of,
)

from mcp_trio import ServerConfig
from mcp_trio.sdk import hosted_app

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpx2\._(sse|models)\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpcore2\._async\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Probe:
    def __init__(self) -> None:
        self.blocked = trio.Event()
        self.block_cancelled = False


def build(probe: Probe) -> Any:
    server = build_sdk_server()

    @server.tool(description="Ask for a name in an input-required round trip")
    async def greet_me(ctx: Context) -> str | InputRequiredResult:
        answer = (ctx.input_responses or {}).get("who")
        if isinstance(answer, ElicitResult) and answer.content:
            return f"Hello, {answer.content['name']}!"
        ask = ElicitRequest(params=ElicitRequestFormParams(message="Who are you?", requested_schema=NAME))
        return InputRequiredResult(input_requests={"who": ask})

    @server.tool(description="Announce a tools list change and a resource update")
    async def announce(ctx: Context) -> str:
        await ctx.notify_tools_changed()
        await ctx.notify_resource_updated("test://readme")
        return "sent"

    @server.tool(description="Block until cancelled")
    async def block() -> str:
        probe.blocked.set()
        try:
            await anyio.sleep_forever()
        finally:
            probe.block_cancelled = True
        return "unreachable"  # pragma: no cover

    return hosted_app(server, ServerConfig(shutdown_grace=2))


async def test_discovery_and_the_features_of_a_hosted_server() -> None:
    reported: list[tuple[float, float | None, str | None]] = []
    logs: list[mt.LoggingMessageNotificationParams] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    callbacks = Callbacks()
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with running_server(build(Probe())) as srv:
            options = {"logging_callback": on_log, "log_level": "info", **callbacks.options()}
            async with connect(srv.url, wire, **options) as client:
                assert client.protocol_version == MODERN
                discover = client.session.discover_result
                assert discover is not None and client.session.initialize_result is None
                assert set(discover.supported_versions) >= {MODERN, "2025-11-25"}
                assert client.server_info is not None and client.server_info.name == SERVER_NAME

                tools = await client.list_tools()
                assert {"add", "count", "greet_me", "announce", "block"} <= {t.name for t in tools.tools}
                assert text_of(await client.call_tool("add", {"a": 2, "b": 40})) == "42"
                result = await client.call_tool("count", {"n": 3}, progress_callback=on_progress)
                assert text_of(result) == "counted to 3"
                await wait_until(lambda: len(reported) == 3 and len(logs) == 3, what="3 progress, 3 logs")
                assert sorted(reported) == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
                assert sorted(str(log.data) for log in logs) == [f"step {i} of 3" for i in (1, 2, 3)]

                read = await client.read_resource("test://users/7/profile")
                assert isinstance(read.contents[0], mt.TextResourceContents)
                assert read.contents[0].text == '{"user": "7"}'
                prompt = await client.get_prompt("greet", {"name": "Trio"})
                assert isinstance(prompt.messages[0].content, mt.TextContent)
                assert prompt.messages[0].content.text == "Please greet Trio warmly."

                # input required: the SDK server seals its own requestState; mcp_trio passes it through
                assert text_of(await client.call_tool("greet_me", {})) == "Hello, Ada!"
                [(key, params)] = callbacks.elicited
                assert (key, params.message) == ("who", "Who are you?")

            (call,) = [c for c in wire.posts("tools/call") if c.params["name"] == "count"]
            assert call.params["_meta"][META_LOG_LEVEL] == "info"
            assert call.content_type == "text/event-stream"
            first, retry = [c for c in wire.posts("tools/call") if c.params["name"] == "greet_me"]
            assert "requestState" not in first.params
            assert retry.params["inputResponses"] == {"who": {"action": "accept", "content": {"name": "Ada"}}}
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_listen_gets_the_sdk_servers_events_and_an_aborted_call_cancels_its_handler() -> None:
    probe = Probe()
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with running_server(build(probe)) as srv:
            async with connect(srv.url, wire) as client:
                async with client.listen(
                    tools_list_changed=True, resource_subscriptions=["test://readme"]
                ) as subscription:
                    assert subscription.honored.tools_list_changed is True
                    assert text_of(await client.call_tool("announce", {})) == "sent"
                    with trio.fail_after(5):
                        assert await subscription.__anext__() == ToolsListChanged()
                        assert await subscription.__anext__() == ResourceUpdated(uri="test://readme")
                await wait_until(lambda: srv.app.statistics()["listeners"] == 0, what="listener gone")

                async with trio.open_nursery() as nursery:

                    async def call() -> None:
                        await client.call_tool("block", {})

                    nursery.start_soon(call)
                    await probe.blocked.wait()
                    assert srv.app.statistics()["modern_inflight"] == 1
                    nursery.cancel_scope.cancel()
                await wait_until(lambda: probe.block_cancelled, what="the SDK's handler cancelled")
                assert text_of(await client.call_tool("add", {"a": 1, "b": 1})) == "2"
            wire.assert_stateless()
            await assert_server_idle(srv.app)
