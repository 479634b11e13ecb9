"""The operations listener (``AdminApp``): ``/metrics`` in the Prometheus text format (the MCP
histograms after real requests, the transport's gauges and counters), ``/healthz``, ``/readyz`` (503
before the app runs, while it drains, while a Redis link is down), ``/stats``, and what it refuses."""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.server import AdminApp, LocalNotificationBus
from mcp_trio.testing import open_asgi_client

from .conftest import Client

# -- a strict reader of the Prometheus text format 0.0.4 ---------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{({_LABEL}(?:,{_LABEL})*)?\}})? (\S+)$")
_HELP = re.compile(rf"^# HELP ({_NAME}) (.*)$")
_TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> tuple[dict[str, str], Series]:
    """(family -> type, (sample name, labels) -> value); AssertionError on any line out of format, a
    sample of an undeclared family, a duplicate, or a histogram whose buckets do not hold together."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    series: Series = {}
    family: str | None = None
    for line in text[:-1].split("\n"):
        if match := _HELP.match(line):
            family = match[1]
            assert family not in types, f"{family} declared twice"
            continue
        if match := _TYPE.match(line):
            assert match[1] == family, line
            types[match[1]] = match[2]
            continue
        match = _SAMPLE.match(line)
        assert match is not None, f"not a sample: {line!r}"
        name, labels, value = match[1], match[2] or "", match[3]
        assert family is not None and family in types, line
        suffixes = ("_bucket", "_sum", "_count") if types[family] == "histogram" else ("",)
        assert any(name == family + suffix for suffix in suffixes), f"{name} outside {family}"
        pairs = _PAIR.findall(labels)
        assert ",".join(f'{k}="{v}"' for k, v in pairs) == labels, line
        assert len({k for k, _ in pairs}) == len(pairs), f"duplicate label: {line}"
        number = float(value)  # +Inf, -Inf and NaN are floats too
        key = (name, frozenset(pairs))
        assert key not in series, f"duplicate sample: {line}"
        series[key] = number
    for name, kind in types.items():
        if kind == "histogram":
            _check_histogram(name, series)
    return types, series


def _check_histogram(name: str, series: Series) -> None:
    groups: dict[frozenset[tuple[str, str]], list[tuple[float, float]]] = {}
    for (sample, labels), value in series.items():
        if sample == name + "_bucket":
            rest = frozenset(pair for pair in labels if pair[0] != "le")
            (le,) = [v for k, v in labels if k == "le"]
            groups.setdefault(rest, []).append((math.inf if le == "+Inf" else float(le), value))
    for labels, buckets in groups.items():
        buckets.sort()
        counts = [count for _, count in buckets]
        assert counts == sorted(counts), f"{name}{dict(labels)}: buckets not cumulative"
        assert buckets[-1][0] == math.inf
        assert series[(name + "_count", labels)] == buckets[-1][1]
        assert series[(name + "_sum", labels)] >= 0


def samples_named(series: Series, name: str, **labels: str) -> list[float]:
    return [v for (n, ls), v in series.items() if n == name and set(labels.items()) <= ls]


# -- calling the ASGI app -----------------------------------------------------------------------------


async def call(
    app: Any,
    method: str,
    path: str,
    scope_type: str = "http",
    *,
    hosts: tuple[bytes, ...] = (b"127.0.0.1:9000",),
    server: tuple[str, int] = ("127.0.0.1", 9000),
) -> tuple[int, dict[str, str], bytes]:
    """One request to the ASGI ``app``, arriving on ``server`` with these ``Host`` headers: (status,
    headers, body)."""
    sent: list[dict[str, Any]] = []
    scope = {
        "type": scope_type,
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", host) for host in hosts],
        "client": ("127.0.0.1", 50000),
        "server": server,
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(5):
        await app(scope, receive, send)
    start, *bodies = sent
    assert start["type"] == "http.response.start"
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in bodies)
    assert bodies[-1].get("more_body", False) is False
    assert int(headers["content-length"]) == len(body)
    return start["status"], headers, body


async def metrics(admin: AdminApp) -> tuple[dict[str, str], Series]:
    await trio.sleep(0.06)  # past the statistics' cache
    status, headers, body = await call(admin, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_metrics(body.decode())


async def ready(admin: AdminApp) -> tuple[int, dict[str, Any]]:
    status, headers, body = await call(admin, "GET", "/readyz")
    assert headers["content-type"] == "application/json"
    state = json.loads(body)
    assert state["ready"] is (status == 200)
    return status, state


@asynccontextmanager
async def demo(config: ServerConfig | None = None) -> AsyncIterator[tuple[MCPApp, AdminApp, Client]]:
    app = MCPApp(build_demo_server(), config)
    admin = AdminApp(app)
    async with open_asgi_client(app) as asgi:
        yield app, admin, Client(asgi, app)


# -- /metrics -----------------------------------------------------------------------------------------


async def test_metrics_parse_and_carry_the_gauges_before_any_request() -> None:
    async with demo() as (_app, admin, _client):
        types, series = await metrics(admin)
    assert types["mcp_server_operation_duration_seconds"] == "histogram"
    assert types["mcp_server_session_duration_seconds"] == "histogram"
    for gauge in (
        "mcp_trio_sessions_open", "mcp_trio_streams_open", "mcp_trio_requests_in_flight",
        "mcp_trio_listeners_open", "mcp_trio_websocket_connections_open", "mcp_trio_writes_in_progress",
        "mcp_trio_writes_stalled", "mcp_trio_tasks_running", "mcp_trio_process_trio_tasks",
    ):  # fmt: skip
        assert types[gauge] == "gauge", gauge
    assert types["mcp_trio_sessions_created_total"] == "counter"
    assert all(kind != "counter" or name.endswith("_total") for name, kind in types.items())
    assert types["mcp_client_operation_duration_seconds"] == "histogram"  # what the server sends
    prefixes = ("mcp_trio_", "mcp_server_", "mcp_client_", "process_", "python_info")
    assert [name for name in types if not name.startswith(prefixes)] == []
    inflight = {
        (dict(ls)["era"], dict(ls)["transport"]) for (n, ls) in series if n == "mcp_trio_requests_in_flight"
    }
    assert inflight == {("2025", "http"), ("2026", "http"), ("2025", "websocket"), ("2026", "websocket")}
    assert samples_named(series, "mcp_trio_sessions_open") == [0]
    assert samples_named(series, "mcp_trio_process_trio_tasks")[0] > 0
    assert "mcp_trio_redis_up" not in types  # no Redis, no Redis metrics


async def test_the_histograms_record_a_tools_call_and_the_session_gauges_count() -> None:
    async with demo() as (_app, admin, client):
        await client.initialize()
        answer = await client.request(2, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
        assert answer["result"]["structuredContent"] == {"sum": 3.0}
        await client.request(3, "tools/call", {"name": "no-such-tool", "arguments": {}})
        _, series = await metrics(admin)
        assert samples_named(series, "mcp_trio_sessions_open") == [1]
        assert samples_named(series, "mcp_trio_sessions_created_total") == [1]
        calls = samples_named(
            series, "mcp_server_operation_duration_seconds_count", mcp_method_name="tools/call",
            gen_ai_tool_name="add", network_transport="tcp",
        )  # fmt: skip
        assert calls == [1]
        counts = [
            labels for (name, labels) in series if name == "mcp_server_operation_duration_seconds_count"
        ]
        unknown = [
            dict(labels)
            for labels in counts
            if ("gen_ai_tool_name", "add") not in labels and ("mcp_method_name", "tools/call") in labels
        ]
        assert unknown and all(labels["gen_ai_tool_name"] == "_OTHER" for labels in unknown)  # bounded
        assert all(
            "jsonrpc_request_id" not in dict(ls) and "mcp_session_id" not in dict(ls) for _, ls in series
        )
        deleted = await client.delete()
        assert deleted.status in (200, 204)
        await deleted.read()
        with trio.fail_after(5):
            while True:
                _, series = await metrics(admin)
                if samples_named(series, "mcp_server_session_duration_seconds_count"):
                    break
        assert sum(samples_named(series, "mcp_server_session_duration_seconds_count")) == 1
        assert samples_named(series, "mcp_trio_sessions_open") == [0]


async def test_refused_requests_are_counted_by_status() -> None:
    """Requests refused before any handler (a wrong Accept, an unknown session, a bad body) count in
    ``mcp_trio_http_refused_total``, by status: a flood of them shows on /metrics."""
    async with demo() as (app, admin, client):
        _, series = await metrics(admin)
        assert samples_named(series, "mcp_trio_http_refused_total") == []
        for _ in range(3):
            response = await client.asgi.request(
                "POST", headers={"content-type": "application/json"}, body=b"{}"
            )
            assert response.status == 406  # no Accept of both JSON and SSE
        response = await client.asgi.request(
            "DELETE", headers={"mcp-session-id": "no-such-session", "mcp-protocol-version": "2025-11-25"}
        )
        assert response.status == 404
        await client.initialize()
        assert (await client.post(b"{not json")).status == 400
        _, series = await metrics(admin)
        assert samples_named(series, "mcp_trio_http_refused_total", status="406") == [3]
        assert samples_named(series, "mcp_trio_http_refused_total", status="404") == [1]
        assert samples_named(series, "mcp_trio_http_refused_total", status="400") == [1]
        assert app.statistics()["refused"] == {"400": 1, "404": 1, "406": 3}


async def test_metrics_of_redis_links_and_readiness_when_one_is_down() -> None:
    bus = _FakeRedisBus()
    server = build_demo_server()
    server.notifications = bus
    app = MCPApp(server)
    admin = AdminApp(app)
    async with open_asgi_client(app):
        status, state = await ready(admin)
        assert (status, state["reasons"], state["redis"]) == (200, [], {"notifications": "connected"})
        _, series = await metrics(admin)
        assert samples_named(series, "mcp_trio_redis_up", link="notifications") == [1]
        assert samples_named(series, "mcp_trio_redis_failures_total", link="notifications") == [0]
        bus.state = "disconnected"
        bus.failures = 3
        status, state = await ready(admin)
        assert status == 503
        assert state["reasons"] == ["redis unreachable"]
        assert state["redis"] == {"notifications": "disconnected"}
        _, series = await metrics(admin)
        assert samples_named(series, "mcp_trio_redis_up", link="notifications") == [0]
        assert samples_named(series, "mcp_trio_redis_failures_total", link="notifications") == [3]
        bus.state = "connected"
        assert (await ready(admin))[0] == 200


class _FakeRedisBus(LocalNotificationBus):
    """What the listener asks of a Redis link: ``link_up``, ``state`` and its statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.state = "connected"
        self.failures = 0

    @property
    def link_up(self) -> bool:
        return self.state == "connected"

    def statistics(self) -> dict[str, Any]:
        return {"state": self.state, "url": "redis://***@x", "connects": 1, "failures": self.failures}


