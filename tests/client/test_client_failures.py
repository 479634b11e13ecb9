"""The client against hand-written servers that misbehave (plain ASGI apps served by hypercorn on
127.0.0.1:0, see ``FakeServer`` in conftest.py): streams that end early, resumption, malformed events,
a black-holed DELETE, a broken GET stream, an expired session, and a session closed mid-request.

Every test also checks that the session left nothing behind: no task, and no connection of the test's
own ``httpx.AsyncClient`` (passed with ``http=``) still checked out of its pool.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import RPCError, open_client_session
from mcp_trio.errors import MCPTrioError, SessionExpired, TransportError

from .conftest import (
    SESSION_ID,
    VERSION,
    Fake,
    Request,
    Send,
    answer_call,
    assert_clean,
    body,
    checked_out,
    client_tasks,
    event,
    eventually,
    reply,
    start_response,
    tool_result,
    wait_disconnect,
)

MODES = ["legacy", "modern"]
STEP = 10.0
"""Seconds one exchange may take on a loaded machine (two test workers, coverage): a bound against a hang,
not a measure of speed.  What a test says about time it checks with lower bounds and counts."""


def note(text: str) -> dict[str, Any]:
    """A log notification carrying ``text``."""
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": text}}


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


class Notes:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def logs(self) -> list[Any]:
        return [m["params"]["data"] for m in self.messages if m.get("method") == "notifications/message"]


# -- (a) a POST stream that ends before the response ----------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_stream_closed_before_response_raises_promptly(
    fake: Fake, http: httpx.AsyncClient, mode: str
) -> None:
    """python-sdk #1811: an SSE answer that ends without the response (and without event ids, so it
    cannot be resumed) fails the call at once; it never hangs."""
    notes = Notes()

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(note("working")))
        await body(send, b"", more=False)

    fake.server.call = call
    async with open_client_session(fake.url, mode=mode, http=http, on_notification=notes) as s:  # type: ignore[arg-type]
        with trio.fail_after(STEP), pytest.raises(TransportError, match="closed the stream"):
            await s.call_tool("work")
        assert notes.logs() == ["working"]
        assert checked_out(http) == []
        fake.server.call = answer_call  # the session is still usable
        assert text_of(await s.call_tool("work")) == "ok"
    # it did not wait to resume: nothing to resume from
    assert [r for r in fake.server.requests("GET") if "last-event-id" in r.headers] == []
    assert_clean(http)


async def test_stream_broken_mid_body_raises_transport_error(fake: Fake, http: httpx.AsyncClient) -> None:
    """The connection breaks in the middle of a POST's SSE body (the app fails after the first event:
    hypercorn aborts the chunked body).  ``TransportError`` documents "a broken connection"."""

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(note("partial")))
        raise RuntimeError("the fake server breaks the connection")

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP), pytest.raises(TransportError):
            await s.call_tool("work")
    assert_clean(http)


# -- (b) resumption with Last-Event-ID ----------------------------------------------------------


async def test_stream_closed_with_event_ids_resumes_after_retry(fake: Fake, http: httpx.AsyncClient) -> None:
    """The POST stream carries event ids and ``retry: 2500`` and ends before the response; the client
    waits 2.5 s (not its 1 s default), GETs with ``Last-Event-ID`` and gets the response there."""
    notes = Notes()
    closed_at: list[float] = []

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(id="e1", retry=2500))  # the priming event
        await body(send, event(note("before the drop"), id="e2"))
        await body(send, b"", more=False)
        closed_at.append(trio.current_time())

    async def get(request: Request, send: Send) -> None:
        if "last-event-id" not in request.headers:
            await reply(send, 405, b"", "text/plain")  # no standalone GET stream
            return
        await start_response(send)
        await body(send, event(note("after the drop"), id="e3"))
        await body(
            send, event(tool_result(fake.server.requests("POST", "tools/call")[-1], "resumed"), id="e4")
        )
        await body(send, b"", more=False)

    fake.server.call = call
    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http, on_notification=notes) as s:  # type: ignore[arg-type]
        with trio.fail_after(STEP):
            result = await s.call_tool("work")
        assert text_of(result) == "resumed"
        assert notes.logs() == ["before the drop", "after the drop"]
    resumes = [r for r in fake.server.requests("GET") if "last-event-id" in r.headers]
    assert len(resumes) == 1
    resume = resumes[0]
    assert resume.headers["last-event-id"] == "e2"
    assert resume.headers["mcp-session-id"] == SESSION_ID
    assert resume.headers["mcp-protocol-version"] == VERSION
    assert "text/event-stream" in resume.headers["accept"]
    gap = resume.at - closed_at[0]
    assert 2.45 <= gap < 2.5 + STEP, gap  # the server's retry (2500 ms), not the default (1000 ms)
    assert_clean(http)


async def test_resumption_over_several_drops(fake: Fake, http: httpx.AsyncClient) -> None:
    """The resumed stream drops again (new ids); the client resumes from the newest id each time."""

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(id="p1", retry=50))
        await body(send, b"", more=False)

    async def get(request: Request, send: Send) -> None:
        last = request.headers.get("last-event-id")
        if last is None:
            await reply(send, 405, b"", "text/plain")
            return
        await start_response(send)
        if last == "p1":
            await body(send, event(id="p2"))
        else:
            assert last == "p2"
            await body(
                send, event(tool_result(fake.server.requests("POST", "tools/call")[-1], "third"), id="p3")
            )
        await body(send, b"", more=False)

    fake.server.call = call
    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "third"
    resumes = [
        r.headers["last-event-id"] for r in fake.server.requests("GET") if "last-event-id" in r.headers
    ]
    assert resumes == ["p1", "p2"]
    assert_clean(http)


async def test_resumption_gives_up_after_bounded_attempts(fake: Fake, http: httpx.AsyncClient) -> None:
    """Resumed streams that never carry the response: a bounded number of attempts, then TransportError."""

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(id="r0", retry=50))
        await body(send, b"", more=False)

    async def get(request: Request, send: Send) -> None:
        if "last-event-id" not in request.headers:
            await reply(send, 405, b"", "text/plain")
            return
        n = len([r for r in fake.server.requests("GET") if "last-event-id" in r.headers])
        await start_response(send)
        await body(send, event(id=f"r{n}"))
        await body(send, b"", more=False)

    fake.server.call = call
    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP), pytest.raises(TransportError):
            await s.call_tool("work")
    resumes = [
        r.headers["last-event-id"] for r in fake.server.requests("GET") if "last-event-id" in r.headers
    ]
    assert 1 <= len(resumes) <= 5
    assert resumes == [f"r{n}" for n in range(len(resumes))]
    assert_clean(http)


async def test_resumption_refused_with_404_is_session_expired(fake: Fake, http: httpx.AsyncClient) -> None:
    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        await body(send, event(id="x1", retry=10))
        await body(send, b"", more=False)

    async def get(request: Request, send: Send) -> None:
        status = 404 if "last-event-id" in request.headers else 405
        await reply(send, status, b"gone", "text/plain")

    fake.server.call = call
    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP), pytest.raises(SessionExpired):
            await s.call_tool("work")
    assert_clean(http)


# -- (c) malformed events -----------------------------------------------------------------------


async def test_malformed_sse_data_is_ignored(fake: Fake, http: httpx.AsyncClient) -> None:
    notes = Notes()

    async def call(request: Request, send: Send) -> None:
        await start_response(send)
        for raw in ("not json", "{broken", "[1, 2]", "42", '"a string"', "null", "{}"):
            await body(send, event(raw=raw))
        await body(send, event({"jsonrpc": "2.0", "id": 987654, "result": {}}))  # a stray response
        await body(
            send, b'event: message\ndata: {"jsonrpc": "2.0",\ndata:  "method": "notifications/message",\n'
        )
        await body(send, b'data: "params": {"level": "info", "data": "split"}}\n\n')  # one event, three lines
        await body(send, b": a comment\n\n")
        await body(send, event(tool_result(request, "fine")))
        await body(send, b"", more=False)

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http, on_notification=notes) as s:  # type: ignore[arg-type]
        with trio.fail_after(STEP):
            assert text_of(await s.call_tool("work")) == "fine"
    assert notes.logs() == ["split"]
    assert_clean(http)


@pytest.mark.parametrize(
    "payload", [b"this is not json", b"[1, 2]", b'"text"'], ids=["garbage", "list", "string"]
)
async def test_malformed_json_answer_is_transport_error(
    fake: Fake, http: httpx.AsyncClient, payload: bytes
) -> None:
    """An ``application/json`` answer that is not a JSON-RPC message: a ``TransportError`` (the exchange
    failed), not a raw ``json.JSONDecodeError`` / ``AttributeError`` from the client's parsing."""

    async def call(request: Request, send: Send) -> None:
        await reply(send, 200, payload)

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP), pytest.raises(TransportError):
            await s.call_tool("work")
    assert_clean(http)


