"""hypercorn 0.18's trio worker with mcp_trio's fast path (``mcp_trio._http.hypercorn_fast_path``).

In-process, on real loopback sockets, on mcp_trio's hypercorn server (``serve_hypercorn``: the CLOSE_WAIT
fix of ``hypercorn_close_wait`` and the fast path, in subclasses used by that server only), these tests check
that HTTP/1.1 behaves as before: pipelining, HTTP/1.0, malformed requests, chunked and split request
bodies, ``Expect: 100-continue``, streamed (SSE) and content-length responses flushed as the app sends
them, app errors, large bodies, disconnect detection, the keep-alive idle timer (now a deadline instead
of a task per request), the release of closed idle connections and graceful shutdown.
``test_fast_path_is_active_*`` proves the patch is at work by counting, not timing: tasks spawned and
socket writes per request.

The one behaviour change (see ``test_content_length_head_waits_for_first_body``): the head of a response
that has a ``content-length`` is written together with its first body message instead of at
``http.response.start`` (ASGI allows a server to do so).  Streams without ``content-length`` still get
their head at once."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.trio import tcp_server
from hypercorn.trio.task_group import TaskGroup
from mcp_http import count_sockets, count_tasks, fast_path_idle_timers, read_until, tasks_named, wait_until
from tests.required import not_applicable

from mcp_trio._http.hypercorn_server import hypercorn_fixes_available, serve_hypercorn
from mcp_trio._runtime.contract import DISCONNECT_CALLBACK

KEEP_ALIVE = 0.5  # keep_alive_timeout of the idle-timer tests
IDLE_CLOSE_WINDOW = (0.3, 2.5)  # seconds within which such an idle connection must be closed
RELEASE_BUDGET = 1.0  # seconds a closed idle connection may linger
CHUNK_GAP = 0.2  # seconds the app sleeps between the chunks of /sse and /slowcl
MIN_GAP = 0.1  # chunks sent CHUNK_GAP apart must arrive at least this far apart (not held and batched)
PROMPT = 0.15  # "at once"

# Task names trio gives hypercorn's per-connection tasks.
CONNECTION_TASK = "_highlevel_serve_listeners._run_handler"  # runs TCPServer.run, one per connection

CALL = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}'
CALL_RESULT = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}'
CL30 = [(b"content-length", b"30")]


# -- the app -----------------------------------------------------------------------------------


@dataclass
class AppState:
    disconnects: int = 0  # http.disconnect messages seen by /hold
    hook_calls: list[str] = field(default_factory=list)  # disconnect callbacks run, by path
    client_ports: list[int] = field(default_factory=list)  # peer port of each request


def make_app(state: AppState) -> Any:
    async def respond(send: Any, status: int, body: bytes = b"", headers: Any = ()) -> None:
        all_headers = [*headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": all_headers})
        await send({"type": "http.response.body", "body": body})

    async def read_body(receive: Any) -> bytes | None:
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # http.disconnect
            body += message.get("body", b"")
            if not message.get("more_body", False):
                return body

    async def json_rpc(scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Fixed JSON answers with content-length, like benchmarks/baseline_bare_asgi.py."""
        body = await read_body(receive)
        if body is None:
            return
        if scope["method"] == "DELETE":
            await respond(send, 200)
        elif scope["method"] != "POST":
            await respond(send, 405)
        else:
            try:
                request = json.loads(body)
            except ValueError:
                await respond(send, 400)
                return
            if not isinstance(request, dict) or "id" not in request:
                await respond(send, 202)
                return
            answer = {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {"content": [{"type": "text", "text": "hi"}]},
            }
            await respond(
                send,
                200,
                json.dumps(answer, separators=(",", ":")).encode(),
                [(b"content-type", b"application/json")],
            )

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http"
        state.client_ports.append(scope["client"][1])
        path = scope["path"]
        event_stream = [(b"content-type", b"text/event-stream")]
        if path == "/sse":  # 3 chunks CHUNK_GAP apart, chunked (no content-length)
            await send({"type": "http.response.start", "status": 200, "headers": event_stream})
            for i in range(3):
                await send({"type": "http.response.body", "body": b"data: %d\n\n" % i, "more_body": True})
                await trio.sleep(CHUNK_GAP)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif path == "/hold":  # head, then keep the stream open until the client goes away
            await send({"type": "http.response.start", "status": 200, "headers": event_stream})
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    state.disconnects += 1
                    return
        elif path == "/slowcl":  # content-length body in 3 chunks CHUNK_GAP apart
            await send({"type": "http.response.start", "status": 200, "headers": CL30})
            for i in range(3):
                await send({"type": "http.response.body", "body": b"%d" % i * 10, "more_body": i < 2})
                if i < 2:
                    await trio.sleep(CHUNK_GAP)
        elif path == "/latecl":  # content-length head, body 0.3 s later
            await send({"type": "http.response.start", "status": 200, "headers": CL30})
            await trio.sleep(0.3)
            await send({"type": "http.response.body", "body": b"x" * 30})
        elif path in ("/hooked", "/hooked-hold"):  # the mcp_trio.disconnect_callback extension
            hook = scope["extensions"][DISCONNECT_CALLBACK]
            gone = trio.Event()
            hook.set(lambda: (state.hook_calls.append(path), gone.set()))
            if path == "/hooked":  # a whole response: the callback must not run for it
                await respond(send, 200, b"whole")
                await trio.sleep(0.1)
                hook.set(None)
            else:  # head and part of the body, then wait for the client to go
                await send({"type": "http.response.start", "status": 200, "headers": event_stream})
                await send({"type": "http.response.body", "body": b"data: 0\n\n", "more_body": True})
                await gone.wait()
        elif path == "/boom":
            raise RuntimeError("boom before start")
        elif path == "/boom2":
            await send({"type": "http.response.start", "status": 200, "headers": CL30})
            raise RuntimeError("boom after start")
        elif path == "/big":
            await respond(send, 200, b"b" * 1_000_000)
        elif path == "/echo":  # the length of the request body
            body = await read_body(receive)
            if body is not None:
                await respond(send, 200, str(len(body)).encode())
        else:
            await json_rpc(scope, receive, send)

    return app


