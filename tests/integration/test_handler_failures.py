"""End to end over a real server (``serve()``: hypercorn on 127.0.0.1:0) in each era, with mcp_trio's
client: the error policy (a tool's explicit error, an unexpected one with its reference in the answer
and the log, a failing resource and prompt) and output schemas from return annotations (listed,
answered, valid against the schema; a task tool's too).  The official Python SDK client, which checks
``structuredContent`` against ``outputSchema`` itself, reads the same tools in the 2025 era."""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import httpx2
import jsonschema
import mcp_types as mt
import pydantic
import pytest
import trio
from interop_server import serving
from mcp.client import ClientSession as SDKSession
from mcp.client.streamable_http import streamable_http_client

from mcp_trio import MCPServer, RPCError, ToolError, open_client_session

pytestmark = [  # the SDK's SSE readers, as in test_interop_python_sdk.py
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpx2\._(sse|models)\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpcore2\._async\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
]

DEADLINE = 20.0
REFERENCE = re.compile(r"Internal error \(reference ([0-9a-f]{8})\)")


class Point(pydantic.BaseModel):
    x: int
    y: int


@dataclasses.dataclass
class Size:
    width: float
    height: float


def build() -> MCPServer:
    server = MCPServer("failures")

    @server.tool()
    async def lookup(city: str) -> Point:
        if city == "Atlantis":
            raise ToolError("no such city: Atlantis")
        if city == "nowhere":
            raise KeyError("missing")
        return Point(x=len(city), y=1)

    @server.tool()
    async def size() -> Size:
        return Size(2.0, 3.5)

    @server.tool()
    async def greeting(name: str) -> str:
        return f"hello {name}"

    @server.tool()
    async def liar() -> int:
        return "many"  # type: ignore[return-value]

    @server.tool(task="optional")
    async def slow_point() -> Point:
        await trio.sleep(0.05)
        return Point(x=7, y=7)

    @server.resource("test://broken/{part}")
    async def broken(part: str) -> str:
        raise KeyError("missing")

    @server.prompt()
    async def broken_prompt() -> str:
        raise ZeroDivisionError("division by zero")

    return server


def text_of(result: mt.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mt.TextContent), block
    return block.text


def reference_in(text: str) -> str:
    found = REFERENCE.fullmatch(text)
    assert found is not None, text
    return found[1]


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_failures_and_output_schemas_end_to_end(mode: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    with trio.fail_after(DEADLINE):
        async with serving(build()) as (_app, url), open_client_session(url, mode=mode) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert tools["lookup"].output_schema == Point.model_json_schema()
            wrapped = tools["greeting"].output_schema
            assert wrapped is not None
            assert wrapped["properties"] == {"result": {"title": "Result", "type": "string"}}

            found = await session.call_tool("lookup", {"city": "Oslo"})
            assert not found.is_error and found.structured_content == {"x": 4, "y": 1}
            assert text_of(found) == '{"x": 4, "y": 1}'
            sized = await session.call_tool("size")
            assert sized.structured_content == {"width": 2.0, "height": 3.5}
            greeted = await session.call_tool("greeting", {"name": "Ann"})
            assert text_of(greeted) == "hello Ann" and greeted.structured_content == {"result": "hello Ann"}
            for name, result in [("lookup", found), ("size", sized), ("greeting", greeted)]:
                jsonschema.validate(result.structured_content, tools[name].output_schema)
            tasked = await session.call_tool("slow_point")  # a task where the era and client have them
            assert tasked.structured_content == {"x": 7, "y": 7}

            explicit = await session.call_tool("lookup", {"city": "Atlantis"})
            assert explicit.is_error and text_of(explicit) == "no such city: Atlantis"
            assert caplog.records == []  # an explicit tool error is not logged

            failed = await session.call_tool("lookup", {"city": "nowhere"})
            assert failed.is_error and failed.structured_content is None
            references = [reference_in(text_of(failed))]
            lied = await session.call_tool("liar")
            assert lied.is_error
            references.append(reference_in(text_of(lied)))
            with pytest.raises(RPCError) as read:
                await session.read_resource("test://broken/x")
            assert read.value.code == mt.INTERNAL_ERROR
            assert read.value.data == {"reference": reference_in(read.value.message)}
            references.append(read.value.data["reference"])
            with pytest.raises(RPCError) as got:
                await session.get_prompt("broken_prompt")
            assert got.value.code == mt.INTERNAL_ERROR
            references.append(reference_in(got.value.message))
    assert [record.getMessage() for record in caplog.records] == [
        f"{what} failed (reference {reference})"
        for what, reference in zip(
            ["tool lookup", "tool liar", "resource template test://broken/{part}", "prompt broken_prompt"],
            references,
            strict=True,
        )
    ]
    assert [type(record.exc_info[1]).__name__ for record in caplog.records if record.exc_info] == [
        "KeyError",
        "OutputMismatch",
        "KeyError",
        "ZeroDivisionError",
    ]


async def test_the_python_sdk_client_validates_our_structured_content() -> None:
    """The SDK client checks every result's ``structuredContent`` against the tool's ``outputSchema``
    (and raises if it does not match, or is missing): ours pass, and an error result needs none."""
    with trio.fail_after(DEADLINE):
        async with (
            serving(build()) as (_app, url),
            httpx2.AsyncClient(timeout=10) as http,
            streamable_http_client(url, http_client=http) as (read_stream, write_stream),
            SDKSession(read_stream, write_stream) as session,
        ):
            await session.initialize()
            await session.list_tools()
            found = await session.call_tool("lookup", {"city": "Oslo"})
            assert not found.is_error and found.structured_content == {"x": 4, "y": 1}
            greeted = await session.call_tool("greeting", {"name": "Ann"})
            assert greeted.structured_content == {"result": "hello Ann"}
            sized = await session.call_tool("size", {})
            assert sized.structured_content == {"width": 2.0, "height": 3.5}
            failed = await session.call_tool("lookup", {"city": "nowhere"})
            assert failed.is_error and failed.structured_content is None
