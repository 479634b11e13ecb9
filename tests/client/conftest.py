"""Fixtures of the client tests: servers on 127.0.0.1:0 in this Trio run, and leak checks.

``demo`` serves the demo server with :func:`mcp_trio.serve`; ``fake`` serves a hand-written ASGI app
(:class:`FakeServer`, no framework) with hypercorn directly, so each test can make one part of the
exchange misbehave.  ``http`` is the test's own ``httpx.AsyncClient``, passed to the session with
``http=`` so that its connection pool can be inspected afterwards (:func:`assert_no_leaks`,
:func:`assert_clean`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import mcp_trio
from mcp_trio import MCPApp, ServerConfig, serve
from mcp_trio._http.hypercorn_server import serve_hypercorn
from mcp_trio.demo import build_demo_server
from mcp_trio.server import hypercorn_config

# httpx reads a body through a chain of async generators (Response.aiter_bytes -> aiter_raw ->
# BoundAsyncStream -> ... -> httpcore's _receive_response_body).  The client stops reading a POST's SSE
# stream as soon as the response has arrived, and cancels the GET stream on exit; it then calls aclose()
# on the outer generator only, which leaves the inner ones to the garbage collector, and Trio's asyncgen
# finalizer warns for each (a ResourceWarning; encode/httpx#3686).  test_client_demo.py::
# test_no_async_generator_left_to_gc shows it; the other client tests ignore exactly those warnings.
IGNORE_HTTPX_ASYNCGEN_WARNINGS = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx|httpcore)\.[A-Za-z0-9_.]+' was garbage collected:ResourceWarning"
)
CLIENT_SRC = Path(mcp_trio.__file__).resolve().parent / "_client"
SESSION_ID = "fake-session-1"
VERSION = "2025-11-25"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# -- leak checks --------------------------------------------------------------------------------


def _tasks_below(nursery: trio.Nursery) -> list[trio.lowlevel.Task]:
    found: list[trio.lowlevel.Task] = []
    stack = [nursery]
    while stack:
        for task in stack.pop().child_tasks:
            found.append(task)
            stack.extend(task.child_nurseries)
    return found


def client_tasks() -> list[trio.lowlevel.Task]:
    """Every live task of this Trio run whose coroutine is mcp_trio client code (anywhere in the run)."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    tasks = [task for nursery in root.child_nurseries for task in _tasks_below(nursery)]
    return [
        task
        for task in tasks
        if CLIENT_SRC in Path(getattr(getattr(task.coro, "cr_code", None), "co_filename", "/")).parents
    ]


def checked_out(http: httpx.AsyncClient) -> list[Any]:
    """The connections of ``http``'s pool that are neither idle nor closed (an exchange still owns them)."""
    pool = http._transport._pool  # type: ignore[attr-defined]
    return [conn for conn in pool.connections if not (conn.is_idle() or conn.is_closed())]


def assert_no_leaks(http: httpx.AsyncClient | None = None) -> None:
    """After a session block: no client task anywhere in the run, and no connection (or queued request)
    still checked out of ``http``'s pool."""
    assert client_tasks() == []
    if http is not None:
        assert checked_out(http) == []
        assert http._transport._pool._requests == []  # type: ignore[attr-defined]


def assert_clean(http: httpx.AsyncClient | None = None) -> None:
    """:func:`assert_no_leaks`, and no task at all left under the test's own task (pytest-trio opens a
    nursery around every test): for tests that run nothing of their own beside the session."""
    assert_no_leaks(http)
    assert [t for n in trio.lowlevel.current_task().child_nurseries for t in _tasks_below(n)] == []


async def eventually(predicate: Callable[[], bool], within: float = 2.0, poll: float = 0.01) -> None:
    """Wait (at most ``within`` seconds) until ``predicate()`` is true (polled: statistics have no event)."""
    for _ in range(int(within / poll) + 1):
        if predicate():
            return
        await trio.sleep(poll)
    assert predicate(), f"not true within {within} s"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # like the client's own: no read timeout (SSE streams idle); the tests bound every wait themselves
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as client:
        yield client


# -- the demo server ----------------------------------------------------------------------------


@dataclass
class Demo:
    app: MCPApp
    url: str

    def stats(self) -> dict[str, Any]:
        return self.app.statistics()


@pytest.fixture
async def demo() -> AsyncIterator[Demo]:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield Demo(app, urls[0])
        stop.set()


# -- a hand-written misbehaving server ----------------------------------------------------------


@dataclass
class Request:
    """One HTTP request the fake server received."""

    method: str
    headers: dict[str, str]
    message: Any
    at: float
    disconnected: trio.Event = field(default_factory=trio.Event)
    ended_at: float | None = None  # when the handler finished its response (or gave up)


Handler = Callable[[Request, Send], Awaitable[None]]


