"""The operations listener of a running ``mcp-trio demo --admin-bind 127.0.0.1:0``:

- a real Prometheus (Debian's ``prometheus``) scrapes its ``/metrics`` after a few ``tools/call`` and
  its query API returns the operation histogram, labelled ``mcp_method_name="tools/call"``;
- on SIGTERM ``/readyz`` turns 503 while the public port still serves (``--drain-delay``), then the
  process exits by itself;
- with ``--redis``, ``/readyz`` is 503 while Redis is down and 200 again once it is back.

prometheus and redis-server come from Debian (scripts/test.sh installs them): without them the tests
are skipped when run by hand, and fail under the test command (``tests/required.py``).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import test_redis
import trio
from mcp_http import POST_HEADERS, DemoServer, MCPClient, http_client, serve_demo
from test_redis import RedisServer, free_port
from tests.required import missing

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


async def query(http: httpx.AsyncClient, prometheus: str, promql: str) -> list[dict[str, Any]]:
    response = await http.get(prometheus + "/api/v1/query", params={"query": promql})
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
