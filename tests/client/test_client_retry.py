"""The client sends again a message answered 503 or 429 (``Retry-After`` in seconds or as an HTTP date,
a backoff without it, bounded by ``retry_attempts`` and ``retry_budget``, then ``ServerBusy``): requests
in both eras, notifications, the GET stream, a resumption, the DELETE, ``subscriptions/listen``.

Against hand-written servers (``FakeServer`` in conftest.py).  Every test also checks that the session
left nothing behind (no task, no connection still checked out).
"""

from __future__ import annotations

import email.utils
import math
import time
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import open_client_session
from mcp_trio._client.retry import RetryPolicy, retry_after
from mcp_trio.errors import ServerBusy, TransportError

from .conftest import (
    Fake,
    Handler,
    Request,
    Send,
    accept_202,
    answer_200,
    answer_call,
    assert_clean,
    body,
    event,
    eventually,
    reply,
    result_of,
    start_response,
    tool_result,
)

STEP = 10.0
"""Seconds one exchange may take on a loaded machine: a bound against a hang, not a measure of speed."""


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


def busy(status: int = 503, after: str | None = None, then: Handler = answer_call) -> Handler:
    """A handler answering ``status`` (with ``Retry-After: after``) the first time, then ``then``."""

    async def handler(request: Request, send: Send) -> None:
        if not getattr(handler, "done", False):
            handler.done = True  # type: ignore[attr-defined]
            headers = {} if after is None else {"retry_after": after}
            await start_response(send, status, "text/plain", **headers)
            await body(send, b"busy", more=False)
            return
        await then(request, send)

    return handler


def refused(status: int = 503, after: str | None = None) -> Handler:
    """A handler that always answers ``status`` (with ``Retry-After: after``)."""

    async def handler(request: Request, send: Send) -> None:
        headers = {} if after is None else {"retry_after": after}
        await start_response(send, status, "text/plain", **headers)
        await body(send, b"busy", more=False)

    return handler


# -- Retry-After, read -----------------------------------------------------------------------------


def test_retry_after_values() -> None:
    now = time.time()
    assert retry_after(None) is None
    assert retry_after("0") == 0.0
    assert retry_after(" 7 ") == 7.0
    assert retry_after("9" * 40) == math.inf
    assert retry_after("-1") is None
    assert retry_after("1.5") is None  # delta-seconds are whole
    assert retry_after("soon") is None
    assert retry_after("\u0663") is None  # a digit, but not an ASCII one
    date = email.utils.formatdate(now + 120, usegmt=True)
    assert 118 <= (retry_after(date, now) or 0) <= 120
    assert retry_after(email.utils.formatdate(now - 3600, usegmt=True), now) == 0.0


@pytest.mark.parametrize(
    "attempts, budget",
    [(0, 30.0), (True, 30.0), (2.5, 30.0), (5, -1.0), (5, math.inf), (5, math.nan), (5, "30")],
)
def test_retry_policy_refuses_nonsense(attempts: Any, budget: Any) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts, budget)


async def test_open_client_session_refuses_a_bad_policy_before_sending(fake: Fake) -> None:
    with pytest.raises(ValueError, match="retry_attempts"):
        async with open_client_session(fake.url, mode="legacy", retry_attempts=0):
            pass
    assert fake.server.log == []


# -- 503 and 429 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_503_with_retry_after_then_success(fake: Fake, http: httpx.AsyncClient, mode: str) -> None:
    """The server answers 503 ``Retry-After: 1``: the same message is sent again, not before 1 s."""
    fake.server.call = busy(503, "1")
    async with open_client_session(fake.url, mode=mode, http=http) as s:  # type: ignore[arg-type]
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work", {"n": 1})) == "ok"
    calls = fake.server.requests("POST", "tools/call")
    assert len(calls) == 2
    assert calls[0].message == calls[1].message  # the same request, the same id
    assert calls[1].at - calls[0].at >= 1.0, calls[1].at - calls[0].at
    assert_clean(http)


async def test_429_without_retry_after_backs_off(fake: Fake, http: httpx.AsyncClient) -> None:
    fake.server.call = busy(429)
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "ok"
    calls = fake.server.requests("POST", "tools/call")
    assert len(calls) == 2
    assert calls[1].at - calls[0].at >= 0.5  # the first backoff
    assert_clean(http)


async def test_retry_after_as_http_date(fake: Fake, http: httpx.AsyncClient) -> None:
    fake.server.call = busy(503, email.utils.formatdate(time.time() + 2, usegmt=True))
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "ok"
    calls = fake.server.requests("POST", "tools/call")
    assert len(calls) == 2
    assert calls[1].at - calls[0].at >= 0.9  # the date has whole seconds: between 1 and 2 s from now
    assert_clean(http)


async def test_retries_exhausted_raise_server_busy(fake: Fake, http: httpx.AsyncClient) -> None:
    fake.server.call = refused(503, "0")
    async with open_client_session(fake.url, mode="legacy", http=http, retry_attempts=3) as s:
        with trio.fail_after(STEP), pytest.raises(ServerBusy) as caught:
            await s.call_tool("work")
        assert caught.value.status == 503
        assert caught.value.retry_after == 0.0
        assert caught.value.attempts == 3
        assert isinstance(caught.value, TransportError)
        fake.server.call = answer_call  # the session is still usable
        assert text_of(await s.call_tool("work")) == "ok"
    assert len(fake.server.requests("POST", "tools/call")) == 4
    assert_clean(http)