# -- /readyz, /healthz, /stats ----------------------------------------------------------------------


async def test_readiness_is_503_before_the_app_runs_200_while_it_serves_503_once_it_drains() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(drain_delay=0.5))
    admin = AdminApp(app)
    status, state = await ready(admin)
    assert (status, state["reasons"]) == (503, ["starting"])
    assert "redis" not in state
    status, _, body = await call(admin, "GET", "/healthz")
    assert (status, body) == (200, b"ok\n")  # alive, even before the app runs
    async with open_asgi_client(app) as asgi:
        assert await ready(admin) == (200, {"ready": True, "reasons": []})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app.aclose)
            await trio.sleep(0.1)
            status, state = await ready(admin)
            assert (status, state["reasons"]) == (503, ["draining"])
            # meanwhile the app still serves (the balancer notices first): a new session is made
            response = await asgi.request("POST", headers=_POST, body=_init())
            assert response.status == 200
            await response.read()
        assert (await ready(admin))[1]["reasons"] == ["draining"]  # and stays so once closed
    assert (await ready(admin))[0] == 503


_POST = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _init() -> bytes:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()


async def test_stats_are_the_apps_statistics() -> None:
    async with demo() as (app, admin, client):
        await client.initialize()
        await trio.sleep(0.06)
        status, headers, body = await call(admin, "GET", "/stats")
        assert (status, headers["content-type"]) == (200, "application/json")
        stats = json.loads(body)
        assert stats["sessions"] == 1 and stats.keys() == app.statistics().keys()


