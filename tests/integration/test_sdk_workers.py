"""A python-sdk server hosted by several workers: ``mcp-trio serve
tests.integration.sdk_workers_server:server --worker-id a|b --redis URL`` behind a real HAProxy
(docs/deploy/haproxy-workers.cfg) with a real redis-server, as test_deploy_handover.py runs the demo.

- the SDK server's own events (``ctx.notify_tools_changed()``, ``ctx.notify_resource_updated(uri)``,
  from a 2025 session's call and from a 2026 request) reach the 2025 sessions' GET streams and the 2026
  ``subscriptions/listen`` streams of both workers, resource updates only where that URI was
  subscribed to;
- a rolling restart (SIGTERM one worker, start it again, then the other): every hosted session goes on
  without a new ``initialize``, calls in flight complete, and the SDK kernel of each session, rebuilt
  by the worker that takes it over, keeps the client's log level and subscriptions;
- a worker killed with SIGKILL: the other adopts its hosted sessions within 15 s, without an
  ``initialize`` (its count of created sessions does not move), and the kernel it rebuilds from the
  session's record filters log messages at the level set before the kill and keeps the subscription
  made before it, which goes on receiving updates.

The server keeps each client's log level and subscriptions in the SDK kernel only (see
sdk_workers_server.py): what a worker knows of them after a hand-over is what ``HostedServer``'s
replay of the record told the kernel.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp_http import POST_HEADERS, VERSION, MCPClient, SSEResponse, fetch_stats
from test_conformance import suite_installed
from test_deploy_handover import (
    ADOPTED_WITHIN,
    Listener,
    Workers,
    eventually,
    held_sessions,
    owner_of,
    post,
    workers,
)
from test_deploy_workers import CONFORMANCE, SUMMARY
from test_redis import SECRET as REDIS_SECRET
from test_redis import Reader, RedisServer, legacy_headers
from test_redis import redis as redis  # the fixture: a redis-server of its own for a test
from tests.integration.sdk_workers_server import LEVELS
from tests.required import missing

from mcp_trio import ServerConfig
from mcp_trio._cli.serve import _use_redis, load_app
from mcp_trio.redis import RedisNotificationBus
from mcp_trio.sdk import HostedServer
from mcp_trio.testing import ASGIClient, open_asgi_client

TARGET = "tests.integration.sdk_workers_server:server"
EVERYTHING = "tests.integration.sdk_everything:server"
"""The python-sdk conformance server (test_conformance_hosted.py serves it alone)."""
CONFORMANCE_RUNS = [(["--spec-version", "2025-11-25"], 33), (["--spec-version", "2026-07-28"], 40)]
"""Extra arguments of scripts/conformance.sh (0.2.0-alpha.12) and the scenarios each run has."""
WATCHED = "test://watched"
MODERN = "2026-07-28"
TOOLS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
UPDATED = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": WATCHED}}
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
SESSIONS = 8


# -- a 2025 client of the hosted server ---------------------------------------------------------


async def hosted_sessions(c: Workers, count: int) -> list[MCPClient]:
    """``count`` initialized sessions through HAProxy (round robin: both workers), each client named
    ``client-N`` (what the server keys its kernel state by)."""
    clients = []
    for n in range(count):
        client = MCPClient(c.http, c.url)
        info = {"name": f"client-{n}", "version": "1"}
        answer = await client.request(
            "initialize", {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": info}
        )
        assert answer["result"]["serverInfo"]["name"] == "sdk-workers", answer
        await client.initialized()
        clients.append(client)
    assert {owner_of(client) for client in clients} == {"a", "b"}
    return clients


async def exchange(
    client: MCPClient, method: str, params: dict[str, Any], statuses: list[int]
) -> list[dict[str, Any]]:
    """Every message of a request's stream through HAProxy (a 503 retried), its response last."""
    message = {"jsonrpc": "2.0", "id": client._request_id(), "method": method, "params": params}
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


async def call(client: MCPClient, tool: str, statuses: list[int], **arguments: Any) -> list[dict[str, Any]]:
    """A ``tools/call``'s messages, its result last."""
    return await exchange(client, "tools/call", {"name": tool, "arguments": arguments}, statuses)


