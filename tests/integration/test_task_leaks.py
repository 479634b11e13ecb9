"""Tasks leave nothing behind: against a real hypercorn (``mcp-trio serve`` in a subprocess, with the demo's
tools and a short task TTL), 10 000 tasks made by 2026-07-28 ``tools/call`` requests that declare the
tasks extension, in two rounds of 5 000: most finish at once (``slow_compute`` with ``seconds: 0``),
every tenth runs long and is cancelled with ``tasks/cancel``, and a few run long until their TTL
cancels them.  Once every TTL ran out, the server runs no task and stores no record (``/stats``), every
task id is unknown (``tasks/get``: -32602), the server's sockets and Trio tasks are back at the idle
baseline, and its memory (VmRSS) after the second round is within a few MB of where the first left it
(10 000 forgotten records would be tens of MB).

The store forgets expired records at its next call (a ``get``, a ``create``, or the ``statistics`` that
``/stats`` asks for), so nothing here waits for an eviction that never comes: once a TTL ran out, any
look at the store forgets the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
from mcp_http import (
    Baseline,
    DemoServer,
    _env_without_coverage,
    _read_url,
    assert_back_to_baseline,
    coverage_paused,
    fetch_stats,
    wait_for,
)
from tests.required import not_applicable

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason=not_applicable("inspects the server's sockets through /proc (Linux only)"),
)

ROUNDS = 2
TASKS_PER_ROUND = 5_000
"""10 000 tasks in all."""
CANCELLED_EVERY = 10
"""Every tenth task runs long and is cancelled by the client."""
LEFT_TO_EXPIRE = 20
"""Long tasks per round that nobody cancels: their TTL does."""
TASK_TTL = 2.0
CONCURRENCY = 16
"""Requests in flight at once (one connection each)."""
LABEL = "x" * 1024
"""In each task's result (``Computed xxx… after 0 s``): a kept record weighs 2 KB or more."""
RSS_GROWTH_LIMIT_KIB = 4 * 1024
"""How much more memory the server may hold after the second round than after the first (the 5 000
records of a round, kept, would be 10 MB or more)."""
TASKS = "io.modelcontextprotocol/tasks"
V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientInfo": {"name": "task-leaks", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
}


def task_leak_app() -> MCPApp:
    """The app the server subprocess serves (``mcp-trio serve test_task_leaks:task_leak_app``)."""
    config = ServerConfig(stats_path="/stats", task_ttl=TASK_TTL, shutdown_grace=2.0)
    return MCPApp(build_demo_server(), config)


@asynccontextmanager
async def serve_tasks_app() -> AsyncIterator[DemoServer]:
    """``task_leak_app`` on hypercorn in a subprocess (as ``mcp_http.serve_demo`` runs the demo), without
    coverage (a volume test); stopped with SIGINT afterwards, which it must obey in time."""
    command = [
        sys.executable,
        "-c",
        "from mcp_trio._cli import main; main()",
        "serve",
        "test_task_leaks:task_leak_app",
        "--bind",
        "127.0.0.1:0",
    ]
    here = Path(__file__).parent
    env = _env_without_coverage()  # this module imports tests.required: the checkout's root on the path
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(here.parents[1])]))
    with tempfile.TemporaryFile() as stderr:
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=here
        )
        try:
            url = await _read_url(process, stderr)
            server = DemoServer(url, process.pid, process, stderr, shutdown_grace=2.0)
            yield server
            await server.stop()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await process.wait()
            assert process.stdout is not None
            await process.stdout.aclose()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")  # pragma: no cover


