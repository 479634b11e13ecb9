"""The shutdown rule (docs/transport.md, "Shutdown"), on real servers on 127.0.0.1:0 (hypercorn and the
embedded h11), in both eras:

1. once the app stops admitting, a new request gets 503 with ``Retry-After`` and the JSON-RPC error
   -32000 ``Server shutting down`` (a 2025 session's notifications are still taken);
2. a call in flight shorter than ``shutdown_grace`` is answered normally;
3. a call still running when the grace runs out is cancelled and answered -32000 on its own stream (the
   2025 POST's SSE stream, the 2026 answer), then that stream ends cleanly, and so does the 2025 GET
   stream; mcp_trio's client sees an :class:`RPCError`, not a :class:`TransportError`.

The WebSocket side of the rule is in test_websocket.py, stdio's in test_stdio_server.py, a worker that
hands its sessions over through Redis in tests/integration/test_redis.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig, open_client_session, serve
from mcp_trio.errors import RPCError

GRACE = 1.0
SHORT = 0.3
"""Seconds of a call shorter than the grace."""
LONG = 60.0
"""Seconds of a call far longer than the grace (it never finishes here)."""
DEADLINE = 15.0
SERVERS = ["hypercorn", "h11"]
V2025 = "2025-11-25"
V2026 = "2026-07-28"
SHUTTING_DOWN = {"code": -32000, "message": "Server shutting down"}
INFO = {"name": "t", "version": "1"}
POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class Probe:
    """Which calls started, and which were cancelled."""

    def __init__(self) -> None:
        self.started: dict[str, trio.Event] = {}
        self.cancelled: set[str] = set()

    def event(self, key: str) -> trio.Event:
        return self.started.setdefault(key, trio.Event())


def build_server(probe: Probe) -> MCPServer:
    server = MCPServer("shutdown-test")

    @server.tool()
    async def slow(key: str, seconds: float) -> str:
        probe.event(key).set()
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            probe.cancelled.add(key)
            raise
        return f"{key} slept {seconds}"

    @server.tool()
    async def chatty(ctx: Context, key: str) -> str:
        """Reports progress every 0.1 s until cancelled (its answer is an SSE stream)."""
        probe.event(key).set()
        step = 0
        try:
            while True:
                step += 1
                await ctx.report_progress(step)
                await trio.sleep(0.1)
        except trio.Cancelled:
            probe.cancelled.add(key)
            raise

    return server


@dataclass
class Served:
    app: MCPApp
    url: str
    stop: trio.Event
    done: trio.Event = field(default_factory=trio.Event)
    stopped_at: float = 0.0

    def shut_down(self) -> None:
        self.stopped_at = trio.current_time()
        self.stop.set()


@asynccontextmanager
async def serving(
    http: Literal["hypercorn", "h11"], probe: Probe, *, json_response: bool = False, grace: float = GRACE
) -> AsyncIterator[Served]:
    """The app on 127.0.0.1:0; the block must end with the server stopped (``served.shut_down()``)."""
    app = MCPApp(build_server(probe), ServerConfig(shutdown_grace=grace, json_response=json_response))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        run = functools.partial(serve, app, "127.0.0.1", 0, http=http, shutdown_trigger=stop.wait)
        urls = await nursery.start(run)
        url = urls[0] if urls[0].endswith("/mcp") else urls[0] + "/mcp"  # (the endpoint, or its address)
        served = Served(app, url, stop)

        async def watch() -> None:
            await stop.wait()
            while nursery.child_tasks - {trio.lowlevel.current_task()}:  # noqa: ASYNC110 - no event
                await trio.sleep(0.01)
            served.done.set()

        nursery.start_soon(watch)
        yield served
        await served.done.wait()


def call(request_id: int, key: str, seconds: float, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "slow", "arguments": {"key": key, "seconds": seconds}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@dataclass
class Answer:
    """An HTTP answer read to its end: its status, headers, the JSON-RPC messages it carried (a JSON
    body, or each SSE event's), and when it ended."""

    status: int
    headers: httpx.Headers
    messages: list[dict[str, Any]]
    ended_at: float


async def read_answer(http: httpx.AsyncClient, url: str, headers: dict[str, str], body: Any) -> Answer:
    """POST (or GET, without a body) and read the answer to its clean end (a cut response raises)."""
    method = "GET" if body is None else "POST"
    content = None if body is None else json.dumps(body).encode()
    async with http.stream(method, url, headers=headers, content=content) as response:
        messages = []
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            async for line in response.aiter_lines():
                if line.startswith("data:") and line[5:].strip():
                    messages.append(json.loads(line[5:]))
        else:
            data = await response.aread()
            if data:
                messages.append(json.loads(data))
        return Answer(response.status_code, response.headers, messages, trio.current_time())


class Era:
    """How a raw client speaks one era: the headers of a request, a session to open first (2025)."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url

    async def open(self) -> None:
        pass

    def headers(self, message: dict[str, Any]) -> dict[str, str]:
        raise NotImplementedError

    def body(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    async def post(self, message: dict[str, Any]) -> Answer:
        return await read_answer(self.http, self.url, self.headers(message), self.body(message))


class Legacy(Era):
    session_id = ""

    async def open(self) -> None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": V2025, "capabilities": {}, "clientInfo": INFO},
        }
        response = await self.http.post(self.url, headers=POST_HEADERS, content=json.dumps(init).encode())
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        answer = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert answer.status == 202, answer

    def headers(self, message: dict[str, Any] | None = None) -> dict[str, str]:
        return {**POST_HEADERS, "mcp-protocol-version": V2025, "mcp-session-id": self.session_id}

    async def get_stream(self) -> Answer:
        headers = {**self.headers(), "accept": "text/event-stream"}
        del headers["content-type"]
        return await read_answer(self.http, self.url, headers, None)


class Modern(Era):
    META = {
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientInfo": INFO,
        "io.modelcontextprotocol/clientCapabilities": {},
    }

    def headers(self, message: dict[str, Any]) -> dict[str, str]:
        headers = {**POST_HEADERS, "mcp-protocol-version": V2026, "mcp-method": message["method"]}
        name = message.get("params", {}).get("name")
        if name is not None:
            headers["mcp-name"] = name
        return headers

    def body(self, message: dict[str, Any]) -> dict[str, Any]:
        if "id" not in message:
            return message
        params = message.get("params", {})
        return {**message, "params": {**params, "_meta": {**self.META, **params.get("_meta", {})}}}


ERAS: dict[str, type[Era]] = {"2025": Legacy, "2026": Modern}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("http", SERVERS)
async def test_stop_admitting_finish_within_the_grace_then_answer_shutting_down(
    http: Literal["hypercorn", "h11"], era: str
) -> None:
    """The whole rule on the wire: a short call and a long one in flight (and, in 2025, a GET stream);
    once the app stops admitting, new calls get 503 with Retry-After and -32000 (2025 notifications
    still 202); the short call is answered as usual; the long one, once the grace has run out, gets
    -32000 as its answer, on its own stream, which then ends cleanly (so does the GET stream)."""
    probe = Probe()
    answers: dict[str, Answer] = {}
    with trio.fail_after(DEADLINE):
        async with serving(http, probe) as served, httpx.AsyncClient(timeout=DEADLINE) as client:
            peer = ERAS[era](client, served.url)
            await peer.open()
            async with trio.open_nursery() as nursery:

                async def keep(name: str, answer: Any) -> None:
                    answers[name] = await answer

                nursery.start_soon(keep, "long", peer.post(call(1, "long", LONG)))
                nursery.start_soon(keep, "short", peer.post(call(2, "short", SHORT)))
                if isinstance(peer, Legacy):
                    nursery.start_soon(keep, "get", peer.get_stream())
                await probe.event("long").wait()
                await probe.event("short").wait()
                served.shut_down()
                # until the app stops admitting (at once: no drain delay), quick calls are still served
                for request_id in range(100, 1000):
                    refused = await peer.post(call(request_id, f"q{request_id}", 0))
                    if refused.status == 503:
                        break
                    assert refused.status == 200 and "result" in refused.messages[-1], refused
                assert refused.headers["retry-after"] == "1"
                assert refused.messages == [{"jsonrpc": "2.0", "id": request_id, "error": SHUTTING_DOWN}]
                if isinstance(peer, Legacy):  # what is not a request is still taken
                    progress = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
                    assert (await peer.post(progress)).status == 202
                assert "long" not in answers and "long" not in probe.cancelled  # it runs on meanwhile
    short, long = answers["short"], answers["long"]
    assert short.status == 200 and short.messages[-1]["result"]["content"][0]["text"] == "short slept 0.3"
    assert "short" not in probe.cancelled
    assert long.status == 200 and "long" in probe.cancelled
    assert long.messages == [{"jsonrpc": "2.0", "id": 1, "error": SHUTTING_DOWN}]
    assert long.ended_at - served.stopped_at >= GRACE  # the grace was given in full
    if era == "2025":
        assert answers["get"].status == 200 and answers["get"].messages == []  # ended cleanly, empty


@pytest.mark.parametrize("mode", ["legacy", "modern"])
@pytest.mark.parametrize("http", SERVERS)
async def test_the_client_gets_its_answer_or_an_rpc_error(
    http: Literal["hypercorn", "h11"], mode: Literal["legacy", "modern"]
) -> None:
    """mcp_trio's client, in each era: the call shorter than the grace returns its result; the longer
    one raises RPCError -32000 "Server shutting down" (not a TransportError)."""
    probe = Probe()
    outcomes: dict[str, Any] = {}
    with trio.fail_after(DEADLINE):
        async with serving(http, probe) as served, open_client_session(served.url, mode=mode) as session:

            async def run(key: str, seconds: float) -> None:
                try:
                    outcomes[key] = await session.call_tool("slow", {"key": key, "seconds": seconds})
                except Exception as exc:
                    outcomes[key] = exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "long", LONG)
                nursery.start_soon(run, "short", SHORT)
                await probe.event("long").wait()
                await probe.event("short").wait()
                served.shut_down()
    short, long = outcomes["short"], outcomes["long"]
    assert isinstance(short, mt.CallToolResult), short
    assert isinstance(short.content[0], mt.TextContent) and short.content[0].text == "short slept 0.3"
    assert isinstance(long, RPCError), repr(long)
    assert (long.code, long.message) == (-32000, "Server shutting down")


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("shape", ["sse", "json"])
async def test_the_shutdown_answer_takes_the_shape_of_the_answer(era: str, shape: str) -> None:
    """A call that reports progress (its answer an SSE stream) and is cut by the grace: the stream
    carries its notifications, then the -32000 answer, then ends cleanly; with ``json_response`` the
    answer is one JSON body carrying the -32000 error (the notifications go elsewhere, or nowhere)."""
    probe = Probe()
    with trio.fail_after(DEADLINE):
        async with (
            serving("h11", probe, json_response=shape == "json") as served,
            httpx.AsyncClient(timeout=DEADLINE) as client,
        ):
            peer = ERAS[era](client, served.url)
            await peer.open()
            message = call(1, "loud", 0)
            message["params"] = {"name": "chatty", "arguments": {"key": "loud"}}
            message["params"]["_meta"] = {"progressToken": "p"}
            async with trio.open_nursery() as nursery:
                answer: list[Answer] = []

                async def keep() -> None:
                    answer.append(await peer.post(message))

                nursery.start_soon(keep)
                await probe.event("loud").wait()
                await trio.sleep(0.3)
                served.shut_down()
    (got,) = answer
    assert got.status == 200 and "loud" in probe.cancelled
    assert got.messages[-1] == {"jsonrpc": "2.0", "id": 1, "error": SHUTTING_DOWN}
    progress = [m for m in got.messages[:-1] if m.get("method") == "notifications/progress"]
    if shape == "sse":
        assert got.headers["content-type"].startswith("text/event-stream")
        assert len(progress) >= 3 and progress == got.messages[:-1]
    else:
        assert got.headers["content-type"].startswith("application/json") and got.messages[:-1] == []


@pytest.mark.parametrize("http", SERVERS)
async def test_a_call_the_client_cancels_during_the_grace_gets_no_answer(
    http: Literal["hypercorn", "h11"],
) -> None:
    """2025: ``notifications/cancelled`` is still taken while the server stops; the call it cancels is
    not answered (neither its result nor -32000), and its stream ends cleanly at once."""
    probe = Probe()
    answers: list[Answer] = []
    with trio.fail_after(DEADLINE):
        async with (
            serving(http, probe, grace=DEADLINE) as served,  # a grace that does not run out here
            httpx.AsyncClient(timeout=DEADLINE) as client,
        ):
            peer = Legacy(client, served.url)
            await peer.open()
            async with trio.open_nursery() as nursery:

                async def keep() -> None:
                    answers.append(await peer.post(call(1, "long", LONG)))

                nursery.start_soon(keep)
                await probe.event("long").wait()
                served.shut_down()
                for request_id in range(100, 1000):  # until the app stops admitting
                    if (await peer.post(call(request_id, f"q{request_id}", 0))).status == 503:
                        break
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
                assert (await peer.post(cancel)).status == 202
    (answer,) = answers
    assert answer.status == 200 and answer.messages == [] and "long" in probe.cancelled