# -- (d) a black-holed DELETE -------------------------------------------------------------------


async def test_black_holed_delete_costs_delete_grace(fake: Fake, http: httpx.AsyncClient) -> None:
    """DELETE is given ``delete_grace`` (3 s here, more than the 2 s default: the lower bound shows the
    one given is used), then dropped: the block ends (well within STEP)."""
    fake.server.delete = wait_disconnect
    async with open_client_session(fake.url, mode="legacy", http=http, delete_grace=3.0) as s:
        assert text_of(await s.call_tool("work")) == "ok"
        start = trio.current_time()
    elapsed = trio.current_time() - start
    assert 2.95 <= elapsed < 3.0 + STEP, elapsed
    deletes = fake.server.requests("DELETE")
    assert len(deletes) == 1
    assert deletes[0].headers["mcp-session-id"] == SESSION_ID
    with trio.fail_after(STEP):
        await deletes[0].disconnected.wait()  # the client dropped the connection
    assert_clean(http)


async def test_black_holed_delete_under_cancellation(fake: Fake, http: httpx.AsyncClient) -> None:
    """Leaving the block because of a cancellation: DELETE is still tried (shielded), still bounded."""
    fake.server.delete = wait_disconnect
    with trio.CancelScope() as cancelled:
        async with open_client_session(fake.url, mode="legacy", http=http, delete_grace=3.0):
            start = trio.current_time()  # once the session is open (a loaded machine may take a while)
            cancelled.cancel()
            await trio.sleep_forever()
    assert 2.95 <= trio.current_time() - start < 3.0 + STEP
    assert len(fake.server.requests("DELETE")) == 1
    assert_clean(http)