class TaskRequests:
    """2026-07-28 requests declaring the tasks extension, on one keep-alive HTTP/1.1 connection of its
    own (h11 on a Trio socket: the client must cost much less than the server, which is measured;
    ``httpx`` costs about as much per request as the server)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.next_id = 0
        self._stream: trio.SocketStream | None = None
        self._h11 = h11.Connection(h11.CLIENT)

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None

    async def _exchange(self, headers: list[tuple[str, str]], body: bytes) -> tuple[int, bytes]:
        if self._stream is None:
            self._stream = await trio.open_tcp_stream("127.0.0.1", self.port)
            self._h11 = h11.Connection(h11.CLIENT)
        conn = self._h11
        head = [("host", f"127.0.0.1:{self.port}"), ("content-length", str(len(body))), *headers]
        data = conn.send(h11.Request(method="POST", target="/mcp", headers=head))
        await self._stream.send_all(data + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
        status, chunks = 0, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await self._stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):  # pragma: no cover - a server bug
                raise AssertionError("the server closed the connection mid-response")
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        else:  # the server ends keep-alive connections after so many requests: open a new one
            await self.aclose()
        return status, b"".join(chunks)

    async def request(self, method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
        self.next_id += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": method,
            "params": {**params, "_meta": META},
        }
        headers = [
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
            ("mcp-protocol-version", V),
            ("mcp-method", method),
            ("mcp-name", name),
        ]
        status, body = await self._exchange(headers, json.dumps(message).encode())
        assert status == 200, (status, body)
        answer: dict[str, Any] = json.loads(body)
        return answer

    async def start(self, seconds: float) -> str:
        params = {"name": "slow_compute", "arguments": {"seconds": seconds, "label": LABEL}}
        answer = await self.request("tools/call", params, "slow_compute")
        assert answer["result"]["resultType"] == "task", answer
        task_id: str = answer["result"]["taskId"]
        return task_id

    async def task(self, method: str, task_id: str) -> dict[str, Any]:
        return await self.request(method, {"taskId": task_id}, task_id)


async def one_round(requests: list[TaskRequests], first: int) -> list[str]:
    """Make ``TASKS_PER_ROUND`` tasks (numbered from ``first``) with ``CONCURRENCY`` clients at once;
    return their ids."""
    ids: list[str] = []

    async def worker(client: TaskRequests, offset: int) -> None:
        for n in range(first + offset, first + TASKS_PER_ROUND, CONCURRENCY):
            if n % CANCELLED_EVERY == 0:
                task_id = await client.start(3600)
                ack = await client.task("tasks/cancel", task_id)
                assert ack["result"]["resultType"] == "complete", ack
            elif n % TASKS_PER_ROUND < LEFT_TO_EXPIRE * CANCELLED_EVERY and n % CANCELLED_EVERY == 1:
                task_id = await client.start(3600)  # left running: its TTL cancels it
            else:
                task_id = await client.start(0)
            ids.append(task_id)

    async with trio.open_nursery() as nursery:
        for offset, client in enumerate(requests):
            nursery.start_soon(worker, client, offset)
    return ids


async def expired_everywhere(server: DemoServer, requests: TaskRequests, ids: list[str]) -> dict[str, Any]:
    """Wait for every TTL to run out: no task running, none stored; then every id is unknown."""
    stats = await wait_for(
        server,
        lambda s: s["tasks_running"] == 0 and s["tasks_stored"] == 0,
        within=TASK_TTL + 10,
        what="every task gone after its TTL",
    )
    for task_id in ids[:: len(ids) // 200]:  # a sample: 200 of them
        answer = await requests.task("tasks/get", task_id)
        assert answer["error"] == {"code": -32602, "message": "Failed to retrieve task: Task not found"}, (
            answer
        )
    return stats


@pytest.mark.deadline(90)
async def test_ten_thousand_tasks_leave_nothing_behind() -> None:
    async with serve_tasks_app() as server:
        baseline = await Baseline.measure(server)
        rss_before = rss_kib(server.pid)
        rss_after: list[int] = []
        peaks: list[dict[str, Any]] = []
        all_ids: list[str] = []
        start = trio.current_time()
        with trio.fail_after(60), coverage_paused():
            for round_number in range(ROUNDS):
                requests = [TaskRequests(server.port) for _ in range(CONCURRENCY)]
                try:
                    ids = await one_round(requests, round_number * TASKS_PER_ROUND)
                    assert len(ids) == len(set(ids)) == TASKS_PER_ROUND
                    peaks.append(await fetch_stats(server))
                    # a task polled before its TTL runs out: completed, with its result
                    client = requests[0]
                    task_id = await client.start(0)
                    while True:
                        polled = (await client.task("tasks/get", task_id))["result"]
                        if polled["status"] == "completed":
                            break
                        await trio.sleep(0.01)
                    assert polled["result"]["content"][0]["text"] == f"Computed {LABEL} after 0 s"
                    await expired_everywhere(server, client, ids)
                finally:
                    for client in requests:
                        await client.aclose()
                all_ids.extend(ids)
                sockets, stats = await assert_back_to_baseline(server, baseline, within=5.0)
                assert stats["tasks_running"] == 0 and stats["tasks_stored"] == 0, stats
                rss_after.append(rss_kib(server.pid))
        took = trio.current_time() - start
        assert len(set(all_ids)) == ROUNDS * TASKS_PER_ROUND
        growth = rss_after[-1] - rss_after[0]
        print(
            f"\n{ROUNDS * TASKS_PER_ROUND} tasks in {took:.1f} s: at the end of each round (tasks_running,"
            f" tasks_stored) {[(p['tasks_running'], p['tasks_stored']) for p in peaks]}; process_tasks"
            f" {baseline.process_tasks} -> {stats['process_tasks']}, sockets {baseline.sockets} -> {sockets};"
            f" VmRSS {rss_before} KiB idle, {rss_after} KiB after each round (growth {growth} KiB)"
        )
        assert growth < RSS_GROWTH_LIMIT_KIB, (
            f"the server's memory grew by {growth} KiB from the first round to the second: {rss_after}"
        )
