"""The client against hostile servers: real servers on 127.0.0.1 (the hand-written ``FakeServer`` on
hypercorn, raw WebSocket servers on Trio sockets) that answer with what a hostile or broken server could
send: nesting far deeper than the interpreter's recursion limit, numbers of thousands of digits, ``1e999``
and ``NaN``, lone surrogates, bytes that are not UTF-8, answers over the size limit, ids and results of
the wrong types, on a request's JSON answer, in an SSE event, in an HTTP error answer, on the standalone
GET stream, in a WebSocket message.

The rule checked: each malformed answer fails its own call with a typed exception (an ``MCPTrioError``:
``TransportError``, ``RPCError``...) or is skipped; never an exception of another type, never the end
of the session (its nursery), never a failure of another call running at the same time, never an ERROR
logged by the client (which is how it reports its own bugs).

Some cases are spelled out; then hypothesis generates many, in both eras, over HTTP and WebSocket: one
session per mode lives through all examples, and each example makes a malformed call and a good call
at the same time.  As in tests/integration/test_fuzz.py, ``@given`` runs a sync function in a worker
thread and each example is run back in the test's Trio run (``trio.from_thread.run``);
``derandomize=True`` and no example database: every run tries the same examples.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Ping, Request, TextMessage

from mcp_trio import open_client_session, open_stdio_client, open_websocket_client
from mcp_trio._client.http import MAX_RETRY_DELAY, _retry_delay
from mcp_trio._protocol import safejson
from mcp_trio._protocol.sse import SSEDecoder
from mcp_trio.errors import MCPTrioError, TransportError

from .conftest import (
    Fake,
    Send,
    answer_call,
    assert_clean,
    body,
    start_response,
    tool_result,
)
from .conftest import Request as FakeRequest

LIMIT = 64 * 1024
"""The sessions' ``max_message_size`` here (small, so that answers over it are cheap to make)."""
ID = b'"__ID__"'
"""Stands for the id of the request being answered in a generated body."""
EXAMPLES = 60
PROGRESS = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":'


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def with_id(payload: bytes, request_id: Any) -> bytes:
    return payload.replace(ID, json.dumps(request_id).encode())


def sse(payload: bytes) -> bytes:
    """``payload`` as the data of one SSE event (each line of it a ``data:`` line)."""
    lines = payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


def client_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the client logged at ERROR or above (its own bugs; a server's misbehaviour is INFO)."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("mcp_trio") and record.levelno >= logging.ERROR
    ]


# -- the safe decoder -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (deep(100_000), "nested deeper than 128"),
        (b'{"a":' * 200 + b"1" + b"}" * 200, "nested deeper than 128"),
        (b"1" * 5000, r"too many digits \(more than 1000\)"),
        (b"0." + b"1" * 5000, r"too many characters \(more than 1000\)"),
        (b"1e999", "out of range"),
        (b"[-1e400]", "out of range"),
        (b"NaN", "NaN is not a JSON number"),
        (b"-Infinity", "-Infinity is not a JSON number"),
        (b'"\\ud800"', "lone UTF-16 surrogate"),
        (b'{"\\udc00x": 1}', "lone UTF-16 surrogate"),
        (b'"\xed\xa0\x80"', "not UTF-8"),  # an encoded surrogate
        (b'"\xff"', "not UTF-8"),
        (b"{broken", "not valid JSON"),
        (b'"' + b'\\"' * 10_000, "not valid JSON"),  # an unterminated string full of escapes: linear scan
        (b"[" + b" " * 100, "longer than 64 bytes"),
    ],
)
def test_the_safe_decoder_refuses(data: bytes, match: str) -> None:
    with pytest.raises(safejson.JSONRejected, match=match):
        safejson.loads(data, max_size=64 if match.startswith("longer") else None)


def test_the_safe_decoder_accepts_what_json_is() -> None:
    assert safejson.loads(deep(128)) == json.loads(deep(128))
    assert safejson.loads(b'{"s": "[[[[{{{{", "n": 1000000, "f": 1.5e300}') == {
        "s": "[[[[{{{{",
        "n": 1000000,
        "f": 1.5e300,
    }
    assert safejson.loads(b'"\\ud83d\\ude00"') == "\U0001f600"  # a surrogate pair is one character
    assert safejson.loads(b"\xef\xbb\xbf[1]") == [1]  # a UTF-8 byte order mark
    assert safejson.loads("[1]", max_size=3) == [1]
    assert safejson.nesting_depth_exceeds('["]]]]", [1]]', 2) is False
    assert safejson.nesting_depth_exceeds('["[[[[", [[[1]]]]', 3) is True


