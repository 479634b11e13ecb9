"""Hosted python-sdk servers on a real socket (hypercorn or the embedded h11 on 127.0.0.1:0), and raw
clients of both eras that read each answer's SSE stream event by event.

``hosting(sdk_server, config)`` serves :func:`mcp_trio.sdk.hosted_app` of the server until the block
ends, then shuts it down and waits for every task of the server to end.  ``Legacy`` speaks 2025-11-25
(a session: ``open()``, ``post()``, ``stream()``, ``get_stream()``, ``delete()``), ``Modern`` 2026-07-28
(the envelope in each request's ``_meta``).  ``Probe`` records which handlers started and which ended by
cancellation (their ``finally`` ran with a cancellation).
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx
import trio

from mcp_trio import MCPApp, ServerConfig, serve
from mcp_trio.sdk import SDKServer, hosted_app

V2025 = "2025-11-25"
V2026 = "2026-07-28"
INFO = {"name": "hosting-test", "version": "1"}
POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
SHUTTING_DOWN = {"code": -32000, "message": "Server shutting down"}


class Probe:
    """Which handlers started, and which of them saw their cancellation (in their ``finally``)."""

    def __init__(self) -> None:
        self.started: dict[str, trio.Event] = {}
        self.cancelled: dict[str, trio.Event] = {}
        self.sessions: list[Any] = []
        """What handlers kept of their requests (``ctx.session``)."""

    def start(self, key: str) -> trio.Event:
        return self.started.setdefault(key, trio.Event())

    def cancel(self, key: str) -> trio.Event:
        return self.cancelled.setdefault(key, trio.Event())

    async def block(self, key: str) -> None:
        """A handler's body that runs until cancelled, recording both ends (anyio only)."""
        self.start(key).set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancel(key).set()
            raise


@dataclass
class Hosted:
    app: MCPApp
    url: str
    stop: trio.Event


@asynccontextmanager
async def hosting(
    sdk_server: SDKServer,
    config: ServerConfig | None = None,
    *,
    http: Literal["hypercorn", "h11"] = "hypercorn",
    app: MCPApp | None = None,
    **serve_options: Any,
) -> AsyncIterator[Hosted]:
    """Serve the hosted ``sdk_server`` on 127.0.0.1:0 for the block; stop it (gracefully) after.
    ``serve_options``: more of :func:`mcp_trio.serve`'s (``admin_bind``, ``admin_started``)."""
    app = app if app is not None else hosted_app(sdk_server, config or ServerConfig(shutdown_grace=1.0))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            serve, app, "127.0.0.1", 0, http=http, shutdown_trigger=stop.wait, **serve_options
        )
        urls = await nursery.start(run)
        url = urls[0] if urls[0].endswith("/mcp") else urls[0] + "/mcp"
        try:
            yield Hosted(app, url, stop)
        finally:
            stop.set()


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


class Stream:
    """An open answer (a POST's or the GET's): its status, headers, and its messages as they come."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.status = response.status_code
        self._chunks = response.aiter_raw()
        self._buffer = b""
        self._ended = False
        self.messages: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any] | None:
        """The next JSON-RPC message of the stream (an SSE event's data, or the JSON body); None once
        the body has ended (a cut body raises ``httpx.RemoteProtocolError``)."""
        sse = self.response.headers.get("content-type", "").startswith("text/event-stream")
        while True:
            if sse and b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode().rstrip("\r")
                if text.startswith("data:") and text[5:].strip():
                    self.messages.append(json.loads(text[5:]))
                    return self.messages[-1]
                continue
            if self._ended:
                if not sse and self._buffer.strip():
                    self.messages.append(json.loads(self._buffer))
                    self._buffer = b""
                    return self.messages[-1]
                return None
            try:
                self._buffer += await self._chunks.__anext__()
            except StopAsyncIteration:
                self._ended = True

    async def aclose(self) -> None:
        """Drop the answer (a client disconnect, if it has not ended).  A read in a cancelled scope
        unwinds httpx's chain of generators (``aclose()`` would leave the inner ones to the garbage
        collector, a ResourceWarning each)."""
        if not self._ended:
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    while True:
                        await self._chunks.__anext__()
                except StopAsyncIteration:
                    self._ended = True
                except httpx.HTTPError:
                    pass
        await self.response.aclose()

    async def rest(self) -> list[dict[str, Any]]:
        """Every message up to the stream's (clean) end."""
        while await self.next() is not None:
            pass
        return self.messages


