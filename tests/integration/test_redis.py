"""Workers sharing notifications through a real Redis: :class:`mcp_trio.redis.RedisNotificationBus`.

Two apps in one process, then two ``mcp-trio demo --redis URL --worker-id a|b`` processes: a list
change on one worker reaches the 2025 sessions and 2026 ``subscriptions/listen`` streams of the other,
once; Redis killed and started again on the same port mid-test (local delivery goes on, no worker
fails, open streams stay open, cross-worker delivery resumes within seconds); a malformed message
published by hand is dropped with a log line.

redis-server comes from Debian (the ``redis-server`` package; scripts/test.sh installs it).  Without
it the tests are skipped when run by hand, and fail under the test command (``tests/required.py``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp_http import (
    POST_HEADERS,
    MCPClient,
    SSEResponse,
    fetch_stats,
    http_client,
    serve_demo,
    wait_for,
)
from tests.required import missing

from mcp_trio import MCPApp, MCPServer
from mcp_trio.demo import build_demo_server
from mcp_trio.redis import RedisNotificationBus  # imports coredis only once a bus is made
from mcp_trio.testing import open_asgi_client

if importlib.util.find_spec("coredis") is None:  # a dev dependency: a broken install, whoever runs this
    raise ImportError("coredis is not installed: pip install -e '.[dev]' (or the redis extra)")

STARTUP = 10.0
RESUME = 8.0
"""Cross-worker delivery must be back this soon after Redis is (the bus retries every 2 s at most)."""
QUIET = 0.5
"""How long a stream is watched to see that nothing arrives."""
TOOLS = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
V2026 = "2026-07-28"
INFO = {"name": "t", "version": "1"}


def redis_binary() -> str:
    places = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")
    found = shutil.which("redis-server") or next((p for p in places if os.access(p, os.X_OK)), None)
    if found is None:
        missing("redis-server is not installed (scripts/test.sh installs Debian's redis-server)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def command(port: int, *args: bytes) -> bytes:
    """One Redis command over a plain socket (RESP), its raw reply's first line."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        request = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        await stream.send_all(request)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            reply += chunk
        return reply.strip()


