"""``/metrics`` by the conventions, read back through the strict text-format reader of test_admin.py:

- only what the server receives is in ``mcp_server_operation_duration_seconds``; what it sends (a
  tool's progress and log notifications, its requests to the client) is in
  ``mcp_client_operation_duration_seconds``, in both eras, and on a client the other way round;
- the session histograms' buckets reach hours;
- ``process_*`` (from /proc, as Prometheus' client libraries compute them), ``python_info`` and
  ``mcp_trio_build_info``;
- ``mcp_trio_requests_in_flight`` by ``era`` and ``transport``, over HTTP and WebSocket.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import h11
import pytest
import trio

import mcp_trio
from mcp_trio import MCPApp, ServerConfig, open_websocket_client
from mcp_trio._observe.conventions import DURATION_BUCKETS, SESSION_BUCKETS
from mcp_trio._observe.process import process_samples
from mcp_trio._observe.telemetry import HTTP, PIPE, Telemetry
from mcp_trio._transport.admin import build_info
from mcp_trio.demo import build_demo_server
from mcp_trio.server import AdminApp

from .test_admin import Series, demo, metrics, parse_metrics, samples_named
from .test_modern import Modern
from .test_stdio_server import modern_meta
from .test_websocket import serving, until

RECEIVED = "mcp_server_operation_duration_seconds"
SENT = "mcp_client_operation_duration_seconds"
STEPS = 25
PROCESS = {
    "process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
    "process_start_time_seconds", "process_open_fds", "process_max_fds",
}  # fmt: skip


def counts_by_method(series: Series, histogram: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for (name, labels), value in series.items():
        if name == histogram + "_count":
            method = dict(labels)["mcp_method_name"]
            found[method] = found.get(method, 0) + value
    return found


def bounds(series: Series, histogram: str) -> list[float]:
    return sorted(
        {
            math.inf if (le := dict(labels)["le"]) == "+Inf" else float(le)
            for (name, labels) in series
            if name == histogram + "_bucket"
        }
    )


# -- what the server receives, and what it sends ---------------------------------------------------


@pytest.mark.parametrize("era", ["2025", "2026"])
async def test_a_tools_progress_is_sent_operations_and_the_call_one_received(era: str) -> None:
    params: dict[str, Any] = {
        "name": "count",
        "arguments": {"steps": STEPS, "delay": 0},
        "_meta": {"progressToken": "p"},
    }
    async with demo() as (_app, admin, client):
        if era == "2025":
            await client.initialize()
            body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
            response = await client.post(json.dumps(body).encode())
        else:
            params["_meta"].update(modern_meta())
            response = await Modern(client.asgi).post("tools/call", params)
        messages = []
        with trio.fail_after(10):
            while (message := await response.next_message()) is not None:
                messages.append(message)
        assert messages[-1]["result"]["content"][0]["text"] == f"counted to {STEPS}"
        assert sum(m.get("method") == "notifications/progress" for m in messages) == STEPS
        _, series = await metrics(admin)
    received = counts_by_method(series, RECEIVED)
    expected = {"tools/call": 1}
    if era == "2025":
        expected |= {"initialize": 1, "notifications/initialized": 1}
    assert received == expected  # the 25 progress notifications are not requests the server served
    sent = counts_by_method(series, SENT)
    assert sent["notifications/progress"] == STEPS
    assert all(method.startswith("notifications/") for method in sent), sent
    assert sum(sent.values()) == sum("method" in m for m in messages)  # each message it sent, once
    labels = [dict(ls) for (n, ls) in series if n == SENT + "_count"]
    assert {ls["network_protocol_name"] for ls in labels} == {"http"}
    assert {ls["mcp_protocol_version"] for ls in labels} == {"2025-11-25" if era == "2025" else "2026-07-28"}
    assert bounds(series, SENT) == [*DURATION_BUCKETS, math.inf]


async def test_a_servers_request_to_the_client_is_a_sent_operation() -> None:
    """Sampling asked by a tool: the tool's call is received, ``sampling/createMessage`` sent; the
    client's answer to it is neither (it completes the sent operation)."""
    async with demo() as (_app, admin, client):
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}},
            "clientInfo": {"name": "t", "version": "1"},
        }
        response = await client.asgi.request(
            "POST",
            headers=client.headers(),
            body=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode(),
        )
        client.session_id = response.headers["mcp-session-id"]
        await client.notify("notifications/initialized")
        call = {"name": "test_sampling", "arguments": {"prompt": "hi"}}
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call}
        response = await client.post(json.dumps(body).encode())
        with trio.fail_after(10):
            request = await response.next_message()
            assert request is not None and request["method"] == "sampling/createMessage"
            result = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": result}
            await client.post(json.dumps(answer).encode())
            assert "result" in (await response.next_message() or {})
        _, series = await metrics(admin)
    received = counts_by_method(series, RECEIVED)
    assert received == {"initialize": 1, "notifications/initialized": 1, "tools/call": 1}
    assert counts_by_method(series, SENT) == {"sampling/createMessage": 1}


