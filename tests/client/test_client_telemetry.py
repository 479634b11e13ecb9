"""The client's telemetry, read back through the OpenTelemetry SDK's in-memory exporters (``spans``,
``metric_points``: tests/otel.py): a CLIENT span per request and notification with the MCP conventions'
attributes, its trace context in ``params._meta`` (the server's SERVER span is its child), SERVER spans
for what the client answers (the server's requests in the 2025 era, the input requests of 2026-era
rounds), failures, and the client's two duration histograms, bounded in cardinality.

Against real servers: the demo served in this Trio run (HTTP, WebSocket: both sides record into the same
providers, so the parent of the server's span can be checked), ``serve_stdio`` in a child process, and
the misbehaving fake server of tests/client/conftest.py for the transport's failures.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
import mcp_types as mt
import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from mcp_trio import RPCError, open_client_session, open_stdio_client, open_websocket_client
from mcp_trio._client.observe import MAX_LISTED
from mcp_trio.errors import ServerBusy, SessionExpired, TransportError
from tests.client.conftest import (
    IGNORE_HTTPX_ASYNCGEN_WARNINGS,
    Demo,
    Fake,
    Request,
    Send,
    body,
    event,
    eventually,
    reply,
    result_of,
    start_response,
    tool_result,
    wait_disconnect,
)
from tests.otel import MetricLog, SpanLog

pytestmark = IGNORE_HTTPX_ASYNCGEN_WARNINGS

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
CLIENT_OPERATION = "mcp.client.operation.duration"
CLIENT_SESSION = "mcp.client.session.duration"
SERVER_OPERATION = "mcp.server.operation.duration"
# attributes that identify one request or session: never on a metric point
UNBOUNDED = ("jsonrpc.request.id", "mcp.session.id", "mcp.resource.uri")


def client_spans(spans: SpanLog, name: str | None = None) -> list[ReadableSpan]:
    """The client's own spans (they name the server they reach: ``server.address``), oldest first."""
    found = [
        span
        for span in spans.finished()
        if span.attributes is not None
        and ("server.address" in span.attributes or span.attributes.get("network.transport") == "pipe")
        and (name is None or span.name == name)
    ]
    return sorted(found, key=lambda span: span.start_time or 0)


def server_spans(spans: SpanLog, kind: SpanKind, name: str) -> list[ReadableSpan]:
    """The server's spans (in this process) of ``kind`` called ``name``, oldest first."""
    found = [
        span
        for span in spans.finished()
        if span.kind is kind
        and span.name == name
        and span.attributes is not None
        and "server.address" not in span.attributes
    ]
    return sorted(found, key=lambda span: span.start_time or 0)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def is_child(child: ReadableSpan, parent: ReadableSpan) -> bool:
    return (
        child.parent is not None
        and child.parent.span_id == parent.context.span_id
        and child.context.trace_id == parent.context.trace_id
    )


def served_by_server(spans: SpanLog, client_span: ReadableSpan) -> ReadableSpan:
    """The server's SERVER span of the request ``client_span`` sent (same method and request id)."""
    a = attrs(client_span)
    found = [
        span
        for span in spans.finished()
        if span.kind is SpanKind.SERVER
        and "server.address" not in attrs(span)
        and attrs(span).get("jsonrpc.request.id") == a["jsonrpc.request.id"]
        and attrs(span)["mcp.method.name"] == a["mcp.method.name"]
    ]
    assert len(found) == 1, (client_span.name, [s.name for s in spans.finished()])
    return found[0]


def check_points(points: Sequence[Any], carrier: dict[str, Any]) -> None:
    """Every point carries the carrier's attributes and none of the per-request ones."""
    assert points
    for point in points:
        assert not set(UNBOUNDED) & point.attributes.keys(), point
        for key, value in carrier.items():
            assert point.attributes.get(key) == value, (key, point)