def test_a_servers_retry_is_bounded() -> None:
    """``retry: 99999999999`` cannot make a call wait for years before it resumes its stream."""
    decoder = SSEDecoder()
    assert _retry_delay(decoder) == 1.0
    decoder.feed(b"retry: 99999999999\n\n")
    assert _retry_delay(decoder) == MAX_RETRY_DELAY == 60.0
    decoder.feed(b"retry: 250\n\n")
    assert _retry_delay(decoder) == 0.25


# -- spelled-out cases over HTTP --------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        deep(100_000),
        b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"content":' + deep(5000) + b"}}",
        b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"n":' + b"9" * 50_000 + b"}}",
        b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"n":1e999}}',
        b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"s":"\\udfff"}}',
        b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"s":"\xff\xfe"}}',
        b'{"jsonrpc":"2.0","id":' + ID + b',"result":[1]}',
        b'{"jsonrpc":"2.0","id":[' + ID + b'],"result":{}}',
        b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"content":"' + b"x" * LIMIT + b'"}}',
    ],
    ids=["deep", "deep-result", "long-int", "inf", "surrogate", "not-utf8", "list", "list-id", "too-big"],
)
@pytest.mark.parametrize("delivery", ["json", "sse", "error"])
async def test_a_malformed_answer_is_a_transport_error(
    fake: Fake, http: httpx.AsyncClient, payload: bytes, delivery: str
) -> None:
    async def call(request: FakeRequest, send: Send) -> None:
        data = with_id(payload, request.message["id"])
        if delivery == "json":
            await start_response(send, 200, "application/json")
            await body(send, data, more=False)
        elif delivery == "sse":
            await start_response(send)
            await body(send, sse(data), more=False)
        else:
            await start_response(send, 500, "application/json")
            await body(send, data, more=False)

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http, max_message_size=LIMIT) as s:
        with trio.fail_after(10), pytest.raises(TransportError):
            await s.call_tool("work")
        fake.server.call = answer_call
        with trio.fail_after(10):
            assert text_of(await s.call_tool("work")) == "ok"  # type: ignore[arg-type]
    assert_clean(http)


async def test_an_error_answer_body_is_read_up_to_its_limit(fake: Fake, http: httpx.AsyncClient) -> None:
    """An HTTP error answer of many megabytes: the status is reported, the body is not read whole."""

    async def call(request: FakeRequest, send: Send) -> None:
        await start_response(send, 502, "text/plain")
        for _ in range(64):
            await body(send, b"x" * 65536)
        await body(send, b"", more=False)

    fake.server.call = call
    async with open_client_session(fake.url, mode="legacy", http=http) as s:
        with trio.fail_after(10), pytest.raises(TransportError, match="HTTP 502") as caught:
            await s.call_tool("work")
        assert isinstance(caught.value.body, str) and len(caught.value.body) <= 64 * 1024
    assert_clean(http)


