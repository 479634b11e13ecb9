"""2025 sessions that survive their worker: two ``mcp-trio demo --worker-id a|b --redis URL`` workers on
fixed ports behind a real HAProxy (docs/deploy/haproxy-workers.cfg) and a real redis-server.

- a rolling restart (SIGTERM one worker, start it again, then the other) with 40 sessions, each with a
  GET stream, and 10 three-second calls in flight: every call completes, no session gets 404, every
  later call works without a new ``initialize``, and a list-changed notification afterwards reaches
  every session's GET stream; the workers never hold one session both;
- a worker killed with SIGKILL: within 15 s every one of its sessions answers again through HAProxy
  without a new ``initialize``; its calls in flight end quickly (their connection ends), never hang.

The clients here are raw HTTP clients that do what the spec allows a client to do: retry a 503 after
its ``Retry-After``, and reconnect a GET stream with ``Last-Event-ID``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp_http import (
    DemoServer,
    MCPClient,
    SSEResponse,
    fetch_stats,
    http_client,
    serve_demo,
)
from test_deploy_workers import SECRET, STARTUP, Redis, free_port, haproxy, need
from test_redis import call as redis_call

from mcp_trio import open_client_session
from mcp_trio._protocol.cluster import SESSION_TAG, ClusterKeys
from mcp_trio.errors import TransportError

SESSIONS = 40
CALLS = 10
CALL_SECONDS = 3.0
ADOPTED_WITHIN = 15.0
"""A killed worker's sessions answer again through HAProxy this soon (heartbeat TTL 5 s + checks)."""
RETRY_FOR = 30.0
"""How long a client here goes on retrying a 503 before the test fails."""


@dataclass
class Workers:
    redis: Redis
    ports: dict[str, int]
    servers: dict[str, DemoServer]
    url: str
    http: httpx.AsyncClient
    stack: AsyncExitStack
    target: str | None = None
    """``MODULE:ATTR`` the workers serve (``mcp-trio serve``); None: the demo."""

    async def start(self, name: str) -> DemoServer:
        flags = ("--worker-id", name, "--redis", self.redis.url, "--bind", f"127.0.0.1:{self.ports[name]}")
        server = await self.stack.enter_async_context(
            serve_demo(
                *flags, "--drain-delay", "2.5", shutdown_grace=5.0, measure_coverage=False, target=self.target
            )
        )
        self.servers[name] = server
        with trio.fail_after(STARTUP):
            while (await fetch_stats(server))["notification_bus"]["state"] != "connected":  # noqa: ASYNC110
                await trio.sleep(0.05)
        return server

    async def until_routed(self, name: str) -> None:
        """Until HAProxy sends requests to ``name`` again (its health check passed twice)."""
        with trio.fail_after(STARTUP):
            while True:
                created = (await fetch_stats(self.servers[name]))["sessions_created"]
                client = MCPClient(self.http, self.url)
                await client.initialize()
                await client.delete()
                if (await fetch_stats(self.servers[name]))["sessions_created"] > created:
                    return
                await trio.sleep(0.2)


@asynccontextmanager
async def workers(tmp_path: Path, target: str | None = None) -> AsyncIterator[Workers]:
    """Redis, workers ``a`` and ``b`` on fixed ports (the demo, or ``mcp-trio serve target``), HAProxy."""
    need("haproxy", shutil.which("haproxy") or os.access("/usr/sbin/haproxy", os.X_OK))
    need("redis-server", shutil.which("redis-server") or os.access("/usr/bin/redis-server", os.X_OK))
    redis = Redis(tmp_path)
    os.environ["MCP_TRIO_REQUEST_STATE_SECRET"] = SECRET
    try:
        async with AsyncExitStack() as stack:
            stack.push_async_callback(redis.kill)
            await redis.start()
            http = await stack.enter_async_context(http_client())
            c = Workers(redis, {"a": free_port(), "b": free_port()}, {}, "", http, stack, target)
            for name in ("a", "b"):
                await c.start(name)
            c.url = await stack.enter_async_context(
                haproxy(free_port(), c.servers["a"], c.servers["b"], tmp_path / "haproxy.log")
            )
            yield c
    finally:
        os.environ.pop("MCP_TRIO_REQUEST_STATE_SECRET", None)


