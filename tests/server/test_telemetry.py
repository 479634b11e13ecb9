"""The server's telemetry by the OpenTelemetry MCP conventions, read back from the SDK's in-memory
exporters (tests/otel.py): span names, kinds, attributes, parents and status, and the duration
histograms, in both eras and on every transport (Streamable HTTP, stdio's message connection,
WebSocket); the Prometheus registry; nothing recorded (and nothing made) when nothing records."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from mcp_trio import MCPApp, MCPServer, ServerConfig, open_websocket_client
from mcp_trio._observe.conventions import DURATION_BUCKETS, OTHER, SESSION_BUCKETS
from mcp_trio._observe.telemetry import PIPE, Telemetry
from mcp_trio.demo import build_demo_server
from mcp_trio.testing import open_asgi_client

from ..otel import Point, SpanLog
from .conftest import POST_HEADERS, Client, init_body
from .test_message_connection import ChannelConnection
from .test_modern import Modern
from .test_modern import build as build_modern
from .test_stdio_server import modern_meta
from .test_websocket import serving

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def named(spans: SpanLog, name: str, kind: SpanKind = SpanKind.SERVER) -> ReadableSpan:
    found = [span for span in spans if span.name == name and span.kind == kind]
    assert len(found) == 1, [(span.name, span.kind) for span in spans]
    return found[0]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def operations(points: list[Point], method: str) -> list[Point]:
    return [
        point
        for point in points
        if point.name == "mcp.server.operation.duration" and point.attributes["mcp.method.name"] == method
    ]


# -- Streamable HTTP, 2025 ------------------------------------------------------------------------


async def test_a_2025_session_over_http(client: Client, spans: SpanLog, metric_points: Any) -> None:
    await client.initialize()
    session_id = client.session_id
    echo = await client.request(
        2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"traceparent": TRACEPARENT}}
    )
    assert echo["result"]["content"][0]["text"] == "hi"
    failed = await client.request(3, "tools/call", {"name": "test_error_handling", "arguments": {}})
    assert failed["result"]["isError"] is True
    unknown = await client.request(4, "prompts/get", {"name": "no-such-prompt"})
    assert unknown["error"]["code"] == -32602
    await client.request(5, "resources/read", {"uri": "test://static-text"})
    assert (await client.delete()).status == 200
    await trio.testing.wait_all_tasks_blocked()

    initialize = named(spans, "initialize")
    assert attributes(initialize) == {
        "mcp.method.name": "initialize",
        "jsonrpc.request.id": "1",
        "mcp.session.id": session_id,
        "mcp.protocol.version": "2025-11-25",
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    assert initialize.status.status_code == StatusCode.UNSET
    initialized = named(spans, "notifications/initialized")
    assert "jsonrpc.request.id" not in attributes(initialized)
    assert attributes(initialized)["mcp.session.id"] == session_id

    call = named(spans, "tools/call echo")
    assert attributes(call) == {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "2",
        "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool",
        "mcp.session.id": session_id,
        "mcp.protocol.version": "2025-11-25",
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    # the client's traceparent is the parent; the server span is remote-parented, in the client's trace
    assert format(call.context.trace_id, "032x") == TRACE_ID
    assert call.parent is not None and format(call.parent.span_id, "016x") == PARENT_ID
    assert call.parent.is_remote
    assert call.status.status_code == StatusCode.UNSET

    tool_error = named(spans, "tools/call test_error_handling")
    assert attributes(tool_error)["error.type"] == "tool_error"
    assert tool_error.status.status_code == StatusCode.ERROR
    assert tool_error.parent is None  # no traceparent: a root span

    prompt = named(spans, "prompts/get")  # not registered: no target in the name
    assert attributes(prompt)["gen_ai.prompt.name"] == "no-such-prompt"
    assert attributes(prompt)["error.type"] == "-32602"
    assert attributes(prompt)["rpc.response.status_code"] == "-32602"
    assert prompt.status.status_code == StatusCode.ERROR
    assert prompt.status.description and "no-such-prompt" in prompt.status.description
    read = named(spans, "resources/read")
    assert attributes(read)["mcp.resource.uri"] == "test://static-text"

    points = metric_points()
    (echo_point,) = [
        p for p in operations(points, "tools/call") if p.attributes["gen_ai.tool.name"] == "echo"
    ]
    assert echo_point.unit == "s" and echo_point.count == 1
    assert echo_point.bounds == DURATION_BUCKETS
    assert echo_point.attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool",
        "mcp.protocol.version": "2025-11-25",
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    (error_point,) = [
        p
        for p in operations(points, "tools/call")
        if p.attributes["gen_ai.tool.name"] == "test_error_handling"
    ]
    assert error_point.attributes["error.type"] == "tool_error"
    (prompt_point,) = operations(points, "prompts/get")
    assert prompt_point.attributes["gen_ai.prompt.name"] == OTHER  # unregistered: no client-made series
    assert prompt_point.attributes["error.type"] == "-32602"
    (read_point,) = operations(points, "resources/read")
    assert "mcp.resource.uri" not in read_point.attributes  # never a URI as a metric attribute
    for point in points:
        assert "jsonrpc.request.id" not in point.attributes and "mcp.session.id" not in point.attributes
    sessions = [p for p in points if p.name == "mcp.server.session.duration"]
    assert {p.bounds for p in sessions} == {SESSION_BUCKETS}  # up to a day: sessions last hours
    assert [(p.count, p.attributes) for p in sessions] == [
        (
            1,
            {
                "network.transport": "tcp",
                "network.protocol.name": "http",
                "mcp.protocol.version": "2025-11-25",
            },
        )
    ]


async def test_a_server_request_is_a_client_span_under_the_tool(client: Client, spans: SpanLog) -> None:
    """Sampling asked by a tool: a CLIENT span, child of the tool's span, its context in the request's
    ``params._meta``."""
    init = json.loads(init_body())
    init["params"]["capabilities"] = {"sampling": {}}
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=json.dumps(init).encode())
    client.session_id = response.headers["mcp-session-id"]
    await client.notify("notifications/initialized")
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "test_sampling",
            "arguments": {"prompt": "hi"},
            "_meta": {"traceparent": TRACEPARENT},
        },
    }
    response = await client.post(json.dumps(body).encode())
    request = await response.next_message()
    assert request is not None and request["method"] == "sampling/createMessage"
    traceparent = request["params"]["_meta"]["traceparent"]
    answer = {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"},
    }
    await client.post(json.dumps(answer).encode())
    result = await response.next_message()
    assert result is not None and "result" in result
    await trio.testing.wait_all_tasks_blocked()
    tool = named(spans, "tools/call test_sampling")
    sampling = named(spans, "sampling/createMessage", SpanKind.CLIENT)
    assert sampling.parent is not None and sampling.parent.span_id == tool.context.span_id
    assert sampling.context.trace_id == tool.context.trace_id == int(TRACE_ID, 16)
    assert traceparent == f"00-{TRACE_ID}-{format(sampling.context.span_id, '016x')}-01"
    assert attributes(sampling)["jsonrpc.request.id"] == str(request["id"])
    assert attributes(sampling)["mcp.session.id"] == client.session_id


# -- Streamable HTTP, 2026 ------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["2025", "2026"])
async def test_notifications_a_tool_sends_are_client_spans_under_it(
    client: Client, spans: SpanLog, metric_points: Any, era: str
) -> None:
    """... and their durations are the sender's (``mcp.client.operation.duration``): the receiver's
    histogram counts the call only, as the Prometheus one does."""
    params: dict[str, Any] = {
        "name": "count",
        "arguments": {"steps": 2, "delay": 0},
        "_meta": {"progressToken": "p"},
    }
    if era == "2025":
        await client.initialize()
        response = await client.post(
            json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}).encode()
        )
    else:
        params["_meta"].update(modern_meta())
        response = await Modern(client.asgi).post("tools/call", params)
    messages = []
    while (message := await response.next_message()) is not None:
        messages.append(message)
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert len(progress) == 2
    tool = named(spans, "tools/call count")
    sent = [s for s in spans if s.name == "notifications/progress"]
    assert len(sent) == 2 and {s.kind for s in sent} == {SpanKind.CLIENT}
    for span, message in zip(sent, progress, strict=True):
        assert span.parent is not None and span.parent.span_id == tool.context.span_id
        assert "jsonrpc.request.id" not in attributes(span)
        assert message["params"]["_meta"]["traceparent"].split("-")[2] == format(span.context.span_id, "016x")
    points = metric_points()
    received = {p.attributes["mcp.method.name"] for p in points if p.name == "mcp.server.operation.duration"}
    handshake = {"initialize", "notifications/initialized"} if era == "2025" else set()
    assert received == {"tools/call", *handshake}
    by_sender = [p for p in points if p.name == "mcp.client.operation.duration"]
    (progress_point,) = [p for p in by_sender if p.attributes["mcp.method.name"] == "notifications/progress"]
    assert progress_point.count == 2 and progress_point.bounds == DURATION_BUCKETS
    notifications = {"notifications/progress", "notifications/message"}
    assert {p.attributes["mcp.method.name"] for p in by_sender} <= notifications


async def test_2026_requests_over_http(spans: SpanLog, metric_points: Any) -> None:
    app = MCPApp(build_modern(), ServerConfig())
    async with app.running(), open_asgi_client(app) as asgi:
        modern = Modern(asgi)
        status, body = await modern.call(
            "tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": {"traceparent": TRACEPARENT}}
        )
        assert status == 200 and body["result"]["content"][0]["text"] == "x"
        status, body = await modern.call("tools/call", {"name": "greet", "arguments": {}})
        assert body["result"]["resultType"] == "input_required"
        status, body = await modern.call("prompts/get", {"name": "hello", "arguments": {"name": "a"}})
        assert status == 200
    call = named(spans, "tools/call echo")
    assert attributes(call) == {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "1",
        "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool",
        "mcp.protocol.version": "2026-07-28",
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    assert format(call.context.trace_id, "032x") == TRACE_ID
    round_one = named(spans, "tools/call greet")  # an input-required round: an answer, not an error
    assert round_one.status.status_code == StatusCode.UNSET and "error.type" not in attributes(round_one)
    assert attributes(named(spans, "prompts/get hello"))["gen_ai.prompt.name"] == "hello"
    points = operations(metric_points(), "tools/call")
    assert {p.attributes["gen_ai.tool.name"] for p in points} == {"echo", "greet"}
    assert {p.attributes["mcp.protocol.version"] for p in points} == {"2026-07-28"}


# -- stdio (the message connection) and WebSocket ------------------------------------------------------


async def test_both_eras_over_a_pipe(spans: SpanLog, metric_points: Any) -> None:
    server = MCPServer("pipe")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    send, receive = trio.open_memory_channel[bytes](100)
    connection = ChannelConnection(server, receive)

    async def call(request: dict[str, Any]) -> dict[str, Any]:
        await send.send(json.dumps(request).encode())
        answer: dict[str, Any] = json.loads(await connection.out_receive.receive())
        return answer

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(connection.run)
            init = {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            }
            await call({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
            params = {"name": "echo", "arguments": {"text": "a"}, "_meta": {"traceparent": TRACEPARENT}}
            await call({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
            params = {"name": "echo", "arguments": {"text": "b"}, "_meta": modern_meta()}
            await call({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params})
            await send.aclose()
    legacy, modern = (s for s in spans if s.name == "tools/call echo")
    assert attributes(legacy)["network.transport"] == "pipe"
    assert "network.protocol.name" not in attributes(legacy)
    assert attributes(legacy)["mcp.protocol.version"] == "2025-06-18"
    assert format(legacy.context.trace_id, "032x") == TRACE_ID
    assert attributes(modern)["mcp.protocol.version"] == "2026-07-28"
    assert attributes(modern)["network.transport"] == "pipe"
    assert attributes(named(spans, "initialize"))["mcp.protocol.version"] == "2025-06-18"
    points = metric_points()
    assert {p.attributes["mcp.protocol.version"] for p in operations(points, "tools/call")} == {
        "2025-06-18",
        "2026-07-28",
    }
    (session,) = [p for p in points if p.name == "mcp.server.session.duration"]
    assert session.attributes == {"network.transport": "pipe", "mcp.protocol.version": "2025-06-18"}


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_both_eras_over_websocket(mode: Any, spans: SpanLog, metric_points: Any) -> None:
    async with serving("h11", MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1.0))) as served:
        async with open_websocket_client(served.url, mode=mode) as session:
            await session.call_tool("echo", {"text": "x"})
        await served.until_no_connection()
    call = named(spans, "tools/call echo")
    assert attributes(call)["network.transport"] == "tcp"
    assert attributes(call)["network.protocol.name"] == "websocket"
    version = "2026-07-28" if mode == "modern" else "2025-11-25"
    assert attributes(call)["mcp.protocol.version"] == version
    (point,) = operations(metric_points(), "tools/call")
    assert point.attributes["network.protocol.name"] == "websocket"


# -- bounds, cancellation, the registry, nothing on ----------------------------------------------------


async def test_client_chosen_names_do_not_grow_the_series(
    client: Client, metric_points: Any, spans: SpanLog
) -> None:
    await client.initialize()
    for n in range(20):
        await client.request(10 + n, "tools/call", {"name": f"nope-{n}", "arguments": {}})
        await client.request(40 + n, f"custom/method-{n}", {})
    points = metric_points()
    assert len(operations(points, "tools/call")) == 1  # every unknown tool is one _OTHER series
    (other,) = operations(points, OTHER)  # ... and every unknown method one more
    assert other.count == 20 and other.attributes["error.type"] == "-32601"
    names = {span.name for span in spans}
    assert "tools/call" in names and OTHER in names  # span names are as bounded
    assert not any(name.startswith(("custom/", "tools/call nope")) for name in names)
    methods = {span.attributes["mcp.method.name"] for span in spans if span.name == OTHER}
    assert methods == {f"custom/method-{n}" for n in range(20)}  # the attribute still says which


async def test_a_cancelled_request_ends_its_span(client: Client, spans: SpanLog) -> None:
    await client.initialize()
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 60}},
        }
    ).encode()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.post, body)
        await trio.testing.wait_all_tasks_blocked()
        await client.notify("notifications/cancelled", {"requestId": 9})
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    span = named(spans, "tools/call sleep")
    assert attributes(span)["error.type"] == "cancelled"
    assert span.status.status_code == StatusCode.ERROR


async def test_the_prometheus_registry(client: Client, app: MCPApp) -> None:
    registry = app.server.telemetry.enable_metrics()
    await client.initialize()
    await client.request(2, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
    text = registry.render([("mcp_trio_sessions", "gauge", "Open sessions.", [({}, 1)])])
    lines = text.splitlines()
    assert "# TYPE mcp_server_operation_duration_seconds histogram" in lines
    series = [line for line in lines if line.startswith("mcp_server_operation_duration_seconds_count{")]
    echo = [line for line in series if 'gen_ai_tool_name="echo"' in line]
    assert len(echo) == 1 and echo[0].endswith(" 1")
    assert 'mcp_method_name="tools/call"' in echo[0] and 'mcp_protocol_version="2025-11-25"' in echo[0]
    buckets = [
        line
        for line in lines
        if line.startswith("mcp_server_operation_duration_seconds_bucket{")
        and 'gen_ai_tool_name="echo"' in line
    ]
    assert (
        len(buckets) == len(DURATION_BUCKETS) + 1
        and buckets[-1].endswith(" 1")
        and 'le="+Inf"' in buckets[-1]
    )
    assert "mcp_trio_sessions 1" in lines


def test_nothing_records_when_nothing_is_on() -> None:
    telemetry = Telemetry("server", opentelemetry=False)
    assert telemetry.operation("tools/call", {"name": "x"}, 1, incoming=True, carrier=PIPE) is None
    assert telemetry.session(PIPE) is None
    telemetry.enable_metrics()
    operation = telemetry.operation("tools/call", {"name": "x"}, 1, incoming=True, carrier=PIPE)
    assert operation is not None
    operation.finish({"result": {}})
    assert telemetry.registry is not None
    assert 'mcp_method_name="tools/call"' in telemetry.registry.render()


@pytest.mark.parametrize(
    "meta",
    [
        {"traceparent": "garbage", "tracestate": "x" * 100_000},
        {"traceparent": 12, "tracestate": ["a"], "baggage": {"k": "v"}},
        {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},
        {"traceparent": TRACEPARENT, "baggage": ",".join(f"k{n}=v" for n in range(5000))},
        "not an object",
    ],
)
async def test_a_hostile_trace_context_costs_only_its_parent(
    client: Client, spans: SpanLog, meta: Any
) -> None:
    """Whatever a client puts where trace context goes, the call is answered and its span is made: a
    context that does not parse is no parent (a new trace), a valid one is."""
    await client.initialize()
    answer = await client.request(
        2, "tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": meta}
    )
    assert answer.get("result", {}).get("content") == [{"type": "text", "text": "x"}] or "error" in answer
    if isinstance(meta, dict):
        assert "result" in answer
        span = named(spans, "tools/call echo")
        if meta.get("traceparent") == TRACEPARENT:
            assert format(span.context.trace_id, "032x") == TRACE_ID
        else:
            assert span.parent is None


def test_no_provider_no_record_then_one_set_later_records() -> None:
    """In a process of its own (this one has providers): with the API installed and no provider set,
    nothing is made; a provider set while serving is used from the next operation on."""
    script = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from mcp_trio._observe.telemetry import PIPE, Telemetry
telemetry = Telemetry("server")
assert telemetry.otel.live() == (False, False)
assert telemetry.operation("ping", None, 1, incoming=True, carrier=PIPE) is None
assert telemetry.session(PIPE) is None
trace.set_tracer_provider(TracerProvider())
assert telemetry.otel.live() == (True, False)
operation = telemetry.operation("ping", None, 1, incoming=True, carrier=PIPE)
assert operation is not None and operation._span.is_recording()
operation.finish({"result": {}})
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


async def test_a_task_runs_under_its_tools_call_span(spans: SpanLog) -> None:
    """``tools/call`` answered with a task: its span ends with the CreateTaskResult; the tool's work,
    run by the task afterwards, stays in the call's trace (a span it starts is the call span's child);
    ``tasks/get`` and ``tasks/result`` are spans of their own."""
    from opentelemetry import trace as otel_trace

    from .test_tasks import TaskClient

    server = MCPServer("tasks")
    release = trio.Event()

    @server.tool(task="optional")
    async def slow() -> str:
        await release.wait()
        with otel_trace.get_tracer("test").start_as_current_span("work"):
            return "done"

    app = MCPApp(server, ServerConfig())
    async with app.running(), open_asgi_client(app) as asgi:
        tc = TaskClient(asgi)
        params = {"name": "slow", "arguments": {}, "_meta": {"traceparent": TRACEPARENT}}
        status, body = await tc.call("tools/call", params)
        assert status == 200, body
        task_id = body["result"]["taskId"]
        release.set()
        await tc.wait(task_id, "completed")
    call = named(spans, "tools/call slow")
    work = named(spans, "work", SpanKind.INTERNAL)
    assert work.parent is not None and work.parent.span_id == call.context.span_id
    assert format(work.context.trace_id, "032x") == TRACE_ID
    gets = [span for span in spans if span.name == "tasks/get"]
    assert gets and all(span.kind == SpanKind.SERVER for span in gets)


def test_the_registry_merges_label_orders_and_bounds_its_series() -> None:
    from mcp_trio._observe.prometheus import MAX_SERIES, MetricsRegistry

    registry = MetricsRegistry()
    histogram = registry.histogram("h_seconds", "A test histogram.", (0.1, 1.0))
    histogram.observe(0.05, {"a.b": "1", "c": "2"})
    histogram.observe(5.0, {"c": "2", "a.b": "1"})
    lines = registry.render().splitlines()
    assert 'h_seconds_bucket{a_b="1",c="2",le="0.1"} 1' in lines
    assert 'h_seconds_bucket{a_b="1",c="2",le="1"} 1' in lines
    assert 'h_seconds_bucket{a_b="1",c="2",le="+Inf"} 2' in lines
    assert 'h_seconds_count{a_b="1",c="2"} 2' in lines
    bounded = registry.histogram("b_seconds", "Another.", (1.0,))
    for n in range(MAX_SERIES + 50):
        bounded.observe(0.5, {"n": str(n)})
    counts = [line for line in registry.render().splitlines() if line.startswith("b_seconds_count")]
    assert len(counts) == MAX_SERIES + 1  # past the bound, label sets share one overflow series
    assert 'b_seconds_count{overflow="_OTHER"} 50' in counts


async def test_an_extension_method_keeps_its_name(spans: SpanLog, metric_points: Any) -> None:
    server = MCPServer("extended")

    async def hello(ctx: Any, params: Any) -> dict[str, Any]:
        return {"hello": True}

    server.add_method("example/hello", hello)
    app = MCPApp(server, ServerConfig())
    async with app.running(), open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        assert (await client.request(2, "example/hello", {}))["result"]["hello"] is True
    assert attributes(named(spans, "example/hello"))["mcp.method.name"] == "example/hello"
    (point,) = operations(metric_points(), "example/hello")
    assert "error.type" not in point.attributes


async def test_a_broken_telemetry_backend_costs_no_request(
    client: Client, app: MCPApp, caplog: pytest.LogCaptureFixture
) -> None:
    """An OpenTelemetry backend that raises (a span processor, a propagator, an instrument): every call
    is still answered, and the failure is logged, once."""
    from mcp_trio._observe import telemetry as telemetry_module

    class Broken:
        calls = 0

        def live(self) -> tuple[bool, bool]:
            return True, True

        def start(self, *args: Any) -> Any:
            Broken.calls += 1
            if Broken.calls % 2:
                raise RuntimeError("span processor on_start")
            return _BrokenSpan(), None

        @staticmethod
        def end(*args: Any) -> None:
            raise RuntimeError("span processor on_end")

        class instrument:
            @staticmethod
            def record(*args: Any) -> None:
                raise RuntimeError("instrument")

        operation_duration = {True: instrument, False: instrument}
        session_duration = {"server": instrument, "client": instrument}

    class _BrokenSpan:
        def set_attribute(self, *args: Any) -> None:
            raise RuntimeError("set_attribute")

        def get_span_context(self) -> Any:
            raise RuntimeError("context")

    telemetry = app.server.telemetry
    saved, telemetry.otel = telemetry.otel, Broken()
    telemetry_module._told = False
    try:
        await client.initialize()
        for n in range(4):
            answer = await client.request(2 + n, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
            assert answer["result"]["content"][0]["text"] == "x"
        assert (await client.delete()).status == 200
    finally:
        telemetry.otel = saved
        telemetry_module._told = False
    failures = [
        r for r in caplog.records if r.name == "mcp_trio._observe.telemetry" and r.levelname == "ERROR"
    ]
    assert len(failures) == 1 and "logged once" in failures[0].getMessage()
    assert Broken.calls >= 4
