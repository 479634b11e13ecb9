"""``mcp-trio demo`` with OpenTelemetry and structured logs, as users run it: with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set it exports its spans and duration histograms over OTLP/HTTP to a
receiver (here a small one on 127.0.0.1 that decodes the protobuf bodies), the last ones at SIGTERM;
``--log-format json`` writes one JSON object per line, one per request, carrying its span's ids.  What
cannot be exported (another OTLP protocol) stops it at startup with status 2; without the ``otel`` extra
it warns and serves."""

from __future__ import annotations

import gzip
import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import trio
from mcp_http import DemoServer, MCPClient, http_client, serve_demo
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from test_cli_serve import _drain

from mcp_trio._cli.otel_setup import SHUTDOWN_TIMEOUT
from mcp_trio._observe.conventions import DURATION_BUCKETS, SESSION_BUCKETS
from mcp_trio._observe.telemetry import identity_hash

MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "otel-test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
QUICK_EXPORT = {"OTEL_METRIC_EXPORT_INTERVAL": "500", "OTEL_BSP_SCHEDULE_DELAY": "200"}
CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]


# -- an OTLP/HTTP receiver ---------------------------------------------------------------------------


class Receiver:
    """What an OTLP/HTTP collector got: the decoded export requests of ``/v1/traces`` and
    ``/v1/metrics`` (anything else is answered 404 and counted in ``strays``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.strays: list[str] = []
        self.url = ""

    def spans(self) -> list[Span]:
        with self.lock:
            return [
                span
                for request in self.traces
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]

    def resources(self) -> list[dict[str, Any]]:
        with self.lock:
            found = [r.resource for request in self.traces for r in request.resource_spans]
            found += [r.resource for request in self.metrics for r in request.resource_metrics]
        return [attributes(resource.attributes) for resource in found]

    def metric_points(self, name: str) -> list[Any]:
        """The histogram data points of metric ``name`` in the last export that has it (the SDK
        exports cumulative sums: the last one holds every measurement)."""
        with self.lock:
            exports = list(self.metrics)
        for request in reversed(exports):
            points = [
                (metric, point)
                for resource_metrics in request.resource_metrics
                for scope_metrics in resource_metrics.scope_metrics
                for metric in scope_metrics.metrics
                if metric.name == name
                for point in metric.histogram.data_points
            ]
            if points:
                return points
        return []


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP ``KeyValue``s as a dict (string, int, double and bool values)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        kind = pair.value.WhichOneof("value")
        out[pair.key] = getattr(pair.value, kind) if kind else None
    return out


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A threaded HTTP server on 127.0.0.1:0 decoding OTLP/HTTP protobuf exports into a :class:`Receiver`."""
    receiver = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            kinds = {"/v1/traces": ExportTraceServiceRequest, "/v1/metrics": ExportMetricsServiceRequest}
            kind = kinds.get(self.path)
            if kind is None or self.headers.get("content-type") != "application/x-protobuf":
                with receiver.lock:
                    receiver.strays.append(f"{self.path} {self.headers.get('content-type')}")
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            request = kind.FromString(body)
            with receiver.lock:
                (receiver.traces if kind is ExportTraceServiceRequest else receiver.metrics).append(request)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")  # an empty Export*ServiceResponse
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# -- what the tests do to the demo -----------------------------------------------------------------


async def modern_call(http: httpx.AsyncClient, url: str, request_id: int, name: str, arguments: Any) -> Any:
    """One stateless 2026-07-28 ``tools/call``; its JSON-RPC answer."""
    params = {"name": name, "arguments": arguments, "_meta": MODERN_META}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    response = await http.post(url, json=body, headers=headers)
    assert response.status_code == 200, (response.status_code, response.text)
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    answers = [json.loads(line) for line in data if line]
    return next(answer for answer in answers if answer.get("id") == request_id)