async def start_response(
    send: Send, status: int = 200, content_type: str | None = "text/event-stream", **headers: str
) -> None:
    raw = [(b"mcp-session-id", SESSION_ID.encode())]
    if content_type is not None:
        raw.append((b"content-type", content_type.encode()))
    raw.extend((name.replace("_", "-").encode(), value.encode()) for name, value in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": raw})


async def body(send: Send, data: bytes, *, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": more})


def event(
    message: Any = None, *, id: str | None = None, retry: int | None = None, raw: str | None = None
) -> bytes:
    """One SSE event: ``message`` as JSON (or ``raw`` data text), with optional id and retry fields."""
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    data = raw if raw is not None else ("" if message is None else json.dumps(message))
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


def result_of(request: Request, result: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request.message["id"], "result": result if result is not None else {}}


def tool_result(request: Request, text: str = "ok") -> dict[str, Any]:
    return result_of(request, {"content": [{"type": "text", "text": text}]})


async def reply(send: Send, status: int, payload: Any, content_type: str = "application/json") -> None:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    await start_response(send, status, content_type)
    await body(send, data, more=False)


async def answer_call(request: Request, send: Send) -> None:
    """The well-behaved answer to a request: one JSON body."""
    await reply(send, 200, tool_result(request))


async def refuse_405(request: Request, send: Send) -> None:
    await reply(send, 405, b"Method Not Allowed", "text/plain")


async def answer_200(request: Request, send: Send) -> None:
    await reply(send, 200, b"", "text/plain")


async def accept_202(request: Request, send: Send) -> None:
    """The answer to a notification or a response: 202, no body."""
    await start_response(send, 202, None)
    await body(send, b"", more=False)


async def wait_disconnect(request: Request, send: Send) -> None:
    """Never answer: wait until the client goes away."""
    await request.disconnected.wait()


class FakeServer:
    """A hand-written 2025-era MCP endpoint (plain ASGI).  ``initialize`` and notifications get the
    normal answers; every other POSTed request goes to ``self.call``, GET to ``self.get`` (405 unless
    replaced), DELETE to ``self.delete``, POSTed notifications and responses to ``self.notify``, and
    ``initialize`` to ``self.initialize`` if set.  Every request is logged in ``self.log``."""

    def __init__(self) -> None:
        self.call: Handler = answer_call
        self.get: Handler = refuse_405
        self.delete: Handler = answer_200
        self.notify: Handler = accept_202
        self.initialize: Handler | None = None  # instead of the normal answer
        self.initialize_result: dict[str, Any] | None = None  # instead of the normal one
        self.log: list[Request] = []
        self.running = 0  # handlers in progress
        self.received = trio.Condition()

    def requests(self, http_method: str, jsonrpc_method: str | None = None) -> list[Request]:
        return [
            r
            for r in self.log
            if r.method == http_method
            and (
                jsonrpc_method is None
                or (isinstance(r.message, dict) and r.message.get("method") == jsonrpc_method)
            )
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            for _ in range(2):
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        assert scope["type"] == "http"
        data = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            data += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        request = Request(scope["method"], headers, json.loads(data) if data else None, trio.current_time())
        self.log.append(request)
        async with self.received:
            self.received.notify_all()
        self.running += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, request, receive)
                await self._route(request, send)
                request.ended_at = trio.current_time()
                nursery.cancel_scope.cancel()
        finally:
            self.running -= 1

    async def _watch(self, request: Request, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                request.disconnected.set()
                return

    async def _route(self, request: Request, send: Send) -> None:
        message = request.message
        if request.method == "GET":
            await self.get(request, send)
        elif request.method == "DELETE":
            await self.delete(request, send)
        elif message.get("method") == "initialize" and self.initialize is not None:
            await self.initialize(request, send)
        elif message.get("method") == "initialize":
            result = self.initialize_result or {
                "protocolVersion": VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "1"},
            }
            await reply(send, 200, result_of(request, result))
        elif "id" not in message or "method" not in message:  # a notification or a response
            await self.notify(request, send)
        else:
            await self.call(request, send)

    async def wait_for(self, predicate: Callable[[], bool], within: float = 2.0) -> None:
        """Wait (at most ``within`` seconds) until a request makes ``predicate()`` true."""
        with trio.fail_after(within):
            async with self.received:
                while not predicate():
                    await self.received.wait()


@dataclass
class Fake:
    server: FakeServer
    url: str


@pytest.fixture
async def fake() -> AsyncIterator[Fake]:
    server = FakeServer()
    stop = trio.Event()
    config = hypercorn_config(["127.0.0.1:0"], graceful_timeout=1.0)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve_hypercorn(
                server,
                config,
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        yield Fake(server, urls[0] + "/mcp")
        stop.set()
