"""Two ``mcp-trio demo --worker-id a|b --redis URL`` workers behind a real HAProxy with the shipped
docs/deploy/haproxy-workers.cfg and a real redis-server (docs/deploy/workers.md).

- a whole 2025 session through HAProxy (routed by the session id's prefix), whose client answers an
  elicitation by a POST sent straight to the *other* worker: it is forwarded through Redis to the owner
  (202), and the tool completes; a GET stream; DELETE;
- the official conformance suite (0.2.0-alpha.12, spec versions 2025-11-25 and 2026-07-28) through
  HAProxy: requests without a session id go round robin;
- a worker killed with SIGKILL: the other worker adopts its sessions once its heartbeat expires (a
  DELETE then ends one: 404 after), the other worker's sessions are unaffected;
- Redis restarted: each worker serves its own sessions throughout, a cross-worker answer gets 503 +
  Retry-After while Redis is down, and is forwarded again once it is back.

haproxy and redis-server are Debian packages; without them the tests are skipped when run by hand,
and fail under the test command (``tests/required.py``).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp_http import POST_HEADERS, VERSION, DemoServer, MCPClient, fetch_stats, http_client, serve_demo
from tests.required import missing

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "docs" / "deploy" / "haproxy-workers.cfg"
CONFORMANCE = ROOT / "scripts" / "conformance.sh"
STARTUP = 10.0
EXPIRY = 12.0
"""A killed worker's sessions must be adopted this soon (heartbeat TTL 5 s, HAProxy's check 2 x 1 s)."""
RESUME = 10.0
"""Cross-worker forwarding must be back this soon after Redis is (the bus retries every 2 s at most)."""
SECRET = base64.b64encode(b"k" * 32).decode()
SUMMARY = re.compile(
    r"conformance (?P<version>\S+): (?P<clean>\d+)/(?P<total>\d+) scenarios clean; "
    r"checks ok=(?P<ok>\d+) failed=(?P<failed>\d+) warnings=(?P<warnings>\d+)"
)


def need(what: str, found: object) -> None:
    if not found:
        missing(f"{what} is missing (scripts/test.sh installs Debian's haproxy and redis-server)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def redis_ping(port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return False
    async with stream:
        await stream.send_all(b"*1\r\n$4\r\nPING\r\n")
        with trio.move_on_after(1):
            return (await stream.receive_some(64)).startswith(b"+PONG")
    return False


class Redis:
    """redis-server on 127.0.0.1 without persistence; can be killed and started again on its port."""

    def __init__(self, directory: Path) -> None:
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.directory = directory
        self.port = free_port()
        self.process: trio.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    async def start(self) -> None:
        argv = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.process = await trio.lowlevel.open_process(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.directory
        )
        with trio.move_on_after(STARTUP):
            while not await redis_ping(self.port):  # noqa: ASYNC110 - polls a socket, no event
                await trio.sleep(0.05)
            return
        raise AssertionError("redis-server did not start")

    async def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self.process.wait()
            self.process = None


@dataclass
class Cluster:
    redis: Redis
    workers: dict[str, DemoServer]
    url: str
    """HAProxy's MCP endpoint."""
    http: httpx.AsyncClient


@asynccontextmanager
async def haproxy(port: int, a: DemoServer, b: DemoServer, log: Path) -> AsyncIterator[str]:
    env = {
        **os.environ,
        "MCP_BIND": f"127.0.0.1:{port}",
        "WORKER_A": f"127.0.0.1:{a.port}",
        "WORKER_B": f"127.0.0.1:{b.port}",
    }
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    with log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [binary, "-db", "-f", str(CONFIG)], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        with trio.fail_after(STARTUP):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    await stream.aclose()
                    break
                except OSError:
                    if process.returncode is not None:
                        break
                    await trio.sleep(0.05)
        assert process.returncode is None, f"haproxy exited: {log.read_bytes()[-2000:]!r}"  # noqa: ASYNC240
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await process.wait()
        if process.returncode is None:
            process.kill()


