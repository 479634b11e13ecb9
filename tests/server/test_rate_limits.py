"""Rate limits (following the draft SEP-3304): the token bucket and the ``SCOPE=N/PERIOD`` parser, and
the limits at admission in both HTTP eras (429, ``Retry-After``, ``RateLimit-*``, -32023 with
``retryAfterMs``), on WebSocket and stdio (the JSON-RPC error alone), per principal, address,
session, tool and method; a new session does not reset them; counted in the statistics and
``/metrics``."""

from __future__ import annotations

import json
import math
from typing import Any

import mcp_types as mt
import pytest
import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._app.principal import PrincipalKeys
from mcp_trio._protocol.ratelimits import RATE_LIMITED, RateLimit, Refusal, rate_limit_data, refill, refused
from mcp_trio._transport.admin import samples
from mcp_trio._transport.ratelimit import LocalBuckets, RateLimits
from mcp_trio.demo import build_demo_server
from mcp_trio.server import HTTPRequestInfo
from mcp_trio.testing import open_asgi_client

from .conftest import Client, call_body
from .test_modern import Modern, headers_for, meta
from .test_stdio_server import modern_meta, open_stdio

# -- the limit and its parser ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scope", "count", "period"),
    [
        ("address=100/min", "address", 100, 60.0),
        ("tool:search=5/s", "tool:search", 5, 1.0),
        ("principal=1000/h", "principal", 1000, 3600.0),
        ("session=10/30s", "session", 10, 30.0),
        ("method:tools/list=2/10min", "method:tools/list", 2, 600.0),
        (" address=1/s ", "address", 1, 1.0),
    ],
)
def test_parse(text: str, scope: str, count: int, period: float) -> None:
    limit = RateLimit.parse(text)
    assert (limit.scope, limit.count, limit.period, limit.capacity) == (scope, count, period, count)
    assert RateLimit.parse(str(limit)) == limit  # str() says it the way it is parsed


@pytest.mark.parametrize(
    "text",
    [
        "address", "address=", "address=10", "address=10/", "address=10/d", "address=-1/s", "address=0/s",
        "address=10/0s", "user=10/s", "tool=10/s", "tool:=10/s", "method:=1/s", "principal:x=1/s",
        "address=1.5/s", "address=10/ms", "=10/s", "address=10/s,principal=1/s",
        "tool:" + "x" * 200 + "=1/s", "address=9999999999/s",
    ],
)  # fmt: skip
def test_parse_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="rate limit"):
        RateLimit.parse(text)


def test_a_limit_made_in_code_is_checked() -> None:
    with pytest.raises(ValueError, match="burst"):
        RateLimit("address", 10, 1.0, burst=0)
    with pytest.raises(ValueError, match="period"):
        RateLimit("address", 10, 0)
    with pytest.raises(ValueError, match="count"):
        RateLimit("address", True, 1.0)  # type: ignore[arg-type]
    limit = RateLimit("address", 10, 60.0, burst=3)
    assert (limit.capacity, limit.rate, limit.ttl) == (3, 10 / 60, 18.0)
    assert str(limit) == "address=10/min (burst 3)"
    assert str(RateLimit("address", 1, 1.5)) == "address=1/1.5s"
    with pytest.raises(TypeError, match="RateLimit"):
        ServerConfig(rate_limits=["address=1/s"])  # type: ignore[list-item]
    assert ServerConfig(rate_limits=[limit]).rate_limits == (limit,)


def test_the_answer_follows_the_draft() -> None:
    limit = RateLimit.parse("tool:search=5/s")
    answer = refused(Refusal(limit, 0.2501), 7)
    assert (answer.http_status, answer.code, answer.request_id) == (429, RATE_LIMITED, 7)
    assert answer.data == {"retryAfterMs": 251, "limit": 5, "remaining": 0}
    assert dict(answer.headers) == {"retry-after": "1", "ratelimit-limit": "5", "ratelimit-remaining": "0"}
    assert dict(refused(Refusal(limit, 61.2)).headers)["retry-after"] == "62"  # whole seconds, rounded up
    error = {"code": -32023, "message": "x", "data": answer.data}
    assert rate_limit_data(error) == (0.251, 5, 0)
    assert rate_limit_data({"code": -32023, "data": {"retryAfterMs": 10, "limit": "x"}}) == (0.01, None, None)
    for bad in (
        None, {}, {"code": -32000, "data": {"retryAfterMs": 1}}, {"code": -32023},
        {"code": -32023, "data": 1},
        {"code": -32023, "data": {"retryAfterMs": -1}}, {"code": -32023, "data": {"retryAfterMs": True}},
    ):  # fmt: skip
        assert rate_limit_data(bad) is None


