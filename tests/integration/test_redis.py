"""Workers sharing notifications through a real Redis: :class:`mcp_trio.redis.RedisNotificationBus`.

Two apps in one process, then two ``mcp-trio demo --redis URL --worker-id a|b`` processes: a list
change on one worker reaches the 2025 sessions and 2026 ``subscriptions/listen`` streams of the other,
once; Redis killed and started again on the same port mid-test (local delivery goes on, no worker
fails, open streams stay open, cross-worker delivery resumes within seconds); a malformed message
published by hand is dropped with a log line, and so is one not signed by the cluster's key ring.

Then what workers write to Redis: a flood of client answers for made-up sessions of a live worker is
404 with nothing kept in Redis; inbox entries and bus messages written straight into Redis without
the key ring are not delivered; a real forwarded answer is delivered and then gone from Redis; and a
deployment with OAuth forwards an answer from the session's owner (and 404 from anyone else).

redis-server comes from Debian (the ``redis-server`` package; scripts/test.sh installs it).  Without
it the tests are skipped when run by hand, and fail under the test command (``tests/required.py``).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import logging
import os
import shutil
import socket
import subprocess
import time
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

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio._protocol.cluster import ClusterKeys, encode_inbox_entry, seal_bus_message
from mcp_trio._transport.forwarding import RELEASE_BODY
from mcp_trio.auth import AccessToken, InvalidToken, ProtectedResource
from mcp_trio.demo import build_demo_server
from mcp_trio.redis import RedisNotificationBus  # imports coredis only once a bus is made
from mcp_trio.testing import open_asgi_client

if importlib.util.find_spec("coredis") is None:  # a dev dependency: a broken install, whoever runs this
    raise ImportError("coredis is not installed: pip install -e . --group dev (or the redis extra)")

STARTUP = 10.0
RESUME = 8.0
"""Cross-worker delivery must be back this soon after Redis is (the bus retries every 2 s at most)."""
QUIET = 0.5
"""How long a stream is watched to see that nothing arrives."""
TOOLS = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
TOOLS_MESSAGE = json.dumps({"v": 1, "from": "intruder", "message": TOOLS}).encode()
"""A well-formed bus message (what a worker signs and publishes)."""
OTHER_KEYS = ClusterKeys([b"a key that is not the cluster's!"])
V2026 = "2026-07-28"
INFO = {"name": "t", "version": "1"}


SECRET = base64.b64encode(b"test cluster key ring, 32 bytes!").decode()
"""The workers' shared key ring (``MCP_TRIO_REQUEST_STATE_SECRET``)."""


@pytest.fixture(autouse=True)
def key_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bus of this module (and every demo worker, which inherits it) shares the key ring."""
    monkeypatch.setenv("MCP_TRIO_REQUEST_STATE_SECRET", SECRET)


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
        keys = ClusterKeys.of(None)
        with caplog.at_level(logging.WARNING, logger="mcp_trio.redis"):
            call = b'{"v": 1, "from": "x", "message": {"method": "tools/call"}}'
            for garbage in (b"not json", call, b"\xff"):  # signed, but not a notification of the bus
                sealed = seal_bus_message(keys, channel, garbage, time.time())
                assert await redis.publish(channel, sealed) == 2
            await eventually(lambda: bus_of(b).statistics()["malformed"] == 3, 5, "all three dropped")
            for unsigned in (
                call,
                TOOLS_MESSAGE,
                seal_bus_message(OTHER_KEYS, channel, TOOLS_MESSAGE, time.time()),
            ):
                assert await redis.publish(channel, unsigned) == 2
            await eventually(lambda: bus_of(b).statistics()["forged"] == 3, 5, "the unsigned ones dropped")
        dropped = [r for r in caplog.records if "dropped a" in r.getMessage()]
        assert len(dropped) == 2, "one line per bus (the others within 10 s are counted)"
        assert "dropped a malformed message" in dropped[0].getMessage()
        assert peer.got == []
        assert bus_of(b).statistics()["received"] == 0
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
            await wait_for(worker_b, lambda s: s["notification_bus"]["forged"] == 1, 5, "dropped")
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
        assert "dropped an unauthenticated message" in worker_b.log()


# -- what workers write to Redis: nothing anonymous, nothing kept, nothing forged ----------------


async def call(port: int, *args: bytes | str) -> Any:
    """One Redis command over a plain socket; its reply parsed (RESP 2: integers, strings, arrays)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        parts = [a.encode() if isinstance(a, str) else a for a in args]
        await stream.send_all(
            b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in parts)
        )
        buffer = bytearray()

        async def need(n: int) -> None:
            while len(buffer) < n:
                chunk = await stream.receive_some(65536)
                assert chunk, "Redis closed the connection"
                buffer.extend(chunk)

        async def line() -> bytes:
            while b"\r\n" not in buffer:
                await need(len(buffer) + 1)
            found, _, rest = bytes(buffer).partition(b"\r\n")
            buffer[:] = rest
            return found

        async def reply() -> Any:
            head = await line()
            kind, rest = head[:1], head[1:]
            if kind == b"+":
                return rest.decode()
            if kind == b"-":
                raise AssertionError(f"Redis: {rest.decode()}")
            if kind == b":":
                return int(rest)
            if kind == b"$":
                size = int(rest)
                if size < 0:
                    return None
                await need(size + 2)
                value = bytes(buffer[:size])
                buffer[:] = buffer[size + 2 :]
                return value
            assert kind == b"*", head
            return [await reply() for _ in range(int(rest))]

        return await reply()