# -- (e) a broken standalone GET stream ---------------------------------------------------------


async def test_get_stream_405_leaves_posts_working(fake: Fake, http: httpx.AsyncClient) -> None:
    """go-sdk #1175: the GET stream is optional; a 405 ends it quietly, once, and POSTs keep working."""
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        for n in range(3):
            assert text_of(await s.call_tool("work", {"n": n})) == "ok"
        await eventually(lambda: client_tasks() == [], within=STEP)  # the GET task ended
        assert text_of(await s.call_tool("work")) == "ok"
    assert len(fake.server.requests("GET")) == 1
    assert_clean(http)


async def test_get_stream_refused_500_leaves_posts_working(fake: Fake, http: httpx.AsyncClient) -> None:
    async def get(request: Request, send: Send) -> None:
        await reply(send, 500, b"boom", "text/plain")

    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        assert text_of(await s.call_tool("work")) == "ok"
        await eventually(lambda: client_tasks() == [], within=STEP)  # the GET task gave up, for good
        assert text_of(await s.call_tool("work")) == "ok"
    assert len(fake.server.requests("GET")) == 1
    assert_clean(http)


async def test_get_stream_dropping_repeatedly_leaves_posts_working(
    fake: Fake, http: httpx.AsyncClient
) -> None:
    """The GET stream ends after one event, again and again: the client reconnects (with Last-Event-ID,
    at the server's ``retry`` pace, not in a hot loop), delivers the events, and POSTs are unaffected."""
    notes = Notes()

    async def get(request: Request, send: Send) -> None:
        n = len(fake.server.requests("GET"))
        await start_response(send)
        await body(send, event(note(f"get {n}"), id=f"g{n}", retry=100))
        await body(send, b"", more=False)

    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http, on_notification=notes) as s:  # type: ignore[arg-type]
        start = trio.current_time()
        for n in range(10):
            assert text_of(await s.call_tool("work", {"n": n})) == "ok"
            await trio.sleep(0.1)
        elapsed = trio.current_time() - start
    gets = fake.server.requests("GET")
    assert 3 <= len(gets) <= elapsed / 0.1 + 2, (len(gets), elapsed)
    assert "last-event-id" not in gets[0].headers
    assert [g.headers["last-event-id"] for g in gets[1:]] == [f"g{n}" for n in range(1, len(gets))]
    gaps = [b.at - a.at for a, b in itertools.pairwise(gets)]
    assert min(gaps) >= 0.09, gaps
    assert notes.logs()[: len(gets) - 1] == [f"get {n}" for n in range(1, len(gets))]
    assert_clean(http)


