"""The embedded Trio + h11 server (``serve(app, http="h11")``), in-process on real loopback sockets.

The MCP behaviour it serves is the ASGI app's, and the whole integration directory runs against it too
(``MCP_TRIO_TEST_HTTP=h11``, see ``mcp_http.py``).  These tests cover what belongs to the HTTP layer
itself: keep-alive and pipelining, framing, malformed input, timeouts, a failing app, shutdown and
cancellation, and that nothing is left behind.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from mcp_http import POST_HEADERS

from mcp_trio import MCPApp, MCPServer, ServerConfig, serve
from mcp_trio.server import H11Config

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def build_app(**config: Any) -> MCPApp:
    server = MCPServer("h11-test")

    @server.tool()
    async def hello(name: str) -> str:
        return f"hello {name}"

    @server.tool()
    async def block() -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return MCPApp(server, ServerConfig(shutdown_grace=2, **config))


@asynccontextmanager
async def running(
    app: Any, config: H11Config | None = None
) -> AsyncIterator[tuple[str, int, trio.Event, trio.Nursery]]:
    """``serve(app, http="h11")`` on 127.0.0.1:0; yields (url, port, stop, nursery); on exit stops it and
    checks that it returned and left no task behind."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app,
                "127.0.0.1",
                0,
                http="h11",
                config=config,
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        base, path = urls[0].rsplit("/", 1)  # serve() reports the endpoint: http://127.0.0.1:PORT/mcp
        assert "/" + path == app.config.path, urls
        yield base, int(base.rsplit(":", 1)[1]), stop, nursery
        stop.set()
        await until(lambda: not nursery.child_tasks, within=5)
    assert not nursery.child_tasks


@asynccontextmanager
async def raw(port: int) -> AsyncIterator[trio.SocketStream]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        yield stream


async def until(predicate: Callable[[], bool], within: float = 2.0) -> None:
    with trio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - polls the app's statistics, which have no event
            await trio.sleep(0.01)


async def read_until_closed(stream: trio.SocketStream, limit: float = 3.0) -> bytes:
    data = b""
    with trio.fail_after(limit):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def read_responses(stream: trio.SocketStream, count: int, limit: float = 3.0) -> bytes:
    """Read until ``count`` complete content-length responses have arrived."""
    data = b""
    with trio.fail_after(limit):
        while True:
            done, rest = 0, data
            while b"\r\n\r\n" in rest:
                head, _, rest = rest.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                if len(rest) < length:
                    break
                rest = rest[length:]
                done += 1
            if done >= count:
                return data
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk


def post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"accept: application/json, text/event-stream\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n"
        + extra
        + b"\r\n"
        + body
    )


async def test_a_session_over_one_keep_alive_connection() -> None:
    app = build_app(json_response=True)
    async with running(app) as (url, _port, _stop, _), httpx.AsyncClient(timeout=5) as client:
        response = await client.post(url + "/mcp", json=INIT, headers=POST_HEADERS)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.headers["content-length"] == str(len(response.content))  # whole body: no chunking
        session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        notified = await client.post(
            url + "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**POST_HEADERS, **session},
        )
        assert notified.status_code == 202
        for i in range(20):
            call = {
                "jsonrpc": "2.0",
                "id": 10 + i,
                "method": "tools/call",
                "params": {"name": "hello", "arguments": {"name": str(i)}},
            }
            answer = await client.post(url + "/mcp", json=call, headers={**POST_HEADERS, **session})
            assert answer.json()["result"]["content"][0]["text"] == f"hello {i}"
        deleted = await client.delete(url + "/mcp", headers=session)
        assert deleted.status_code == 200
        # every request went over one connection: DELETE (no body read by the app) kept it alive
        assert len(client._transport._pool.connections) == 1  # type: ignore[attr-defined]
    assert app.statistics()["sessions"] == 0


async def test_pipelined_requests_are_answered_in_order() -> None:
    app = build_app(json_response=True)
    async with running(app) as (_, port, _stop, _), raw(port) as stream:
        modern = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "server/discover",
                "params": {
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                    }
                },
            }
        ).encode()
        extra = b"mcp-protocol-version: 2026-07-28\r\nmcp-method: server/discover\r\n"
        await stream.send_all(post(b"/mcp", json.dumps(INIT).encode()) + post(b"/mcp", modern, extra))
        data = await read_responses(stream, 2)
        assert data.count(b"HTTP/1.1 200 OK") == 2
        assert data.index(b'"id":1') < data.index(b'"id":7')
        await stream.aclose()


async def test_sse_streams_flush_each_event_and_use_chunked_framing() -> None:
    app = build_app()
    async with running(app) as (url, _port, stop, _), httpx.AsyncClient(timeout=5) as client:
        response = await client.post(url + "/mcp", json=INIT, headers=POST_HEADERS)
        session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        async with client.stream(
            "GET", url + "/mcp", headers={"accept": "text/event-stream", **session}
        ) as get:
            assert get.status_code == 200
            assert get.headers["transfer-encoding"] == "chunked"
            chunks = get.aiter_bytes()
            with trio.fail_after(2):
                assert b"id: 0-0" in await chunks.__anext__()  # the priming event, before anything else
            stop.set()  # shutdown while the stream is open: it ends cleanly
            with trio.fail_after(3):
                assert b"".join([chunk async for chunk in chunks]) == b""
    assert app.statistics()["sessions"] == 0