@asynccontextmanager
async def cluster(tmp_path: Path, *, measure_coverage: bool = True) -> AsyncIterator[Cluster]:
    """Redis, two workers and HAProxy (``measure_coverage=False``: the workers measure no coverage
    under ``coverage run``, see ``mcp_http.serve_demo``)."""
    if importlib.util.find_spec("coredis") is None:  # a dev dependency: a broken install, whoever runs this
        raise ImportError("coredis is not installed: pip install -e . --group dev (or the redis extra)")
    need("haproxy", shutil.which("haproxy") or os.access("/usr/sbin/haproxy", os.X_OK))
    need("redis-server", shutil.which("redis-server") or os.access("/usr/bin/redis-server", os.X_OK))
    redis = Redis(tmp_path)
    os.environ["MCP_TRIO_REQUEST_STATE_SECRET"] = SECRET  # the workers inherit it (a shared key ring)
    try:
        async with AsyncExitStack() as stack:
            stack.push_async_callback(redis.kill)
            await redis.start()
            workers = {
                name: await stack.enter_async_context(
                    serve_demo("--worker-id", name, "--redis", redis.url, measure_coverage=measure_coverage)
                )
                for name in ("a", "b")
            }
            url = await stack.enter_async_context(
                haproxy(free_port(), workers["a"], workers["b"], tmp_path / "haproxy.log")
            )
            http = await stack.enter_async_context(http_client())
            for worker in workers.values():  # both connected to Redis (heartbeat set)
                with trio.fail_after(STARTUP):
                    while (await fetch_stats(worker))["notification_bus"]["state"] != "connected":  # noqa: ASYNC110
                        await trio.sleep(0.05)
            yield Cluster(redis, workers, url, http)
    finally:
        os.environ.pop("MCP_TRIO_REQUEST_STATE_SECRET", None)


def owner_of(client: MCPClient) -> str:
    assert client.session_id is not None
    return client.session_id.split(".", 1)[0]


async def sessions_on_both(c: Cluster) -> dict[str, MCPClient]:
    """One initialized session per worker, created through HAProxy (round robin)."""
    found: dict[str, MCPClient] = {}
    with trio.fail_after(10):
        while len(found) < 2:
            client = MCPClient(c.http, c.url)
            params = {
                "protocolVersion": VERSION,
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "t", "version": "1"},
            }
            await client.request("initialize", params)
            await client.initialized()
            found.setdefault(owner_of(client), client)
    return found


async def answer_post(c: Cluster, client: MCPClient, worker: str, message: dict[str, Any]) -> httpx.Response:
    """POST ``message`` with ``client``'s session straight to ``worker`` (not through HAProxy)."""
    return await c.http.post(
        c.workers[worker].url, content=json.dumps(message).encode(), headers=client.headers(**POST_HEADERS)
    )