async def used_memory(port: int) -> int:
    info: bytes = await call(port, "INFO", "memory")
    for entry in info.decode().splitlines():
        if entry.startswith("used_memory:"):
            return int(entry.partition(":")[2])
    raise AssertionError(info)


def padded_answer(size: int) -> bytes:
    """A client's answer to a server request, of about ``size`` bytes."""
    return json.dumps({"jsonrpc": "2.0", "id": "s-1", "result": {"pad": "x" * size}}).encode()


async def sessions_in_redis(port: int, worker: str, count: int) -> None:
    """Wait until ``worker``'s session hash in Redis holds ``count`` sessions (written right after a
    session is made or ends)."""
    with trio.fail_after(5):
        while await call(port, "HLEN", f"mcp-trio:sessions:{worker}") != count:  # noqa: ASYNC110 - polls Redis
            await trio.sleep(0.01)


def legacy_headers(session_id: str) -> dict[str, str]:
    return {**POST_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}


async def initialized_session(asgi: Any) -> str:
    """A 2025 session made by ``initialize`` through an in-process client; its id."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO},
    }
    response = await asgi.request("POST", headers=POST_HEADERS, body=json.dumps(init).encode())
    assert response.status == 200, await response.read()
    await response.read()
    session_id: str = response.headers["mcp-session-id"]
    return session_id


async def test_a_flood_of_answers_for_made_up_sessions_leaves_redis_flat(
    redis: RedisServer, linux: None
) -> None:
    flags = ("--redis", redis.url)
    async with (
        serve_demo(*flags, "--worker-id", "a") as worker_a,
        serve_demo(*flags, "--worker-id", "b") as worker_b,
        http_client() as http,
    ):
        for worker_ in (worker_a, worker_b):
            await wait_for(worker_, lambda s: bus_state(s) == "connected", STARTUP, "bus connected")
        assert await call(redis.port, "EXISTS", "mcp-trio:worker:a") == 1  # a is alive
        before = await used_memory(redis.port)
        body = padded_answer(1024 * 1024)
        for n in range(40):
            response = await http.post(worker_b.url, content=body, headers=legacy_headers(f"a.made-up-{n}"))
            assert response.status_code == 404, (response.status_code, response.text)
            assert response.json()["error"]["message"] == "Not Found: unknown or terminated session"
        after = await used_memory(redis.port)
        assert await call(redis.port, "EXISTS", "mcp-trio:inbox:a", "mcp-trio:inbox-bytes:a") == 0
        assert after - before < 256 * 1024, (before, after)  # nothing of 40 MB was kept, nor sent
        stats = (await fetch_stats(worker_b))["notification_bus"]
        # 404 from the session records (no record: nothing to adopt, nothing to forward)
        assert stats["adopt_unknown"] == 40 and stats["forwarded"] == 0, stats
        # nor is there anything to send elsewhere for a request, a GET or a DELETE: 404, not 503
        made_up = legacy_headers("a.made-up")
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        assert (await http.post(worker_b.url, content=ping, headers=made_up)).status_code == 404
        get = {**made_up, "accept": "text/event-stream"}
        assert (await http.get(worker_b.url, headers=get)).status_code == 404
        assert (await http.delete(worker_b.url, headers=made_up)).status_code == 404
        assert (await fetch_stats(worker_a))["notification_bus"]["inbox_received"] == 0


async def test_forged_messages_are_not_delivered_and_a_real_answer_is_then_gone(
    redis: RedisServer, linux: None
) -> None:
    flags = ("--redis", redis.url)
    async with (
        serve_demo(*flags, "--worker-id", "a") as worker_a,
        serve_demo(*flags, "--worker-id", "b") as worker_b,
        http_client() as http,
    ):
        for worker_ in (worker_a, worker_b):
            await wait_for(worker_, lambda s: bus_state(s) == "connected", STARTUP, "bus connected")
        client = MCPClient(http, worker_a.url)
        params = {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": INFO}
        await client.request("initialize", params)
        await client.initialized()
        session_id = client.session_id
        assert session_id is not None and session_id.startswith("a.")
        await sessions_in_redis(redis.port, "a", 1)
        recorded = await call(redis.port, "HGETALL", "mcp-trio:sessions:a")
        assert len(recorded) == 2 and session_id.encode() not in b"".join(recorded)  # a keyed hash only
        stream = await client.start_tool_call("test_elicitation", {"message": "who?"})
        try:
            with trio.fail_after(10):
                ask = await stream.next_message()
            assert ask is not None and ask["method"] == "elicitation/create", ask
            content = {"username": "u", "email": "u@example.com"}
            answer = {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": content}}
            data = json.dumps(answer).encode()

            # Written straight into Redis by something without the key ring: never delivered.
            keys = ClusterKeys.of(None)
            principal = keys.tag(b"principal", b"none")
            unsigned = ["v", "1", "session", session_id, "body", data]
            other = encode_inbox_entry(OTHER_KEYS, "a", session_id, data, principal, time.time())
            tampered = {
                **encode_inbox_entry(
                    keys, "a", session_id, b'{"jsonrpc":"2.0","method":"x"}', principal, time.time()
                ),
                "body": data,
            }
            for fields in (
                unsigned,
                [x for kv in other.items() for x in kv],
                [x for kv in tampered.items() for x in kv],
            ):
                await call(redis.port, "XADD", "mcp-trio:inbox:a", "*", *fields)
            await call(
                redis.port,
                "PUBLISH",
                "mcp-trio:notifications",
                seal_bus_message(OTHER_KEYS, "mcp-trio:notifications", TOOLS_MESSAGE, time.time()),
            )
            stats = await wait_for(
                worker_a, lambda s: s["notification_bus"]["inbox_forged"] == 3, 5, "dropped"
            )
            assert stats["notification_bus"]["inbox_delivered"] == 0
            await wait_for(worker_a, lambda s: s["notification_bus"]["forged"] == 1, 5, "bus forgery dropped")
            assert await call(redis.port, "EXISTS", "mcp-trio:inbox:a") == 0  # read, dropped, deleted

            # The client's real answer, sent to the other worker: forwarded, delivered, then gone.
            response = await http.post(worker_b.url, content=data, headers=client.headers(**POST_HEADERS))
            assert response.status_code == 202, (response.status_code, response.text)
            with trio.fail_after(10):
                done = await stream.next_message()
            assert done is not None and "action=accept" in done["result"]["content"][0]["text"], done
        finally:
            await stream.aclose()
        stats = await wait_for(
            worker_a, lambda s: s["notification_bus"]["inbox_delivered"] == 1, 5, "delivered"
        )
        assert await call(redis.port, "EXISTS", "mcp-trio:inbox:a", "mcp-trio:inbox-bytes:a") == 0
        response = await http.delete(worker_a.url, headers=client.headers())
        assert response.status_code == 200
        await sessions_in_redis(redis.port, "a", 0)
        response = await http.post(worker_b.url, content=data, headers=client.headers(**POST_HEADERS))
        assert response.status_code == 404  # the session is gone: nothing forwarded
        for worker_ in (worker_a, worker_b):
            await worker_.stop()
            assert "Traceback" not in worker_.log()
        assert "dropped an unauthenticated inbox entry" in worker_a.log()


class Verifier:
    """Bearer tokens named after their owner (``alice``, ``alice-2``: the same owner, ``bob``)."""

    async def verify(self, token: str) -> AccessToken:
        subject = token.partition("-")[0]
        if subject not in ("alice", "bob"):
            raise InvalidToken("unknown token")
        return AccessToken(
            token=token, subject=subject, scopes=frozenset({"mcp"}), client_id="c1", issuer=ISSUER
        )


ISSUER = "https://as.example.com"


def protected_worker(url: str, name: str) -> MCPApp:
    server = build_demo_server()
    server.notifications = RedisNotificationBus(url, retry_initial=0.05, retry_max=0.5)
    oauth = ProtectedResource(
        resource="http://127.0.0.1/mcp",
        authorization_servers=[ISSUER],
        verifier=Verifier(),
        scopes_supported=["mcp"],
        required_scopes=["mcp"],
    )
    return MCPApp(server, ServerConfig(worker_id=name, oauth=oauth))


async def test_an_authenticated_deployment_forwards_the_owner_s_answers(redis: RedisServer) -> None:
    app_a, app_b = protected_worker(redis.url, "a"), protected_worker(redis.url, "b")
    bus_a, bus_b = bus_of(app_a.server), bus_of(app_b.server)
    async with open_asgi_client(app_a) as on_a, open_asgi_client(app_b) as on_b:
        await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "connected")
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO},
        }
        response = await on_a.request(
            "POST", headers={**POST_HEADERS, "authorization": "Bearer alice"}, body=json.dumps(init).encode()
        )
        assert response.status == 200, await response.read()
        session_id = response.headers["mcp-session-id"]
        answer = padded_answer(10)
        headers = legacy_headers(session_id)
        await sessions_in_redis(redis.port, "a", 1)
        response = await on_b.request(
            "POST", headers={**headers, "authorization": "Bearer alice-2"}, body=answer
        )
        assert response.status == 202, await response.read()  # the owner's (refreshed) token
        await eventually(lambda: bus_a.statistics()["inbox_delivered"] == 1, 5, "delivered")
        for token, status in (("bob", 404), (None, 401)):
            auth = {"authorization": f"Bearer {token}"} if token else {}
            response = await on_b.request("POST", headers={**headers, **auth}, body=answer)
            assert response.status == status, await response.read()
        stats_b = bus_b.statistics()  # bob's answer: 404 from the session's record, before forwarding
        assert (stats_b["forwarded"], stats_b["forward_unknown"]) == (1, 0), stats_b
        assert bus_a.statistics()["inbox_received"] == 1
        assert await call(redis.port, "EXISTS", "mcp-trio:inbox:a") == 0
        # the sessions hash names no token, subject or session id
        recorded = b"".join(await call(redis.port, "HGETALL", "mcp-trio:sessions:a"))
        # nor do the session's record and lease (their keys are a keyed hash of the session id)
        for key in await call(redis.port, "KEYS", "mcp-trio:*"):
            assert session_id.encode() not in key, key
            if key.startswith((b"mcp-trio:session:", b"mcp-trio:lease:")):
                recorded += key + await call(redis.port, "GET", key)
        assert b"mcp-trio:session:" in recorded and b"mcp-trio:lease:" in recorded
        for secret in (b"alice", session_id.encode()):
            assert secret not in recorded


async def test_an_inbox_nobody_reads_is_bounded_and_expires(redis: RedisServer) -> None:
    """A worker that beats but does not read (its inbox stays as written): entries past the inbox's
    count or bytes are refused, and what is there expires; a session it does not have, or another
    principal's, gets nothing written."""
    server, bus = worker(redis.url)
    link = bus.worker_link
    link.inbox_maxlen = 3
    async with MCPApp(server, ServerConfig(worker_id="b")).running():
        await eventually(lambda: bus.state == "connected", STARTUP, "connected")
        keys = ClusterKeys.of(None)
        await call(redis.port, "SET", "mcp-trio:worker:ghost", "x", "PX", "60000")
        session_tag = keys.tag(b"session", b"ghost.s1")
        await call(
            redis.port, "HSET", "mcp-trio:sessions:ghost", session_tag, keys.tag(b"principal", b"none")
        )
        small = padded_answer(100)
        assert await link.forward_to_worker("ghost", "ghost.other", small, b"none") == "unknown"
        assert await link.forward_to_worker("ghost", "ghost.s1", small, b"str:bob") == "unknown"
        assert await link.forward_to_worker("nobody", "nobody.s1", small, b"none") == "gone"
        assert await call(redis.port, "EXISTS", "mcp-trio:inbox:ghost") == 0
        outcomes = [await link.forward_to_worker("ghost", "ghost.s1", small, b"none") for _ in range(4)]
        assert outcomes == ["sent", "sent", "sent", "full"]
        assert await call(redis.port, "XLEN", "mcp-trio:inbox:ghost") == 3
        assert int(await call(redis.port, "GET", "mcp-trio:inbox-bytes:ghost")) == 3 * len(small)
        for key in ("mcp-trio:inbox:ghost", "mcp-trio:inbox-bytes:ghost"):
            assert 0 < await call(redis.port, "PTTL", key) <= link.inbox_ttl * 1000
        await call(redis.port, "DEL", "mcp-trio:inbox:ghost", "mcp-trio:inbox-bytes:ghost")
        big = padded_answer(1536 * 1024)
        link.inbox_maxlen, link.inbox_max_bytes = 100, 4 * 1024 * 1024
        outcomes = [await link.forward_to_worker("ghost", "ghost.s1", big, b"none") for _ in range(3)]
        assert outcomes == ["sent", "sent", "full"]  # 4 MiB hold two of 1.5 MiB
        stats = bus.statistics()
        assert (stats["forwarded"], stats["forward_full"], stats["forward_unknown"]) == (5, 2, 2), stats