# -- the bucket ----------------------------------------------------------------------------------


def test_the_bucket_admits_its_burst_then_one_per_interval() -> None:
    limit = RateLimit.parse("address=2/s")
    buckets = LocalBuckets()
    key = {(limit, "10.0.0.1"): 1}
    assert buckets.take(key, 100.0) is None
    assert buckets.take(key, 100.0) is None
    refusal = buckets.take(key, 100.0)
    assert refusal is not None and refusal.limit is limit and math.isclose(refusal.retry_after, 0.5)
    assert buckets.take(key, 100.25) is not None  # half a token
    assert buckets.take(key, 100.5) is None  # one token back
    assert buckets.take({(limit, "10.0.0.2"): 1}, 100.5) is None  # another address: its own bucket
    assert refill(limit, 0, 1000.0) == 2 and refill(limit, math.nan, 0.0) == 0 and refill(limit, 5, -3) == 2


def test_a_request_taking_several_buckets_takes_all_or_none() -> None:
    wide, narrow = RateLimit.parse("address=10/s"), RateLimit.parse("tool:echo=1/min")
    buckets = LocalBuckets()
    both = {(wide, "a"): 1, (narrow, "a"): 1}
    assert buckets.take(both, 0.0) is None
    refusal = buckets.take(both, 0.0)
    assert refusal is not None and refusal.limit is narrow and math.isclose(refusal.retry_after, 60.0)
    for _ in range(9):  # the refused request took nothing from the wide bucket
        assert buckets.take({(wide, "a"): 1}, 0.0) is None
    assert buckets.take({(wide, "a"): 1}, 0.0) is not None
    buckets.give_back({(wide, "a"): 2}, 0.0)
    assert buckets.take({(wide, "a"): 2}, 0.0) is None
    buckets.give_back({(wide, "a"): 20}, 0.0)  # never more than the bucket holds
    assert buckets.take({(wide, "a"): 11}, 0.0) is not None  # more than the burst: always refused


def test_buckets_are_bounded_and_full_ones_are_forgotten() -> None:
    limit = RateLimit.parse("address=1/s")
    buckets = LocalBuckets(max_buckets=100)
    for n in range(1000):
        assert buckets.take({(limit, str(n)): 1}, 0.0) is None
    assert len(buckets) == 100
    for n in range(10):  # a second later every bucket is full again: those met are dropped
        buckets.take({(limit, f"late{n}"): 1}, 1.0 + n)
    assert len(buckets) < 100


# -- at admission, over HTTP -----------------------------------------------------------------------

ECHO = {"name": "echo", "arguments": {"text": "x"}}


def limited(*specs: str, principal: bool = False) -> MCPApp:
    async def authenticate(request: HTTPRequestInfo) -> object:
        return request.header("x-user")

    return MCPApp(
        build_demo_server(),
        ServerConfig(
            rate_limits=[RateLimit.parse(spec) for spec in specs],
            authenticate=authenticate if principal else None,
        ),
    )


async def expect_limited(response: Any, request_id: Any, limit: int, period: float = 60) -> dict[str, Any]:
    assert response.status == 429
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["ratelimit-limit"] == str(limit)
    assert response.headers["ratelimit-remaining"] == "0"
    body = await response.json()
    assert body.get("id") == request_id
    error = body["error"]
    assert error["code"] == RATE_LIMITED and error["message"].startswith("Too Many Requests")
    assert error["data"]["limit"] == limit and error["data"]["remaining"] == 0
    assert 1 <= error["data"]["retryAfterMs"] <= period * 1000
    assert int(response.headers["retry-after"]) == math.ceil(error["data"]["retryAfterMs"] / 1000)
    return error