class RedisServer:
    """``redis-server`` on 127.0.0.1:PORT without persistence, in a temporary directory; it can be
    killed and started again on the same port."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: trio.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    async def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        self.process = await trio.lowlevel.open_process(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.directory
        )
        with trio.move_on_after(STARTUP):
            while self.process.returncode is None:
                try:
                    if await command(self.port, b"PING") == b"+PONG":
                        return
                except OSError:
                    pass
                await trio.sleep(0.02)
        raise AssertionError(f"redis-server did not answer on port {self.port} within {STARTUP} s")

    async def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        with trio.move_on_after(5):
            await self.process.wait()
        self.process = None

    async def publish(self, channel: str, data: bytes) -> int:
        """PUBLISH by hand; the number of subscribers that got it."""
        reply = await command(self.port, b"PUBLISH", channel.encode(), data)
        assert reply.startswith(b":"), reply
        return int(reply[1:])


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    server = RedisServer(redis_binary(), tmp_path)
    await server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            with trio.CancelScope(shield=True):
                await server.kill()


def listen_body() -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientInfo": INFO,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": True}, "_meta": meta},
    }


async def eventually(predicate: Callable[[], bool], within: float, what: str) -> None:
    with trio.move_on_after(within):
        while not predicate():  # noqa: ASYNC110 - polls statistics, which have no event
            await trio.sleep(0.01)
        return
    raise AssertionError(f"{what}: not within {within} s")


# -- in process: two apps ------------------------------------------------------------------------


class Peer:
    """A bare bus subscriber: what it was handed."""

    def __init__(self, *uris: str) -> None:
        self.subscriptions = set(uris)
        self.got: list[dict[str, Any]] = []

    def notify_nowait(self, message: dict[str, Any]) -> None:
        self.got.append(message)


def worker(url: str) -> tuple[MCPServer, RedisNotificationBus]:
    bus = RedisNotificationBus(url, retry_initial=0.05, retry_max=0.5)
    server = build_demo_server()
    server.notifications = bus
    return server, bus


@asynccontextmanager
async def two_workers(url: str) -> AsyncIterator[tuple[MCPServer, MCPServer]]:
    (a, bus_a), (b, bus_b) = worker(url), worker(url)
    async with MCPApp(a).running(), MCPApp(b).running():
        await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "both connected")
        yield a, b


def bus_of(server: MCPServer) -> RedisNotificationBus:
    assert isinstance(server.notifications, RedisNotificationBus)
    return server.notifications


async def test_each_worker_delivers_each_notification_once(redis: RedisServer) -> None:
    async with two_workers(redis.url) as (a, b):
        peer_a, peer_b, watcher_b = Peer(), Peer(), Peer("test://watched-resource")
        a.notifications.subscribe(peer_a)
        b.notifications.subscribe(peer_b)
        b.notifications.subscribe(watcher_b)
        await a.notify_tools_changed()
        assert peer_a.got == [TOOLS]  # at once, without a round trip through Redis
        await eventually(lambda: len(peer_b.got) == 1, 5, "b got a's notification")
        await b.notify_resource_updated("test://watched-resource")
        await b.notify_resource_updated("test://other")
        updated = {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": "test://watched-resource"},
        }
        await eventually(lambda: bus_of(a).statistics()["received"] == 2, 5, "a got b's notifications")
        await trio.sleep(0.2)  # any echo or duplicate would have arrived by now
        assert peer_a.got == [TOOLS]  # a resource update goes only to subscribers of its URI
        assert peer_b.got == [TOOLS]
        assert watcher_b.got == [TOOLS, updated]
        stats_a, stats_b = bus_of(a).statistics(), bus_of(b).statistics()
        assert (stats_a["published"], stats_a["echoes"], stats_a["received"]) == (1, 1, 2)
        assert (stats_b["published"], stats_b["echoes"], stats_b["received"]) == (2, 2, 1)


async def test_sessions_and_listen_streams_of_the_other_worker(redis: RedisServer) -> None:
    (a, _), (b, _) = worker(redis.url), worker(redis.url)
    app_a, app_b = MCPApp(a), MCPApp(b)
    async with open_asgi_client(app_a), open_asgi_client(app_b) as asgi:
        await eventually(lambda: bus_of(a).state == bus_of(b).state == "connected", STARTUP, "connected")
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO},
        }
        response = await asgi.request("POST", headers=POST_HEADERS, body=json.dumps(init).encode())
        assert response.status == 200
        session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        await response.read()
        initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        response = await asgi.request("POST", headers={**POST_HEADERS, **session}, body=initialized)
        assert response.status == 202
        stream = await asgi.request("GET", headers={"accept": "text/event-stream", **session})
        await stream.next_event()  # priming
        headers = {**POST_HEADERS, "mcp-protocol-version": V2026, "mcp-method": "subscriptions/listen"}
        listen = await asgi.request("POST", headers=headers, body=json.dumps(listen_body()).encode())
        ack = await listen.next_message()
        assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged"
        await a.notify_tools_changed()
        with trio.fail_after(5):
            assert await stream.next_message() == TOOLS
            tagged = await listen.next_message()
        assert tagged is not None and tagged["method"] == TOOLS["method"]
        assert app_b.statistics()["notification_bus"]["received"] == 1
        await stream.aclose()
        await listen.aclose()


async def test_a_malformed_message_is_dropped_with_a_log_line(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with two_workers(redis.url) as (a, b):
        peer = Peer()
        b.notifications.subscribe(peer)
        channel = bus_of(b).channel
        with caplog.at_level(logging.WARNING, logger="mcp_trio.redis"):
            call = b'{"v": 1, "from": "x", "message": {"method": "tools/call"}}'
            for garbage in (b"not json", call, b"\xff"):
                assert await redis.publish(channel, garbage) == 2
            await eventually(lambda: bus_of(b).statistics()["malformed"] == 3, 5, "all three dropped")
        dropped = [r for r in caplog.records if "malformed" in r.getMessage()]
        assert len(dropped) == 2, "one line per bus (the others within 10 s are counted)"
        assert "dropped a malformed message" in dropped[0].getMessage()
        assert peer.got == []
        await a.notify_tools_changed()  # the bus goes on
        await eventually(lambda: peer.got == [TOOLS], 5, "a well-formed one after them")
        assert bus_of(b).state == "connected"


async def test_redis_restarted_under_two_workers(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="mcp_trio.redis"):
        async with two_workers(redis.url) as (a, b):
            peer_a, peer_b = Peer(), Peer()
            a.notifications.subscribe(peer_a)
            b.notifications.subscribe(peer_b)
            caplog.clear()
            await redis.kill()
            await eventually(lambda: bus_of(a).state == bus_of(b).state == "disconnected", 5, "noticed")
            await a.notify_tools_changed()
            assert peer_a.got == [TOOLS]  # local delivery goes on
            await trio.sleep(1.0)  # several retries
            assert peer_b.got == []
            assert bus_of(a).statistics()["local_only"] == 1
            await redis.start()
            await eventually(lambda: bus_of(a).state == bus_of(b).state == "connected", RESUME, "back")
            assert peer_b.got == []  # what was published while Redis was down is not sent late
            await a.notify_tools_changed()
            await eventually(lambda: len(peer_b.got) == 1, 5, "cross-worker delivery resumed")
            assert peer_a.got == [TOOLS, TOOLS]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        lost = [m for m in warnings if "lost its connection" in m]
        back = [m for m in warnings if "again after" in m]
        assert len(lost) == 2 and len(back) == 2, warnings  # once per bus, however many retries
        assert len(warnings) == 4, warnings
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # coredis's included


# -- two processes ------------------------------------------------------------------------------


async def open_listen(http: httpx.AsyncClient, url: str) -> SSEResponse:
    """A 2026 ``subscriptions/listen`` stream for tool list changes, its acknowledgement read."""
    body = listen_body()
    headers = {**POST_HEADERS, "mcp-protocol-version": V2026, "mcp-method": "subscriptions/listen"}
    request = http.build_request("POST", url, content=json.dumps(body).encode(), headers=headers)
    stream = SSEResponse(await http.send(request, stream=True))
    assert stream.status_code == 200, await stream.response.aread()
    ack = await stream.next_message()
    assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged", ack
    return stream


class Reader:
    """Reads an SSE stream in a task of its own, so that a test can wait for a message, or see that
    none comes, without cutting the stream (a cancelled read of an httpx body ends it)."""

    def __init__(self, stream: SSEResponse) -> None:
        self.stream = stream
        self._send, self._receive = trio.open_memory_channel[dict[str, Any]](100)
        self.ended = False

    async def run(self) -> None:
        while (message := await self.stream.next_message()) is not None:
            self._send.send_nowait(message)
        self.ended = True

    async def next(self, within: float = 5.0) -> dict[str, Any]:
        with trio.fail_after(within):
            return await self._receive.receive()

    async def quiet(self, within: float = QUIET) -> None:
        with trio.move_on_after(within):
            message = await self._receive.receive()
            raise AssertionError(f"unexpected {message}")


def bus_state(stats: dict[str, Any]) -> str:
    return str(stats.get("notification_bus", {}).get("state"))


async def test_two_demo_workers_share_list_changes_through_redis(redis: RedisServer, linux: None) -> None:
    flags = ("--redis", redis.url)
    async with (
        serve_demo(*flags, "--worker-id", "a") as worker_a,
        serve_demo(*flags, "--worker-id", "b") as worker_b,
        http_client() as http,
    ):
        async with trio.open_nursery() as readers:
            for worker_ in (worker_a, worker_b):
                await wait_for(worker_, lambda s: bus_state(s) == "connected", STARTUP, "bus connected")
            caller = MCPClient(http, worker_a.url)
            await caller.initialize()
            await caller.initialized()
            assert caller.session_id is not None and caller.session_id.startswith("a.")
            session = MCPClient(http, worker_b.url)
            await session.initialize()
            await session.initialized()
            assert session.session_id is not None and session.session_id.startswith("b.")
            streams = [await caller.open_get(), await session.open_get()]
            streams.append(await open_listen(http, worker_b.url))
            own, get_b, listen_b = (Reader(stream) for stream in streams)
            for reader in (own, get_b, listen_b):
                readers.start_soon(reader.run)

            async def trigger() -> None:
                result = await caller.call_tool("test_trigger_tool_change", {})
                assert result["content"][0]["text"] == "tools/list_changed sent"

            async def reaches_b() -> None:
                assert await get_b.next() == TOOLS
                tagged = await listen_b.next()
                assert tagged["method"] == TOOLS["method"], tagged
                assert tagged["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": 1}

            await trigger()
            assert await own.next() == TOOLS
            await reaches_b()
            await own.quiet()  # exactly once, on the publishing worker too
            await get_b.quiet(0)

            await redis.kill()
            for worker_ in (worker_a, worker_b):
                await wait_for(worker_, lambda s: bus_state(s) == "disconnected", 5, "outage noticed")
            await trigger()
            assert await own.next() == TOOLS  # local delivery goes on
            await get_b.quiet()
            await listen_b.quiet(0)

            await redis.start()
            for worker_ in (worker_a, worker_b):
                await wait_for(worker_, lambda s: bus_state(s) == "connected", RESUME, "reconnected")
            await trigger()
            assert await own.next() == TOOLS
            await reaches_b()  # on the same streams, open all along

            assert await redis.publish("mcp-trio:notifications", b'{"v": 1, "from": "forged"}') == 2
            await wait_for(worker_b, lambda s: s["notification_bus"]["malformed"] == 1, 5, "dropped")
            await get_b.quiet()
            stats_b = await fetch_stats(worker_b)
            assert stats_b["notification_bus"]["received"] == 2 and stats_b["listeners"] == 1
            assert not (own.ended or get_b.ended or listen_b.ended)
            readers.cancel_scope.cancel()
        for stream in streams:
            await stream.aclose()
        for worker_ in (worker_a, worker_b):
            await worker_.stop()  # exits by itself, status 0
            log = worker_.log()
            for part in ("notification bus", "task store"):  # each logs once per outage
                assert log.count(f"Redis {part} lost its connection") == 1, log
                assert log.count(f"Redis {part}: connected to") == 1, log
            assert "Traceback" not in log, log
        assert "dropped a malformed message" in worker_b.log()