async def test_a_handed_over_session_keeps_its_subscriptions(redis: RedisServer) -> None:
    """A session subscribed to a resource on worker a, handed over when a drains (``app.aclose()``),
    is adopted by b with its subscription: b's update of that resource reaches the session's GET stream
    there, an update of another resource does not."""
    apps = {}
    for name in ("a", "b"):
        server, _ = worker(redis.url)
        apps[name] = MCPApp(server, ServerConfig(worker_id=name, drain_delay=0))
    bus_a, bus_b = bus_of(apps["a"].server), bus_of(apps["b"].server)
    async with open_asgi_client(apps["b"]) as on_b:
        async with open_asgi_client(apps["a"]) as on_a:
            await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "connected")
            session_id = await initialized_session(on_a)
            headers = legacy_headers(session_id)
            for message in (
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "resources/subscribe",
                    "params": {"uri": "test://watched-resource"},
                },
            ):
                response = await on_a.request("POST", headers=headers, body=json.dumps(message).encode())
                assert response.status in (200, 202), await response.read()
                await response.read()
            await eventually(lambda: bus_a.statistics()["sessions_recorded"] == 1, 5, "recorded")
            with trio.fail_after(10):
                await apps["a"].aclose()  # drains: hands the session over
            assert bus_a.statistics()["released"] == 1
        get_headers = {**headers, "accept": "text/event-stream"}
        stream = await on_b.request("GET", headers=get_headers)
        assert stream.status == 200
        await eventually(lambda: apps["b"].statistics()["sessions"] == 1, 5, "adopted")
        await apps["b"].server.notify_resource_updated("test://unwatched")
        await apps["b"].server.notify_resource_updated("test://watched-resource")
        with trio.fail_after(5):
            message = await stream.next_message()
        assert message is not None
        assert message["method"] == "notifications/resources/updated", message
        assert message["params"]["uri"] == "test://watched-resource"  # the other one was not sent
        await stream.aclose()
        assert bus_b.statistics()["adopted"] == 1