def text(messages: list[dict[str, Any]]) -> str:
    result: str = messages[-1]["result"]["content"][0]["text"]
    return result


def log_levels(messages: list[dict[str, Any]]) -> list[str]:
    return [m["params"]["level"] for m in messages if m.get("method") == "notifications/message"]


async def kernel_state(client: MCPClient, statuses: list[int]) -> dict[str, Any]:
    state: dict[str, Any] = (await call(client, "kernel_state", statuses))[-1]["result"]["structuredContent"]
    return state


async def set_up(client: MCPClient, level: str, statuses: list[int]) -> None:
    """The client's log level and a subscription to :data:`WATCHED`, in its session's SDK kernel."""
    await exchange(client, "logging/setLevel", {"level": level}, statuses)
    await exchange(client, "resources/subscribe", {"uri": WATCHED}, statuses)


async def in_its_state(client: MCPClient, level: str, statuses: list[int]) -> None:
    """The session's kernel holds what :func:`set_up` made: the ``log`` tool sends what the level lets
    through, and only that; the subscription is there."""
    messages = await call(client, "log", statuses)
    expected = {"warning": ["warning", "error"], "error": ["error"]}[level]
    assert log_levels(messages) == expected and text(messages) == ",".join(expected), messages
    assert await kernel_state(client, statuses) == {"level": level, "subscribed": [WATCHED]}


async def all_in_their_state(clients: list[MCPClient], level: str, statuses: list[int]) -> None:
    """:func:`in_its_state` for each client, concurrently."""
    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(in_its_state, client, level, statuses)


# -- 2026 requests to one worker ----------------------------------------------------------------


def modern_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "modern", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    return headers


async def open_listen(http: httpx.AsyncClient, url: str) -> SSEResponse:
    """A ``subscriptions/listen`` stream for tool list changes and :data:`WATCHED`, acknowledged."""
    notifications = {"toolsListChanged": True, "resourceSubscriptions": [WATCHED]}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {"notifications": notifications, "_meta": modern_meta()},
    }
    request = http.build_request(
        "POST", url, content=json.dumps(body).encode(), headers=modern_headers("subscriptions/listen")
    )
    stream = SSEResponse(await http.send(request, stream=True))
    assert stream.status_code == 200, await stream.response.aread()
    ack = await stream.next_message()
    assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged", ack
    assert ack["params"]["notifications"] == notifications, ack  # the server grants both
    return stream


async def modern_call(http: httpx.AsyncClient, url: str, tool: str, **arguments: Any) -> str:
    """A stateless 2026 ``tools/call`` (``serve_one`` in the SDK) to the worker at ``url``."""
    params = {"name": tool, "arguments": arguments, "_meta": modern_meta()}
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).encode()
    with trio.fail_after(5):
        response = await http.post(url, content=body, headers=modern_headers("tools/call", tool))
    assert response.status_code == 200, (response.status_code, response.text)
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        message: dict[str, Any] = json.loads(data[-1])
    else:
        message = response.json()
    result: str = message["result"]["content"][0]["text"]
    return result