# -- a client that retries 503 as the spec allows -----------------------------------------------


def retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after", "1")
    return min(float(value), 2.0) if value.isdigit() else 1.0


async def post(client: MCPClient, message: dict[str, Any], statuses: list[int]) -> SSEResponse:
    """POST ``message`` through the balancer, again after each 503; never a 404."""
    with trio.fail_after(RETRY_FOR):
        while True:
            stream = await client.post_stream(message)
            statuses.append(stream.status_code)
            if stream.status_code != 503:
                assert stream.status_code in (200, 202), (stream.status_code, await stream.response.aread())
                return stream
            await stream.response.aread()
            await stream.aclose()
            await trio.sleep(retry_after(stream.response))


async def call_messages(
    client: MCPClient, name: str, arguments: dict[str, Any], statuses: list[int]
) -> list[dict[str, Any]]:
    """Every message of a ``tools/call``'s stream, its response last."""
    message = {
        "jsonrpc": "2.0",
        "id": client._request_id(),
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    stream = await post(client, message, statuses)
    try:
        messages = []
        while (answer := await stream.next_message()) is not None:
            messages.append(answer)
            if answer.get("id") == message["id"]:
                break
    finally:
        await stream.aclose()
    assert messages and "result" in messages[-1], messages
    return messages


async def call(
    client: MCPClient, name: str, arguments: dict[str, Any], statuses: list[int]
) -> dict[str, Any]:
    """A ``tools/call``'s result."""
    result: dict[str, Any] = (await call_messages(client, name, arguments, statuses))[-1]["result"]
    return result


@dataclass(eq=False)
class Listener:
    """A session's GET stream, reconnected with ``Last-Event-ID`` whenever it ends (a 503 retried)."""

    client: MCPClient
    statuses: list[int]
    messages: list[dict[str, Any]] = field(default_factory=list)
    connects: int = 0
    last_event_id: str | None = None
    connected: trio.Event = field(default_factory=trio.Event)

    async def run(self) -> None:
        while True:
            headers = {"accept": "text/event-stream"}
            if self.last_event_id is not None:
                headers["last-event-id"] = self.last_event_id
            request = self.client.http.build_request(
                "GET", self.client.url, headers=self.client.headers(**headers)
            )
            stream = SSEResponse(await self.client.http.send(request, stream=True))
            try:
                self.statuses.append(stream.status_code)
                if stream.status_code != 200:
                    assert stream.status_code == 503, (stream.status_code, await stream.response.aread())
                    await stream.response.aread()
                    await trio.sleep(retry_after(stream.response))
                    continue
                self.connects += 1
                self.connected.set()
                try:
                    while (event := await stream.next_event()) is not None:
                        if event.id:
                            self.last_event_id = event.id
                        if event.data:
                            self.messages.append(json.loads(event.data))
                except httpx.HTTPError:
                    pass  # the worker went away: reconnect
            finally:
                await stream.aclose()
            await trio.sleep(0.1)


async def open_sessions(c: Workers, count: int, statuses: list[int]) -> list[MCPClient]:
    clients = []
    for _ in range(count):
        client = MCPClient(c.http, c.url)
        await client.initialize()
        await client.initialized()
        clients.append(client)
    return clients


def owner_of(client: MCPClient) -> str:
    assert client.session_id is not None
    return client.session_id.split(".", 1)[0]


async def eventually(check: Callable[[], bool], within: float, why: Callable[[], object] = str) -> None:
    with trio.move_on_after(within):
        while not check():  # noqa: ASYNC110 - a condition of several tasks' results
            await trio.sleep(0.05)
        return
    raise AssertionError(f"not within {within} s: {why()}")


async def every_listener_gets(listeners: list[Listener], method: str) -> None:
    def got() -> bool:
        return all(any(m.get("method") == method for m in listener.messages) for listener in listeners)

    def why() -> object:
        return [(owner_of(lst.client), lst.connects, lst.last_event_id, lst.messages) for lst in listeners]

    await eventually(got, 20, why)


async def described(c: Workers) -> str:
    """The workers' link statistics and logs (for a failure's message)."""
    parts = []
    for name, server in c.servers.items():
        stats = {} if server.stopped else (await fetch_stats(server))["notification_bus"]
        parts.append(f"{name}: {stats}\n{server.log()}")
    return "\n".join(parts)


async def held_sessions(c: Workers) -> dict[str, int]:
    return {
        name: (await fetch_stats(server))["sessions"]
        for name, server in c.servers.items()
        if not server.stopped
    }


@pytest.mark.deadline(240)
async def test_rolling_restart_keeps_every_session(tmp_path: Path) -> None:
    statuses: list[int] = []
    async with workers(tmp_path) as c, trio.open_nursery() as nursery:
        clients = await open_sessions(c, SESSIONS, statuses)
        assert {owner_of(client) for client in clients} == {"a", "b"}
        listeners = [Listener(client, statuses) for client in clients]
        for listener in listeners:
            nursery.start_soon(listener.run)
        with trio.fail_after(10):
            for listener in listeners:
                await listener.connected.wait()
        results: list[str] = []

        async def slow_call(client: MCPClient, n: int) -> None:
            result = await call(client, "sleep", {"seconds": CALL_SECONDS}, statuses)
            results.append(result["content"][0]["text"])

        async with trio.open_nursery() as calls:
            in_flight = [client for client in clients if owner_of(client) == "a"][:5]
            in_flight += [client for client in clients if owner_of(client) == "b"][: CALLS - len(in_flight)]
            for n, client in enumerate(in_flight):
                calls.start_soon(slow_call, client, n)
            await trio.sleep(0.5)  # the calls are running
            for name in ("a", "b"):
                await c.servers[name].stop(signal.SIGTERM)
                # the sessions of the stopped worker go on with the other one
                for client in clients:
                    assert (await call(client, "echo", {"text": "x"}, statuses))["content"][0]["text"] == "x"
                assert (await held_sessions(c)) == {"a" if name == "b" else "b": SESSIONS}
                await c.start(name)
                await c.until_routed(name)
        assert len(results) == CALLS, results

        # every session on its home worker again, each held by one worker only
        for client in clients:
            try:
                assert (await call(client, "echo", {"text": "y"}, statuses))["content"][0]["text"] == "y"
            except trio.TooSlowError:
                raise AssertionError(f"{client.session_id}: {statuses[-20:]}\n{await described(c)}") from None
        held = await held_sessions(c)
        assert sum(held.values()) == SESSIONS, held
        # a list change afterwards reaches every session's GET stream
        await call(clients[0], "test_trigger_tool_change", {}, statuses)
        await every_listener_gets(listeners, "notifications/tools/list_changed")
        assert 404 not in statuses, statuses
        nursery.cancel_scope.cancel()


@pytest.mark.deadline(120)
async def test_a_killed_worker_s_sessions_are_adopted(tmp_path: Path) -> None:
    statuses: list[int] = []
    async with workers(tmp_path) as c, trio.open_nursery() as nursery:
        clients = await open_sessions(c, 8, statuses)
        victims = [client for client in clients if owner_of(client) == "a"]
        assert victims
        listeners = [Listener(client, statuses) for client in clients]
        for listener in listeners:
            nursery.start_soon(listener.run)
        with trio.fail_after(10):
            for listener in listeners:
                await listener.connected.wait()
        hanging = await victims[0].start_tool_call("sleep", {"seconds": 60})
        await trio.sleep(0.3)
        server = c.servers["a"]
        server.stopped = True
        server.process.kill()
        with trio.fail_after(5):
            await server.process.wait()
        killed_at = trio.current_time()
        with trio.fail_after(5):  # the call in flight ends with its connection, at once
            try:
                assert await hanging.rest() is not None
            except httpx.HTTPError:
                pass
        await hanging.aclose()
        for client in victims:
            assert (await call(client, "echo", {"text": "back"}, statuses))["content"][0]["text"] == "back"
        assert trio.current_time() - killed_at < ADOPTED_WITHIN
        stats = (await fetch_stats(c.servers["b"]))["notification_bus"]
        assert stats["adopted"] == len(victims), stats
        assert (await fetch_stats(c.servers["b"]))["sessions"] == len(clients)
        await call(clients[0], "test_trigger_tool_change", {}, statuses)
        await every_listener_gets(listeners, "notifications/tools/list_changed")
        assert 404 not in statuses, statuses
        nursery.cancel_scope.cancel()


@pytest.mark.deadline(120)
async def test_events_missed_during_a_hand_over_are_replayed_by_the_adopter(tmp_path: Path) -> None:
    """A notification stored for a session while its GET stream was not connected is replayed, with
    ``Last-Event-ID``, by the worker that adopted the session after a SIGTERM of its owner."""
    statuses: list[int] = []
    async with workers(tmp_path) as c:
        clients = await open_sessions(c, 4, statuses)
        victim = next(client for client in clients if owner_of(client) == "a")
        get = await victim.open_get()  # its priming event, 0-0, read
        await get.aclose()
        other = next(client for client in clients if owner_of(client) == "b")
        await call(other, "test_trigger_tool_change", {}, statuses)  # reaches a through Redis
        await trio.sleep(1.0)  # a stores it for the victim's GET stream (no connection to send it on)
        await c.servers["a"].stop(signal.SIGTERM)
        listener = Listener(victim, statuses, last_event_id="0-0")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listener.run)
            await every_listener_gets([listener], "notifications/tools/list_changed")
            nursery.cancel_scope.cancel()
        assert listener.connects == 1
        stats = (await fetch_stats(c.servers["b"]))["notification_bus"]
        assert stats["adopted"] >= 1, stats
        assert 404 not in statuses, statuses


