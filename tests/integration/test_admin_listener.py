"""The operations listener of a running ``mcp-trio demo --admin-bind 127.0.0.1:0``:

- a real Prometheus (Debian's ``prometheus``) scrapes its ``/metrics`` after a few ``tools/call`` and
  its query API returns the operation histogram, labelled ``mcp_method_name="tools/call"``;
- while a tool sends hundreds of progress notifications, the ``rate()`` of the server's operation
  counter stays 0 (it counts what the server receives: the call ends once) while the progress is in the
  sender's histogram; the process, Python and build metrics are scraped;
- on SIGTERM ``/readyz`` turns 503 while the public port still serves (``--drain-delay``), then the
  process exits by itself;
- with ``--redis``, ``/readyz`` is 503 while Redis is down and 200 again once it is back.

prometheus and redis-server come from Debian (scripts/test.sh installs them): without them the tests
are skipped when run by hand, and fail under the test command (``tests/required.py``).
"""

from __future__ import annotations

import json
import platform
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import test_redis
import trio
from mcp_http import HTTP_SERVER, POST_HEADERS, DemoServer, MCPClient, http_client, serve_demo
from test_redis import RedisServer, free_port
from tests.required import missing

import mcp_trio

STARTUP = 30.0
"""Seconds Prometheus gets to start and to have scraped the demo (a backstop, not a measure)."""
DRAIN = 3.0
EXIT_MARGIN = 5.0
CALLS = 3

redis = test_redis.redis
"""The fixture of test_redis.py: a redis-server of its own for the test, killed after it."""
key_ring = test_redis.key_ring
"""The fixture of test_redis.py (autouse): MCP_TRIO_REQUEST_STATE_SECRET for a demo with --redis."""


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        missing("prometheus is not installed (scripts/test.sh installs Debian's prometheus)")
    return found