def untagged(message: dict[str, Any]) -> dict[str, Any]:
    """A listen stream's notification without its subscription id (``_meta``)."""
    params = {k: v for k, v in (message.get("params") or {}).items() if k != "_meta"}
    return {k: v for k, v in message.items() if k != "params"} | ({"params": params} if params else {})


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.deadline(120)
async def test_the_hosted_server_s_events_reach_every_worker(tmp_path: Path) -> None:
    statuses: list[int] = []
    async with workers(tmp_path, TARGET) as c, trio.open_nursery() as nursery:
        clients = await hosted_sessions(c, 4)
        by_worker = {name: [client for client in clients if owner_of(client) == name] for name in "ab"}
        assert all(by_worker.values()), by_worker
        subscribed = [by_worker["a"][0], by_worker["b"][0]]
        for client in subscribed:
            await exchange(client, "resources/subscribe", {"uri": WATCHED}, statuses)
        gets = {id(client): Reader(await client.open_get()) for client in clients}
        listens = [Reader(await open_listen(c.http, c.servers[name].url)) for name in "ab"]
        for reader in [*gets.values(), *listens]:
            nursery.start_soon(reader.run)

        # a 2025 session's call on a: every session and listen stream of both workers
        assert text(await call(by_worker["a"][0], "change_tools", statuses)) == "tools changed"
        for reader in gets.values():
            assert await reader.next() == TOOLS_CHANGED
        for reader in listens:
            assert untagged(await reader.next()) == TOOLS_CHANGED
        # then, from b: a 2026 request's update of the watched resource, one of a resource nobody
        # watches, and a list change from a 2025 session of b (in this order: one bus, one publisher)
        worker_b = c.servers["b"].url
        assert await modern_call(c.http, worker_b, "touch", uri=WATCHED) == f"touched {WATCHED}"
        assert await modern_call(c.http, worker_b, "touch", uri="test://other") == "touched test://other"
        await call(by_worker["b"][0], "change_tools", statuses)

        for client in clients:
            expected = [UPDATED, TOOLS_CHANGED] if client in subscribed else [TOOLS_CHANGED]
            got = [await gets[id(client)].next() for _ in expected]
            assert got == expected, (owner_of(client), client in subscribed, got)
        for listen in listens:
            got = [await listen.next() for _ in range(2)]
            assert [untagged(m) for m in got] == [UPDATED, TOOLS_CHANGED], got
            assert all(m["params"]["_meta"] == {SUBSCRIPTION_ID: 1} for m in got), got
        for reader in [*gets.values(), *listens]:
            await reader.quiet(0.3)  # each exactly once
        for name, server in c.servers.items():
            bus = (await fetch_stats(server))["notification_bus"]
            assert bus["received"] == (3 if name == "a" else 1), (name, bus)  # the other's events
        assert 404 not in statuses and 503 not in statuses, statuses
        nursery.cancel_scope.cancel()
    for reader in [*gets.values(), *listens]:
        await reader.stream.aclose()


@pytest.mark.deadline(180)
async def test_hosted_sessions_survive_a_rolling_restart(tmp_path: Path) -> None:
    statuses: list[int] = []
    async with workers(tmp_path, TARGET) as c, trio.open_nursery() as nursery:
        clients = await hosted_sessions(c, SESSIONS)
        for client in clients:
            await set_up(client, "warning", statuses)
        listeners = [Listener(client, statuses) for client in clients]
        for listener in listeners:
            nursery.start_soon(listener.run)
        with trio.fail_after(10):
            for listener in listeners:
                await listener.connected.wait()
        slept: list[str] = []

        async def slow_call(client: MCPClient) -> None:
            slept.append(text(await call(client, "sleep", statuses, seconds=3.0)))

        async with trio.open_nursery() as calls:
            for name in ("a", "b"):  # a call in flight on each worker when it is stopped
                calls.start_soon(slow_call, next(cl for cl in clients if owner_of(cl) == name))
            await trio.sleep(0.5)
            for name in ("a", "b"):
                other = "b" if name == "a" else "a"
                await c.servers[name].stop(signal.SIGTERM)
                await all_in_their_state(clients, "warning", statuses)  # on the other worker now
                assert await held_sessions(c) == {other: SESSIONS}
                await c.start(name)
                await c.until_routed(name)
        assert slept == ["slept 3.0"] * 2, slept

        await all_in_their_state(clients, "warning", statuses)  # back home (handed over again)
        held = await held_sessions(c)
        assert sum(held.values()) == SESSIONS and set(held) == {"a", "b"}, held
        await call(clients[0], "touch", statuses, uri=WATCHED)
        await every_listener_gets_update(listeners)
        assert 404 not in statuses, statuses
        nursery.cancel_scope.cancel()


async def every_listener_gets_update(listeners: list[Listener]) -> None:
    def got() -> bool:
        return all(UPDATED in listener.messages for listener in listeners)

    def why() -> object:
        return [(owner_of(lst.client), lst.connects, lst.messages) for lst in listeners]

    await eventually(got, 20, why)