async def test_2025_an_address_gets_n_requests_and_a_new_session_does_not_reset_it() -> None:
    app = limited("address=4/min")
    async with open_asgi_client(app) as asgi:
        first = Client(asgi, app)
        await first.initialize()  # 1 (the notification is not counted)
        for n in (2, 3):
            assert "result" in await first.request(n, "tools/call", ECHO)
        again = Client(asgi, app)
        await again.initialize()  # 4: a new session, the same address
        error = await expect_limited(await again.post(call_body(9, "echo", {"text": "x"})), 9, 4)
        assert "address" in error["message"]
        refused_init = await asgi.request("POST", headers=first.headers(), body=b'{"jsonrpc":"2.0","id":5,'
                                          b'"method":"initialize","params":{}}')  # fmt: skip
        await expect_limited(refused_init, 5, 4)
        other = await asgi.request("POST", headers=again.headers(), body=call_body(1, "echo", {"text": "y"}),
                                   client=("192.0.2.7", 4000))  # fmt: skip
        assert other.status == 200  # another address has its own bucket
        stats = app.statistics()
        assert stats["rate_limited"]["address"] == 2 and stats["rate_limit_admitted"] == 5
        found = {name: values for name, _, _, values in samples(stats)}
        assert ({"scope": "address"}, 2) in found["mcp_trio_rate_limited_total"]
        assert found["mcp_trio_rate_limit_buckets"] == [({}, 2)]


async def test_2025_a_session_limit_is_per_session() -> None:
    app = limited("session=2/min")
    async with open_asgi_client(app) as asgi:
        first = Client(asgi, app)
        await first.initialize()  # initialize has no session yet: not counted here
        for n in (2, 3):
            assert "result" in await first.request(n, "ping")
        await expect_limited(await first.post(b'{"jsonrpc":"2.0","id":4,"method":"ping"}'), 4, 2)
        assert (await first.notify("notifications/cancelled", {"requestId": 4})).status == 202  # not counted
        second = Client(asgi, app)
        await second.initialize()
        assert "result" in await second.request(2, "ping")


async def test_2025_a_batch_counts_each_request() -> None:
    app = limited("session=2/min")
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize("2025-03-26")
        batch = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(3)]
        await expect_limited(await client.post(json.dumps(batch).encode()), None, 2)
        batch = batch[:2]
        assert (await client.post(json.dumps(batch).encode())).status == 200


async def test_2025_tool_and_method_limits() -> None:
    app = limited("tool:echo=2/min", "method:tools/list=1/min")
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        for n in (2, 3):
            assert "result" in await client.request(n, "tools/call", ECHO)
        error = await expect_limited(await client.post(call_body(4, "echo", {"text": "x"})), 4, 2)
        assert "tool:echo" in error["message"]
        added = await client.request(5, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
        assert "result" in added
        assert "result" in await client.request(6, "tools/list")
        await expect_limited(await client.post(b'{"jsonrpc":"2.0","id":7,"method":"tools/list"}'), 7, 1)
        # a tool's bucket is the tool's, whoever calls it: another address (no principal here) finds it empty
        other = await asgi.request("POST", headers=client.headers(), body=call_body(8, "echo", {"text": "z"}),
                                   client=("192.0.2.9", 1))  # fmt: skip
        await expect_limited(other, 8, 2)


async def test_2026_a_principal_gets_n_requests_whatever_its_address() -> None:
    app = limited("principal=3/min", principal=True)
    async with open_asgi_client(app) as asgi:
        modern = Modern(asgi)
        alice = {**_modern_headers("tools/call", "echo"), "x-user": "alice"}
        for n in range(3):
            address = ("192.0.2.1", 1000 + n)
            status, body = await modern.call("tools/call", ECHO, headers=alice, client=address)
            assert status == 200 and "result" in body, body
        await expect_limited(await modern.post("tools/call", ECHO, headers=alice), modern.next_id, 3)
        bob = {**_modern_headers("tools/call", "echo"), "x-user": "bob"}
        status, body = await modern.call("tools/call", ECHO, headers=bob)
        assert status == 200 and "result" in body
        # a notification is not counted (answered 202 as before)
        notification = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                   "params": {"requestId": 1, "_meta": _meta()}}).encode()  # fmt: skip
        headers = {**_modern_headers("notifications/cancelled"), "x-user": "alice"}
        sent = await asgi.request("POST", headers=headers, body=notification)
        assert sent.status == 202


async def test_2026_a_tool_limit_hit_is_refused_before_the_tool_runs() -> None:
    server = build_demo_server()
    calls: list[str] = []

    @server.tool()
    async def costly() -> str:
        calls.append("ran")
        return "done"

    app = MCPApp(server, ServerConfig(rate_limits=[RateLimit.parse("tool:costly=1/h")]))
    async with open_asgi_client(app) as asgi:
        modern = Modern(asgi)
        status, body = await modern.call("tools/call", {"name": "costly", "arguments": {}})
        assert status == 200 and not body["result"].get("isError")
        response = await modern.post("tools/call", {"name": "costly", "arguments": {}})
        error = await expect_limited(response, modern.next_id, 1, 3600)
        assert error["data"]["retryAfterMs"] > 3_000_000  # an hour's token
        assert calls == ["ran"]