@asynccontextmanager
async def running_prometheus(target: str, directory: Path) -> AsyncIterator[str]:
    """Prometheus scraping ``target`` (``HOST:PORT``) every second; yields its URL; stopped on exit."""
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: mcp\n    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    argv = [
        prometheus_binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    log = (directory / "prometheus.log").open("wb")
    process = await trio.lowlevel.open_process(argv, stdout=log, stderr=subprocess.STDOUT, cwd=directory)
    url = f"http://127.0.0.1:{port}"
    try:
        ready = False
        async with httpx.AsyncClient(timeout=5) as http:
            with trio.move_on_after(STARTUP):
                while not ready and process.returncode is None:
                    try:
                        ready = (await http.get(url + "/-/ready")).status_code == 200
                    except httpx.TransportError:
                        pass
                    if not ready:
                        await trio.sleep(0.1)
        if not ready:
            raise AssertionError(f"prometheus was not ready within {STARTUP} s:\n{_tail(directory)}")
        yield url
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with trio.move_on_after(10):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(5):
                    await process.wait()
            log.close()


def _tail(directory: Path) -> str:
    return (directory / "prometheus.log").read_text(errors="replace")[-3000:]


async def query(
    http: httpx.AsyncClient, prometheus: str, promql: str, at: float | None = None
) -> list[dict[str, Any]]:
    """The result of an instant query (evaluated ``at`` that Unix time, else now)."""
    params = {"query": promql} if at is None else {"query": promql, "time": repr(at)}
    response = await http.get(prometheus + "/api/v1/query", params=params)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


async def test_prometheus_scrapes_the_operation_histogram(tmp_path: Path) -> None:
    prometheus_binary()
    async with serve_demo("--admin-bind", "127.0.0.1:0") as server, http_client() as http:
        admin = _admin(server)
        client = MCPClient(http, server.url)
        await client.initialize()
        await client.initialized()
        for n in range(CALLS):
            result = await client.call_tool("add", {"a": n, "b": 1})
            assert result["structuredContent"] == {"sum": n + 1.0}
        async with running_prometheus(admin.removeprefix("http://"), tmp_path) as prometheus:
            promql = 'mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call"}'
            found: list[dict[str, Any]] = []
            with trio.move_on_after(STARTUP):
                while not found:
                    found = await query(http, prometheus, promql)
                    await trio.sleep(0.2)
            assert found, f"no {promql} in Prometheus within {STARTUP} s:\n{_tail(tmp_path)}"
            (series,) = found
            labels = series["metric"]
            assert labels["job"] == "mcp" and labels["gen_ai_tool_name"] == "add", labels
            assert labels["network_transport"] == "tcp" and labels["mcp_protocol_version"] == "2025-11-25"
            assert float(series["value"][1]) == CALLS
            # the scrape is healthy (the whole exposition parsed) and the transport's gauges are there
            (target,) = (await http.get(prometheus + "/api/v1/targets")).json()["data"]["activeTargets"]
            assert (target["health"], target["lastError"]) == ("up", ""), target
            sessions = await query(http, prometheus, "mcp_trio_sessions_open")
            assert [float(s["value"][1]) for s in sessions] == [1.0]
            buckets = await query(http, prometheus, "mcp_server_operation_duration_seconds_bucket")
            assert any(s["metric"]["le"] == "+Inf" for s in buckets)


PROGRESS_STEPS = 400
PROGRESS_DELAY = 0.0125
"""The demo's ``count`` tool sends a progress notification (and a log message) every 12.5 ms for at
least 5 s: Prometheus, scraping every second, scrapes several times while it runs."""


async def until_query(http: httpx.AsyncClient, prometheus: str, promql: str) -> list[dict[str, Any]]:
    """Poll ``promql`` until it has a result (within STARTUP)."""
    with trio.move_on_after(STARTUP):
        while not (found := await query(http, prometheus, promql)):  # noqa: ASYNC110 - another process
            await trio.sleep(0.2)
        return found
    raise AssertionError(f"no {promql} in Prometheus within {STARTUP} s")


async def test_a_tools_progress_leaves_the_request_rate_flat(tmp_path: Path) -> None:
    prometheus_binary()
    received = "mcp_server_operation_duration_seconds_count"
    progress = 'mcp_client_operation_duration_seconds_count{mcp_method_name="notifications/progress"}'
    async with serve_demo("--admin-bind", "127.0.0.1:0") as server, http_client() as http:
        admin = _admin(server)
        client = MCPClient(http, server.url)
        await client.initialize()
        await client.initialized()
        async with running_prometheus(admin.removeprefix("http://"), tmp_path) as prometheus:
            await until_query(http, prometheus, f"sum({received}) == 2")  # the handshake is scraped
            arguments = {"steps": PROGRESS_STEPS, "delay": PROGRESS_DELAY}
            params = {"name": "count", "arguments": arguments, "_meta": {"progressToken": "t"}}
            call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
            stream = await client.post_stream(call)
            messages = []
            try:
                with trio.fail_after(PROGRESS_STEPS * PROGRESS_DELAY * 10 + 30):
                    while (message := await stream.next_message()) is not None:
                        messages.append(message)
            finally:
                await stream.aclose()
            assert messages[-1]["result"]["content"][0]["text"] == f"counted to {PROGRESS_STEPS}"
            sent = [m["method"] for m in messages[:-1]]
            assert sent.count("notifications/progress") == PROGRESS_STEPS
            await until_query(http, prometheus, f"sum({progress}) == {PROGRESS_STEPS}")

            # the scrapes made while the tool was sending progress: its counter between 0 and the end
            (series,) = await query(http, prometheus, f"{progress}[10m]")
            during = [float(at) for at, value in series["values"] if 0 < float(value) < PROGRESS_STEPS]
            assert len(during) >= 2, series["values"]
            first, last = during[0], during[-1]
            window = f"{round((last - first) * 1000) + 200}ms"  # those scrapes, and no earlier one
            rate = await query(http, prometheus, f"sum(rate({received}[{window}]))", at=last)
            assert [float(r["value"][1]) for r in rate] == [0.0]  # flat: no request ended meanwhile
            sending = await query(http, prometheus, f"sum(rate({progress}[{window}]))", at=last)
            assert float(sending[0]["value"][1]) > 0  # ... while progress was being sent
            in_flight = await query(
                http, prometheus, 'mcp_trio_requests_in_flight{era="2025",transport="http"}', at=last
            )
            assert [float(r["value"][1]) for r in in_flight] == [1.0]  # the call, in its session
            # once scraped after the call: three operations received, whatever the server sent
            by_method = await query(http, prometheus, f"sum by (mcp_method_name) ({received})")
            assert {r["metric"]["mcp_method_name"]: float(r["value"][1]) for r in by_method} == {
                "initialize": 1.0, "notifications/initialized": 1.0, "tools/call": 1.0,
            }  # fmt: skip
            increase = await query(http, prometheus, f"sum(increase({received}[1h]))")
            assert float(increase[0]["value"][1]) < 3  # at most the three (extrapolated), not hundreds
            increase = await query(http, prometheus, f"sum(increase({progress}[1h]))")
            assert float(increase[0]["value"][1]) > PROGRESS_STEPS / 4  # what the server sent meanwhile

            # the process, Python and build metrics, as Prometheus' client libraries name them
            for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                         "process_virtual_memory_bytes", "process_open_fds", "process_max_fds"):  # fmt: skip
                (value,) = await query(http, prometheus, f'{name}{{job="mcp"}}')
                assert float(value["value"][1]) > 0, name
            (started,) = await query(http, prometheus, "process_start_time_seconds")
            assert 0 < time.time() - float(started["value"][1]) < 3600
            (python,) = await query(http, prometheus, "python_info")
            assert python["metric"]["version"] == platform.python_version()
            (build,) = await query(http, prometheus, "mcp_trio_build_info")
            assert build["metric"]["version"] == mcp_trio.__version__
            assert build["metric"]["http_server"] == HTTP_SERVER and build["metric"]["http_server_version"]
            (target,) = (await http.get(prometheus + "/api/v1/targets")).json()["data"]["activeTargets"]
            assert (target["health"], target["lastError"]) == ("up", ""), target


