"""Hostile peers against both of mcp_trio's HTTP servers, in-process on real loopback sockets.

Each test runs on hypercorn (as ``serve()`` runs it: mcp_trio's fixes, with and without the fast path)
and on ``serve_h11``: a request that used to kill the server, a client that stops reading (write
deadlines, DELETE and shutdown while a write is stuck), handler failures that arrive as exception
groups, input-required from several tasks of one handler, HEAD and WebSocket upgrades.  The tests of a
handler's failure and of a client that stops reading run on a hosted python-sdk server too
(``sdk_servers.py``, the same tools written with the SDK's API), on hypercorn and ``serve_h11``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio
from mcp_http import INIT, POST_HEADERS, read_until, serve_in_process
from sdk_servers import build_server as build_sdk_server

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig
from mcp_trio._protocol import versions
from mcp_trio.sdk import hosted_app

SERVERS = ["hypercorn", "hypercorn-as-shipped-path", "h11"]
APPS = [("ours", kind) for kind in SERVERS] + [("hosted", kind) for kind in ("hypercorn", "h11")]
"""(app, server kind): the app below, or the python-sdk server of ``sdk_servers.py`` hosted."""
MODERN = versions.LATEST_MODERN.name
CHUNK = 256 * 1024  # one flood notification's payload


class Misbehaving(BaseException):
    """Not an Exception: user code can raise anything."""


def build_app(**config: Any) -> MCPApp:
    server = MCPServer("hostile")

    @server.tool()
    async def hello(name: str) -> str:
        return f"hello {name}"

    @server.tool()
    async def flood(ctx: Context, count: int) -> str:
        for i in range(count):
            await ctx.report_progress(i, count, "x" * CHUNK)
        return "flooded"

    @server.tool()
    async def ask_twice(ctx: Context) -> str:
        answers: dict[str, str] = {}
        schema = {"type": "object", "properties": {"v": {"type": "string"}}}

        async def ask(key: str) -> None:
            result = await ctx.elicit(f"give {key}", schema, key=key)
            answers[key] = str((result.content or {}).get("v"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "first")
            nursery.start_soon(ask, "second")
        return f"{answers['first']}+{answers['second']}"

    @server.tool()
    async def group_failure() -> str:
        async with trio.open_nursery() as nursery:

            async def fail() -> None:
                raise Misbehaving("from a child task")

            nursery.start_soon(fail)
            nursery.start_soon(fail)
        return "unreachable"

    options: dict[str, Any] = {"shutdown_grace": 2.0, "stats_path": "/stats", **config}
    return MCPApp(server, ServerConfig(**options))


def build(app: str, **config: Any) -> MCPApp:
    """``build_app``, or (``hosted``) the python-sdk server with the same tools, hosted."""
    if app == "ours":
        return build_app(**config)
    options: dict[str, Any] = {"shutdown_grace": 2.0, "stats_path": "/stats", **config}
    return hosted_app(build_sdk_server(), ServerConfig(**options))


def running(app: MCPApp, kind: str) -> AbstractAsyncContextManager[tuple[str, int, trio.Event]]:
    """The app on 127.0.0.1:0 with ``kind`` of server; yields (url, port, stop) and checks on exit that
    the server returned (no task left behind)."""
    return serve_in_process(app, kind, stop_within=6)


async def until(predicate: Callable[[], bool], within: float) -> None:
    with trio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - polls the app's statistics, which have no event
            await trio.sleep(0.01)


def modern(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> tuple[dict, dict]:
    meta = {versions.PROTOCOL_VERSION_META_KEY: MODERN, mt.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}}}
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": meta}}
    headers = {**POST_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": method}
    if params and "name" in params:
        headers["mcp-name"] = params["name"]
    return body, headers


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    response = await http.post(url, json=INIT, headers=POST_HEADERS)
    assert response.status_code == 200, response.text
    session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    response = await http.post(
        url,
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={**POST_HEADERS, **session},
    )
    assert response.status_code == 202
    return session


async def call(
    http: httpx.AsyncClient, url: str, session: dict[str, str], tool: str, **arguments: Any
) -> Any:
    message = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    response = await http.post(url, json=message, headers={**POST_HEADERS, **session})
    assert response.status_code == 200, response.text
    data = [line[5:] for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return json.loads(data[-1])


# -- no request kills the server ---------------------------------------------------------------------

STRAY = (
    b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-type: application/json\r\n"
    b"accept: application/json, text/event-stream\r\ncontent-length: 2\r\n\r\n{}"
)


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("after", [b"x", b"\r\n", b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"])
async def test_connection_close_with_stray_bytes_does_not_kill_the_server(kind: str, after: bytes) -> None:
    # hypercorn as shipped dies of this (BusyResourceError out of TCPServer.run, pgjones/hypercorn#203).
    app = build_app()
    with trio.fail_after(20):
        async with running(app, kind) as (url, port, _stop):
            for _ in range(10):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    await stream.send_all(STRAY + after)
                    answer = b""
                    with trio.move_on_after(3):
                        while chunk := await stream.receive_some(65536):
                            answer += chunk
                    assert answer.startswith(b"HTTP/1.1 400"), answer
            async with httpx.AsyncClient(timeout=5) as http:
                session = await open_session(http, url)
                result = await call(http, url, session, "hello", name="still here")
                assert result["result"]["content"][0]["text"] == "hello still here"


@pytest.mark.parametrize("kind", SERVERS)
async def test_head_and_websocket_upgrade_get_clean_answers(kind: str) -> None:
    app = build_app()
    with trio.fail_after(10):
        async with running(app, kind) as (url, port, _stop):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                buffer = bytearray()
                await stream.send_all(b"HEAD /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                head = await read_until(stream, buffer, b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 405"), head
                # No body follows a HEAD answer, and the connection serves the next request.
                await stream.send_all(b"GET /stats HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                head = await read_until(stream, buffer, b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200"), (head, bytes(buffer))
            async with httpx.AsyncClient(timeout=5) as http:
                upgrade = {
                    "connection": "upgrade",
                    "upgrade": "websocket",
                    "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
                    "sec-websocket-version": "13",
                }
                response = await http.get(url, headers=upgrade)
                assert 400 <= response.status_code < 500, response.status_code
                session = await open_session(http, url)
                assert (await call(http, url, session, "hello", name="x"))["result"]["content"][0][
                    "text"
                ] == "hello x"


# -- containment --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("which", "kind"), APPS)
async def test_handler_failure_as_a_group_of_base_exceptions_is_contained(which: str, kind: str) -> None:
    app = build(which)
    with trio.fail_after(10):
        async with running(app, kind) as (url, _port, _stop), httpx.AsyncClient(timeout=5) as http:
            session = await open_session(http, url)
            answer = await call(http, url, session, "group_failure")
            assert answer["error"]["code"] == mt.INTERNAL_ERROR, answer
            body, headers = modern("tools/call", {"name": "group_failure", "arguments": {}})
            response = await http.post(url, json=body, headers=headers)
            assert response.json()["error"]["code"] == mt.INTERNAL_ERROR, response.text
            # The session and the server go on.
            assert (await call(http, url, session, "hello", name="x"))["result"]["content"][0][
                "text"
            ] == "hello x"
            assert app.statistics()["sessions"] == 1


@pytest.mark.parametrize("kind", SERVERS)
async def test_input_required_from_two_tasks_of_a_handler_is_one_result(kind: str) -> None:
    app = build_app()
    with trio.fail_after(10):
        async with running(app, kind) as (url, _port, _stop), httpx.AsyncClient(timeout=5) as http:
            body, headers = modern("tools/call", {"name": "ask_twice", "arguments": {}})
            response = await http.post(url, json=body, headers=headers)
            assert response.status_code == 200, response.text
            result = response.json()["result"]
            assert result["resultType"] == "input_required", result
            assert set(result["inputRequests"]) == {"first", "second"}
            answers = {
                key: {"action": "accept", "content": {"v": key.upper()}} for key in ("first", "second")
            }
            body["params"].update(inputResponses=answers, requestState=result["requestState"])
            response = await http.post(url, json=body, headers=headers)
            final = response.json()["result"]
            assert final["content"][0]["text"] == "FIRST+SECOND", final


# -- a client that stops reading ----------------------------------------------------------------------


@asynccontextmanager
async def stuck_reader(port: int, session: dict[str, str]) -> AsyncIterator[trio.SocketStream]:
    """A connection with a tiny receive window that asks for a flood of notifications and never reads."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    call_message = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "flood", "arguments": {"count": 100}, "_meta": {"progressToken": "p"}},
    }
    body = json.dumps(call_message).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in {**POST_HEADERS, **session}.items())
    request = f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: {len(body)}\r\n\r\n"
    async with stream:
        await stream.send_all(request.encode() + body)
        yield stream