async def elicit_answered_elsewhere(c: Cluster, client: MCPClient) -> None:
    """A tool call through HAProxy whose elicitation is answered by a POST to the other worker."""
    other = "b" if owner_of(client) == "a" else "a"
    stream = await client.start_tool_call("test_elicitation", {"message": "who?"})
    try:
        with trio.fail_after(10):
            ask = await stream.next_message()
            assert ask is not None and ask["method"] == "elicitation/create", ask
            content = {"username": "u", "email": "u@example.com"}
            answer = {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": content}}
            response = await answer_post(c, client, other, answer)
            assert response.status_code == 202, (response.status_code, response.text)
            done = await stream.next_message()
        assert done is not None and "result" in done, done
        assert "action=accept" in done["result"]["content"][0]["text"], done
    finally:
        await stream.aclose()


async def test_a_session_through_haproxy_answered_on_the_other_worker(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        sessions = await sessions_on_both(c)
        for name, client in sessions.items():
            assert await client.echo(f"hi {name}") == f"hi {name}"
            get = await client.open_get()
            await elicit_answered_elsewhere(c, client)
            # a request for a session of another worker, sent there: 503 + Retry-After (not forwarded)
            other = "b" if name == "a" else "a"
            ping = {"jsonrpc": "2.0", "id": 99, "method": "ping"}
            response = await answer_post(c, client, other, ping)
            assert response.status_code == 503 and response.headers["retry-after"] == "1", response.text
            await client.delete()
            with trio.fail_after(5):
                await get.rest()  # the GET stream ends with the session
            assert get.ended
            await get.aclose()
            assert await client.status_of("DELETE") == 404
        stats = {name: (await fetch_stats(w))["notification_bus"] for name, w in c.workers.items()}
        assert stats["a"]["forwarded"] == 1 and stats["b"]["forwarded"] == 1, stats
        assert stats["a"]["inbox_delivered"] == 1 and stats["b"]["inbox_delivered"] == 1, stats


@pytest.mark.deadline(300)
async def test_conformance_through_haproxy(tmp_path: Path) -> None:
    installed = (ROOT / ".node22").is_dir() and (ROOT / ".conformance").is_dir() and shutil.which("npm")
    need("the conformance suite (scripts/conformance.sh install)", installed)
    async with cluster(tmp_path) as c:
        runs = [
            (["--version", "0.2.0-alpha.12"], 33),
            (["--version", "0.2.0-alpha.12", "--spec-version", "2026-07-28"], 40),
            # every scenario, the tasks extension's too: a task runs on one worker and is polled,
            # answered and cancelled through HAProxy on either (a RedisTaskStore, set up by --redis)
            (["--version", "0.2.0-alpha.12", "--every-spec-version"], 65),
        ]
        for extra, expected in runs:
            result = await trio.run_process(
                ["bash", str(CONFORMANCE), "server", c.url, *extra],
                capture_stdout=True,
                stderr=subprocess.STDOUT,
                check=False,
            )
            output = result.stdout.decode(errors="replace")
            tail = output[-4000:]
            (found,) = list(SUMMARY.finditer(output)) or [None]
            assert found is not None, tail
            assert int(found["total"]) == expected and found["clean"] == found["total"], tail
            assert found["failed"] == "0" and found["warnings"] == "0", tail
            assert result.returncode == 0, tail
        created = [(await fetch_stats(w))["sessions_created"] for w in c.workers.values()]
        assert all(n > 0 for n in created), created  # round robin reached both workers


async def test_a_killed_worker_s_session_is_adopted_then_deleted(tmp_path: Path) -> None:
    """SIGKILL: the other worker answers 503 while the dead one's heartbeat lives, then adopts its
    sessions (tests/integration/test_deploy_handover.py has the whole story): here a DELETE ends one,
    after which it is 404 everywhere and nothing is forwarded for it."""
    async with cluster(tmp_path) as c:
        sessions = await sessions_on_both(c)
        victim = c.workers["a"]
        victim.stopped = True  # serve_demo does not expect a clean exit
        victim.process.kill()
        with trio.fail_after(5):
            await victim.process.wait()
        start = trio.current_time()
        with trio.fail_after(EXPIRY):
            while (status := await sessions["a"].status_of("DELETE")) != 200:
                assert status == 503, status  # b: "the owner is alive, retry" until its heartbeat expires
                await trio.sleep(0.2)
        assert trio.current_time() - start < EXPIRY
        assert await sessions["a"].status_of("DELETE") == 404
        ping = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        response = await answer_post(c, sessions["a"], "b", ping)
        assert response.status_code == 404  # deleted: nothing to adopt, nothing forwarded
        assert await sessions["b"].echo("still here") == "still here"
        stats = (await fetch_stats(c.workers["b"]))["notification_bus"]
        assert stats["adopted"] == 1 and stats["forwarded"] == 0, stats


async def test_redis_restarted_under_the_workers(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        sessions = await sessions_on_both(c)
        await c.redis.kill()
        for worker in c.workers.values():
            with trio.fail_after(10):
                while (await fetch_stats(worker))["notification_bus"]["state"] == "connected":  # noqa: ASYNC110
                    await trio.sleep(0.05)
        for name, client in sessions.items():
            assert await client.echo(name) == name  # each worker serves its own sessions
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
        response = await answer_post(c, sessions["a"], "b", cancel)
        assert response.status_code == 503 and response.headers["retry-after"] == "1", response.text
        await c.redis.start()
        with trio.fail_after(RESUME):
            while (await answer_post(c, sessions["a"], "b", cancel)).status_code != 202:  # noqa: ASYNC110
                await trio.sleep(0.1)
        for client in sessions.values():
            await elicit_answered_elsewhere(c, client)