@pytest.mark.deadline(180)
async def test_mcp_trio_s_own_client_goes_on_in_one_block(tmp_path: Path) -> None:
    """The same story with ``open_client_session``: one block, one session id, no new ``initialize``,
    through a SIGTERM of the session's worker (its call in flight completes), that worker's return (the
    session moves home) and its SIGKILL (the call in flight fails at once, the next ones work)."""
    notes: list[str] = []

    async def on_notification(message: dict[str, Any]) -> None:
        notes.append(message.get("method", ""))

    async with (
        workers(tmp_path) as c,
        open_client_session(c.url, mode="legacy", on_notification=on_notification) as s,
    ):
        if True:
            first_id = s.session_id
            assert first_id is not None
            home = first_id.split(".", 1)[0]
            other = "b" if home == "a" else "a"
            async with trio.open_nursery() as nursery:
                slept: list[str] = []

                async def slow() -> None:
                    result = await s.call_tool("sleep", {"seconds": CALL_SECONDS})
                    slept.append(result.content[0].text)  # type: ignore[union-attr]

                nursery.start_soon(slow)
                await trio.sleep(0.5)
                await c.servers[home].stop(signal.SIGTERM)
            assert len(slept) == 1
            assert (await s.call_tool("echo", {"text": "on the other"})).content[0].text == "on the other"  # type: ignore[union-attr]
            assert (await fetch_stats(c.servers[other]))["sessions"] >= 1
            await c.start(home)
            await c.until_routed(home)
            assert (await s.call_tool("echo", {"text": "home"})).content[0].text == "home"  # type: ignore[union-attr]
            assert (await fetch_stats(c.servers[home]))["notification_bus"]["adopted"] == 1
            broken: list[TransportError] = []

            async def doomed() -> None:
                with trio.fail_after(10):  # the call in flight on a killed worker fails at once
                    try:
                        await s.call_tool("sleep", {"seconds": 60})
                    except TransportError as exc:
                        broken.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(doomed)
                await trio.sleep(0.5)
                server = c.servers[home]
                server.stopped = True
                server.process.kill()
            assert len(broken) == 1, broken
            # The next call: retried by the client on 503 until the session is adopted.  A call sent in
            # the very instant the worker died may find its connection closed by the balancer (seen
            # once, under load): that call fails at once, never hangs, and the next one goes through.
            cut: list[TransportError] = []
            with trio.fail_after(ADOPTED_WITHIN):
                while True:
                    try:
                        echoed = await s.call_tool("echo", {"text": "again"})
                        break
                    except TransportError as exc:
                        cut.append(exc)
                        assert len(cut) <= 2, cut
            assert echoed.content[0].text == "again"  # type: ignore[union-attr]
            await s.call_tool("test_trigger_tool_change", {})
            await eventually(lambda: "notifications/tools/list_changed" in notes, 20, lambda: notes)
            assert s.session_id == first_id
            assert s.renewals == 0