@pytest.mark.deadline(120)
async def test_a_killed_worker_s_hosted_sessions_are_adopted_in_their_state(tmp_path: Path) -> None:
    statuses: list[int] = []
    async with workers(tmp_path, TARGET) as c, trio.open_nursery() as nursery:
        clients = await hosted_sessions(c, 6)
        victims = [client for client in clients if owner_of(client) == "a"]
        survivors = [client for client in clients if owner_of(client) == "b"]
        for victim in victims:
            await set_up(victim, "error", statuses)
            await in_its_state(victim, "error", statuses)
        control = survivors[0]  # no level set (every message), no subscription
        assert log_levels(await call(control, "log", statuses)) == list(LEVELS)
        listeners = {id(client): Listener(client, statuses) for client in clients}
        for listener in listeners.values():
            nursery.start_soon(listener.run)
        with trio.fail_after(10):
            for listener in listeners.values():
                await listener.connected.wait()
        created = (await fetch_stats(c.servers["b"]))["sessions_created"]
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

        await all_in_their_state(victims, "error", statuses)  # adopted by b: kernels rebuilt
        assert trio.current_time() - killed_at < ADOPTED_WITHIN
        stats = await fetch_stats(c.servers["b"])
        assert stats["notification_bus"]["adopted"] == len(victims), stats["notification_bus"]
        assert stats["sessions"] == len(clients)
        assert stats["sessions_created"] == created + len(victims)  # adopted, none made by initialize

        # the subscriptions made on a receive updates on b; the control, not subscribed, only the list
        # change sent after the update (one publisher: in order)
        await call(control, "touch", statuses, uri=WATCHED)
        await call(control, "change_tools", statuses)
        await eventually(
            lambda: all(TOOLS_CHANGED in lst.messages for lst in listeners.values()),
            20,
            lambda: [(owner_of(lst.client), lst.connects, lst.messages) for lst in listeners.values()],
        )
        for victim in victims:
            assert UPDATED in listeners[id(victim)].messages, listeners[id(victim)].messages
        for survivor in survivors:
            assert UPDATED not in listeners[id(survivor)].messages, listeners[id(survivor)].messages
        assert 404 not in statuses, statuses
        nursery.cancel_scope.cancel()


# -- in one process: two hosted apps as ``mcp-trio serve MODULE:ATTR --redis`` makes them ------------


async def asgi_exchange(asgi: ASGIClient, headers: dict[str, str], message: dict[str, Any]) -> list[Any]:
    """Every message of a POST's answer (none for a notification: 202)."""
    response = await asgi.request("POST", headers=headers, body=json.dumps(message).encode())
    if "id" not in message:
        assert response.status == 202, await response.read()
        await response.read()
        return []
    assert response.status == 200, await response.read()
    messages = []
    with trio.fail_after(5):
        while (answer := await response.next_message()) is not None:
            messages.append(answer)
    assert messages and "result" in messages[-1], messages
    return messages