@pytest.mark.parametrize("side", ["server", "client"])
def test_received_and_sent_operations_by_the_conventions_on_either_side(side: str) -> None:
    """Whichever side records: what it received is the receiver's histogram (the server one), what it
    sent the sender's (the client one); its sessions are its side's, with the session buckets."""
    telemetry = Telemetry(side, opentelemetry=False)
    registry = telemetry.enable_metrics()
    for method, incoming in (("tools/call", True), ("notifications/progress", False), ("ping", False)):
        operation = telemetry.operation(method, {"name": "x"}, 1, incoming=incoming, carrier=HTTP)
        assert operation is not None
        operation.finish({"result": {}})
    clock = telemetry.session(PIPE)
    assert clock is not None
    clock.end("2025-11-25")
    types, series = parse_metrics(registry.render())
    assert counts_by_method(series, RECEIVED) == {"tools/call": 1}
    assert counts_by_method(series, SENT) == {"notifications/progress": 1, "ping": 1}
    session = f"mcp_{side}_session_duration_seconds"
    assert types[session] == "histogram"
    assert samples_named(series, session + "_count", network_transport="pipe") == [1]
    assert bounds(series, session) == [*SESSION_BUCKETS, math.inf]
    other = "client" if side == "server" else "server"
    assert f"mcp_{other}_session_duration_seconds" not in types


# -- sessions ----------------------------------------------------------------------------------------


async def test_session_durations_have_buckets_up_to_a_day() -> None:
    assert SESSION_BUCKETS[0] <= 1 and SESSION_BUCKETS[-1] == 24 * 3600
    assert list(SESSION_BUCKETS) == sorted(set(SESSION_BUCKETS))
    assert 3600 in SESSION_BUCKETS and 8 * 3600 in SESSION_BUCKETS
    async with demo() as (_app, admin, client):
        await client.initialize()
        assert (await client.delete()).status in (200, 204)
        histogram = admin.registry.histograms["mcp_server_session_duration_seconds"]
        histogram.observe(90 * 60, {"network.transport": "tcp"})  # a session of an hour and a half
        name = "mcp_server_session_duration_seconds"
        with trio.fail_after(5):  # the session's end is recorded once its task has ended
            _, series = await metrics(admin)
            while not samples_named(series, name + "_count", network_protocol_name="http"):
                _, series = await metrics(admin)
    assert bounds(series, name) == [*SESSION_BUCKETS, math.inf]
    long = {dict(ls)["le"]: v for (n, ls), v in series.items() if n == name + "_bucket" and len(ls) == 2}
    assert (long["3600"], long["7200"], long["+Inf"]) == (0, 1, 1)  # in the bucket it belongs to
    short = samples_named(series, name + "_bucket", network_protocol_name="http", le="1")
    assert short == [1]  # the session just closed lasted less than a second


# -- the process, Python and the build ---------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process metrics come from /proc (Linux)")
async def test_process_python_and_build_metrics() -> None:
    async with demo() as (app, _admin, _client):
        admin = AdminApp(app, http_server="h11")
        types, series = await metrics(admin)
    assert {name for name in types if name.startswith("process_")} == PROCESS
    assert types["process_cpu_seconds_total"] == "counter"
    assert all(types[name] == "gauge" for name in PROCESS - {"process_cpu_seconds_total"})
    value = {name: samples_named(series, name)[0] for name in PROCESS}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert 0 < value["process_cpu_seconds_total"] <= usage.ru_utime + usage.ru_stime + 0.05
    assert value["process_cpu_seconds_total"] >= usage.ru_utime + usage.ru_stime - 1.0  # ticks: 10 ms
    assert usage.ru_maxrss * 1024 >= value["process_resident_memory_bytes"] > 10 * 2**20
    assert value["process_virtual_memory_bytes"] >= value["process_resident_memory_bytes"]
    assert time.time() - 24 * 3600 < value["process_start_time_seconds"] < time.time()
    assert value["process_max_fds"] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert 3 <= value["process_open_fds"] <= value["process_max_fds"]
    (python,) = [dict(ls) for (n, ls) in series if n == "python_info"]
    assert python == {
        "implementation": platform.python_implementation(),
        "major": str(sys.version_info.major),
        "minor": str(sys.version_info.minor),
        "patchlevel": str(sys.version_info.micro),
        "version": platform.python_version(),
    }
    assert samples_named(series, "python_info") == [1]
    (build,) = [dict(ls) for (n, ls) in series if n == "mcp_trio_build_info"]
    assert build == {
        "version": mcp_trio.__version__,
        "protocol_versions": "2026-07-28,2025-11-25,2025-06-18,2025-03-26",
        "trio_version": trio.__version__,
        "http_server": "h11",
        "http_server_version": h11.__version__,
    }
    assert samples_named(series, "mcp_trio_build_info") == [1]