async def both_eras(server: DemoServer) -> str:
    """A 2025 session calls ``echo`` (under the client's ``traceparent``) and ends; a stateless 2026
    request calls ``add``, another an unknown tool.  Returns the session id."""
    async with http_client() as http:
        client = MCPClient(http, server.url)
        with trio.fail_after(10):
            await client.initialize()
            await client.initialized()
            answer = await client.request(
                "tools/call",
                {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"traceparent": TRACEPARENT}},
            )
            assert answer["result"]["content"][0]["text"] == "hi", answer
            session_id = client.session_id
            assert session_id is not None
            await client.delete()
            answer = await modern_call(http, server.url, 7, "add", {"a": 1, "b": 2})
            assert answer["result"]["structuredContent"] == {"sum": 3}, answer
            answer = await modern_call(http, server.url, 8, "no_such_tool", {})
            assert "error" in answer or answer["result"].get("isError"), answer
    return session_id


def stderr_of(server: DemoServer) -> str:
    server.stderr.flush()
    server.stderr.seek(0)
    return server.stderr.read().decode(errors="replace")


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` parsed as a JSON object (a line that is not one fails the test)."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}\nin:\n{text[-3000:]}") from None
        assert isinstance(record, dict), line
        records.append(record)
    return records


def request_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if record.get("logger") == "mcp_trio.requests"]


# -- the tests ---------------------------------------------------------------------------------------


@pytest.mark.deadline(90)
async def test_spans_and_histograms_reach_an_otlp_receiver_and_the_request_log_carries_their_ids() -> None:
    with otlp_receiver() as receiver:
        environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, **QUICK_EXPORT}
        async with serve_demo(
            "--log-format", "json", "--log-level", "INFO", environment=environment
        ) as server:
            session_id = await both_eras(server)
            await server.stop(signal.SIGTERM)
            log = stderr_of(server)

    assert receiver.strays == []
    assert {resource["service.name"] for resource in receiver.resources()} == {"mcp-trio"}
    spans = {
        (span.name, attributes(span.attributes).get("mcp.protocol.version")): span
        for span in receiver.spans()
    }
    echo = spans[("tools/call echo", "2025-11-25")]
    add = spans[("tools/call add", MODERN)]
    unknown = spans[("tools/call", MODERN)]  # an unregistered tool is no span name's target
    for span in (echo, add, unknown):
        assert span.kind == Span.SpanKind.SPAN_KIND_SERVER, span
    echo_attributes = attributes(echo.attributes)
    assert echo_attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool",
        "jsonrpc.request.id": "2",
        "mcp.protocol.version": "2025-11-25",
        "mcp.session.id": session_id,
        "network.transport": "tcp",
        "network.protocol.name": "http",
        **{key: value for key, value in echo_attributes.items() if key == "network.protocol.version"},
    }
    # the client's traceparent in params._meta: the server's span is its child
    assert echo.trace_id.hex() == CLIENT_TRACE and echo.parent_span_id.hex() == CLIENT_SPAN
    add_attributes = attributes(add.attributes)
    assert add_attributes["gen_ai.tool.name"] == "add" and add_attributes["jsonrpc.request.id"] == "7"
    assert "mcp.session.id" not in add_attributes
    assert not add.parent_span_id
    unknown_attributes = attributes(unknown.attributes)
    assert unknown_attributes["gen_ai.tool.name"] == "no_such_tool"
    assert "error.type" in unknown_attributes and unknown.status.code == unknown.status.STATUS_CODE_ERROR

    points = receiver.metric_points("mcp.server.operation.duration")
    calls = {
        (point_attributes["mcp.protocol.version"], point_attributes.get("gen_ai.tool.name")): point
        for metric, point in points
        if (point_attributes := attributes(point.attributes))["mcp.method.name"] == "tools/call"
    }
    assert calls.keys() >= {("2025-11-25", "echo"), (MODERN, "add"), (MODERN, "_OTHER")}, calls.keys()
    for metric, point in points:
        assert metric.unit == "s"
        assert list(point.explicit_bounds) == list(DURATION_BUCKETS)
        assert point.count >= 1 and sum(point.bucket_counts) == point.count
    sessions = receiver.metric_points("mcp.server.session.duration")
    # the session buckets reach a day (the instrument's advice, through the SDK and the exporter)
    assert all(list(point.explicit_bounds) == list(SESSION_BUCKETS) for _metric, point in sessions)
    assert any(
        attributes(point.attributes).get("mcp.protocol.version") == "2025-11-25"
        for _metric, point in sessions
    ), sessions

    records = json_lines(log)
    requests = request_records(records)
    by_target = {(record.get("target"), record.get("protocol_version")): record for record in requests}
    echo_record = by_target[("echo", "2025-11-25")]
    assert echo_record["method"] == "tools/call" and echo_record["status"] == "ok"
    assert echo_record["request_id"] == "2" and echo_record["transport"] == "http"
    assert echo_record["session"] == identity_hash(session_id)
    assert echo_record["trace_id"] == echo.trace_id.hex() and echo_record["span_id"] == echo.span_id.hex()
    assert isinstance(echo_record["duration_ms"], float | int) and echo_record["duration_ms"] >= 0
    add_record = by_target[("add", MODERN)]
    assert add_record["trace_id"] == add.trace_id.hex() and add_record["span_id"] == add.span_id.hex()
    assert "session" not in add_record
    assert by_target[("no_such_tool", MODERN)]["status"] != "ok"
    assert session_id not in log  # the log holds the session id's hash only


@pytest.mark.deadline(90)
async def test_the_last_spans_and_measurements_are_exported_at_sigterm() -> None:
    """Nothing would be exported for a minute: what the receiver gets, it gets from the shutdown.  The
    resource is the one of the standard variables."""
    with otlp_receiver() as receiver:
        environment = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_METRIC_EXPORT_INTERVAL": "60000",
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
            "OTEL_SERVICE_NAME": "my-tools",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test,service.namespace=mcp",
        }
        async with serve_demo(environment=environment) as server, http_client() as http:
            with trio.fail_after(10):
                answer = await modern_call(http, server.url, 1, "echo", {"text": "last"})
            assert answer["result"]["content"][0]["text"] == "last"
            await trio.sleep(0.5)
            assert receiver.spans() == [] and receiver.metric_points("mcp.server.operation.duration") == []
            await server.stop(signal.SIGTERM)
    assert [span.name for span in receiver.spans()] == ["tools/call echo"]
    resources = receiver.resources()
    assert len(resources) == 2  # one export of each signal, the same resource
    for resource in resources:
        assert resource["service.name"] == "my-tools" and resource["service.namespace"] == "mcp"
        assert resource["deployment.environment.name"] == "test"
    assert [point.count for _metric, point in receiver.metric_points("mcp.server.operation.duration")] == [1]


@pytest.mark.deadline(90)
async def test_an_unreachable_collector_delays_the_exit_by_the_shutdown_timeout_at_most() -> None:
    """A collector that accepts connections and never answers: the server still exits, with status 0,
    a WARNING saying what was given up."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the kernel; nobody reads or answers
        environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}"}
        async with serve_demo(environment=environment, shutdown_grace=1.0) as server, http_client() as http:
            with trio.fail_after(10):
                await modern_call(http, server.url, 1, "echo", {"text": "lost"})
            server.drain_delay = SHUTDOWN_TIMEOUT  # what stop() allows besides the grace and margin
            took = await server.stop(signal.SIGTERM)
            log = stderr_of(server)
    assert took < 1.0 + SHUTDOWN_TIMEOUT + 2.0
    assert f"were not exported within {SHUTDOWN_TIMEOUT:g} s of shutdown" in log, log


@pytest.mark.deadline(60)
async def test_json_logs_without_tracing() -> None:
    """Every stderr line is JSON; the request records have their fields, and no trace ids."""
    async with serve_demo("--log-format", "json", "--log-level", "DEBUG") as server:
        session_id = await both_eras(server)
        await server.stop(signal.SIGTERM)
        log = stderr_of(server)
    records = json_lines(log)
    assert {"time", "level", "logger", "message"} <= set(records[0]), records[0]
    requests = request_records(records)
    methods = sorted(record["method"] for record in requests)
    assert methods == ["initialize", "tools/call", "tools/call", "tools/call"]  # requests, not notifications
    for record in requests:
        assert record["level"] == "INFO" and "trace_id" not in record and "span_id" not in record, record
        assert {"method", "status", "duration_ms", "protocol_version", "transport"} <= set(record), record
        assert "request_id" in record, record
    echo = next(record for record in requests if record.get("target") == "echo")
    assert echo["session"] == identity_hash(session_id) and echo["request_id"] == "2"
    assert echo["message"].startswith("tools/call echo ok ")


@pytest.mark.deadline(60)
async def test_request_log_is_asked_for_in_either_format() -> None:
    async with serve_demo("--request-log") as server, http_client() as http:
        with trio.fail_after(10):
            await modern_call(http, server.url, 1, "echo", {"text": "x"})
        await server.stop(signal.SIGTERM)
        log = stderr_of(server)
    assert [
        line for line in log.splitlines() if line.startswith("INFO mcp_trio.requests: tools/call echo ok ")
    ]
    async with serve_demo("--log-format", "json", "--no-request-log", "--log-level", "INFO") as server:
        async with http_client() as http:
            with trio.fail_after(10):
                await modern_call(http, server.url, 1, "echo", {"text": "x"})
        await server.stop(signal.SIGTERM)
        log = stderr_of(server)
    assert request_records(json_lines(log)) == []


@pytest.mark.deadline(60)
async def test_over_stdio_the_last_spans_are_exported_at_sigterm() -> None:
    """A stdio server whose client sends SIGTERM (after closing stdin or not) exports what it holds."""
    init_params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        },
    ]
    with otlp_receiver() as receiver:
        environment = {
            **_base_environment(),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
            "OTEL_METRIC_EXPORT_INTERVAL": "60000",
        }
        process = await trio.lowlevel.open_process(
            [*CLI, "demo", "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
        )
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        stderr = bytearray()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, process.stderr, stderr)
                await process.stdin.send_all(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
                output = b""
                with trio.fail_after(30):
                    while b'"id": 2' not in output and b'"id":2' not in output:
                        chunk = await process.stdout.receive_some(65536)
                        assert chunk, (output, bytes(stderr))
                        output += chunk
                process.send_signal(signal.SIGTERM)
                with trio.fail_after(SHUTDOWN_TIMEOUT + 5):
                    code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
            await process.stdin.aclose()
            await process.stdout.aclose()
            await process.stderr.aclose()
    assert code == 0, bytes(stderr)
    spans = {span.name: attributes(span.attributes) for span in receiver.spans()}
    assert spans["tools/call echo"]["network.transport"] == "pipe", spans
    assert "initialize" in spans


OWN_TRACER_PROVIDER = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

provider = TracerProvider()
exporter = ConsoleSpanExporter(out=sys.stderr, formatter=lambda span: f"own provider: {span.name}\\n")
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
from mcp_trio._cli import main

main()
"""


@pytest.mark.deadline(60)
async def test_a_provider_set_before_is_left_as_it_is() -> None:
    """As under ``opentelemetry-instrument``: a tracer provider was set before ``main`` runs; its spans
    go where it says, mcp-trio sets up only the meter provider."""
    with otlp_receiver() as receiver:
        command = [
            sys.executable,
            "-c",
            OWN_TRACER_PROVIDER,
            "demo",
            "--bind",
            "127.0.0.1:0",
            "--shutdown-grace",
            "1",
        ]
        environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, **QUICK_EXPORT}
        code, _stdout, stderr = await run_until_serving(command, environment, call_echo=True)
    assert code == 0, stderr
    assert "own provider: tools/call echo" in stderr.splitlines(), stderr
    assert receiver.spans() == []
    assert "Overriding of current TracerProvider is not allowed" not in stderr, stderr  # none was tried
    points = receiver.metric_points("mcp.server.operation.duration")
    assert [attributes(point.attributes)["gen_ai.tool.name"] for _metric, point in points] == ["echo"]


# -- what cannot be exported ------------------------------------------------------------------------

BLOCK_OPENTELEMETRY = """
import sys

class BlockOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, BlockOpenTelemetry())
from mcp_trio._cli import main

try:
    main()
finally:
    print("imported:", sorted(m for m in sys.modules if m.startswith("opentelemetry")), file=sys.stderr)
"""


@pytest.mark.deadline(60)
async def test_without_the_otel_extra_a_warning_says_what_to_install_and_the_server_serves() -> None:
    """The child process cannot import ``opentelemetry`` (a meta-path finder refuses it): the server
    warns that nothing is exported and how to install the extra, serves, and stops cleanly."""
    command = [
        sys.executable, "-c", BLOCK_OPENTELEMETRY, "demo", "--bind", "127.0.0.1:0", "--shutdown-grace", "1",
    ]  # fmt: skip
    environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    code, stdout, stderr = await run_until_serving(command, environment, call_echo=True)
    assert code == 0, stderr
    assert "WARNING mcp_trio.cli: OTEL_EXPORTER_OTLP_ENDPOINT is set, but" in stderr, stderr
    assert "pip install 'mcp-trio[otel]'" in stderr
    assert "imported: []" in stderr, stderr  # nothing of OpenTelemetry got in
    assert "Traceback" not in stderr, stderr
    assert stdout.rstrip().endswith("mcp-trio: stopped")


@pytest.mark.parametrize(
    "variables",
    [
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
        {"OTEL_METRICS_EXPORTER": "prometheus"},
    ],
    ids=["grpc", "traces-http-json", "metrics-exporter"],
)
def test_an_export_mcp_trio_cannot_do_is_a_usage_error_at_startup(variables: dict[str, str]) -> None:
    name, value = next(iter(variables.items()))
    environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", **variables}
    done = subprocess.run(
        [*CLI, "demo", "--bind", "127.0.0.1:0"],
        env={**_base_environment(), **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stdout == "", done.stdout  # it never served
    assert done.stderr.startswith(f"mcp-trio: {name}={value}: mcp-trio exports over OTLP"), done.stderr
    assert "Traceback" not in done.stderr


def _base_environment() -> dict[str, str]:
    import os

    return {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}


async def run_until_serving(
    command: list[str], environment: dict[str, str], *, call_echo: bool = False
) -> tuple[int, str, str]:
    """Run ``command`` until it printed its URL (then call ``echo`` once if asked), SIGINT it; its exit
    status, stdout and stderr."""
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**_base_environment(), **environment}
    )
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = bytearray(), bytearray()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, process.stderr, stderr)
            with trio.fail_after(30):
                while b"\n" not in stdout.partition(b"mcp-trio: serving on ")[2]:
                    chunk = await process.stdout.receive_some(4096)
                    assert chunk, (bytes(stdout), bytes(stderr))
                    stdout += chunk
            url = stdout.partition(b"mcp-trio: serving on ")[2].partition(b"\n")[0].decode().strip()
            if call_echo:
                async with http_client() as http:
                    with trio.fail_after(10):
                        answer = await modern_call(http, url, 1, "echo", {"text": "still served"})
                assert answer["result"]["content"][0]["text"] == "still served"
            process.send_signal(signal.SIGINT)
            nursery.start_soon(_drain, process.stdout, stdout)
            with trio.fail_after(10):
                code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        await process.stdout.aclose()
        await process.stderr.aclose()
    return code, stdout.decode(), stderr.decode()