@pytest.mark.deadline(120)
async def test_an_adopted_session_keeps_its_log_level_and_a_forged_record_is_no_session(
    tmp_path: Path,
) -> None:
    """A session's log level, set on its first worker, holds on the worker that adopts it (the demo's
    logging tool says nothing below ``error``); a record copied by a Redis writer to another session's
    key is no session (404), and counted."""
    statuses: list[int] = []
    async with workers(tmp_path) as c:
        clients = await open_sessions(c, 8, statuses)
        quiet, copied_over = [client for client in clients if owner_of(client) == "a"][:2]
        loud = next(client for client in clients if owner_of(client) == "b")
        level = {"jsonrpc": "2.0", "id": 900, "method": "logging/setLevel", "params": {"level": "error"}}
        stream = await post(quiet, level, statuses)
        await stream.aclose()

        def logs(messages: list[dict[str, Any]]) -> int:
            return sum(m.get("method") == "notifications/message" for m in messages)

        assert logs(await call_messages(loud, "test_tool_with_logging", {}, statuses)) > 0  # the control
        assert logs(await call_messages(quiet, "test_tool_with_logging", {}, statuses)) == 0
        keys = ClusterKeys([base64.b64decode(SECRET)])

        def record_key_of(client: MCPClient) -> str:
            assert client.session_id is not None
            return "mcp-trio:session:" + keys.tag(SESSION_TAG, client.session_id.encode())

        await trio.sleep(0.5)  # the record written again after setLevel (by the bus's writer)
        value = await redis_call(c.redis.port, "GET", record_key_of(quiet))
        assert value is not None and value.startswith(b"mtr1 ")
        assert b"error" in value  # the log level is in the record (signed)
        server = c.servers["a"]
        server.stopped = True
        server.process.kill()
        with trio.fail_after(5):
            await server.process.wait()
        assert await redis_call(c.redis.port, "SET", record_key_of(copied_over), value) == "OK"
        messages = await call_messages(quiet, "test_tool_with_logging", {}, statuses)  # adopted by b
        assert logs(messages) == 0, messages
        with trio.fail_after(RETRY_FOR):
            while (status := await copied_over.status_of("DELETE")) == 503:  # noqa: ASYNC110
                await trio.sleep(0.2)
        assert status == 404
        stats = (await fetch_stats(c.servers["b"]))["notification_bus"]
        assert stats["adopted"] == 1 and stats["records_forged"] >= 1, stats