async def test_unknown_paths_are_404_other_methods_405_and_nothing_else_is_served() -> None:
    admin = AdminApp(MCPApp(build_demo_server()))
    for path in ("/", "/metrics/", "/mcp", "/readyz?x", "//metrics", "", "/%00"):
        assert (await call(admin, "GET", path))[0] == 404, path
    for method in ("POST", "HEAD", "PUT", "DELETE", "OPTIONS", "BREW"):
        status, headers, _ = await call(admin, method, "/metrics")
        assert (status, headers["allow"]) == (405, "GET"), method
    # a WebSocket upgrade is refused before it is accepted
    closed: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        closed.append(message)

    await admin({"type": "websocket", "path": "/metrics", "headers": []}, receive, send)
    assert [m["type"] for m in closed] == ["websocket.close"]


async def test_under_any_asgi_server_it_answers_its_own_address_loopback_and_allowed_hosts_only() -> None:
    admin = AdminApp(MCPApp(build_demo_server()), allowed_hosts=["prometheus.svc"])
    pod = ("10.0.0.5", 9464)  # the address the connection arrived on (scope["server"])
    for hosts, status in (
        ((b"10.0.0.5:9464",), 200), ((b"localhost:9464",), 200), ((b"prometheus.svc:9464",), 200), ((), 200),
        ((b"10.0.0.5:9465",), 421), ((b"rebind.example:9464",), 421),
        ((b"10.0.0.5:9464", b"rebind.example:9464"), 421),  # a server that lets two through
    ):  # fmt: skip
        found, _, body = await call(admin, "GET", "/stats", hosts=hosts, server=pod)
        assert found == status, (hosts, body)
        assert status == 200 or body.startswith(b"Misdirected Request: ")


async def test_it_answers_the_lifespan_protocol() -> None:
    admin = AdminApp(MCPApp(build_demo_server()))
    incoming = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return next(incoming)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    with trio.fail_after(5):
        await admin({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