async def test_2026_a_session_limit_counts_by_the_client_session_id_of_each_principal() -> None:
    app = limited("session=2/min", principal=True)
    async with open_asgi_client(app) as asgi:
        modern = Modern(asgi)
        conversation = "6f1c1e7a-3b0e-4d5e-9a51-4b7e0c2d8f10"
        alice = {**_modern_headers("tools/call", "echo"), "x-user": "alice"}
        alice_1 = {**alice, "mcp-client-session-id": conversation}
        for _ in range(2):
            status, body = await modern.call("tools/call", ECHO, headers=alice_1)
            assert status == 200 and "result" in body, body
        refused_call = await modern.post("tools/call", ECHO, headers=alice_1)
        error = await expect_limited(refused_call, modern.next_id, 2)
        assert "session" in error["message"]
        # the same id in _meta alone is the same conversation
        in_meta = {**ECHO, "_meta": {**meta(), "clientSessionId": conversation.upper()}}
        await expect_limited(await modern.post("tools/call", in_meta, headers=alice), modern.next_id, 2)
        # another conversation of alice's, the same id sent by bob (scoped by the principal), and a
        # request with no id (nothing to count it by) are admitted
        others = [
            {**alice, "mcp-client-session-id": "0e3b1a52-88f4-4f27-bd2c-5d9f0a6c7e31"},
            {**alice_1, "x-user": "bob"},
            alice,
            {**alice, "mcp-client-session-id": "not-a-uuid"},  # ignored, as no id
        ]
        for headers in others:
            for _ in range(2):
                status, body = await modern.call("tools/call", ECHO, headers=headers)
                assert status == 200 and "result" in body, (headers, body)
        assert app.statistics()["rate_limited"]["session"] == 2


def _meta() -> dict[str, Any]:
    return meta()


def _modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    return headers_for(method, name)


async def test_no_limits_no_statistics() -> None:
    app = MCPApp(build_demo_server())
    assert "rate_limited" not in app.statistics()
    assert not any(name.startswith("mcp_trio_rate_limit") for name, *_ in samples(app.statistics()))


# -- on WebSocket and stdio: the JSON-RPC error alone ------------------------------------------------


async def _websocket(app: MCPApp, messages: list[dict[str, Any]], expect: int) -> list[dict[str, Any]]:
    """Open one WebSocket connection to ``app`` (running) in memory, send ``messages``, return the
    first ``expect`` messages the server sent (then disconnect)."""
    incoming_tx, incoming_rx = trio.open_memory_channel[dict[str, Any]](100)
    received: list[dict[str, Any]] = []
    enough = trio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            received.append(json.loads(message["text"]))
            if len(received) >= expect:
                enough.set()

    scope = {
        "type": "websocket", "path": "/mcp", "headers": [(b"host", b"127.0.0.1:8000")],
        "subprotocols": ["mcp"], "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    await incoming_tx.send({"type": "websocket.connect"})
    for message in messages:
        await incoming_tx.send({"type": "websocket.receive", "text": json.dumps(message)})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, scope, incoming_rx.receive, send)
        with trio.fail_after(10):
            await enough.wait()
        await incoming_tx.send({"type": "websocket.disconnect", "code": 1000})
    return received


async def test_websocket_gets_the_jsonrpc_error() -> None:
    app = limited("session=3/min")
    client = {"name": "t", "version": "1"}
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    pings = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(2, 5)]
    async with app.running():
        answers = await _websocket(app, [init, *pings], expect=4)
    by_id = {answer["id"]: answer for answer in answers}
    assert "result" in by_id[1] and "result" in by_id[2] and "result" in by_id[3]
    error = by_id[4]["error"]
    assert error["code"] == RATE_LIMITED and error["data"]["limit"] == 3 and error["data"]["remaining"] == 0
    assert error["data"]["retryAfterMs"] > 0
    assert app.statistics()["rate_limited"]["session"] == 1


async def test_websocket_connections_share_their_address_bucket() -> None:
    app = limited("address=2/min")
    pings = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(2)]
    async with app.running():
        first = await _websocket(app, pings, expect=2)
        assert all("result" in answer for answer in first)
        second = await _websocket(app, pings[:1], expect=1)  # a new connection from the same address
    assert second[0]["error"]["code"] == RATE_LIMITED