async def test_get_stream_is_open_before_the_block_starts(fake: Fake, http: httpx.AsyncClient) -> None:
    """A server that sends what concerns no request only on an open GET stream (and drops it when none
    is open: the typescript-sdk) must find the stream open by the first request of the block: the
    session's opening waits for the GET's answer, here 0.3 s late."""
    answered: list[float] = []
    notes = Notes()

    async def get(request: Request, send: Send) -> None:
        await trio.sleep(0.3)
        await start_response(send)
        answered.append(trio.current_time())
        await body(send, event(note("on the GET stream")))
        await trio.sleep_forever()

    fake.server.get = get
    async with open_client_session(fake.url, mode="legacy", http=http, on_notification=notes) as s:  # type: ignore[arg-type]
        assert len(answered) == 1, "the block started before the GET stream was answered"
        assert fake.server.requests("POST", "tools/call") == []
        assert text_of(await s.call_tool("work")) == "ok"
        await eventually(lambda: notes.logs() == ["on the GET stream"], within=STEP)
    assert_clean(http)


async def test_get_stream_never_answered_holds_the_opening_boundedly(
    fake: Fake, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that never answers the GET holds the opening for ``GET_STREAM_WAIT`` seconds, no longer;
    the GET stays pending (it may still be answered) and POSTs work meanwhile."""
    from mcp_trio._client import session as client_session

    monkeypatch.setattr(client_session, "GET_STREAM_WAIT", 0.5)

    async def get(request: Request, send: Send) -> None:
        await trio.sleep_forever()

    fake.server.get = get
    start = trio.current_time()
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        waited = trio.current_time() - start
        assert 0.5 <= waited < 0.5 + STEP, waited
        assert text_of(await s.call_tool("work")) == "ok"
        assert len(fake.server.requests("GET")) == 1
    assert_clean(http)


# -- (f) an expired session ---------------------------------------------------------------------


NOT_FOUND_BODIES = {
    "plain": (b"Not Found", "text/plain"),
    "jsonrpc-id-null": (  # typescript-sdk, python-sdk 2.x
        json.dumps(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}
        ).encode(),
        "application/json",
    ),
    "jsonrpc-id-server-error": (  # python-sdk 1.x: JSONRPCError(id="server-error", ...)
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": "server-error",
                "error": {"code": -32600, "message": "Session not found"},
            }
        ).encode(),
        "application/json",
    ),
}


@pytest.mark.parametrize("kind", list(NOT_FOUND_BODIES))
async def test_404_for_the_session_is_session_expired(fake: Fake, http: httpx.AsyncClient, kind: str) -> None:
    payload, content_type = NOT_FOUND_BODIES[kind]

    async def call(request: Request, send: Send) -> None:
        await reply(send, 404, payload, content_type)

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP), pytest.raises(SessionExpired) as caught:
            await s.call_tool("work")
        assert caught.value.status == 404
    assert_clean(http)


async def test_404_answering_our_request_is_rpc_error(fake: Fake, http: httpx.AsyncClient) -> None:
    """A 404 whose body is the JSON-RPC error *for our request id* is that error, not an expiry."""

    async def call(request: Request, send: Send) -> None:
        error = {"code": -32601, "message": "Method not found: tools/call"}
        await reply(send, 404, {"jsonrpc": "2.0", "id": request.message["id"], "error": error})

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(STEP), pytest.raises(RPCError) as caught:
            await s.call_tool("work")
        assert not isinstance(caught.value, SessionExpired)
        assert caught.value.code == -32601
    assert_clean(http)


# -- (g) the session ends while a request runs --------------------------------------------------


async def test_cancelled_block_cancels_the_running_request(fake: Fake, http: httpx.AsyncClient) -> None:
    """The block is cancelled while a call is in flight: the POST is abandoned (the server sees the
    disconnect), ``notifications/cancelled`` names the request, DELETE is sent, and the block exits."""
    fake.server.call = wait_disconnect
    start = trio.current_time()
    with trio.move_on_after(0.3) as scope:
        async with open_client_session(fake.url, mode="legacy", http=http) as s:
            await s.call_tool("work")
    assert scope.cancelled_caught
    assert trio.current_time() - start < 0.3 + STEP  # the never-answered call did not hold the block
    call = fake.server.requests("POST", "tools/call")[0]
    with trio.fail_after(STEP):
        await call.disconnected.wait()
    cancelled = fake.server.requests("POST", "notifications/cancelled")
    assert [c.message["params"]["requestId"] for c in cancelled] == [call.message["id"]]
    assert len(fake.server.requests("DELETE")) == 1
    assert_clean(http)


@pytest.mark.parametrize("mode", MODES)
async def test_request_in_another_task_is_cancelled_when_the_block_exits(
    fake: Fake, http: httpx.AsyncClient, mode: str
) -> None:
    """``open_client_session`` documents: "Requests still running when the block ends are cancelled."
    A call started from a task outside the block (the server never answers it) must end promptly when
    the block exits, with an error, and its POST must be abandoned; the block must not wait for it."""
    fake.server.call = wait_disconnect
    outcome: list[BaseException | mt.CallToolResult] = []
    ended_call = trio.Event()

    async def call(s: Any) -> None:
        try:
            outcome.append(await s.call_tool("work"))
        except Exception as exc:
            outcome.append(exc)
        ended_call.set()

    with trio.fail_after(2 * STEP):
        async with trio.open_nursery() as nursery:
            async with open_client_session(fake.url, mode=mode, http=http) as s:  # type: ignore[arg-type]
                nursery.start_soon(call, s)
                await fake.server.wait_for(lambda: bool(fake.server.requests("POST", "tools/call")))
            with trio.move_on_after(STEP):
                await ended_call.wait()
            nursery.cancel_scope.cancel()  # so that a failure here does not hang the test
    assert outcome, f"the request was still running {STEP} s after the session block exited"
    assert isinstance(outcome[0], MCPTrioError), outcome
    with trio.fail_after(STEP):
        await fake.server.requests("POST", "tools/call")[0].disconnected.wait()
    assert_clean(http)
