"""The client against a server with rate limits (following the draft SEP-3304): a request refused with
429 (HTTP, both eras) or -32023 (WebSocket) is sent again after the wait the server asked for
(``data.retryAfterMs`` before ``Retry-After``), and once the retries are spent, or the wait is longer
than their budget, the call raises :class:`RateLimited`.  A real app, served on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as mt
import pytest
import trio

from mcp_trio import MCPApp, ServerConfig, open_client_session, open_websocket_client, serve
from mcp_trio._client.retry import Retries, RetryPolicy, until_admitted
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import RateLimited, RPCError, ServerBusy
from mcp_trio.server import RateLimit

MODES = ["legacy", "modern"]


async def served(nursery: trio.Nursery, *limits: str, http: str = "hypercorn") -> tuple[MCPApp, str]:
    config = ServerConfig(rate_limits=[RateLimit.parse(spec) for spec in limits], shutdown_grace=1)
    app = MCPApp(build_demo_server(), config)
    urls = await nursery.start(
        lambda task_status: serve(app, "127.0.0.1", 0, http=http, task_status=task_status)  # type: ignore[arg-type]
    )
    return app, urls[0]


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery
        nursery.cancel_scope.cancel()


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


@pytest.mark.parametrize("http", ["hypercorn", "h11"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_refused_call_is_sent_again_after_the_wait_asked(
    nursery: trio.Nursery, mode: str, http: str
) -> None:
    app, url = await served(nursery, "tool:echo=5/s", http=http)  # a token every 200 ms, bursts of 5
    with trio.fail_after(20):
        async with open_client_session(url, mode=mode) as session:  # type: ignore[arg-type]
            for n in range(8):
                assert text_of(await session.call_tool("echo", {"text": str(n)})) == str(n)
    limited = app.statistics()["rate_limited"]["tool"]
    assert limited >= 1  # some were refused, and the client waited and sent them again


@pytest.mark.parametrize("mode", MODES)
async def test_spent_retries_raise_rate_limited(nursery: trio.Nursery, mode: str) -> None:
    app, url = await served(nursery, "tool:echo=2/s")
    with trio.fail_after(20):
        async with open_client_session(url, mode=mode, retry_attempts=1) as session:  # type: ignore[arg-type]
            for _ in range(2):
                await session.call_tool("echo", {"text": "x"})
            with pytest.raises(RateLimited) as caught:
                await session.call_tool("echo", {"text": "x"})
    error = caught.value
    assert isinstance(error, ServerBusy) and error.status == 429 and error.attempts == 1
    assert (error.limit, error.remaining) == (2, 0)
    assert error.retry_after is not None and 0 < error.retry_after <= 0.5
    assert app.statistics()["rate_limited"]["tool"] == 1


async def test_a_wait_longer_than_the_budget_raises_at_once(nursery: trio.Nursery) -> None:
    _, url = await served(nursery, "method:tools/list=1/h")
    with trio.fail_after(20):
        async with open_client_session(url, mode="modern", retry_budget=5) as session:
            await session.list_tools()
            started = trio.current_time()
            with pytest.raises(RateLimited, match="longer wait") as caught:
                await session.list_tools()
            assert trio.current_time() - started < 5  # it did not wait for what it could not have
    assert caught.value.retry_after is not None and caught.value.retry_after > 3000


async def test_over_websocket_the_jsonrpc_error_is_retried(nursery: trio.Nursery) -> None:
    app, url = await served(nursery, "session=4/s")
    with trio.fail_after(20):
        async with open_websocket_client(url, mode="legacy") as session:  # initialize has no session yet
            for n in range(7):
                assert text_of(await session.call_tool("echo", {"text": str(n)})) == str(n)
    assert app.statistics()["rate_limited"]["session"] >= 1


async def test_over_websocket_rate_limited_has_no_status(nursery: trio.Nursery) -> None:
    _, url = await served(nursery, "tool:echo=1/h")
    with trio.fail_after(20):
        async with open_websocket_client(url, mode="modern") as session:
            await session.call_tool("echo", {"text": "x"})
            with pytest.raises(RateLimited) as caught:
                await session.call_tool("echo", {"text": "x"})
    assert caught.value.status is None and caught.value.limit == 1 and caught.value.remaining == 0


# -- the waits, on a mock clock -------------------------------------------------------------------


def limited_body(ms: Any) -> str:
    data = {"retryAfterMs": ms, "limit": 3, "remaining": 0}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32023, "message": "slow", "data": data}})


async def test_retry_after_ms_counts_before_retry_after(autojump_clock: trio.abc.Clock) -> None:
    retries = Retries(RetryPolicy(5, 60))
    cases = ((2500, "3", 2.5, 3.05), ("nonsense", "3", 3.0, 3.65), (10, None, 0.01, 0.07))
    for ms, header, low, high in cases:
        started = trio.current_time()
        await retries.wait("POST", 429, header, limited_body(ms))
        assert low <= trio.current_time() - started <= high, (ms, header)
    started = trio.current_time()
    await retries.wait("POST", 429, "2", "not json")  # a body of another shape: Retry-After
    assert 2 <= trio.current_time() - started <= 2.45
    with pytest.raises(RateLimited) as caught:
        await retries.wait("POST", 429, "1", limited_body(500))
    assert (caught.value.attempts, caught.value.retry_after, caught.value.limit) == (5, 0.5, 3)
    with pytest.raises(ServerBusy) as busy:
        await Retries(RetryPolicy(1, 60)).wait("POST", 503, "1", limited_body(500))
    assert not isinstance(busy.value, RateLimited) and busy.value.retry_after == 1.0


async def test_until_admitted_retries_only_the_rate_limit(autojump_clock: trio.abc.Clock) -> None:
    answers = iter([RPCError(-32023, "slow", {"retryAfterMs": 1000}), RPCError(-32023, "slow", None), "done"])

    async def send() -> str:
        answer = next(answers)
        if isinstance(answer, RPCError):
            raise answer
        return answer

    started = trio.current_time()
    assert await until_admitted("tools/call", send, None) == "done"
    assert trio.current_time() - started >= 1.0 + 1.0  # its 1 s, then the backoff of 1 s
    with pytest.raises(RPCError) as other:

        async def fails() -> str:
            raise RPCError(-32603, "broken")

        await until_admitted("tools/call", fails, None)
    assert other.value.code == -32603