async def test_a_session_handed_over_follows_the_shutdown_rule(redis: RedisServer) -> None:
    """Worker a drains (``app.aclose()``) with two calls of a session in flight: the one shorter than
    the grace is answered as usual, the one longer is answered -32000 "Server shutting down" on its own
    stream once the grace has run out, a new request meanwhile gets 503 (the session is being handed
    over); then worker b adopts the session and serves it."""
    apps = {}
    for name in ("a", "b"):
        server, _ = worker(redis.url)
        apps[name] = MCPApp(server, ServerConfig(worker_id=name, drain_delay=0, shutdown_grace=0.5))
    bus_a, bus_b = bus_of(apps["a"].server), bus_of(apps["b"].server)
    answers: dict[str, list[dict[str, Any]]] = {}

    def call(request_id: int, seconds: float) -> bytes:
        params = {"name": "sleep", "arguments": {"seconds": seconds}}
        message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        return json.dumps(message).encode()

    async with open_asgi_client(apps["b"]) as on_b:
        async with open_asgi_client(apps["a"]) as on_a:
            await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "connected")
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO},
            }
            response = await on_a.request("POST", headers=POST_HEADERS, body=json.dumps(init).encode())
            assert response.status == 200, await response.read()
            await response.read()
            headers = legacy_headers(response.headers["mcp-session-id"])
            initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
            assert (await on_a.request("POST", headers=headers, body=initialized)).status == 202

            async def read_all(name: str, request_id: int, seconds: float) -> None:
                stream = await on_a.request("POST", headers=headers, body=call(request_id, seconds))
                assert stream.status == 200
                answers[name] = []
                while (message := await stream.next_message()) is not None:
                    answers[name].append(message)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_all, "long", 2, 60)
                    nursery.start_soon(read_all, "short", 3, 0.2)
                    await eventually(lambda: apps["a"].statistics()["inflight"] == 2, 5, "in flight")
                    nursery.start_soon(apps["a"].aclose)  # drains: hands the session over
                    await eventually(lambda: apps["a"]._manager.refusing, 5, "draining")
                    refused = await on_a.request("POST", headers=headers, body=call(4, 0))
                    assert refused.status == 503 and refused.headers["retry-after"] == "1"
                    await refused.read()
            assert bus_a.statistics()["released"] == 1
        assert answers["short"][-1]["result"]["content"][0]["text"] == "slept 0.2s", answers
        error = {"code": -32000, "message": "Server shutting down"}
        assert answers["long"] == [{"jsonrpc": "2.0", "id": 2, "error": error}], answers
        with trio.fail_after(10):
            answer = await on_b.request("POST", headers=headers, body=call(5, 0))
            assert answer.status == 200
            message = await answer.next_message()
        assert message is not None and "result" in message, message
        assert bus_b.statistics()["adopted"] == 1


