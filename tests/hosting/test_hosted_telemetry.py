"""Telemetry of a hosted python-sdk server, on real hypercorn: mcp_trio's spans (one SERVER span per
operation, the client's trace context its parent) and MCP histograms (operation and session durations,
bounded series) in both eras, and the operations listener's ``/metrics`` and ``/stats``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import trio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from opentelemetry.trace import SpanKind, StatusCode

from mcp_trio._observe.conventions import DURATION_BUCKETS, OTHER

from ..otel import MetricLog, Point, SpanLog
from .peers import Legacy, Modern, hosting, request

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
DEADLINE = 15.0


class Seen:
    """A server middleware of the user's own: it stays in the chain (the SDK's span middleware does not:
    mcp_trio makes the operation's one SERVER span)."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        self.methods.append(ctx.method)
        return await call_next(ctx)


def build(seen: Seen | None = None, started: trio.Event | None = None) -> MCPServer:
    server = MCPServer("observed", middleware=[seen or Seen()])

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def fail() -> str:
        raise ToolError("it failed")

    @server.tool()
    async def block() -> str:
        if started is not None:
            started.set()
        await anyio.sleep_forever()
        return "never"  # pragma: no cover

    @server.prompt()
    async def hello(name: str) -> str:
        return f"hello {name}"

    return server


def server_spans(spans: SpanLog, name: str) -> list[Any]:
    return [span for span in spans if span.name == name and span.kind == SpanKind.SERVER]


def operations(points: list[Point], method: str) -> list[Point]:
    return [
        point
        for point in points
        if point.name == "mcp.server.operation.duration" and point.attributes["mcp.method.name"] == method
    ]


async def test_spans_and_histograms_of_both_eras(spans: SpanLog, metric_points: MetricLog) -> None:
    seen = Seen()
    with trio.fail_after(DEADLINE):
        async with hosting(build(seen)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            legacy, modern = Legacy(http, hosted.url), Modern(http, hosted.url)
            await legacy.open()
            call = {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"traceparent": TRACEPARENT}}
            assert (await legacy.call("tools/call", call))["result"]["content"][0]["text"] == "hi"
            assert (await legacy.call_tool("fail"))["result"]["isError"] is True
            assert (await legacy.call_tool("nope-1"))["result"]["isError"] is True
            assert (await legacy.call("custom/thing"))["error"]["code"] == -32601
            prompt = await legacy.call("prompts/get", {"name": "hello", "arguments": {"name": "a"}})
            assert prompt["result"]["messages"][0]["content"]["text"] == "hello a"
            # the SDK raises ValueError for an unknown prompt: an unexpected failure (-32603, logged)
            assert (await legacy.call("prompts/get", {"name": "nope-2"}))["error"]["code"] == -32603
            assert (await modern.call("tools/call", call))["result"]["content"][0]["text"] == "hi"
            assert await legacy.delete() == 200
    assert seen.methods.count("tools/call") == 4  # the user's middleware saw every call
    assert not [span for span in spans if span.instrumentation_scope.name != "mcp_trio"]
    (initialize,) = server_spans(spans, "initialize")
    assert initialize.attributes["mcp.session.id"] == legacy.session_id
    echoes = server_spans(spans, "tools/call echo")
    assert sorted(span.attributes["mcp.protocol.version"] for span in echoes) == ["2025-11-25", "2026-07-28"]
    for span in echoes:  # one SERVER span per call, in the client's trace
        assert format(span.context.trace_id, "032x") == TRACE_ID
        assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID
        assert span.attributes["gen_ai.tool.name"] == "echo"
        assert span.status.status_code == StatusCode.UNSET
    (failed,) = server_spans(spans, "tools/call fail")
    assert failed.attributes["error.type"] == "tool_error" and failed.status.status_code == StatusCode.ERROR
    assert not [span for span in spans if "nope" in span.name]  # unknown names make no span names
    (prompt,) = server_spans(spans, "prompts/get hello")  # a registered prompt names its span
    assert prompt.attributes["gen_ai.prompt.name"] == "hello"
    (unknown_prompt,) = server_spans(spans, "prompts/get")
    assert unknown_prompt.attributes["gen_ai.prompt.name"] == "nope-2"
    (other,) = server_spans(spans, OTHER)
    assert other.attributes["mcp.method.name"] == "custom/thing"

    points = metric_points()
    echo_points = [p for p in operations(points, "tools/call") if p.attributes["gen_ai.tool.name"] == "echo"]
    assert sorted(p.attributes["mcp.protocol.version"] for p in echo_points) == ["2025-11-25", "2026-07-28"]
    assert all(p.count == 1 and p.bounds == DURATION_BUCKETS and p.unit == "s" for p in echo_points)
    (unknown,) = [p for p in operations(points, "tools/call") if p.attributes["gen_ai.tool.name"] == OTHER]
    assert unknown.count == 1  # a client-chosen name is no series of its own
    prompts = {p.attributes["gen_ai.prompt.name"] for p in operations(points, "prompts/get")}
    assert prompts == {"hello", OTHER}
    sessions = [p for p in points if p.name == "mcp.server.session.duration"]
    assert [p.count for p in sessions] == [1]


async def test_the_operations_listener_scrapes_a_hosted_server() -> None:
    admin: list[str] = []
    with trio.fail_after(DEADLINE):
        async with (
            hosting(build(), admin_bind="127.0.0.1:0", admin_started=admin.extend) as hosted,
            httpx.AsyncClient(timeout=DEADLINE) as http,
        ):
            (base,) = admin
            legacy = Legacy(http, hosted.url)
            await legacy.open()
            await legacy.call_tool("echo", {"text": "x"})
            await Modern(http, hosted.url).call_tool("echo", {"text": "y"})
            stats = json.loads((await http.get(base + "/stats")).content)
            assert stats["sessions"] == 1
            scraped = await http.get(base + "/metrics")
            assert scraped.status_code == 200
            lines = scraped.text.splitlines()
            assert "mcp_trio_sessions_open 1" in lines
            series = [
                line
                for line in lines
                if line.startswith("mcp_server_operation_duration_seconds_count{")
                and 'gen_ai_tool_name="echo"' in line
            ]
            assert {line.rsplit(" ", 1)[1] for line in series} == {"1"} and len(series) == 2  # an era each
            assert (await http.get(hosted.url.replace("/mcp", "/metrics"))).status_code == 404
            assert (await http.get(base + "/readyz")).json() == {"ready": True, "reasons": []}


async def test_a_cancelled_hosted_request_ends_its_span(spans: SpanLog) -> None:
    started = trio.Event()
    with trio.fail_after(DEADLINE):
        async with hosting(build(started=started)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            legacy = Legacy(http, hosted.url)
            await legacy.open()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(legacy.post, request(9, "tools/call", {"name": "block", "arguments": {}}))
                await started.wait()
                assert await legacy.notify("notifications/cancelled", {"requestId": 9}) == 202
            (span,) = server_spans(spans, "tools/call block")
            assert span.attributes["error.type"] == "cancelled"
            assert span.status.status_code == StatusCode.ERROR