@pytest.mark.deadline(120)
async def test_a_notification_to_an_adopted_session_before_its_get_returns_is_replayed(
    tmp_path: Path,
) -> None:
    """The client last saw the priming event of its second GET connection; its session is adopted (by a
    call) and notified before its GET stream comes back: the adopter numbers the notification after
    every event the client may have seen (priming events included), so its resumption gets it."""
    statuses: list[int] = []
    async with workers(tmp_path) as c:
        clients = await open_sessions(c, 4, statuses)
        victim = next(client for client in clients if owner_of(client) == "a")
        seen = ""
        for _ in range(2):  # each new GET connection is primed with a new id: 0-0, then 0-1
            get = await victim.open_get()
            seen = get._decoder.last_event_id
            await get.aclose()
        assert seen == "0-1", seen
        await c.servers["a"].stop(signal.SIGTERM)
        assert (await call(victim, "echo", {"text": "x"}, statuses))["content"][0]["text"] == "x"  # adopted
        await call(victim, "test_trigger_tool_change", {}, statuses)
        listener = Listener(victim, statuses, last_event_id=seen)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listener.run)
            await every_listener_gets([listener], "notifications/tools/list_changed")
            nursery.cancel_scope.cancel()
        assert listener.connects == 1
        assert 404 not in statuses, statuses