async def test_retry_budget_caps_the_total_wait(fake: Fake, http: httpx.AsyncClient) -> None:
    """No ``Retry-After``, many attempts allowed, a budget of 1.5 s: the retries stop when it runs out."""
    fake.server.call = refused(429)
    async with open_client_session(
        fake.url, mode="legacy", http=http, retry_attempts=100, retry_budget=1.5
    ) as s:
        start = trio.current_time()
        with trio.fail_after(STEP), pytest.raises(ServerBusy) as caught:
            await s.call_tool("work")
        elapsed = trio.current_time() - start
    assert caught.value.status == 429
    assert caught.value.retry_after is None
    calls = fake.server.requests("POST", "tools/call")
    assert 2 <= len(calls) == caught.value.attempts <= 4  # 0.5 s, then 1 s (cut to what was left)
    assert 1.5 <= elapsed < 1.5 + STEP, elapsed
    assert_clean(http)


async def test_retry_after_over_the_budget_gives_up_at_once(fake: Fake, http: httpx.AsyncClient) -> None:
    fake.server.call = refused(503, "120")
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        start = trio.current_time()
        with trio.fail_after(STEP), pytest.raises(ServerBusy) as caught:
            await s.call_tool("work")
        assert trio.current_time() - start < STEP  # not the 120 s asked, nor the 30 s budget
    assert caught.value.retry_after == 120.0
    assert caught.value.attempts == 1
    assert len(fake.server.requests("POST", "tools/call")) == 1
    assert_clean(http)


async def test_retry_attempts_1_retries_nothing(fake: Fake, http: httpx.AsyncClient) -> None:
    fake.server.call = busy(503, "0")
    async with open_client_session(fake.url, mode="legacy", http=http, retry_attempts=1) as s:
        with trio.fail_after(STEP), pytest.raises(ServerBusy):
            await s.call_tool("work")
    assert len(fake.server.requests("POST", "tools/call")) == 1
    assert_clean(http)


async def test_notifications_get_stream_and_delete_are_retried(fake: Fake, http: httpx.AsyncClient) -> None:
    """``notifications/initialized``, the GET stream and the DELETE, each answered 503 once."""
    got: list[dict[str, Any]] = []
    gets: list[Request] = []

    async def get(request: Request, send: Send) -> None:
        gets.append(request)
        if len(gets) == 1:
            await reply(send, 503, b"busy", "text/plain")
            return
        await start_response(send)
        await body(send, event({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
        await request.disconnected.wait()

    async def on_notification(message: dict[str, Any]) -> None:
        got.append(message)

    fake.server.notify = busy(503, "0", accept_202)
    fake.server.get = get
    fake.server.delete = busy(503, "0", answer_200)
    async with open_client_session(fake.url, mode="legacy", http=http, on_notification=on_notification) as s:
        await eventually(lambda: len(got) == 1, within=STEP)
        assert text_of(await s.call_tool("work")) == "ok"
    assert len(fake.server.requests("POST", "notifications/initialized")) == 2
    assert len(gets) == 2
    assert len(fake.server.requests("DELETE")) == 2
    assert_clean(http)


async def test_resumption_answered_503_is_retried(fake: Fake, http: httpx.AsyncClient) -> None:
    """A POST stream ends before its response; the GET that resumes it is answered 503 once (the
    session is being moved to another worker), then the response comes."""
    resumes: list[Request] = []

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(id="e1", retry=10))
        await body(send, b"", more=False)

    async def get(request: Request, send: Send) -> None:
        if "last-event-id" not in request.headers:
            await reply(send, 405, b"", "text/plain")
            return
        resumes.append(request)
        if len(resumes) == 1:
            await start_response(send, 503, "text/plain", retry_after="1")
            await body(send, b"moving", more=False)
            return
        await start_response(send)
        await body(send, event(tool_result(fake.server.requests("POST", "tools/call")[-1], "moved"), id="e2"))
        await body(send, b"", more=False)

    fake.server.call = call
    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "moved"
    assert [r.headers["last-event-id"] for r in resumes] == ["e1", "e1"]
    assert resumes[1].at - resumes[0].at >= 1.0
    assert_clean(http)


async def test_listen_answered_503_is_retried(fake: Fake, http: httpx.AsyncClient) -> None:
    """2026 era: ``subscriptions/listen`` answered 503 once, then acknowledged."""
    attempts: list[Request] = []

    async def call(request: Request, send: Send) -> None:
        attempts.append(request)
        if len(attempts) == 1:
            await start_response(send, 503, "text/plain", retry_after="0")
            await body(send, b"busy", more=False)
            return
        ack = {"notifications": {"toolsListChanged": True}}
        await start_response(send)
        await body(
            send,
            event({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": ack}),
        )
        await body(send, event(result_of(request)), more=False)

    fake.server.call = call
    async with open_client_session(fake.url, mode="modern", http=http) as s:
        with trio.fail_after(STEP):
            async with s.listen(tools=True) as subscription:
                assert subscription.acknowledged == {"toolsListChanged": True}
                assert [m async for m in subscription] == []
                assert subscription.closed_gracefully
    assert [r.message["method"] for r in attempts] == ["subscriptions/listen"] * 2
    assert attempts[0].message == attempts[1].message
    assert_clean(http)