@pytest.mark.parametrize(("which", "kind"), APPS)
async def test_delete_answers_at_once_while_a_write_is_stuck(which: str, kind: str) -> None:
    app = build(which, write_timeout=30.0)
    with trio.fail_after(20):
        async with running(app, kind) as (url, port, _stop), httpx.AsyncClient(timeout=5) as http:
            session = await open_session(http, url)
            async with stuck_reader(port, session):
                await until(lambda: app.statistics()["writes_stalled"] >= 1, within=8)
                # Another connection of the same session is served meanwhile.
                assert (await call(http, url, session, "hello", name="x"))["result"]["content"]
                with trio.fail_after(1.5):
                    response = await http.delete(url, headers=session)
                assert response.status_code == 200
                await until(lambda: app.statistics()["writes_in_progress"] == 0, within=2)
                assert app.statistics()["sessions"] == 0


@pytest.mark.parametrize(("which", "kind"), APPS)
async def test_a_write_past_write_timeout_breaks_its_connection_not_the_session(
    which: str, kind: str
) -> None:
    app = build(which, write_timeout=1.0)
    with trio.fail_after(20):
        async with running(app, kind) as (url, port, _stop), httpx.AsyncClient(timeout=5) as http:
            session = await open_session(http, url)
            async with stuck_reader(port, session) as stream:
                await until(lambda: app.statistics()["writes_stalled"] >= 1, within=8)
                await until(lambda: app.statistics()["writes_in_progress"] == 0, within=3)
                # The server closed the connection: the client sees its end once it reads what was sent.
                with trio.fail_after(5):
                    while await stream.receive_some(1 << 20):
                        pass
            stats = app.statistics()
            assert stats["sessions"] == 1 and stats["inflight"] == 0, stats
            assert (await call(http, url, session, "hello", name="y"))["result"]["content"][0][
                "text"
            ] == "hello y"


@pytest.mark.parametrize(("which", "kind"), APPS)
async def test_shutdown_ends_on_time_while_a_write_is_stuck(which: str, kind: str) -> None:
    app = build(which, write_timeout=60.0)
    with trio.fail_after(20):
        async with running(app, kind) as (url, port, stop), httpx.AsyncClient(timeout=5) as http:
            session = await open_session(http, url)
            async with stuck_reader(port, session):
                await until(lambda: app.statistics()["writes_stalled"] >= 1, within=8)
                start = trio.current_time()
                stop.set()
                await until(lambda: app.statistics()["sessions"] == 0, within=app.config.shutdown_grace + 1)
                assert trio.current_time() - start < app.config.shutdown_grace