async def test_readiness_turns_on_sigterm_while_the_public_port_still_serves() -> None:
    async with serve_demo("--admin-bind", "127.0.0.1:0", "--drain-delay", str(DRAIN)) as server:
        admin = _admin(server)
        async with httpx.AsyncClient(timeout=5) as http:
            ready = await http.get(admin + "/readyz")
            assert (ready.status_code, ready.json()) == (200, {"ready": True, "reasons": []})
            assert (await http.get(server.base + "/readyz")).status_code == 404  # not on the public port
            assert isinstance(server.process, trio.Process)
            signalled = trio.current_time()
            server.process.send_signal(signal.SIGTERM)
            with trio.fail_after(DRAIN):
                while (ready := await http.get(admin + "/readyz")).status_code == 200:  # noqa: ASYNC110 - another process
                    await trio.sleep(0.02)
            assert (ready.status_code, ready.json()["reasons"]) == (503, ["draining"])
            # the public listener still serves: a new connection, a new session, the balancer's probe
            async with httpx.AsyncClient(timeout=5) as fresh:
                probe = await fresh.get(server.url, headers={"accept": "text/event-stream"})
                assert probe.status_code == 503  # the public port's own readiness says the same
                created = await fresh.post(server.url, headers=POST_HEADERS, content=_initialize())
                assert created.status_code == 200, created.text
            assert trio.current_time() - signalled < DRAIN  # all of that within the drain delay
            assert server.process.returncode is None
        await _exits_by_itself(server, DRAIN + server.shutdown_grace + EXIT_MARGIN)


async def test_readiness_is_503_while_redis_is_down(redis: RedisServer) -> None:
    async with (
        serve_demo("--admin-bind", "127.0.0.1:0", "--redis", redis.url) as server,
        httpx.AsyncClient(timeout=5) as http,
    ):
        admin = _admin(server)
        state = await _ready_within(http, admin, 200, test_redis.STARTUP)
        assert state["redis"] == {"notifications": "connected", "tasks": "connected", "events": "connected"}
        await redis.kill()
        state = await _ready_within(http, admin, 503, 10)
        assert state["reasons"] == ["redis unreachable"], state
        assert "disconnected" in state["redis"].values(), state
        metrics = (await http.get(admin + "/metrics")).text
        assert 'mcp_trio_redis_up{link="notifications"} 0\n' in metrics
        await redis.start()
        # ready again, and the metrics say so (a Redis just restarted may refuse a moment more: wait
        # for both, within the bound)
        with trio.fail_after(test_redis.RESUME + 5):
            while True:
                state = await _ready_within(http, admin, 200, test_redis.RESUME + 5)
                metrics = (await http.get(admin + "/metrics")).text
                if 'mcp_trio_redis_up{link="notifications"} 1\n' in metrics:
                    break
                await trio.sleep(0.1)
        assert 'mcp_trio_redis_failures_total{link="notifications"} ' in metrics