async def test_the_build_info_names_no_server_it_was_not_told_of() -> None:
    async with demo() as (_app, admin, _client):
        _, series = await metrics(admin)
    (build,) = [dict(ls) for (n, ls) in series if n == "mcp_trio_build_info"]
    assert build.keys() == {"version", "protocol_versions", "trio_version"}


def _fake_proc(tmp_path: Path, command: str, limits: str) -> Path:
    (tmp_path / "self" / "fd").mkdir(parents=True)
    for n in range(5):
        (tmp_path / "self" / "fd" / str(n)).touch()
    # pid (comm) state ppid ... utime(14) stime(15) ... starttime(22) vsize(23) rss(24)
    fields = ["S", *["0"] * 10, "250", "150", *["0"] * 6, "1000", "123456789", "300"]
    (tmp_path / "self" / "stat").write_text(f"42 ({command}) " + " ".join(fields) + " 0 0 0\n")
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n")
    (tmp_path / "self" / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units\n"
        f"Max open files            {limits}              files\n"
    )
    return tmp_path


def test_process_metrics_read_from_proc_as_the_client_libraries_do(tmp_path: Path) -> None:
    """The fields of proc(5), whatever the command name holds (spaces, parentheses)."""
    proc = _fake_proc(tmp_path, "a) (b c", "4096                 8192")
    found = {name: values for name, _kind, _help, values in process_samples(proc)}
    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    assert found == {
        "process_cpu_seconds_total": [({}, 400 / ticks)],
        "process_virtual_memory_bytes": [({}, 123456789)],
        "process_resident_memory_bytes": [({}, 300 * page)],
        "process_start_time_seconds": [({}, 1700000000 + 1000 / ticks)],
        "process_open_fds": [({}, 5)],
        "process_max_fds": [({}, 4096)],
    }


def test_process_metrics_are_absent_where_proc_says_nothing(tmp_path: Path) -> None:
    assert process_samples(tmp_path) == []  # no /proc (not Linux): no process_* at all
    proc = _fake_proc(tmp_path / "p", "x", "unlimited            unlimited")
    (proc / "self" / "stat").write_text("42 (x) S 1 2\n")  # another format: those fields are left out
    (proc / "stat").write_text("cpu 1\n")
    names = [name for name, *_ in process_samples(proc)]
    assert names == ["process_open_fds"]  # an unlimited soft limit is no number either
    good = _fake_proc(tmp_path / "q", "x", "1024 1024")
    (good / "stat").write_text("btime soon\n")  # a boot time that is no number: no start time
    names = [name for name, *_ in process_samples(good)]
    assert "process_start_time_seconds" not in names and "process_cpu_seconds_total" in names


def test_the_build_info_of_a_server_that_is_no_distribution() -> None:
    (_name, _kind, _help, [(labels, value)]) = build_info("not-a-distribution")
    assert labels["http_server"] == "not-a-distribution" and "http_server_version" not in labels
    assert value == 1


# -- requests in flight, by era and transport -----------------------------------------------------------


def in_flight(series: Series) -> dict[tuple[str, str], float]:
    found = {}
    for (name, labels), value in series.items():
        if name == "mcp_trio_requests_in_flight":
            pairs = dict(labels)
            assert pairs.keys() == {"era", "transport"}
            found[pairs["era"], pairs["transport"]] = value
    return found


async def test_requests_in_flight_by_era_over_http() -> None:
    sleep = {"name": "sleep", "arguments": {"seconds": 60}}
    async with demo() as (_app, admin, client):
        _, series = await metrics(admin)
        idle = {(era, transport): 0 for era in ("2025", "2026") for transport in ("http", "websocket")}
        assert in_flight(series) == idle
        await client.initialize()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": sleep}
                nursery.start_soon(client.post, json.dumps(body).encode())
                for _ in range(2):
                    nursery.start_soon(Modern(client.asgi).post, "tools/call", sleep)
                await trio.testing.wait_all_tasks_blocked()
                _, series = await metrics(admin)
                assert in_flight(series) == {**idle, ("2025", "http"): 1, ("2026", "http"): 2}
                nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_requests_in_flight_by_era_over_websocket(mode: Any) -> None:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1.0))
    admin = AdminApp(app, http_server="h11")
    era = "2026" if mode == "modern" else "2025"
    async with serving("h11", app) as served:
        with trio.fail_after(20):
            async with open_websocket_client(served.url, mode=mode) as session, trio.open_nursery() as tasks:
                tasks.start_soon(session.call_tool, "sleep", {"seconds": 60})
                await until(lambda: app.statistics()["websocket_requests"] == 1)
                _, series = await metrics(admin)
                counts = in_flight(series)
                assert counts[era, "websocket"] == 1
                assert sum(counts.values()) == 1
                tasks.cancel_scope.cancel()
        await served.until_no_connection()
    _, series = await metrics(admin)
    assert sum(in_flight(series).values()) == 0