async def test_a_client_cannot_ask_for_its_session_to_be_handed_over(redis: RedisServer) -> None:
    """The bytes a session's home puts in an owner's inbox to have the session handed back, POSTed by a
    client: another worker does not forward them (404), the owner ignores them as an unknown
    notification, and the session stays where it is."""
    apps = {name: MCPApp(worker(redis.url)[0], ServerConfig(worker_id=name)) for name in ("a", "b")}
    bus_a, bus_b = bus_of(apps["a"].server), bus_of(apps["b"].server)
    async with open_asgi_client(apps["a"]) as on_a, open_asgi_client(apps["b"]) as on_b:
        await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "connected")
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO},
        }
        response = await on_a.request("POST", headers=POST_HEADERS, body=json.dumps(init).encode())
        assert response.status == 200, await response.read()
        await response.read()
        headers = legacy_headers(response.headers["mcp-session-id"])
        response = await on_b.request("POST", headers=headers, body=RELEASE_BODY)
        assert response.status == 404, await response.read()
        response = await on_a.request("POST", headers=headers, body=RELEASE_BODY)
        assert response.status == 202, await response.read()
        await trio.sleep(0.3)
        assert bus_a.statistics()["released"] == 0 and bus_a.statistics()["inbox_received"] == 0
        assert apps["a"].statistics()["sessions"] == 1
        ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode()
        response = await on_a.request("POST", headers=headers, body=ping)
        assert response.status == 200, await response.read()
        await response.read()


