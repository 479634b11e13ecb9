"""The client recovers by itself: a message answered 503 or 429 is sent again (``Retry-After``, bounded by
``retry_attempts`` and ``retry_budget``, then ``ServerBusy``), and a 2025-era session the server answers
404 for is renewed for the calls that follow, while the requests of the old session raise
``SessionExpired`` (``renew_on_expiry=False``: no renewal).

Against hand-written servers (``FakeServer`` in conftest.py; here with a table of live sessions, so
that a session can be forgotten behind the client's back) and against the demo server.  Every test also
checks that the session left nothing behind (no task, no connection still checked out).
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import open_client_session
from mcp_trio._client.retry import RetryPolicy, retry_after
from mcp_trio.errors import ServerBusy, SessionExpired, TransportError

from .conftest import (
    VERSION,
    Demo,
    Fake,
    Handler,
    Request,
    Send,
    accept_202,
    answer_200,
    answer_call,
    assert_clean,
    body,
    client_tasks,
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


# -- 404: the session renewed -----------------------------------------------------------------------


class Sessions:
    """The live sessions of a fake server: ``initialize`` opens ``s1``, ``s2``, ...; a request of a
    session not live is answered 404; ``forget()`` drops them all (a restart, say)."""

    def __init__(self, fake: Fake, *, logging: bool = False) -> None:
        self.fake = fake
        self.live: set[str] = set()
        self.opened: list[str] = []
        self.init_delay = 0.0
        self.init_status = 200
        self.logging = logging
        fake.server.initialize = self.initialize
        fake.server.call = self.call
        fake.server.notify = self.notify
        self.answer = answer_call
        self.forgotten = trio.Event()

    def forget(self) -> None:
        self.live.clear()
        self.forgotten.set()

    def known(self, request: Request) -> bool:
        return request.headers.get("mcp-session-id") in self.live

    async def initialize(self, request: Request, send: Send) -> None:
        await trio.sleep(self.init_delay)
        if self.init_status != 200:
            await reply(send, self.init_status, b"no", "text/plain")
            return
        sid = f"s{len(self.opened) + 1}"
        self.opened.append(sid)
        self.live.add(sid)
        capabilities: dict[str, Any] = {"tools": {}, "resources": {"subscribe": True}}
        if self.logging:
            capabilities["logging"] = {}
        result = {"protocolVersion": VERSION, "capabilities": capabilities, "serverInfo": {"name": "f"}}
        head = [(b"mcp-session-id", sid.encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await body(send, json.dumps(result_of(request, result)).encode(), more=False)

    async def notify(self, request: Request, send: Send) -> None:
        if not self.known(request):
            await reply(send, 404, b"no such session", "text/plain")
            return
        await accept_202(request, send)

    async def call(self, request: Request, send: Send) -> None:
        if not self.known(request):
            await reply(send, 404, b"no such session", "text/plain")
            return
        await self.answer(request, send)

    def sent(self, method: str) -> list[str | None]:
        """The session ids the POSTs of ``method`` carried."""
        return [r.headers.get("mcp-session-id") for r in self.fake.server.requests("POST", method)]


async def test_404_renews_the_session_for_the_calls_that_follow(fake: Fake, http: httpx.AsyncClient) -> None:
    """The server forgets the session: the call that meets the 404 raises ``SessionExpired``; the next
    one works on a new session (a new ``initialize``, without a session id), with the log level and the
    resource subscription applied again; the new session is the one DELETEd at the end."""
    sessions = Sessions(fake, logging=True)
    async with open_client_session(fake.url, mode="legacy", http=http, log_level="warning") as s:
        assert s.session_id == "s1"
        await s.subscribe_resource("file:///a")
        await s.subscribe_resource("file:///b")
        await s.unsubscribe_resource("file:///b")
        assert text_of(await s.call_tool("work")) == "ok"
        sessions.forget()
        with trio.fail_after(STEP), pytest.raises(SessionExpired) as caught:
            await s.call_tool("work")
        assert caught.value.status == 404
        assert caught.value.session_id == "s1"
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "ok"
        assert s.session_id == "s2"
        assert s.renewals == 1
        assert s.protocol_version == VERSION
    assert sessions.opened == ["s1", "s2"]
    inits = fake.server.requests("POST", "initialize")
    assert [("mcp-session-id" in r.headers, "mcp-protocol-version" in r.headers) for r in inits] == [
        (False, False)
    ] * 2
    assert inits[0].message["params"] == {**inits[1].message["params"]}  # the same options
    assert sessions.sent("notifications/initialized") == ["s1", "s2"]
    assert sessions.sent("logging/setLevel") == ["s1", "s2"]
    subscribes = fake.server.requests("POST", "resources/subscribe")
    assert [(r.headers["mcp-session-id"], r.message["params"]["uri"]) for r in subscribes] == [
        ("s1", "file:///a"),
        ("s1", "file:///b"),
        ("s2", "file:///a"),
    ]
    assert sessions.sent("tools/call") == ["s1", "s1", "s2"]
    assert [r.headers["mcp-session-id"] for r in fake.server.requests("DELETE")] == ["s2"]
    assert_clean(http)


async def test_request_in_flight_gets_session_expired(fake: Fake, http: httpx.AsyncClient) -> None:
    """A request whose stream is open when another call meets the 404: its stream ends before the
    response, and it raises ``SessionExpired`` (its session is gone; its resumption is not tried on the
    new session); the calls after work on the new session."""
    sessions = Sessions(fake)
    release = trio.Event()
    outcome: list[BaseException | mt.CallToolResult] = []

    async def answer(request: Request, send: Send) -> None:
        if request.message["params"]["name"] != "slow":
            await answer_call(request, send)
            return
        await start_response(send)
        await body(send, event(id="k1", retry=10))
        await release.wait()
        await body(send, b"", more=False)  # ends without the response

    async def slow(s: Any) -> None:
        try:
            outcome.append(await s.call_tool("slow"))
        except Exception as exc:
            outcome.append(exc)

    sessions.answer = answer
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow, s)
            await fake.server.wait_for(lambda: bool(sessions.sent("tools/call")))
            sessions.forget()
            with trio.fail_after(STEP), pytest.raises(SessionExpired):
                await s.call_tool("work")
            with trio.fail_after(STEP):
                assert text_of(await s.call_tool("work")) == "ok"
            release.set()
        assert len(outcome) == 1 and isinstance(outcome[0], SessionExpired), outcome
        assert outcome[0].session_id == "s1"
        assert s.session_id == "s2"
    assert sessions.opened == ["s1", "s2"]
    assert [r for r in fake.server.requests("GET") if "last-event-id" in r.headers] == []
    assert_clean(http)


async def test_concurrent_404s_renew_once(fake: Fake, http: httpx.AsyncClient) -> None:
    """Five calls meet the 404 at once: one renewal.  Calls made while it runs (its ``initialize`` is
    slow) wait for it and go to the new session."""
    sessions = Sessions(fake)
    held: list[Request] = []
    all_in = trio.Event()

    async def answer(request: Request, send: Send) -> None:
        await answer_call(request, send)

    async def call(request: Request, send: Send) -> None:
        if request.headers.get("mcp-session-id") == "s1" and not sessions.live:
            held.append(request)
            if len(held) == 5:
                all_in.set()
            await all_in.wait()  # the five 404s go out together
        await Sessions.call(sessions, request, send)

    failures: list[BaseException] = []
    later: list[str] = []

    async def one(s: Any, into: list[Any]) -> None:
        try:
            into.append(text_of(await s.call_tool("work")))
        except Exception as exc:
            failures.append(exc)

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        sessions.forget()
        sessions.init_delay = 0.5
        with trio.fail_after(STEP):
            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(one, s, later)
            assert len(failures) == 5 and all(isinstance(f, SessionExpired) for f in failures), failures
            await fake.server.wait_for(lambda: len(fake.server.requests("POST", "initialize")) == 2)
            async with trio.open_nursery() as nursery:  # while the renewal's initialize runs
                for _ in range(3):
                    nursery.start_soon(one, s, later)
        assert later == ["ok"] * 3
        assert s.renewals == 1
    assert sessions.opened == ["s1", "s2"]
    assert sessions.sent("tools/call") == ["s1"] * 5 + ["s2"] * 3
    assert_clean(http)


async def test_renew_on_expiry_false_keeps_session_expired(fake: Fake, http: httpx.AsyncClient) -> None:
    sessions = Sessions(fake)
    async with open_client_session(fake.url, mode="legacy", http=http, renew_on_expiry=False) as s:
        sessions.forget()
        for _ in range(2):
            with trio.fail_after(STEP), pytest.raises(SessionExpired):
                await s.call_tool("work")
        assert s.session_id == "s1"
        assert s.renewals == 0
    assert sessions.opened == ["s1"]
    assert sessions.sent("tools/call") == ["s1", "s1"]
    assert_clean(http)


async def test_failed_renewal_fails_the_waiting_call_and_is_tried_again(
    fake: Fake, http: httpx.AsyncClient
) -> None:
    """The new ``initialize`` is refused (500): the call waiting for it raises ``TransportError``; the
    next call tries the renewal again, which works."""
    sessions = Sessions(fake)
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        sessions.forget()
        sessions.init_status = 500
        with trio.fail_after(STEP), pytest.raises(SessionExpired):
            await s.call_tool("work")
        with trio.fail_after(STEP), pytest.raises(TransportError, match="opening a new one failed") as caught:
            await s.call_tool("work")
        assert not isinstance(caught.value, SessionExpired)
        assert s.session_id is None
        sessions.init_status = 200
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "ok"
        assert s.session_id == "s2"
        assert s.renewals == 1
    assert len(fake.server.requests("POST", "initialize")) == 3
    assert_clean(http)


async def test_get_stream_404_renews_the_session(fake: Fake, http: httpx.AsyncClient) -> None:
    """The GET stream drops and its reconnection is answered 404: the session is renewed without any
    call meeting the 404, and the new session's GET stream is opened; the old one's task is gone."""
    sessions = Sessions(fake)
    streams: list[Request] = []

    async def get(request: Request, send: Send) -> None:
        if not sessions.known(request):
            await reply(send, 404, b"no such session", "text/plain")
            return
        streams.append(request)
        await start_response(send)
        await body(send, event(id=f"g{len(streams)}", retry=10))
        async with trio.open_nursery() as nursery:  # until the session is gone (then the stream ends)

            async def until(done: trio.Event) -> None:
                await done.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(until, sessions.forgotten)
            nursery.start_soon(until, request.disconnected)

    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        assert [r.headers["mcp-session-id"] for r in streams] == ["s1"]
        sessions.forget()
        await eventually(lambda: s.renewals == 1 and len(streams) == 2, within=STEP)
        assert s.session_id == "s2"
        assert streams[1].headers["mcp-session-id"] == "s2"
        assert "last-event-id" not in streams[1].headers  # a new session's stream starts afresh
        assert len(client_tasks()) == 1  # the new session's GET stream, nothing of the old one
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "ok"
    assert sessions.opened == ["s1", "s2"]
    assert sessions.sent("tools/call") == ["s2"]
    assert_clean(http)


async def test_get_stream_404_at_once_does_not_renew(fake: Fake, http: httpx.AsyncClient) -> None:
    """A GET answered 404 the first time (never open): the stream ends quietly, no renewal (a server that
    answers 404 to every GET would otherwise be asked to initialize again and again)."""
    sessions = Sessions(fake)

    async def get(request: Request, send: Send) -> None:
        await reply(send, 404, b"no", "text/plain")

    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        await eventually(lambda: client_tasks() == [], within=STEP)
        assert text_of(await s.call_tool("work")) == "ok"
        assert s.renewals == 0
    assert sessions.opened == ["s1"]
    assert len(fake.server.requests("GET")) == 1
    assert_clean(http)


# -- against the demo server ----------------------------------------------------------------------------


@pytest.mark.parametrize("get_stream", [True, False], ids=["get-stream", "no-get-stream"])
async def test_demo_session_deleted_behind_the_clients_back(
    demo: Demo, http: httpx.AsyncClient, get_stream: bool
) -> None:
    """A real server closes the session (a DELETE from elsewhere): with a GET stream, the stream ends and
    its reconnection meets the 404, so the session is renewed before any call; without one, the next
    call raises ``SessionExpired`` and the one after works.  Either way the client goes on with a new
    session, and the server ends up holding just that one (DELETEd at the end)."""
    async with open_client_session(demo.url, mode="legacy", http=http, get_stream=get_stream) as s:
        assert text_of(await s.call_tool("echo", {"text": "one"})) == "one"
        old = s.session_id
        assert old is not None
        headers = {"mcp-session-id": old, "mcp-protocol-version": s.protocol_version or ""}
        gone = await http.delete(demo.url, headers=headers)
        assert gone.status_code == 200
        assert demo.stats()["sessions"] == 0
        if get_stream:
            await eventually(lambda: s.renewals == 1, within=STEP)
        else:
            with trio.fail_after(STEP), pytest.raises(SessionExpired) as caught:
                await s.call_tool("echo", {"text": "lost"})
            assert caught.value.session_id == old
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("echo", {"text": "two"})) == "two"
        assert s.session_id not in (None, old)
        assert s.renewals == 1
        assert demo.stats()["sessions"] == 1
        assert len(client_tasks()) == (1 if get_stream else 0)
    assert demo.stats()["sessions"] == 0
    assert_clean(http)