async def test_stdio_gets_the_jsonrpc_error() -> None:
    server = build_demo_server()
    config = ServerConfig(rate_limits=[RateLimit.parse("method:tools/list=1/min")])
    async with open_stdio(server, config) as stdio:
        first = await stdio.call(1, "tools/list", {"_meta": modern_meta()})
        assert "result" in first
        second = await stdio.call(2, "tools/list", {"_meta": modern_meta()})
        assert second["error"]["code"] == RATE_LIMITED and second["error"]["data"]["limit"] == 1


# -- the command line, and the shared store before it connects -------------------------------------


def test_the_command_line_option(capsys: pytest.CaptureFixture[str]) -> None:
    from mcp_trio._cli import _parser, config_from_args, main

    argv = ["demo", "--rate-limit", "address=100/min", "--rate-limit", "tool:search=5/s"]
    args = _parser().parse_args(argv)
    limits = config_from_args(args).rate_limits
    assert limits == (RateLimit("address", 100, 60.0), RateLimit("tool:search", 5, 1.0))
    assert config_from_args(_parser().parse_args(["demo"])).rate_limits == ()
    for wrong, said in (
        ("everyone=5/s", "rate limit scope 'everyone': one of principal, address"),
        ("address=5", "rate limit 'address=5': SCOPE=N/PERIOD"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["demo", "--rate-limit", wrong])
        assert exited.value.code == 2
        assert f"--rate-limit: {said}" in capsys.readouterr().err


async def test_redis_store_not_connected_leaves_the_decision_to_local_buckets() -> None:
    from mcp_trio.redis import RedisRateLimiter

    store = RedisRateLimiter("redis://127.0.0.1:9/0")
    limit = RateLimit.parse("address=1/min")
    assert await store.take({(limit, "10.0.0.1"): 1}) is None  # not connected: not asked
    stats = store.statistics()
    assert stats["state"] == "stopped" and stats["not_connected"] == 1
    first, second = store.key(limit, "10.0.0.1"), store.key(limit, "10.0.0.2")
    assert first.startswith("mcp_trio:rl:") and first != second and "10.0.0.1" not in first
    assert store.key(RateLimit.parse("address=2/min"), "10.0.0.1") != first  # a limit of its own
    with pytest.raises(ValueError, match="Redis URL"):
        RedisRateLimiter("http://127.0.0.1:6379")
    with pytest.raises(ValueError, match="timeout"):
        RedisRateLimiter("redis://127.0.0.1:6379", timeout=0)
    with pytest.raises(ValueError, match="retry_initial"):
        RedisRateLimiter("redis://127.0.0.1:6379", retry_initial=2, retry_max=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        with pytest.raises(RuntimeError, match="already running"):
            await store.run()
        nursery.cancel_scope.cancel()
    # an app with such a store: the local buckets still hold while it cannot answer
    app = MCPApp(
        build_demo_server(),
        ServerConfig(rate_limits=[limit], rate_limit_store_factory=lambda: RedisRateLimiter("redis://127.0.0.1:9")),
    )
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        await expect_limited(await client.post(b'{"jsonrpc":"2.0","id":2,"method":"ping"}'), 2, 1)
        stats = app.statistics()
        assert stats["rate_limit_store"]["state"] in ("connecting", "disconnected")
        found = {name: values for name, _, _, values in samples(stats)}
        assert ({"link": "ratelimits"}, 0.0) in found["mcp_trio_redis_up"]


def test_a_limit_given_twice_is_one_limit() -> None:
    limit = RateLimit.parse("address=5/s")
    limits = RateLimits([limit, RateLimit.parse("address=5/s")], PrincipalKeys())
    assert limits.limits == (limit,)
    request = mt.JSONRPCRequest(jsonrpc="2.0", id=1, method="ping")
    assert limits.keys([request], None, "10.0.0.1", None) == {(limit, "10.0.0.1"): 1}
    assert limits.keys([request], None, None, None) == {}  # nothing to count it by


async def test_what_no_limit_counts_is_admitted_at_once() -> None:
    request = mt.JSONRPCRequest(jsonrpc="2.0", id=1, method="ping")
    none = RateLimits([], PrincipalKeys())
    assert not none and await none.check([request], "p", "10.0.0.1", "s") is None and none.statistics() == {}
    by_address = RateLimits([RateLimit.parse("address=1/h")], PrincipalKeys())
    assert await by_address.check([], None, "10.0.0.1", None) is None  # no request (notifications only)
    for _ in range(3):  # stdio: no address to count by
        assert await by_address.check([request], None, None, "c:1") is None
    assert by_address.statistics()["rate_limit_admitted"] == 0