async def test_a_session_ended_on_its_worker_is_not_adopted_back(redis: RedisServer) -> None:
    """A session that ends on its worker (DELETE) leaves its record and lease in Redis until the
    worker's writer removes them, soon after: meanwhile the worker's own lease does not make it a
    session to adopt (a request right after the DELETE got it back, alive).  Redis itself is asked."""
    server, bus = worker(redis.url)
    app = MCPApp(server, ServerConfig(worker_id="a"))
    async with open_asgi_client(app) as asgi:
        await eventually(lambda: bus.state == "connected", STARTUP, "connected")
        session_id = await initialized_session(asgi)
        assert bus.statistics()["sessions_recorded"] == 1  # written before the answer
        assert len(await call(redis.port, "KEYS", "mcp-trio:lease:*")) == 1
        leases = bus.session_leases
        assert (await leases.peek_session(session_id)).state == "unknown"  # its own: nothing to adopt
        leases.session_dropped(session_id)  # what its end tells the link, before the writer runs
        peek = await leases.peek_session(session_id)
        assert peek.state == "unknown" and peek.record is None, peek
        response = await asgi.request("DELETE", headers=legacy_headers(session_id))
        assert response.status == 200, await response.read()
        ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode()
        response = await asgi.request("POST", headers=legacy_headers(session_id), body=ping)
        assert response.status == 404, await response.read()
        await eventually(lambda: not bus.session_leases._ended, 5, "its keys removed from Redis")
        assert await call(redis.port, "KEYS", "mcp-trio:session:*") == []
        assert await call(redis.port, "KEYS", "mcp-trio:lease:*") == []
        stats = bus.statistics()
        assert stats["adopted"] == 0 and stats["adopt_unknown"] == 3, stats
