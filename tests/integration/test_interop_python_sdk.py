"""Interoperability: the official Python SDK client (``mcp`` 2.3.0) against an in-process mcp_trio server.

The server runs with ``serve()`` on a real hypercorn socket at 127.0.0.1:0; the client is the SDK's
``streamable_http_client`` transport with a ``ClientSession`` on top, run under Trio (the SDK is built on
anyio, which runs on Trio).  One session walks through every feature a real client uses: the
handshake, tools (with progress and log notifications), resources (static and templated), prompts, and
the server-to-client requests sampling and elicitation.  When the client leaves it sends DELETE, and
the server must be back to zero sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import mcp_types as mt
import pytest
import trio
from interop_server import SERVER_NAME, SERVER_VERSION, build_server, serving, wait_until
from mcp.client import ClientRequestContext, ClientSession
from mcp.client.streamable_http import streamable_http_client

from mcp_trio import MCPApp, MCPServer

# The SDK's transport leaves httpx2 SSE readers unexhausted: it returns out of `async for sse in
# EventSource(response)` as soon as a POST's response has arrived (and its GET stream is cancelled on exit),
# so each of those streams leaves 4 async generators (EventSource.__aiter__, Response.aiter_text,
# Response.aiter_bytes, httpcore2's PoolByteStream.__aiter__) to the garbage collector.  Under asyncio
# they are finalized silently; Trio's asyncgen finalizer warns "Async generator '...' was garbage
# collected before it had been exhausted" (ResourceWarning), which `filterwarnings = error` turns into
# PytestUnraisableExceptionWarning errors (48 of them in this test, 4 per SSE stream read).
# Client-side clean-up, nothing the server does: ignore exactly those generators' warnings, here only.
pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpx2\._(sse|models)\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpcore2\._async\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
]

DEADLINE = 20.0


def hosted() -> MCPApp:
    from sdk_interop_server import build_hosted

    return build_hosted()


# our own server, and its twin written with the python-sdk's API, hosted by mcp_trio
SERVERS = [pytest.param(build_server, id="mcp_trio"), pytest.param(hosted, id="hosted-python-sdk")]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # the SDK's sampling API
@pytest.mark.parametrize("make_server", SERVERS)
async def test_python_sdk_client_full_session(make_server: Callable[[], MCPServer | MCPApp]) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    logs: list[mt.LoggingMessageNotificationParams] = []
    sampled: list[mt.CreateMessageRequestParams] = []
    elicited: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_sampling(
        context: ClientRequestContext, params: mt.CreateMessageRequestParams
    ) -> mt.CreateMessageResult:
        sampled.append(params)
        message = params.messages[0]
        assert isinstance(message.content, mt.TextContent), message.content
        return mt.CreateMessageResult(
            role="assistant",
            content=mt.TextContent(type="text", text=f"echo: {message.content.text}"),
            model="fake-model",
            stop_reason="endTurn",
        )

    async def on_elicitation(context: ClientRequestContext, params: Any) -> mt.ElicitResult:
        elicited.append(params)
        return mt.ElicitResult(action="accept", content={"name": "Ada"})

    http_log: list[tuple[str, int]] = []  # (method, status) of every HTTP exchange the SDK made

    async def record(response: httpx2.Response) -> None:
        http_log.append((response.request.method, response.status_code))

    with trio.fail_after(DEADLINE):
        async with serving(make_server()) as (app, url):
            async with (
                httpx2.AsyncClient(timeout=10, event_hooks={"response": [record]}) as http,
                streamable_http_client(url, http_client=http) as (read_stream, write_stream),
                ClientSession(
                    read_stream,
                    write_stream,
                    sampling_callback=on_sampling,
                    elicitation_callback=on_elicitation,
                    logging_callback=on_log,
                    client_info=mt.Implementation(name="python-sdk-interop", version="0.0.1"),
                ) as session,
            ):
                # -- initialize --
                init = await session.initialize()
                assert init.protocol_version == "2025-11-25"
                assert init.server_info.name == SERVER_NAME
                assert init.server_info.version == SERVER_VERSION
                assert init.instructions == "an interop test server"
                assert init.capabilities.tools is not None
                assert init.capabilities.resources is not None
                assert init.capabilities.prompts is not None
                assert init.capabilities.logging is not None
                assert session.protocol_version == "2025-11-25"
                await wait_until(lambda: app.statistics()["sessions"] == 1)

                # -- tools --
                tools = await session.list_tools()
                assert {t.name for t in tools.tools} == {"add", "count", "ask_model", "ask_name"}
                add_tool = next(t for t in tools.tools if t.name == "add")
                assert add_tool.input_schema["properties"].keys() == {"a", "b"}
                assert set(add_tool.input_schema["required"]) == {"a", "b"}
                result = await session.call_tool("add", {"a": 2, "b": 40})
                assert not result.is_error
                assert isinstance(result.content[0], mt.TextContent)
                assert result.content[0].text == "42"

                # -- progress and logging on a tool call --
                result = await session.call_tool("count", {"n": 3}, progress_callback=on_progress)
                assert not result.is_error
                assert isinstance(result.content[0], mt.TextContent)
                assert result.content[0].text == "counted to 3"
                # the SDK runs notification callbacks as tasks of their own: they may land just after
                await wait_until(
                    lambda: len(progress) == 3 and len(logs) == 3,
                    what="3 progress and 3 log notifications",
                )
                assert sorted(progress) == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
                assert sorted(str(log.data) for log in logs) == [f"step {i} of 3" for i in (1, 2, 3)]
                assert {(log.level, log.logger) for log in logs} == {("info", "count")}

                # -- resources --
                resources = await session.list_resources()
                assert [(str(r.uri), r.name, r.mime_type) for r in resources.resources] == [
                    ("test://readme", "readme", "text/plain")
                ]
                templates = await session.list_resource_templates()
                assert [(t.uri_template, t.name) for t in templates.resource_templates] == [
                    ("test://users/{user_id}/profile", "profile")
                ]
                read = await session.read_resource("test://readme")
                assert len(read.contents) == 1
                assert isinstance(read.contents[0], mt.TextResourceContents)
                assert read.contents[0].text == "hello from mcp_trio"
                assert str(read.contents[0].uri) == "test://readme"
                read = await session.read_resource("test://users/42/profile")
                assert isinstance(read.contents[0], mt.TextResourceContents)
                assert read.contents[0].text == '{"user": "42"}'
                assert read.contents[0].mime_type == "application/json"

                # -- prompts --
                prompts = await session.list_prompts()
                assert [p.name for p in prompts.prompts] == ["greet"]
                arguments = prompts.prompts[0].arguments or []
                assert [(a.name, a.description, a.required) for a in arguments] == [
                    ("name", "who to greet", True)
                ]
                prompt = await session.get_prompt("greet", {"name": "Trio"})
                assert prompt.description == "Greet someone"
                assert len(prompt.messages) == 1
                assert prompt.messages[0].role == "user"
                assert isinstance(prompt.messages[0].content, mt.TextContent)
                assert prompt.messages[0].content.text == "Please greet Trio warmly."

                # -- sampling: server -> client request answered by sampling_callback --
                result = await session.call_tool("ask_model", {"question": "what is 2+2?"})
                assert not result.is_error, result
                assert isinstance(result.content[0], mt.TextContent)
                assert result.content[0].text == "fake-model: echo: what is 2+2?"
                assert len(sampled) == 1
                assert sampled[0].max_tokens == 64
                assert sampled[0].system_prompt == "be brief"

                # -- elicitation: server -> client request answered by elicitation_callback --
                result = await session.call_tool("ask_name", {})
                assert not result.is_error, result
                assert isinstance(result.content[0], mt.TextContent)
                assert result.content[0].text == "accept: Ada"
                assert len(elicited) == 1
                assert elicited[0].message == "What is your name?"
                assert elicited[0].requested_schema["required"] == ["name"]

                assert app.statistics()["sessions"] == 1

            # The transport's exit sent DELETE (terminate_on_close=True is its default): the session
            # must be gone from the server, without waiting for idle expiry.
            assert ("DELETE", 200) in http_log, http_log
            await wait_until(lambda: app.statistics()["sessions"] == 0, what="server back to zero sessions")
            stats = app.statistics()
            assert (stats["streams"], stats["connections"], stats["inflight"]) == (0, 0, 0), stats
            # the SDK did open the standalone GET stream after notifications/initialized
            assert ("GET", 200) in http_log, http_log
            assert all(status < 400 for _, status in http_log), http_log