async def test_client_disconnect_cancels_a_2026_handler() -> None:
    app = build_app()
    async with running(app) as (_, port, _stop, _), raw(port) as stream:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {
                    "name": "block",
                    "arguments": {},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                    },
                },
            }
        ).encode()
        extra = b"mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: block\r\n"
        await stream.send_all(post(b"/mcp", body, extra))
        await until(lambda: app.statistics()["modern_inflight"] == 1)
        await stream.aclose()
        await until(lambda: app.statistics()["modern_inflight"] == 0)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}", b"400"),  # no Host
        (b"GET /mcp HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 200_000 + b"\r\n\r\n", b"431"),
    ],
    ids=["garbage", "no-host", "huge-head"],
)
async def test_malformed_requests_get_an_error_and_a_close(request_bytes: bytes, status: bytes) -> None:
    async with (
        running(build_app(), H11Config(max_head_size=16 * 1024)) as (_, port, _stop, _),
        raw(port) as stream,
    ):
        await stream.send_all(request_bytes)
        data = await read_until_closed(stream)
        assert data.startswith(b"HTTP/1.1 " + status), data[:100]


async def test_idle_keep_alive_connections_are_closed() -> None:
    async with (
        running(build_app(), H11Config(keep_alive_timeout=0.2)) as (_, port, _stop, _),
        raw(port) as stream,
    ):
        start = trio.current_time()
        assert await read_until_closed(stream) == b""
        assert 0.15 < trio.current_time() - start < 2


async def test_a_slow_request_head_times_out() -> None:
    async with running(build_app(), H11Config(read_timeout=0.2)) as (_, port, _stop, _), raw(port) as stream:
        await stream.send_all(b"POST /mcp HTTP/1.1\r\nhost: x\r\n")  # and never the rest
        assert await read_until_closed(stream) == b""


async def test_expect_100_continue() -> None:
    async with running(build_app(json_response=True)) as (_, port, _stop, _), raw(port) as stream:
        body = json.dumps(INIT).encode()
        await stream.send_all(
            post(b"/mcp", b"", b"expect: 100-continue\r\n").replace(
                b"content-length: 0", b"content-length: " + str(len(body)).encode()
            )
        )
        with trio.fail_after(2):
            first = await stream.receive_some(65536)
        assert first.startswith(b"HTTP/1.1 100"), first
        await stream.send_all(body)
        data = first + await read_responses(stream, 1)
        assert b"HTTP/1.1 200 OK" in data and b"mcp-session-id" in data


AppFn = Callable[
    [dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
    Awaitable[None],
]


class OddApp:
    """An ASGI app that misbehaves in the ways an HTTP server must survive."""

    startup_failure = None
    """What serve() asks an app before reporting its URLs (an MCPApp's failed lifespan)."""

    def __init__(self) -> None:
        self.config = ServerConfig()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def aclose(self) -> None:
        pass

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/raise":
            raise RuntimeError("boom")
        if path == "/nothing":
            return
        if path == "/head-only":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            return
        if path == "/half":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": path.encode(), "more_body": False})


async def test_a_misbehaving_app_never_takes_the_server_down(caplog: pytest.LogCaptureFixture) -> None:
    async with running(OddApp()) as (url, _port, _stop, _), httpx.AsyncClient(timeout=5) as client:
        assert (await client.get(url + "/raise")).status_code == 500
        assert "ASGI app on GET /raise failed" in caplog.text
        assert (await client.get(url + "/nothing")).status_code == 500
        assert (await client.get(url + "/head-only")).status_code == 204
        with pytest.raises(httpx.RemoteProtocolError):  # closed mid-body: the client sees it
            await client.get(url + "/half")
        response = await client.get(url + "/caf%C3%A9")
        assert response.text == "/café"  # the ASGI path is percent-decoded


async def test_cancelling_serve_h11_stops_everything_at_once() -> None:
    app = build_app()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(functools.partial(serve, app, "127.0.0.1", 0, http="h11"))
            async with httpx.AsyncClient(timeout=5) as client:
                response = await client.post(urls[0], json=INIT, headers=POST_HEADERS)
                assert response.status_code == 200
            nursery.cancel_scope.cancel()
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", int(urls[0].removesuffix("/mcp").rsplit(":", 1)[1]))


SERVE_H11 = """
import sys, trio
from mcp_trio import MCPApp, MCPServer, serve

async def main() -> None:
    app = MCPApp(MCPServer("light"))
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(app, "127.0.0.1", 0, http="h11", task_status=task_status)
        )
        # A raw request: an HTTP client library could load h2 itself.
        port = int(urls[0].removesuffix("/mcp").rsplit(":", 1)[1])
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(b"GET /mcp HTTP/1.1\\r\\nhost: 127.0.0.1\\r\\n\\r\\n")
            assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 ")
        nursery.cancel_scope.cancel()

trio.run(main)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("hypercorn", "h2", "hpack", "priority")))
"""


def test_serving_with_h11_loads_no_hypercorn() -> None:
    """``serve(app, http="h11")`` imports its server only: a program served by h11 never loads hypercorn,
    h2, hpack or priority (a fresh interpreter serves one request, then lists what it loaded)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", SERVE_H11], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


async def test_serve_refuses_what_its_server_cannot_take() -> None:
    app = build_app()
    with pytest.raises(ValueError, match="does not do TLS"):
        await serve(app, http="h11", certfile="cert.pem", keyfile="key.pem")
    with pytest.raises(TypeError, match="takes an H11Config"):
        await serve(app, http="h11", config=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'hypercorn' or 'h11'"):
        await serve(app, http="h2")  # type: ignore[arg-type]
