"""A 2025-era session the server answers 404 for is renewed for the calls that follow (a new
``initialize``, the log level and subscriptions again, a new GET stream), while the requests of the old
session raise ``SessionExpired``; ``renew_on_expiry=False`` keeps ``SessionExpired`` for every call.

Against a hand-written server with a table of live sessions (so that a session can be forgotten behind
the client's back; ``FakeServer`` in conftest.py) and against the demo server.  Every test also checks
that the session left nothing behind (no task, no connection still checked out).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import open_client_session
from mcp_trio.errors import SessionExpired, TransportError

from .conftest import (
    VERSION,
    Demo,
    Fake,
    Request,
    Send,
    accept_202,
    answer_call,
    assert_clean,
    body,
    client_tasks,
    event,
    eventually,
    reply,
    result_of,
    start_response,
)

STEP = 10.0
"""Seconds one exchange may take on a loaded machine: a bound against a hang, not a measure of speed."""


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


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
    first, again = ({k: v for k, v in i.message["params"].items() if k != "_meta"} for i in inits)
    assert first == again  # the same options (each request has its own trace context in _meta)
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
    # the renewed session keeps the client session id (Mcp-Client-Session-Id), in each header and _meta
    assert {r.headers.get("mcp-client-session-id") for r in fake.server.log} == {s.client_session_id}
    assert {i.message["params"]["_meta"]["clientSessionId"] for i in inits} == {s.client_session_id}
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
    inits = fake.server.requests("POST", "initialize")
    assert len(inits) == 3
    assert inits[2].at - inits[1].at >= 0.95  # renewals at most one a second (MIN_RENEWAL_INTERVAL)
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