async def test_what_breaks_the_get_stream_never_ends_the_session(
    fake: Fake, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The standalone GET stream carries a nesting bomb, a huge number, an event over the size limit
    (which breaks the stream): the session lives on, its calls work, the stream is reopened and a
    notification sent on it afterwards arrives."""
    events: list[bytes] = [
        sse(deep(100_000)),
        sse(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":' + b"7" * 9000 + b"}}"),
        sse(b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":[1]}}'),
        sse(b'{"jsonrpc":"2.0","id":{"x":1},"method":"roots/list"}'),
        b"data: " + b"x" * (LIMIT + 10) + b"\n\n",  # over the limit: the stream is dropped
    ]
    notes: list[dict[str, Any]] = []
    arrived = trio.Event()

    def note(message: dict[str, Any]) -> None:
        notes.append(message)
        arrived.set()

    final = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}}

    async def get(request: FakeRequest, send: Send) -> None:
        await start_response(send)
        if events:
            first = events[:]
            events.clear()  # the next GET gets the notification (this one breaks before its end)
            for data in first:
                await body(send, data)
        else:
            await body(send, sse(json.dumps(final).encode()))
        await request.disconnected.wait()

    fake.server.get = get
    async with open_client_session(
        fake.url, mode="legacy", http=http, max_message_size=LIMIT, on_notification=note
    ) as s:
        with trio.fail_after(10):
            await fake.server.wait_for(lambda: len(fake.server.requests("GET")) >= 2)
            assert text_of(await s.call_tool("work")) == "ok"  # type: ignore[arg-type]
            await arrived.wait()
        assert notes == [final]
    assert_clean(http)
    assert client_errors(caplog) == []


@pytest.mark.parametrize(
    "result",
    [
        {"protocolVersion": "2025-11-25", "capabilities": 7, "serverInfo": [1], "instructions": {"a": 1}},
        {"protocolVersion": "2025-11-25", "capabilities": "logging"},
        {"protocolVersion": ["2025-11-25"]},
    ],
)
async def test_a_hostile_initialize_answer(
    fake: Fake, http: httpx.AsyncClient, result: dict[str, Any]
) -> None:
    """Fields of the wrong types in ``initialize``'s result: ignored where the client can do without them,
    else a ``TransportError`` out of the block; never another exception."""
    fake.server.initialize_result = result
    try:
        with trio.fail_after(10):
            async with open_client_session(fake.url, mode="legacy", http=http, log_level="info") as s:
                assert s.server_capabilities == {} and s.server_info == {} and s.instructions is None
                assert text_of(await s.call_tool("work")) == "ok"  # type: ignore[arg-type]
    except TransportError as exc:
        assert "unsupported version" in str(exc)
        assert not isinstance(result["protocolVersion"], str)
    assert_clean(http)


@pytest.mark.parametrize(
    "result",
    [
        {"supportedVersions": 5},
        {"supportedVersions": "2026-07-28"},
        {"supportedVersions": ["2026-07-28"], "_meta": [1], "capabilities": 7, "instructions": 3},
        {"supportedVersions": ["2026-07-28"], "_meta": {"io.modelcontextprotocol/serverInfo": "x"}},
    ],
)
async def test_a_hostile_discover_answer(fake: Fake, http: httpx.AsyncClient, result: dict[str, Any]) -> None:
    """``server/discover`` answered with fields of the wrong types: the client falls back to
    ``initialize`` or takes the server as modern without them; never another exception."""

    async def call(request: FakeRequest, send: Send) -> None:
        if request.message["method"] == "server/discover":
            await start_response(send, 200, "application/json")
            await body(
                send,
                json.dumps({"jsonrpc": "2.0", "id": request.message["id"], "result": result}).encode(),
                more=False,
            )
        else:
            await answer_call(request, send)

    fake.server.call = call
    with trio.fail_after(10):
        async with open_client_session(fake.url, mode="auto", http=http) as s:
            assert s.server_capabilities in ({}, {"tools": {}}) and isinstance(s.server_info, dict)
            assert text_of(await s.call_tool("work")) == "ok"  # type: ignore[arg-type]
    assert_clean(http)


# -- hypothesis: generated hostile answers ----------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
atoms = st.one_of(
    st.integers(129, 4000).map(deep),
    st.integers(129, 400).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.integers(1001, 8000).map(lambda n: b"9" * n),
    st.sampled_from(
        [b"1e999", b"-1e999", b"NaN", b"Infinity", b'"\\ud800"', b'"x\\udfff"', b'{"\\ud83d":1}', b'"\xff"']
    ),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=24),
)
answers = st.one_of(
    atoms,
    atoms.map(lambda a: b'{"jsonrpc":"2.0","id":' + ID + b',"result":' + a + b"}"),
    atoms.map(lambda a: b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"content":' + a + b"}}"),
    atoms.map(lambda a: b'{"jsonrpc":"2.0","id":' + ID + b',"error":' + a + b"}"),
    atoms.map(lambda a: b'{"jsonrpc":"2.0","id":' + ID + b',"error":{"code":' + a + b',"message":"m"}}'),
    atoms.map(lambda a: b'{"jsonrpc":"2.0","id":' + a + b',"result":{}}'),
    atoms.map(lambda a: PROGRESS + a + b"}}"),
    atoms.map(lambda a: b'{"jsonrpc":"2.0","method":' + a + b',"params":{}}'),
    atoms.map(lambda a: b'{"jsonrpc":"2.0","id":' + a + b',"method":"roots/list","params":' + a + b"}"),
    atoms.map(lambda a: b"[" + a + b"," + a + b"]"),
)
http_answers = st.one_of(
    answers,
    answers.map(lambda a: a[: len(a) // 2]),  # cut short
    st.integers(1, 100).map(
        lambda n: b'{"jsonrpc":"2.0","id":' + ID + b',"result":{"t":"' + b"x" * (LIMIT + n) + b'"}}'
    ),
)


@dataclass
class HTTPCase:
    payload: bytes
    delivery: str  # json, sse, error, get (on the standalone GET stream: 2025 era only)
    status: int = 200


http_cases = st.builds(
    HTTPCase,
    http_answers,
    st.sampled_from(["json", "sse", "error", "get"]),
    st.sampled_from([400, 404, 500]),
)

HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@dataclass
class Outcomes:
    """What the malformed calls ended with (the type names: a result, or a typed exception), and how
    many good calls failed (with a typed exception)."""

    seen: dict[str, int] = field(default_factory=dict)
    good_failed: int = 0

    def add(self, name: str) -> None:
        self.seen[name] = self.seen.get(name, 0) + 1


async def both_calls(session: Any, outcomes: Outcomes, *, good_may_fail: bool = False) -> None:
    """A malformed call and a good call at the same time: the good one must succeed (or, where a
    hostile message can carry the good call's id, fail with a typed exception); the malformed one may
    return or raise a typed exception, nothing else."""

    async def malformed() -> None:
        try:
            await session.call_tool("bad")
        except MCPTrioError as exc:
            outcomes.add(type(exc).__name__)
        else:
            outcomes.add("result")

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(malformed)
            try:
                assert text_of(await session.call_tool("good")) == "ok"
            except MCPTrioError:
                if not good_may_fail:
                    raise
                outcomes.good_failed += 1


def run_examples(cases: st.SearchStrategy[Any], example: Callable[[Any], Awaitable[None]]) -> None:
    @HYPOTHESIS
    @given(case=cases)
    def run(case: Any) -> None:
        trio.from_thread.run(example, case)

    run()


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_generated_hostile_http_answers(
    fake: Fake, http: httpx.AsyncClient, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    current: list[HTTPCase] = []
    pushed: trio.MemorySendChannel[bytes]
    pushed, to_push = trio.open_memory_channel[bytes](1000)

    async def call(request: FakeRequest, send: Send) -> None:
        case = current[-1]
        if request.message["params"]["name"] == "good":
            await answer_call(request, send)
            return
        data = with_id(case.payload, request.message["id"])
        if case.delivery == "get":  # the call itself is answered; the payload goes on the GET stream
            pushed.send_nowait(data)
            await answer_call(request, send)
        elif case.delivery == "error":
            await start_response(send, case.status, "application/json")
            await body(send, data, more=False)
        elif case.delivery == "sse":
            await start_response(send)
            await body(send, sse(data), more=False)
        else:
            await start_response(send, 200, "application/json")
            await body(send, data, more=False)

    async def get(request: FakeRequest, send: Send) -> None:
        await start_response(send)
        async with trio.open_nursery() as nursery:

            async def gone() -> None:
                await request.disconnected.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(gone)
            async for data in to_push:
                await body(send, sse(data))

    fake.server.call = call
    fake.server.get = get
    outcomes = Outcomes()
    async with open_client_session(fake.url, mode=mode, http=http, max_message_size=LIMIT) as session:  # type: ignore[arg-type]

        async def example(case: HTTPCase) -> None:
            current.append(case)
            await both_calls(session, outcomes)

        await trio.to_thread.run_sync(run_examples, http_cases, example)
        current.append(HTTPCase(b"", "json"))
        with trio.fail_after(10):
            assert text_of(await session.call_tool("good")) == "ok"
    assert sum(outcomes.seen.values()) >= EXAMPLES // 2, outcomes
    assert set(outcomes.seen) <= {"result", "TransportError", "SessionExpired", "RPCError"}, outcomes
    assert "TransportError" in outcomes.seen
    assert_clean(http)
    assert client_errors(caplog) == []


# -- hypothesis over WebSocket ----------------------------------------------------------------------


@dataclass
class WSServer:
    """A WebSocket MCP server on a Trio socket: answers ``initialize`` and the ``good`` tool; for the
    ``bad`` tool it sends the current payload, then a JSON-RPC error answer to the call (a malformed
    message that cannot be routed is skipped by the client, which then gets that answer)."""

    payload: bytes = b""
    url: str = ""
    connections: int = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        ws = WSConnection(ConnectionType.SERVER)
        parts: list[str] = []
        async with stream:
            while True:
                for event in ws.events():
                    if isinstance(event, Request):
                        await stream.send_all(ws.send(AcceptConnection(subprotocol="mcp")))
                    elif isinstance(event, Ping):
                        await stream.send_all(ws.send(event.response()))
                    elif isinstance(event, CloseConnection):
                        await stream.send_all(ws.send(event.response()))
                        return
                    elif isinstance(event, TextMessage):
                        parts.append(event.data)
                        if event.message_finished:
                            await self.answer(stream, ws, json.loads("".join(parts)))
                            parts.clear()
                    elif isinstance(event, Message):
                        raise AssertionError("the client sends text messages only")
                data = await stream.receive_some(65536)
                if not data:
                    return
                ws.receive_data(data)

    async def answer(self, stream: trio.SocketStream, ws: WSConnection, message: dict[str, Any]) -> None:
        async def send(data: str) -> None:
            await stream.send_all(ws.send(TextMessage(data=data)))

        method, request_id = message.get("method"), message.get("id")
        if method is None or request_id is None:
            return  # a notification, or the client's answer to a request of ours
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
            await send(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))
        elif method == "tools/call" and message["params"]["name"] == "bad":
            await send(with_id(self.payload, request_id).decode("utf-8", "replace"))
            error = {"code": -32000, "message": "after the payload"}
            await send(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}))
        else:
            ok = tool_result(FakeRequest("POST", {}, message, 0.0))
            await send(json.dumps(ok))


@asynccontextmanager
async def ws_server() -> AsyncIterator[WSServer]:
    server = WSServer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
        server.url = f"ws://127.0.0.1:{listeners[0].socket.getsockname()[1]}/mcp"
        yield server
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_generated_hostile_websocket_messages(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    """The same over WebSocket (answers over the size limit excepted: one ends the connection, as
    documented and tested in test_websocket_transport.py)."""
    outcomes = Outcomes()
    async with ws_server() as server:
        async with open_websocket_client(server.url, mode=mode, max_message_size=LIMIT) as session:  # type: ignore[arg-type]

            async def example(payload: bytes) -> None:
                server.payload = payload
                # a message carrying the good call's id is taken as its answer (ids are all a message
                # transport routes by): then the good call fails, with a typed exception
                await both_calls(session, outcomes, good_may_fail=True)

            await trio.to_thread.run_sync(run_examples, answers, example)
            with trio.fail_after(10):
                assert text_of(await session.call_tool("good")) == "ok"  # type: ignore[arg-type]
        assert server.connections == 1  # one connection lived through every example
    assert sum(outcomes.seen.values()) >= EXAMPLES // 2, outcomes
    assert set(outcomes.seen) <= {"result", "TransportError", "RPCError"}, outcomes
    assert outcomes.good_failed <= EXAMPLES // 4, outcomes
    assert client_errors(caplog) == []


# -- stdio ------------------------------------------------------------------------------------------

HOSTILE_CHILD = r"""
import json, sys
def send(data):
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
for line in sys.stdin.buffer:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    ident = json.dumps(message["id"]).encode()
    if message["method"] == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {},
                  "serverInfo": {"name": "hostile", "version": "1"}}
        send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode() + b"\n")
    elif message["params"]["name"] == "bombs":
        send(b"[" * 100000 + b"]" * 100000 + b"\n")
        send(b'{"jsonrpc":"2.0","id":' + ident + b',"result":{"n":' + b"9" * 9000 + b"}}\n")
        send(b'{"jsonrpc":"2.0","id":[' + ident + b'],"result":{}}\n')
        send(b'{"jsonrpc":"2.0","id":' + ident + b',"result":{"content":[{"type":"text","text":"ok"}]}}\n')
    else:
        send(b"x" * (5 * 1024 * 1024))  # a line over 4 MiB, never ended
"""


async def test_a_hostile_stdio_server(caplog: pytest.LogCaptureFixture) -> None:
    """Bombs on stdout are skipped (the call gets its real answer after them); a line over 4 MiB ends the
    connection: the waiting call fails with ``TransportError`` and the block ends normally (not with an
    exception group)."""
    with trio.fail_after(20):
        async with open_stdio_client(
            [sys.executable, "-c", HOSTILE_CHILD], mode="legacy", terminate_grace=0.5
        ) as session:
            assert text_of(await session.call_tool("bombs")) == "ok"  # type: ignore[arg-type]
            with pytest.raises(TransportError, match="a line over 4 MiB"):
                await session.call_tool("flood")
            with pytest.raises(TransportError, match="a line over 4 MiB"):
                await session.call_tool("again")  # at once: the connection is gone
    assert client_errors(caplog) == []