# -- HTTP, both eras ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_http_requests_are_client_spans_whose_children_are_the_servers(
    mode: str, demo: Demo, spans: SpanLog, metric_points: MetricLog
) -> None:
    version = MODERN if mode == "auto" else LEGACY  # "auto": server/discover, and the demo is modern
    async with open_client_session(demo.url, mode=mode) as session:  # type: ignore[arg-type]
        await session.call_tool("echo", {"text": "before the listing"})
        await session.list_tools()
        await session.list_prompts()
        assert (await session.call_tool("echo", {"text": "hi"})).content[0].text == "hi"  # type: ignore[union-attr]
        await session.get_prompt("test_simple_prompt")
        await session.read_resource("test://static-text")
        with pytest.raises(RPCError) as refused:
            await session.call_tool("no_such_tool")
        assert (await session.call_tool("test_error_handling")).is_error
        session_id = session.session_id
    port = urlsplit(demo.url).port
    carrier = {
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "server.address": "127.0.0.1",
        "server.port": port,
    }

    mine = client_spans(spans)
    assert mine and all(span.kind is SpanKind.CLIENT for span in mine)
    for span in mine:
        a = attrs(span)
        assert {k: a.get(k) for k in carrier} == carrier, span.name
        assert a["mcp.protocol.version"] == version, span.name
        if mode == "legacy":
            assert a["mcp.session.id"] == session_id, span.name
        else:
            assert "mcp.session.id" not in a and session_id is None
        if a["mcp.method.name"].startswith("notifications/"):
            assert "jsonrpc.request.id" not in a
        else:  # every request's server span is the child of the client's
            assert a["jsonrpc.request.id"].isdigit()
            assert is_child(served_by_server(spans, span), span), span.name
    handshake = "initialize" if mode == "legacy" else "server/discover"
    assert client_spans(spans)[0].name == handshake
    if mode == "legacy":
        assert [s.name for s in mine[:2]] == ["initialize", "notifications/initialized"]

    echoes = client_spans(spans, "tools/call echo")
    assert len(echoes) == 2
    for span in echoes:
        assert attrs(span)["gen_ai.tool.name"] == "echo"
        assert attrs(span)["gen_ai.operation.name"] == "execute_tool"
        assert span.status.status_code is StatusCode.UNSET and "error.type" not in attrs(span)
    prompt = client_spans(spans, "prompts/get test_simple_prompt")[0]
    assert attrs(prompt)["gen_ai.prompt.name"] == "test_simple_prompt"
    resource = client_spans(spans, "resources/read")[0]
    assert attrs(resource)["mcp.resource.uri"] == "test://static-text"

    # a JSON-RPC error: its code, and the status ERROR with its message (the client names what it called)
    (failure,) = client_spans(spans, "tools/call no_such_tool")
    assert attrs(failure)["error.type"] == attrs(failure)["rpc.response.status_code"] == "-32602"
    assert failure.status.status_code is StatusCode.ERROR
    assert failure.status.description == refused.value.message
    assert attrs(served_by_server(spans, failure))["error.type"] == "-32602"
    # a tool's error result
    (tool_error,) = client_spans(spans, "tools/call test_error_handling")
    assert attrs(tool_error)["error.type"] == "tool_error"
    assert "rpc.response.status_code" not in attrs(tool_error)
    assert tool_error.status.status_code is StatusCode.ERROR

    # the histograms: bounded attributes, a tool's name only once the server listed it
    points = metric_points(CLIENT_OPERATION)
    check_points(points, {**carrier, "mcp.protocol.version": version})
    calls = [p for p in points if p.attributes["mcp.method.name"] == "tools/call"]
    by_tool = {p.attributes["gen_ai.tool.name"]: p for p in calls if "error.type" not in p.attributes}
    assert by_tool["_OTHER"].count == 1 and by_tool["echo"].count == 1  # before and after tools/list
    errors = {p.attributes["error.type"]: p.attributes for p in calls if "error.type" in p.attributes}
    assert errors["-32602"]["gen_ai.tool.name"] == "_OTHER"  # never listed
    assert errors["-32602"]["rpc.response.status_code"] == "-32602"
    assert errors["tool_error"]["gen_ai.tool.name"] == "test_error_handling"
    prompts = [p for p in points if p.attributes["mcp.method.name"] == "prompts/get"]
    assert [p.attributes["gen_ai.prompt.name"] for p in prompts] == ["test_simple_prompt"]
    assert all(p.bounds[:3] == (0.01, 0.02, 0.05) for p in points)
    (session_point,) = metric_points(CLIENT_SESSION)
    assert session_point.attributes == {**carrier, "mcp.protocol.version": version}
    assert session_point.count == 1