async def _ready_within(http: httpx.AsyncClient, admin: str, status: int, within: float) -> dict[str, Any]:
    """Poll ``/readyz`` until it answers ``status``; its JSON."""
    response = None
    with trio.move_on_after(within):
        while (response := await http.get(admin + "/readyz")).status_code != status:  # noqa: ASYNC110 - another process
            await trio.sleep(0.05)
        state: dict[str, Any] = response.json()
        return state
    raise AssertionError(f"/readyz did not turn {status} within {within} s: {response and response.text}")


def _admin(server: DemoServer) -> str:
    assert server.admin_url is not None and server.admin_url.startswith("http://127.0.0.1:"), server
    assert server.admin_url != server.base
    return server.admin_url


def _initialize() -> bytes:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()


async def _exits_by_itself(server: DemoServer, within: float) -> None:
    """The SIGTERM already sent: the process exits by itself, status 0, having said it stopped."""
    assert isinstance(server.process, trio.Process) and server.process.stdout is not None
    server.stopped = True  # serve_demo sends no second signal
    with trio.move_on_after(within):
        server.returncode = await server.process.wait()
    assert server.returncode == 0, f"exit status {server.returncode}; stderr:\n{server.log()}"
    with trio.move_on_after(1):
        while chunk := await server.process.stdout.receive_some(65536):
            server.stdout_tail += chunk
    assert b"mcp-trio: stopped" in server.stdout_tail, server.stdout_tail


async def test_the_listener_answers_the_hosts_it_is_told_to_and_refuses_any_other() -> None:
    """``--admin-allowed-host`` (repeatable): the names it is scraped by; any other Host is 421, so a
    web page on this machine cannot read the listener by DNS rebinding."""
    flags = ("--admin-allowed-host", "scrape.example", "--admin-allowed-host", "probe.example:1")
    async with serve_demo("--admin-bind", "127.0.0.1:0", *flags) as server, http_client() as http:
        admin = _admin(server)
        port = admin.rsplit(":", 1)[1]
        with trio.fail_after(10):
            for host, status in (
                (f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200), (f"scrape.example:{port}", 200),
                ("probe.example:1", 200), (f"probe.example:{port}", 421), (f"rebind.example:{port}", 421),
            ):  # fmt: skip
                for path in ("/metrics", "/stats"):
                    response = await http.get(admin + path, headers={"host": host})
                    assert response.status_code == status, (host, path, response.text)
                    if status == 421:  # a short body, nothing of the server's
                        assert "mcp_trio" not in response.text and "sessions" not in response.text
        await server.stop(signal.SIGTERM)
        assert "WARNING" not in server.log()  # a loopback listener exposes nothing


async def test_a_listener_beyond_loopback_needs_admin_bind_public_and_warns_what_it_exposes() -> None:
    """Bound to 0.0.0.0 and stopped at once (nothing is sent to it)."""
    async with serve_demo("--admin-bind", "0.0.0.0:0", "--admin-bind-public") as server:
        assert server.admin_url is not None and server.admin_url.startswith("http://0.0.0.0:"), server
        await server.stop(signal.SIGTERM)
        log = server.log()
    (warning,) = [line for line in log.splitlines() if line.startswith("WARNING ")]
    assert warning.startswith(f"WARNING mcp_trio.serve: the operations listener on {server.admin_url} is not")
    for shown in ("metrics (/metrics)", "statistics (/stats)", "health (/healthz, /readyz)"):
        assert shown in warning, warning