def tool_call(request_id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_redis_gives_hosted_apps_the_cluster_s_bus_and_sessions(
    redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_app`` and ``_use_redis`` (what ``mcp-trio serve MODULE:ATTR --redis`` does) give a hosted
    python-sdk server the Redis bus: worker a's SDK event reaches worker b's session and listen stream;
    a's session, handed over when a drains, is adopted by b with its SDK kernel rebuilt (log level and
    subscription), and an update of the watched resource reaches it there, not an unsubscribed one."""
    monkeypatch.setenv("MCP_TRIO_REQUEST_STATE_SECRET", REDIS_SECRET)
    apps = {}
    for name in ("a", "b"):
        config = ServerConfig(worker_id=name, drain_delay=0)
        app = load_app("tests.integration.sdk_workers_server:build", config)
        _use_redis(argparse.ArgumentParser(), app, redis.url)
        assert isinstance(app.server, HostedServer), app.server
        assert isinstance(app.server.notifications, RedisNotificationBus)
        apps[name] = app
    buses = [app.statistics for app in apps.values()]
    async with open_asgi_client(apps["b"]) as on_b:
        async with open_asgi_client(apps["a"]) as on_a:
            await eventually(
                lambda: all(bus()["notification_bus"]["state"] == "connected" for bus in buses), 10, str
            )
            sessions = {}
            for name, asgi in (("a", on_a), ("b", on_b)):
                info = {"name": f"in-process-{name}", "version": "1"}
                init = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": info},
                }
                response = await asgi.request("POST", headers=POST_HEADERS, body=json.dumps(init).encode())
                assert response.status == 200, await response.read()
                await response.read()
                sessions[name] = headers = legacy_headers(response.headers["mcp-session-id"])
                await asgi_exchange(asgi, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            mine = sessions["a"]
            level = {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "error"}}
            await asgi_exchange(on_a, mine, level)
            subscribe = {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "resources/subscribe",
                "params": {"uri": WATCHED},
            }
            await asgi_exchange(on_a, mine, subscribe)
            other = await on_b.request("GET", headers={**sessions["b"], "accept": "text/event-stream"})
            listen_body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "subscriptions/listen",
                "params": {"notifications": {"toolsListChanged": True}, "_meta": modern_meta()},
            }
            listen = await on_b.request(
                "POST", headers=modern_headers("subscriptions/listen"), body=json.dumps(listen_body).encode()
            )
            with trio.fail_after(5):
                ack = await listen.next_message()
                assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged", ack
                await asgi_exchange(on_a, mine, tool_call(4, "change_tools"))
                assert await other.next_message() == TOOLS_CHANGED  # from a's SDK server, through Redis
                tagged = await listen.next_message()
            assert tagged is not None and untagged(tagged) == TOOLS_CHANGED, tagged
            await listen.aclose()
            with trio.fail_after(10):
                await apps["a"].aclose()  # drains: hands the session over
        stream = await on_b.request("GET", headers={**mine, "accept": "text/event-stream"})
        assert stream.status == 200
        logged = await asgi_exchange(on_b, mine, tool_call(5, "log"))  # adopted: its kernel rebuilt
        assert log_levels(logged) == ["error"], logged
        state = (await asgi_exchange(on_b, mine, tool_call(6, "kernel_state")))[-1]
        assert state["result"]["structuredContent"] == {"level": "error", "subscribed": [WATCHED]}
        await asgi_exchange(on_b, sessions["b"], tool_call(2, "touch", uri=WATCHED))
        await asgi_exchange(on_b, sessions["b"], tool_call(3, "change_tools"))
        with trio.fail_after(5):
            assert await stream.next_message() == UPDATED
            assert await stream.next_message() == TOOLS_CHANGED
            assert await other.next_message() == TOOLS_CHANGED  # not subscribed: no update before it
        await stream.aclose()
        await other.aclose()
        assert apps["b"].statistics()["notification_bus"]["adopted"] == 1


# -- the conformance suite through the balancer ---------------------------------------------------


@pytest.mark.deadline(300)
async def test_conformance_through_haproxy_to_two_hosted_workers(tmp_path: Path) -> None:
    """The official suite (0.2.0-alpha.12) at 2025-11-25 and at 2026-07-28 against HAProxy in front of
    two workers hosting the python-sdk conformance server (tests/integration/sdk_everything.py) with
    Redis: a 2025 session stays on the worker that made it, requests without one go round robin."""
    if not suite_installed():
        missing("the conformance suite is not installed: run scripts/conformance.sh install")
    async with workers(tmp_path, EVERYTHING) as c:
        created = {
            name: (await fetch_stats(server))["sessions_created"] for name, server in c.servers.items()
        }
        for extra, expected in CONFORMANCE_RUNS:
            result = await trio.run_process(
                ["bash", str(CONFORMANCE), "server", c.url, "--version", "0.2.0-alpha.12", *extra],
                capture_stdout=True,
                stderr=subprocess.STDOUT,
                check=False,
            )
            output = result.stdout.decode(errors="replace")
            tail = output[-4000:]
            (found,) = list(SUMMARY.finditer(output)) or [None]
            assert found is not None, tail
            assert int(found["total"]) == expected and found["clean"] == found["total"], tail
            assert found["failed"] == "0" and found["warnings"] == "0" and int(found["ok"]) > 0, tail
            assert result.returncode == 0, tail
        for name, server in c.servers.items():  # round robin reached both workers
            assert (await fetch_stats(server))["sessions_created"] > created[name], name