async def test_a_cancelled_call_and_its_cancellation_notice(demo: Demo, spans: SpanLog) -> None:
    async with open_client_session(demo.url, mode="legacy") as session:
        with trio.move_on_after(0.3) as scope:
            await session.call_tool("sleep", {"seconds": 60})
        assert scope.cancelled_caught
    (call,) = client_spans(spans, "tools/call sleep")
    assert attrs(call)["error.type"] == "cancelled" and call.status.status_code is StatusCode.ERROR
    (notice,) = client_spans(spans, "notifications/cancelled")
    assert is_child(notice, call) and "jsonrpc.request.id" not in attrs(notice)
    # the server received the notice as the child of the client's notification span
    (received,) = server_spans(spans, SpanKind.SERVER, "notifications/cancelled")
    assert is_child(received, notice)


# -- 2026: input-required rounds ------------------------------------------------------------------


async def elicit(params: Any) -> mt.ElicitResult:
    return mt.ElicitResult(action="accept", content={"name": "Ann", "color": "green"})


async def sample(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
    return mt.CreateMessageResult(
        role="assistant", content=mt.TextContent(type="text", text="four"), model="m"
    )


async def test_each_input_round_is_a_request_and_its_inputs_are_answered_under_it(
    demo: Demo, spans: SpanLog
) -> None:
    async with open_client_session(demo.url, mode="modern", elicitation=elicit) as session:
        result = await session.call_tool("test_input_required_result_multi_round")
    assert result.content[0].text == "Ann likes green"  # type: ignore[union-attr]
    rounds = client_spans(spans, "tools/call test_input_required_result_multi_round")
    assert len(rounds) == 3  # the call, then a retry with each answer
    assert len({attrs(r)["jsonrpc.request.id"] for r in rounds}) == 3
    inputs = sorted(
        (s for s in spans.finished() if s.name == "elicitation/create"), key=lambda s: s.start_time or 0
    )
    assert len(inputs) == 2
    for number, answered in enumerate(inputs):
        asked, retry = rounds[number], rounds[number + 1]
        assert answered.kind is SpanKind.SERVER and is_child(answered, asked)
        assert asked.end_time <= answered.start_time and answered.end_time <= retry.start_time  # type: ignore[operator]
        a = attrs(answered)
        assert a["mcp.method.name"] == "elicitation/create" and "jsonrpc.request.id" not in a
        assert a["mcp.protocol.version"] == MODERN and a["network.protocol.name"] == "http"
    for span in rounds:
        assert is_child(served_by_server(spans, span), span)
        assert span.status.status_code is StatusCode.UNSET


async def test_an_input_the_client_cannot_give_fails_its_span_and_the_call(
    demo: Demo, spans: SpanLog
) -> None:
    async def refuse(params: Any) -> mt.ElicitResult:
        raise ValueError("no user here")

    async with open_client_session(demo.url, mode="modern", elicitation=refuse) as session:
        with pytest.raises(ValueError, match="no user here"):
            await session.call_tool("test_input_required_result_multi_round")
    (answered,) = spans.named("elicitation/create")
    assert attrs(answered)["error.type"] == "ValueError" and answered.status.status_code is StatusCode.ERROR
    (asked,) = client_spans(spans, "tools/call test_input_required_result_multi_round")
    assert is_child(answered, asked) and asked.status.status_code is StatusCode.UNSET


async def test_a_tasks_input_requests_are_answered_under_the_poll_that_brought_them(
    demo: Demo, spans: SpanLog
) -> None:
    async def confirm(params: Any) -> mt.ElicitResult:
        return mt.ElicitResult(action="accept", content={"confirm": True})

    async with open_client_session(demo.url, mode="modern", elicitation=confirm) as session:
        result = await session.call_tool("confirm_delete", {"filename": "a.txt"})
    assert result.content[0].text == "Deleted a.txt"  # type: ignore[union-attr]
    (answered,) = spans.named("elicitation/create")
    assert answered.kind is SpanKind.SERVER
    (brought,) = [poll for poll in client_spans(spans, "tasks/get") if is_child(answered, poll)]
    (update,) = client_spans(spans, "tasks/update")  # the answer goes back with tasks/update
    assert brought.end_time <= answered.start_time and answered.end_time <= update.start_time  # type: ignore[operator]


async def test_a_subscription_is_one_span_from_its_request_to_its_end(demo: Demo, spans: SpanLog) -> None:
    async with open_client_session(demo.url, mode="modern") as session, session.listen(tools=True):
        await session.call_tool("echo", {"text": "while listening"})
        assert client_spans(spans, "subscriptions/listen") == []  # open still
    (listen,) = client_spans(spans, "subscriptions/listen")
    (call,) = client_spans(spans, "tools/call echo")
    assert call.parent is None  # the subscription's span was not the block's current span
    assert listen.start_time < call.start_time and call.end_time < listen.end_time  # type: ignore[operator]
    assert listen.status.status_code is StatusCode.UNSET and attrs(listen)["jsonrpc.request.id"].isdigit()
    # the server's span ends once it has seen the stream closed
    await eventually(lambda: any(s.kind is SpanKind.SERVER for s in spans.named("subscriptions/listen")), 5)
    assert is_child(served_by_server(spans, listen), listen)


# -- 2025: the server's requests ------------------------------------------------------------------


async def test_the_servers_requests_are_server_spans_under_the_servers_client_spans(
    demo: Demo, spans: SpanLog, metric_points: MetricLog
) -> None:
    async def elicit_user(params: Any) -> mt.ElicitResult:
        return mt.ElicitResult(action="accept", content={"username": "ann", "email": "a@example.com"})

    async with open_client_session(
        demo.url, mode="legacy", sampling=sample, elicitation=elicit_user
    ) as session:
        sampled = await session.call_tool("test_sampling", {"prompt": "2+2"})
        elicited = await session.call_tool("test_elicitation", {"message": "who?"})
        session_id = session.session_id
    assert sampled.content[0].text == "LLM response: four"  # type: ignore[union-attr]
    assert "ann" in elicited.content[0].text  # type: ignore[union-attr]
    for tool, method in (
        ("test_sampling", "sampling/createMessage"),
        ("test_elicitation", "elicitation/create"),
    ):
        (call,) = client_spans(spans, f"tools/call {tool}")
        handler = served_by_server(spans, call)
        (asking,) = server_spans(spans, SpanKind.CLIENT, method)  # the server's request to the client
        answering = [s for s in spans.finished() if s.kind is SpanKind.SERVER and s.name == method]
        assert len(answering) == 1
        (answered,) = answering
        # one trace: client call -> server handler -> server's request -> the client's answer
        assert is_child(handler, call) and is_child(asking, handler) and is_child(answered, asking)
        a = attrs(answered)
        assert (
            a["mcp.method.name"] == method and a["jsonrpc.request.id"] == attrs(asking)["jsonrpc.request.id"]
        )
        assert a["mcp.session.id"] == session_id and a["mcp.protocol.version"] == LEGACY
        assert a["server.address"] == "127.0.0.1" and a["network.transport"] == "tcp"
        assert answered.status.status_code is StatusCode.UNSET
        # the duration of the request is the sender's (the server's) and the receiver's (the client's)
        (sent,) = [p for p in metric_points(CLIENT_OPERATION) if p.attributes["mcp.method.name"] == method]
        assert sent.count == 1 and "server.address" not in sent.attributes  # recorded by the server
        received = [p for p in metric_points(SERVER_OPERATION) if p.attributes["mcp.method.name"] == method]
        assert [(p.count, p.attributes["server.address"]) for p in received] == [(1, "127.0.0.1")]


async def test_a_failing_answer_to_the_server_is_an_error_span(demo: Demo, spans: SpanLog) -> None:
    async def broken(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        raise RuntimeError("the model is away")

    async with open_client_session(demo.url, mode="legacy", sampling=broken) as session:
        with pytest.raises(RPCError):
            await session.call_tool("test_sampling", {"prompt": "2+2"})
    (answered,) = [
        s for s in spans.finished() if s.kind is SpanKind.SERVER and s.name == "sampling/createMessage"
    ]
    assert attrs(answered)["error.type"] == attrs(answered)["rpc.response.status_code"] == "-32603"
    assert answered.status.status_code is StatusCode.ERROR
    assert answered.status.description == "the model is away"


# -- WebSocket and stdio --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_websocket_spans_and_the_servers_parent(
    mode: str, demo: Demo, spans: SpanLog, metric_points: MetricLog
) -> None:
    async with open_websocket_client(demo.url, mode=mode) as session:  # type: ignore[arg-type]
        await session.call_tool("echo", {"text": "over a websocket"})
    port = urlsplit(demo.url).port
    carrier = {
        "network.transport": "tcp",
        "network.protocol.name": "websocket",
        "server.address": "127.0.0.1",
        "server.port": port,
    }
    (call,) = client_spans(spans, "tools/call echo")
    a = attrs(call)
    assert {k: a.get(k) for k in carrier} == carrier
    assert a["mcp.protocol.version"] == (MODERN if mode == "modern" else LEGACY)
    assert "mcp.session.id" not in a  # the connection is the session: it has no id
    assert is_child(served_by_server(spans, call), call)
    check_points(metric_points(CLIENT_OPERATION), carrier)
    (session_point,) = metric_points(CLIENT_SESSION)
    assert {k: session_point.attributes.get(k) for k in carrier} == carrier


TRACE_ECHO = textwrap.dedent(
    """
    import trio
    from mcp_trio import Context, MCPServer, serve_stdio

    server = MCPServer("trace-echo")

    @server.tool(description="The trace context this request carried in params._meta.")
    async def traceparent(ctx: Context) -> str:
        return str(ctx.meta.get("traceparent"))

    trio.run(serve_stdio, server)
    """
)


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_stdio_spans_carry_their_context_to_the_child(
    mode: str, spans: SpanLog, metric_points: MetricLog
) -> None:
    async with open_stdio_client([sys.executable, "-c", TRACE_ECHO], mode=mode) as session:  # type: ignore[arg-type]
        seen = (await session.call_tool("traceparent")).content[0].text  # type: ignore[union-attr]
    (call,) = client_spans(spans, "tools/call traceparent")
    context = call.context
    version, trace_id, span_id, flags = seen.split("-")
    assert (version, trace_id, span_id) == ("00", f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert int(flags, 16) & 1  # sampled
    a = attrs(call)
    assert a["network.transport"] == "pipe"
    assert "network.protocol.name" not in a and "server.address" not in a and "mcp.session.id" not in a
    assert a["mcp.protocol.version"] == (MODERN if mode == "modern" else LEGACY)
    check_points(metric_points(CLIENT_OPERATION), {"network.transport": "pipe"})
    (session_point,) = metric_points(CLIENT_SESSION)
    assert session_point.attributes["network.transport"] == "pipe"


# -- the transport's failures ---------------------------------------------------------------------


async def answer_503(request: Request, send: Send) -> None:
    await reply(send, 503, b"busy", "text/plain")


async def answer_404(request: Request, send: Send) -> None:
    await reply(send, 404, b"gone", "text/plain")


async def stream_without_answer(request: Request, send: Send) -> None:
    """An SSE stream that ends before the response (and has no event id to resume from)."""
    await start_response(send)
    await body(send, event({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}), more=False)


@pytest.mark.parametrize(
    ("handler", "raised", "error_type", "options"),
    [
        (answer_503, ServerBusy, "ServerBusy", {"retry_attempts": 1}),
        (answer_404, SessionExpired, "SessionExpired", {"renew_on_expiry": False}),
        (stream_without_answer, TransportError, "TransportError", {}),
        (wait_disconnect, TransportError, "timeout", {}),
    ],
)
async def test_a_failure_of_the_transport_names_its_kind(
    handler: Any,
    raised: type[Exception],
    error_type: str,
    options: dict[str, Any],
    fake: Fake,
    spans: SpanLog,
    metric_points: MetricLog,
) -> None:
    fake.server.call = handler
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.3)) as http,
        open_client_session(fake.url, mode="legacy", http=http, **options) as session,
    ):
        with pytest.raises(raised) as caught:
            await session.call_tool("anything")
    assert type(caught.value) is raised
    (call,) = client_spans(spans, "tools/call anything")
    assert attrs(call)["error.type"] == error_type and "rpc.response.status_code" not in attrs(call)
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == str(caught.value)[:256]
    failed = [p for p in metric_points(CLIENT_OPERATION) if "error.type" in p.attributes]
    assert [p.attributes["error.type"] for p in failed] == [error_type]  # bounded: kept as it is
    assert failed[0].attributes["gen_ai.tool.name"] == "_OTHER"