class Peer:
    """A raw client of one era."""

    version = ""

    def __init__(self, http: httpx.AsyncClient, url: str, extra: dict[str, str] | None = None) -> None:
        self.http = http
        self.url = url
        self.extra = extra or {}
        self._ids = iter(range(1, 1_000_000))

    def next_id(self) -> int:
        return next(self._ids)

    def headers(self, message: dict[str, Any]) -> dict[str, str]:
        raise NotImplementedError

    def body(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    @asynccontextmanager
    async def stream(self, message: dict[str, Any]) -> AsyncIterator[Stream]:
        content = json.dumps(self.body(message)).encode()
        async with self.http.stream("POST", self.url, headers=self.headers(message), content=content) as r:
            answer = Stream(r)
            try:
                yield answer
            finally:
                await answer.aclose()

    async def post(self, message: dict[str, Any]) -> Stream:
        """POST and read the answer to its end."""
        async with self.stream(message) as answer:
            await answer.rest()
            return answer

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A request's final message (its result or error)."""
        answer = await self.post(request(self.next_id(), method, params))
        return answer.messages[-1]

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.call("tools/call", {"name": name, "arguments": arguments or {}})


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def tool_call(request_id: int, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return request(request_id, "tools/call", {"name": name, "arguments": arguments or {}})


class Legacy(Peer):
    version = V2025
    session_id = ""

    async def open(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        init = request(
            0,
            "initialize",
            {"protocolVersion": V2025, "capabilities": capabilities or {}, "clientInfo": INFO},
        )
        headers = {**POST_HEADERS, **self.extra}
        response = await self.http.post(self.url, headers=headers, content=json.dumps(init).encode())
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        answer = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert answer.status == 202, answer.status
        result: dict[str, Any] = sse_messages(response.text)[-1]["result"]
        return result

    def headers(self, message: dict[str, Any] | None = None) -> dict[str, str]:
        return {
            **POST_HEADERS,
            **self.extra,
            "mcp-protocol-version": V2025,
            "mcp-session-id": self.session_id,
        }

    @asynccontextmanager
    async def get_stream(self) -> AsyncIterator[Stream]:
        headers = {**self.headers(), "accept": "text/event-stream"}
        del headers["content-type"]
        async with self.http.stream("GET", self.url, headers=headers) as response:
            answer = Stream(response)
            try:
                yield answer
            finally:
                await answer.aclose()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> int:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return (await self.post(message)).status

    async def respond(self, request_id: Any, result: dict[str, Any]) -> int:
        """Answer a server-to-client request."""
        return (await self.post({"jsonrpc": "2.0", "id": request_id, "result": result})).status

    async def delete(self) -> int:
        response = await self.http.delete(self.url, headers=self.headers())
        return response.status_code


class Modern(Peer):
    version = V2026
    META = {
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientInfo": INFO,
        "io.modelcontextprotocol/clientCapabilities": {},
    }

    def headers(self, message: dict[str, Any]) -> dict[str, str]:
        headers = {
            **POST_HEADERS,
            **self.extra,
            "mcp-protocol-version": V2026,
            "mcp-method": message["method"],
        }
        name = (message.get("params") or {}).get("name")
        if name is not None:
            headers["mcp-name"] = name
        return headers

    def body(self, message: dict[str, Any]) -> dict[str, Any]:
        if "id" not in message:
            return message
        params = message.get("params") or {}
        return {**message, "params": {**params, "_meta": {**self.META, **params.get("_meta", {})}}}