# -- the server ---------------------------------------------------------------------------------


@dataclass
class Server:
    port: int
    state: AppState


@asynccontextmanager
async def running_server(
    keep_alive_timeout: float = 5.0, read_timeout: float | None = None
) -> AsyncIterator[Server]:
    """mcp_trio's hypercorn server on 127.0.0.1 (ephemeral port), stopped on exit."""
    config = Config()
    config.read_timeout = read_timeout
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None  # /boom and /boom2 raise on purpose
    config.keep_alive_timeout = keep_alive_timeout
    config.graceful_timeout = 1.0
    state = AppState()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve_hypercorn(
                make_app(state), config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield Server(port=int(binds[0].rsplit(":", 1)[1]), state=state)
        finally:
            stop.set()


async def connect(server: Server) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", server.port)


# -- the client ---------------------------------------------------------------------------------


def post(body: bytes, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return (
        b"POST /mcp HTTP/"
        + version
        + b"\r\nhost: x\r\n"
        + extra
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


def get(path: str, extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nhost: x\r\n" + extra + b"\r\n"


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise AssertionError(f"no content-length in {head!r}")


async def read_response(stream: trio.SocketStream, buffer: bytearray) -> tuple[bytes, bytes]:
    """Read one content-length response: (head, body)."""
    head = await read_until(stream, buffer, b"\r\n\r\n")
    length = content_length(head)
    while len(buffer) < length:
        data = await stream.receive_some(65536)
        if not data:
            raise AssertionError(f"connection closed in the body; head {head!r}, got {bytes(buffer)!r}")
        buffer += data
    body = bytes(buffer[:length])
    del buffer[:length]
    return head, body


async def read_to_eof(stream: trio.SocketStream, buffer: bytes | bytearray = b"") -> bytes:
    """Everything until the server closes the connection."""
    out = bytearray(buffer)
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return bytes(out)
        out += data


async def timed_reads(
    stream: trio.SocketStream, start: float, done: Callable[[bytes], bool]
) -> list[tuple[float, bytes]]:
    """Each read as (seconds since ``start``, bytes), until ``done(everything read)`` or EOF."""
    reads: list[tuple[float, bytes]] = []
    everything = b""
    while not done(everything):
        data = await stream.receive_some(65536)
        if not data:
            break
        reads.append((trio.current_time() - start, data))
        everything += data
    return reads


async def seconds_until_closed(stream: trio.SocketStream) -> float:
    """How long until the server closes ``stream``; it must send nothing meanwhile."""
    start = trio.current_time()
    data = await stream.receive_some(65536)
    assert data == b"", data
    return trio.current_time() - start


async def stays_silent(stream: trio.SocketStream, seconds: float) -> bool:
    """True if nothing arrives (not even EOF) on ``stream`` for ``seconds``."""
    with trio.move_on_after(seconds):
        data = await stream.receive_some(65536)
        raise AssertionError(f"got {data!r} (b'' is EOF) within {seconds} s")
    return True


# -- the patch is there -------------------------------------------------------------------------


def test_fast_path_is_available_and_hypercorn_untouched() -> None:
    # hypercorn is pinned to 0.18.*: if this fails, a function the fast path replaces or relies on
    # changed (its source hash no longer matches); see hypercorn_server's docstring.
    assert hypercorn_fixes_available() is None
    assert vars(tcp_server)["TrioSingleTask"].__name__ == "TrioSingleTask"
    for method in (
        H11Protocol._send_h11_event,
        H11Protocol.stream_send,
        HTTPStream.app_send,
        TaskGroup.spawn_app,
    ):
        assert method.__module__.startswith("hypercorn."), method


# -- requests -----------------------------------------------------------------------------------


async def test_pipelined_requests_answered_in_order_then_http10_closes() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(
                get("/mcp")
                + post(CALL)
                + b"DELETE /mcp HTTP/1.1\r\nhost: x\r\n\r\n"
                + post(b"{}", version=b"1.0")
            )
            out = await read_to_eof(stream)  # HTTP/1.0 without keep-alive: closed after the last answer
    assert re.findall(rb"HTTP/1.1 (\d+)", out) == [b"405", b"200", b"200", b"202"], out
    responses = re.split(rb"(?=HTTP/1.1 \d{3} )", out)[1:]
    assert responses[1].endswith(b"\r\n\r\n" + CALL_RESULT), responses  # the POST's answer, second
    assert len(set(server.state.client_ports)) == 1  # all four on the one connection


async def test_malformed_request_gets_400_and_close() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(b"garbage\r\n\r\n")
            out = await read_to_eof(stream)
    assert out.startswith(b"HTTP/1.1 400"), out
    assert server.state.client_ports == []  # never reached the app


async def test_chunked_request_body() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(
                b"POST /mcp HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                b'3\r\n{"i\r\n8\r\nd":7,"x"\r\n3\r\n:1}\r\n0\r\n\r\n'
            )
            out = await read_to_eof(stream)
    assert out.startswith(b"HTTP/1.1 200"), out
    assert out.endswith(b"\r\n\r\n" + CALL_RESULT), out


async def test_request_body_split_over_two_tcp_segments() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            request = post(CALL, b"connection: close\r\n")
            await stream.send_all(request[:-10])
            # the app was called with the head: the server read the first part and waits for the rest
            await wait_until(lambda: server.state.client_ports != [], within=3)
            await stream.send_all(request[-10:])
            out = await read_to_eof(stream)
    assert out.startswith(b"HTTP/1.1 200"), out
    assert out.endswith(b"\r\n\r\n" + CALL_RESULT), out


async def test_expect_100_continue() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(
                b"POST /mcp HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n" % len(CALL)
            )
            buffer = bytearray()
            interim = await read_until(stream, buffer, b"\r\n\r\n")  # before the body is sent
            assert interim.startswith(b"HTTP/1.1 100"), interim
            await stream.send_all(CALL)
            out = await read_to_eof(stream, buffer)
    assert out.startswith(b"HTTP/1.1 200"), out
    assert out.endswith(b"\r\n\r\n" + CALL_RESULT), out


async def test_300_kb_request_body() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(
                b"POST /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 300000\r\n\r\n"
                + b"z" * 300_000
            )
            out = await read_to_eof(stream)
    assert out.startswith(b"HTTP/1.1 200"), out[:100]
    assert out.endswith(b"\r\n\r\n300000"), out[-100:]


# -- responses ----------------------------------------------------------------------------------


async def test_sse_head_at_once_and_each_chunk_flushed_on_its_own() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            start = trio.current_time()
            await stream.send_all(get("/sse"))
            reads = await timed_reads(stream, start, lambda data: data.endswith(b"0\r\n\r\n"))
    summary = [(round(t, 3), data[:20]) for t, data in reads]
    head_time, first = reads[0]
    assert first.startswith(b"HTTP/1.1 200"), summary
    assert b"transfer-encoding: chunked" in first.lower(), summary
    assert head_time < PROMPT, summary
    assert b"".join(data for _, data in reads).endswith(b"0\r\n\r\n"), summary
    # Each chunk arrives on its own, when the app sends it (not held back and batched with the next).
    assert all(data.count(b"data: ") <= 1 for _, data in reads), summary
    data_times = [t for t, data in reads if b"data: " in data]
    assert len(data_times) == 3, summary
    assert data_times[0] < PROMPT, summary
    assert data_times[1] - data_times[0] > MIN_GAP, summary
    assert data_times[2] - data_times[1] > MIN_GAP, summary


async def test_content_length_body_chunks_flushed_one_by_one() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            start = trio.current_time()
            await stream.send_all(get("/slowcl"))
            reads = await timed_reads(stream, start, lambda data: len(data.partition(b"\r\n\r\n")[2]) >= 30)
    summary = [(round(t, 3), data[-12:]) for t, data in reads]
    assert len(reads) == 3, summary
    (t0, first), (t1, second), (t2, third) = reads
    # The head goes out with the first body chunk (one write), at once.
    assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"\r\n\r\n" + b"0" * 10), summary
    assert t0 < PROMPT, summary
    assert second == b"1" * 10 and third == b"2" * 10, summary
    assert t1 - t0 > MIN_GAP and t2 - t1 > MIN_GAP, summary


async def test_content_length_head_waits_for_first_body() -> None:
    """The fast path's one behaviour change: the head of a content-length response is held until the
    app's first body message, so here it arrives 0.3 s after ``http.response.start``, with the body
    (upstream hypercorn writes the head at once and the body 0.3 s later)."""
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            start = trio.current_time()
            await stream.send_all(get("/latecl"))
            assert await stays_silent(stream, 0.2)  # no head yet
            reads = await timed_reads(stream, start, lambda data: data.endswith(b"x" * 30))
    summary = [(round(t, 3), data) for t, data in reads]
    assert len(reads) == 1, summary  # head and body in one write
    first_time, response = reads[0]
    assert first_time >= 0.25, summary
    assert response.startswith(b"HTTP/1.1 200") and response.endswith(b"\r\n\r\n" + b"x" * 30), summary


async def test_app_error_before_start_gives_500_and_close() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(get("/boom"))
            out = await read_to_eof(stream)
    assert out.startswith(b"HTTP/1.1 500"), out
    assert out.endswith(b"\r\n\r\n") and content_length(out) == 0, out


async def test_app_error_after_start_gives_head_then_close() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(get("/boom2"))
            out = await read_to_eof(stream)  # the held head is written before the connection closes
    assert out.startswith(b"HTTP/1.1 200"), out
    assert out.endswith(b"\r\n\r\n") and out.count(b"\r\n\r\n") == 1, out  # head only, no body
    assert content_length(out) == 30, out


async def test_1_mb_body_then_head_on_the_same_connection() -> None:
    with trio.fail_after(5):
        async with running_server() as server, await connect(server) as stream:
            await stream.send_all(get("/big") + b"HEAD /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            out = await read_to_eof(stream)
    first_head, _, rest = out.partition(b"\r\n\r\n")
    assert first_head.startswith(b"HTTP/1.1 200") and content_length(first_head) == 1_000_000, first_head
    assert rest[:1_000_000] == b"b" * 1_000_000
    second_head = rest[1_000_000:]
    assert second_head.startswith(b"HTTP/1.1 200"), second_head
    assert content_length(second_head) == 1_000_000, second_head
    assert second_head.endswith(b"\r\n\r\n") and second_head.count(b"\r\n\r\n") == 1, second_head  # no body
    assert len(set(server.state.client_ports)) == 1


async def test_streamed_head_arrives_and_client_disconnect_reaches_the_app() -> None:
    # keep_alive_timeout is short: the idle timer must leave a busy (streaming) connection alone.
    with trio.fail_after(5):
        async with running_server(keep_alive_timeout=KEEP_ALIVE) as server:
            async with await connect(server) as stream:
                await stream.send_all(get("/hold"))
                buffer = bytearray()
                head = await read_until(stream, buffer, b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200"), head
                assert b"transfer-encoding: chunked" in head.lower(), head
                assert buffer == b""  # no body yet
                assert await stays_silent(stream, 2 * KEEP_ALIVE)  # open stream outlives the idle timeout
                assert server.state.disconnects == 0
            await wait_until(lambda: server.state.disconnects == 1, within=1.0)
            await wait_until(lambda: count_tasks(CONNECTION_TASK) == 0, within=RELEASE_BUDGET)


async def test_disconnect_callback_runs_when_the_client_goes_not_after_a_whole_response() -> None:
    """The disconnect callback extension: a response sent whole ends its stream without the callback
    (nothing is left to cancel); a client that goes in the middle of a response gets it at once."""
    with trio.fail_after(5):
        async with running_server() as server:
            async with await connect(server) as stream:
                buffer = bytearray()
                await stream.send_all(get("/hooked"))
                head, body = await read_response(stream, buffer)
                assert head.startswith(b"HTTP/1.1 200") and body == b"whole", (head, body)
                await stream.send_all(post(CALL))  # the same connection serves the next request
                assert (await read_response(stream, buffer))[1] == CALL_RESULT
                assert server.state.hook_calls == []
            async with await connect(server) as stream:
                await stream.send_all(get("/hooked-hold"))
                await read_until(stream, bytearray(), b"data: 0")
                assert server.state.hook_calls == []
            await wait_until(lambda: server.state.hook_calls == ["/hooked-hold"], within=1.0)
            await wait_until(lambda: count_tasks(CONNECTION_TASK) == 0, within=RELEASE_BUDGET)


@pytest.mark.parametrize("read_timeout", [None, 0.3], ids=["no-read-timeout", "read-timeout"])
async def test_read_timeout_still_bounds_a_silent_request(read_timeout: float | None) -> None:
    """Reads open a timeout scope only when ``read_timeout`` is set: then a request that stops halfway
    is dropped after it; without it the connection waits (until the keep-alive timer or the client)."""
    with trio.fail_after(5):
        async with (
            running_server(keep_alive_timeout=30, read_timeout=read_timeout) as server,
            await connect(server) as stream,
        ):
            await stream.send_all(b"POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n{")
            if read_timeout is None:
                assert await stays_silent(stream, 1.0)
            else:
                closed_after = await seconds_until_closed(stream)
                assert read_timeout <= closed_after <= read_timeout + 1.5, closed_after


# -- the keep-alive idle timer ------------------------------------------------------------------


@pytest.mark.parametrize("requests_before_idle", [1, 0], ids=["after-a-response", "never-used"])
async def test_idle_connection_closed_after_keep_alive_timeout(requests_before_idle: int) -> None:
    with trio.fail_after(5):
        async with running_server(keep_alive_timeout=KEEP_ALIVE) as server, await connect(server) as stream:
            buffer = bytearray()
            for _ in range(requests_before_idle):
                await stream.send_all(post(CALL))
                assert (await read_response(stream, buffer))[1] == CALL_RESULT
            closed_after = await seconds_until_closed(stream)
    low, high = IDLE_CLOSE_WINDOW
    assert low <= closed_after <= high, closed_after


async def test_request_with_slow_body_outlives_keep_alive_timeout() -> None:
    with trio.fail_after(5):
        async with running_server(keep_alive_timeout=KEEP_ALIVE) as server, await connect(server) as stream:
            request = post(CALL)
            await stream.send_all(request[:-5])
            await trio.sleep(2 * KEEP_ALIVE)  # the request has started: the connection is busy, not idle
            await stream.send_all(request[-5:])
            head, body = await read_response(stream, bytearray())
    assert head.startswith(b"HTTP/1.1 200"), head
    assert body == CALL_RESULT


async def test_connection_reused_every_200ms_stays_open_past_keep_alive_timeout() -> None:
    with trio.fail_after(6):
        async with running_server(keep_alive_timeout=KEEP_ALIVE) as server, await connect(server) as stream:
            buffer = bytearray()
            start = trio.current_time()
            for _ in range(6):
                await stream.send_all(post(CALL))
                assert (await read_response(stream, buffer))[1] == CALL_RESULT
                await trio.sleep(0.2)
            assert trio.current_time() - start > 2 * KEEP_ALIVE
            assert len(server.state.client_ports) == 6 and len(set(server.state.client_ports)) == 1
            # The timer was re-armed after the last response: the connection is still closed when idle.
            closed_after = await seconds_until_closed(stream) + 0.2
    low, high = IDLE_CLOSE_WINDOW
    assert low <= closed_after <= high, closed_after


async def test_stream_outlives_keep_alive_timeout_then_its_connection_idles_out() -> None:
    with trio.fail_after(6):
        async with running_server(keep_alive_timeout=0.3) as server, await connect(server) as stream:
            await stream.send_all(get("/sse"))  # three chunks over 0.6 s: longer than keep_alive_timeout
            streamed = await read_until(stream, bytearray(), b"0\r\n\r\n")
            assert all(b"data: %d" % i in streamed for i in range(3)), streamed
            closed_after = await seconds_until_closed(stream)  # idle now: the timer is armed again
    assert 0.2 <= closed_after <= 2.5, closed_after


async def test_graceful_shutdown_lets_a_stream_under_way_finish_then_closes() -> None:
    with trio.fail_after(6):
        async with running_server(keep_alive_timeout=5.0) as server:
            stream = await connect(server)
            await stream.send_all(get("/sse"))
            buffer = bytearray()
            await read_until(stream, buffer, b"data: 0")
        # serve() returned (graceful_timeout 1 s): the stream was not cut by the shutdown.
        async with stream:
            rest = await read_to_eof(stream, buffer)
    assert b"data: 2" in rest and rest.endswith(b"0\r\n\r\n"), rest


async def test_an_open_stream_holds_two_tasks_its_connection_and_its_app() -> None:
    with trio.fail_after(5):
        async with running_server(keep_alive_timeout=5.0) as server:
            streams: list[trio.SocketStream] = []
            try:
                counts = []
                for _ in range(2):
                    for _ in range(5):
                        stream = await connect(server)
                        streams.append(stream)
                        await stream.send_all(get("/hold"))
                        await read_until(stream, bytearray(), b"\r\n\r\n")
                    await trio.testing.wait_all_tasks_blocked()
                    counts.append(count_tasks(""))
                assert count_tasks(CONNECTION_TASK) == 10
                # Five more streams, ten more tasks: no idle-timer task (the read loop's deadline).
                assert counts[1] - counts[0] == 10, [task.name for task in tasks_named("")]
                assert fast_path_idle_timers() == (10, 0)  # reading, busy: no timer armed
            finally:
                for stream in streams:
                    await stream.aclose()
            await wait_until(lambda: server.state.disconnects == 10, within=2.0)


# -- releasing connections ----------------------------------------------------------------------


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason=not_applicable("counts sockets through /proc (Linux only)")
)
async def test_closed_idle_connections_are_released_at_once() -> None:
    pid = os.getpid()
    with trio.fail_after(8):
        async with running_server(keep_alive_timeout=5.0) as server:  # the timer cannot explain a release
            baseline = count_sockets(pid)
            streams = [await connect(server) for _ in range(20)]
            try:
                for stream in streams:
                    await stream.send_all(post(CALL))
                    assert (await read_response(stream, bytearray()))[1] == CALL_RESULT
                assert count_sockets(pid) == baseline + 40  # both ends of 20 connections
                assert count_tasks(CONNECTION_TASK) == 20
                # Each idle, its keep-alive timer armed: the deadline of its read loop, no task.
                await wait_until(lambda: fast_path_idle_timers() == (20, 20), within=1.0)
            finally:
                for stream in streams:
                    await stream.aclose()
            released_after = await wait_until(
                lambda: (
                    count_sockets(pid) == baseline
                    and count_tasks(CONNECTION_TASK) == 0
                    and fast_path_idle_timers() == (0, 0)
                ),
                within=RELEASE_BUDGET,
            )
    assert released_after < RELEASE_BUDGET


async def test_graceful_shutdown_closes_idle_keep_alive_connection_at_once() -> None:
    with trio.fail_after(5):
        stream = None
        try:
            async with running_server(keep_alive_timeout=5.0) as server:
                stream = await connect(server)
                await stream.send_all(post(CALL))
                assert (await read_response(stream, bytearray()))[1] == CALL_RESULT
                await trio.sleep(0.05)  # let the connection turn idle
                start = trio.current_time()
            # serve() returned: the idle connection was closed by the shutdown, not by the timeout nor
            # by graceful_timeout (1 s).
            assert trio.current_time() - start < 0.5
            assert await stream.receive_some(65536) == b""
            assert count_tasks(CONNECTION_TASK) == 0
        finally:
            if stream is not None:
                await stream.aclose()


# -- the patch at work: counts, not timings ----------------------------------------------------


class SpawnCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task.name)


REQUESTS = 200


async def test_fast_path_is_active_one_task_and_one_write_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with trio.fail_after(10):
        async with running_server() as server, await connect(server) as stream:
            buffer = bytearray()
            await stream.send_all(post(CALL))  # warm up: the connection exists
            assert (await read_response(stream, buffer))[1] == CALL_RESULT

            writes: list[int] = []  # size of each server-side socket write
            upstream_send_all = trio.SocketStream.send_all

            async def counting_send_all(self: trio.SocketStream, data: Any) -> None:
                if self is not stream:
                    writes.append(len(data))
                await upstream_send_all(self, data)

            spawns = SpawnCounter()
            with monkeypatch.context() as patch:
                patch.setattr(trio.SocketStream, "send_all", counting_send_all)
                trio.lowlevel.add_instrument(spawns)
                try:
                    for _ in range(REQUESTS):
                        await stream.send_all(post(CALL))
                        assert (await read_response(stream, buffer))[1] == CALL_RESULT
                    keep_alive_spawns, keep_alive_writes = list(spawns.spawned), list(writes)
                    del writes[:]
                    await stream.send_all(get("/slowcl"))
                    _, body = await read_response(stream, buffer)
                    assert body == b"0" * 10 + b"1" * 10 + b"2" * 10
                    slowcl_writes = list(writes)
                finally:
                    trio.lowlevel.remove_instrument(spawns)
            assert trio.SocketStream.send_all is upstream_send_all

    # Upstream spawns 2 tasks per request (the app and a new idle timer) and writes 3 times per
    # response (head, body, h11's empty end of message): see the next test.
    app_tasks = [name for name in keep_alive_spawns if name.endswith("._handle")]
    assert len(app_tasks) == REQUESTS, keep_alive_spawns[:10]
    assert len(keep_alive_spawns) / REQUESTS < 1.5, sorted(set(keep_alive_spawns))
    assert len(keep_alive_writes) == REQUESTS, keep_alive_writes[:10]  # one write per response
    assert all(size > len(CALL_RESULT) for size in keep_alive_writes)  # the head and the body together
    # A content-length body sent in 3 messages: 3 writes, the head with the first, no empty write.
    assert len(slowcl_writes) == 3, slowcl_writes
    assert slowcl_writes[1:] == [10, 10], slowcl_writes


# Run in a fresh interpreter: the same counts on hypercorn as shipped, to show the counts above measure
# what the fast path changes.  argv[2] "stock": mcp_trio is never imported; "beside": mcp_trio (and its
# hypercorn server) is imported first, which must change nothing for a plain hypercorn server.
UPSTREAM_COUNTS = r"""
import json, sys
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

REQUESTS = int(sys.argv[1])
if sys.argv[2] == "beside":
    import mcp_trio, mcp_trio._http.hypercorn_server
else:
    assert "mcp_trio" not in sys.modules
BODY = b'{"ok":true}'
REQUEST = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].split(".")[1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})

class Spawns(trio.abc.Instrument):
    count = 0
    def task_spawned(self, task):
        self.count += 1

async def main():
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    config.graceful_timeout = 1.0
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        stream = await trio.open_tcp_stream("127.0.0.1", int(binds[0].rsplit(":", 1)[1]))
        async def one():
            await stream.send_all(REQUEST)
            data = b""
            while not data.endswith(BODY):
                data += await stream.receive_some(65536)
        await one()
        writes = 0
        upstream = trio.SocketStream.send_all
        async def counting(self, data):
            nonlocal writes
            if self is not stream:
                writes += 1
            await upstream(self, data)
        trio.SocketStream.send_all = counting
        spawns = Spawns()
        trio.lowlevel.add_instrument(spawns)
        for _ in range(REQUESTS):
            await one()
        trio.lowlevel.remove_instrument(spawns)
        trio.SocketStream.send_all = upstream
        await stream.aclose()
        stop.set()
    print(json.dumps({"spawns": spawns.count, "writes": writes}))

async def bounded_main():
    with trio.fail_after(10):
        await main()

trio.run(bounded_main)
"""


@pytest.mark.parametrize("mode", ["stock", "beside"])
async def test_upstream_worker_spawns_and_writes_more_per_request(mode: str) -> None:
    with trio.fail_after(12):
        result = await trio.run_process(
            [sys.executable, "-c", UPSTREAM_COUNTS, str(REQUESTS), mode],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    counts = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert counts["spawns"] / REQUESTS >= 1.9, counts  # the app task and a new idle-timer task
    assert counts["writes"] == 3 * REQUESTS, counts  # head, body and an empty end-of-message write