async def test_a_session_that_could_not_open_is_timed_with_its_error(
    fake: Fake, spans: SpanLog, metric_points: MetricLog
) -> None:
    async def refuse(request: Request, send: Send) -> None:
        await reply(send, 500, b"down", "text/plain")

    fake.server.initialize = refuse
    with pytest.raises(TransportError):
        async with open_client_session(fake.url, mode="legacy"):
            pass  # pragma: no cover - never opened
    (handshake,) = client_spans(spans, "initialize")
    assert attrs(handshake)["error.type"] == "TransportError"
    (session_point,) = metric_points(CLIENT_SESSION)
    assert session_point.attributes["error.type"] == "TransportError"
    assert "mcp.protocol.version" not in session_point.attributes


# -- the rest -------------------------------------------------------------------------------------


async def test_the_request_log_of_a_client(
    demo: Demo, spans: SpanLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_trio.requests")
    async with open_client_session(demo.url, mode="modern") as session:
        session.telemetry.request_log = True
        await session.call_tool("echo", {"text": "logged"})
    (record,) = [r for r in caplog.records if r.name == "mcp_trio.requests"]
    fields = record.mcp  # type: ignore[attr-defined]
    (call,) = client_spans(spans, "tools/call echo")
    assert fields["method"] == "tools/call" and fields["target"] == "echo" and fields["status"] == "ok"
    assert fields["trace_id"] == f"{call.context.trace_id:032x}"
    assert fields["transport"] == "http" and fields["protocol_version"] == MODERN


WITHOUT_OTEL = textwrap.dedent(
    """
    import json, sys
    sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
    import trio
    from mcp_trio import open_stdio_client

    async def main():
        demo = [sys.executable, "-c", "from mcp_trio._cli import main; main()", "demo", "--stdio"]
        async with open_stdio_client(demo, mode="legacy") as session:
            text = (await session.call_tool("echo", {"text": "plain"})).content[0].text
            carrier = session._transport.carrier
            idle = session.telemetry.operation("ping", None, 1, incoming=False, carrier=carrier)
            print(json.dumps({"text": text, "otel": session.telemetry.otel is None, "idle": idle is None,
                              "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry."))}))

    trio.run(main)
    """
)


@pytest.mark.deadline(60)
async def test_without_the_extra_a_client_records_nothing_and_imports_nothing() -> None:
    done = await trio.run_process(
        [sys.executable, "-c", WITHOUT_OTEL], capture_stdout=True, capture_stderr=True
    )
    assert json.loads(done.stdout) == {"text": "plain", "otel": True, "idle": True, "imported": []}


# -- a hostile server ------------------------------------------------------------------------------


async def test_a_server_listing_too_many_tools_cannot_grow_the_metrics(
    fake: Fake, metric_points: MetricLog
) -> None:
    """Only the first MAX_LISTED names of a listing become metric attribute values."""
    tools = [{"name": f"tool{n}", "inputSchema": {"type": "object"}} for n in range(MAX_LISTED + 5)]

    async def call(request: Request, send: Send) -> None:
        if request.message["method"] == "tools/list":
            await reply(send, 200, result_of(request, {"tools": tools}))
        else:
            await reply(send, 200, tool_result(request))

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy") as session:
        assert len((await session.list_tools()).tools) == MAX_LISTED + 5
        for n in (0, MAX_LISTED - 1, MAX_LISTED, MAX_LISTED + 4):
            await session.call_tool(f"tool{n}")
    names = [
        p.attributes["gen_ai.tool.name"]
        for p in metric_points(CLIENT_OPERATION)
        if p.attributes["mcp.method.name"] == "tools/call"
    ]
    assert sorted(names) == sorted(["tool0", f"tool{MAX_LISTED - 1}", "_OTHER"])


async def test_a_servers_request_with_a_forged_trace_context_is_a_root_span(
    fake: Fake, spans: SpanLog
) -> None:
    """A ``traceparent`` that is not one (and a ``tracestate`` that is not a string) is ignored: the
    client's SERVER span starts a trace of its own, and the client answers as ever."""
    forged = {"traceparent": "00-not-a-trace-01", "tracestate": 5}
    ping = {"jsonrpc": "2.0", "id": "s1", "method": "ping", "params": {"_meta": forged}}

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(ping))
        await fake.server.wait_for(answered)
        await body(send, event(tool_result(request)), more=False)

    def answered() -> bool:
        return any(
            isinstance(r.message, dict) and r.message.get("id") == "s1" and "result" in r.message
            for r in fake.server.log
        )

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy") as session:
        await session.call_tool("anything")
    (served,) = [s for s in spans.named("ping") if s.kind is SpanKind.SERVER]
    (call_span,) = client_spans(spans, "tools/call anything")
    assert served.parent is None and served.context.trace_id != call_span.context.trace_id
    assert [link.context.span_id for link in served.links] == [call_span.context.span_id]
    assert attrs(served)["jsonrpc.request.id"] == "s1" and served.status.status_code is StatusCode.UNSET
