"""Keep-alive comments on every SSE stream whose sender is silent, read off the wire from a real server
(mcp_trio's hypercorn, and the embedded h11 server) on 127.0.0.1 with ``keepalive_interval`` 0.2 s:

- 2025: the SSE answer of a ``tools/call`` that stays silent for a second, and the session's GET stream;
- 2026-07-28: a silent ``tools/call``, whose answer becomes an SSE stream once it has been silent for an
  interval (a quick call still gets one JSON body), a call silent after a notification, and a
  ``subscriptions/listen`` stream;
- JSON mode: no comments (one JSON body cannot carry them), nothing watched;
- a client that goes while its silent 2026 call gets comments: the handler is cancelled and nothing
  is left watched.

``tests/integration/test_keepalive_haproxy.py`` shows that the comments keep such streams open through
HAProxy with short timeouts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from mcp_http import POST_HEADERS, MCPClient, http_client, serve_in_process

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig, open_client_session
from mcp_trio._protocol.sse import SSEDecoder

INTERVAL = 0.2
SILENCE = 1.0
"""How long the silent tools sleep: some five intervals."""
AT_LEAST = 2
"""Comments a stream silent for :data:`SILENCE` must carry at least (five are due; a busy machine may
send fewer, never none)."""
COMMENT = b": keep-alive\n\n"
MODERN = "2026-07-28"
STOP_WITHIN = 5.0


def build(cancelled: list[str]) -> MCPServer:
    server = MCPServer("keepalive-test", "1.0.0")

    @server.tool(description="Sleeps, saying nothing.")
    async def silent(seconds: float) -> str:
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            cancelled.append("silent")
            raise
        return f"slept {seconds}"

    @server.tool(description="Reports progress once, then sleeps.")
    async def speak_then_silent(ctx: Context, seconds: float) -> str:
        await ctx.report_progress(1, 2, "started")
        await trio.sleep(seconds)
        return "done"

    @server.tool(description="Tells listeners that the tool list changed.")
    async def trigger() -> str:
        await server.notify_tools_changed()
        return "sent"

    return server


@asynccontextmanager
async def served(kind: str = "hypercorn", **config: Any) -> AsyncIterator[tuple[str, MCPApp, list[str]]]:
    cancelled: list[str] = []
    app = MCPApp(build(cancelled), ServerConfig(keepalive_interval=INTERVAL, **config))
    async with serve_in_process(app, kind, stop_within=STOP_WITHIN) as (url, _, _):
        yield url, app, cancelled


class Raw:
    """An SSE (or JSON) response read as it comes: its raw bytes, the comments among them and the
    data events, each with when it arrived."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._chunks = response.aiter_raw()
        self._decoder = SSEDecoder()
        self.raw = b""
        self.messages: list[dict[str, Any]] = []
        self.ended = False

    @property
    def comments(self) -> int:
        return self.raw.count(COMMENT)

    async def _more(self) -> None:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            self.ended = True
            events = self._decoder.close()
        else:
            self.raw += chunk
            events = self._decoder.feed(chunk)
        self.messages.extend(json.loads(event.data) for event in events if event.data)

    async def until(self, predicate: Any, within: float) -> None:
        """Read until ``predicate(self)`` holds; fail after ``within`` seconds or at the body's end."""
        with trio.fail_after(within):
            while not predicate(self):
                if self.ended:
                    raise AssertionError(f"the body ended first: {self.raw!r}")
                await self._more()

    async def to_end(self, within: float) -> None:
        with trio.fail_after(within):
            while not self.ended:
                await self._more()

    async def aclose(self) -> None:
        with trio.CancelScope() as scope:  # unwinds httpx's generators (see mcp_http.SSEResponse.aclose)
            scope.cancel()
            try:
                while True:  # what is buffered comes without a checkpoint; then the cancel ends it all
                    await self._chunks.__anext__()
            except (StopAsyncIteration, httpx.HTTPError):
                pass
        await self.response.aclose()


def modern_request(request_id: int, method: str, params: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {**params, "_meta": {**meta, **params.get("_meta", {})}}
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    headers = {**POST_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": method}
    if "name" in params:
        headers["mcp-name"] = params["name"]
    return body, headers


async def post_modern(http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any]) -> Raw:
    body, headers = modern_request(7, method, params)
    request = http.build_request("POST", url, content=body, headers=headers)
    return Raw(await http.send(request, stream=True))


def result_of(raw: Raw, request_id: int) -> dict[str, Any]:
    answers = [m for m in raw.messages if m.get("id") == request_id and "method" not in m]
    assert len(answers) == 1, raw.raw
    result: dict[str, Any] = answers[0]["result"]
    return result


def silent_for(raw: Raw) -> int:
    """Comments after the last data event so far (the ones a silent stretch at the end got)."""
    return raw.raw.rpartition(b"\ndata:")[2].count(COMMENT)


# -- 2025 --------------------------------------------------------------------------------------


async def test_2025_post_stream_of_a_silent_call_gets_comments() -> None:
    async with served() as (url, _app, _), http_client() as http:
        client = MCPClient(http, url)
        with trio.fail_after(5):
            await client.initialize()
            await client.initialized()
        message = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "silent", "arguments": {"seconds": SILENCE}},
        }
        request = http.build_request(
            "POST", url, content=json.dumps(message).encode(), headers=client.headers(**POST_HEADERS)
        )
        raw = Raw(await http.send(request, stream=True))
        try:
            assert raw.response.headers["content-type"] == "text/event-stream"
            await raw.to_end(SILENCE + 5)
        finally:
            await raw.aclose()
        assert result_of(raw, 3)["content"][0]["text"] == f"slept {SILENCE}"
        assert raw.comments >= AT_LEAST, raw.raw
        assert raw.raw.index(COMMENT) < raw.raw.index(b'"result"'), "the comments came before the result"
        with trio.fail_after(5):
            await client.delete()


async def test_2025_get_stream_gets_comments_and_still_its_notifications() -> None:
    async with served() as (url, _app, _), http_client() as http:
        client = MCPClient(http, url)
        with trio.fail_after(5):
            await client.initialize()
            await client.initialized()
        request = http.build_request("GET", url, headers=client.headers(accept="text/event-stream"))
        raw = Raw(await http.send(request, stream=True))
        try:
            assert raw.response.status_code == 200
            await raw.until(lambda r: r.comments >= AT_LEAST, SILENCE + 5)
            assert raw.messages == []  # only the priming event (no data) so far
            with trio.fail_after(5):
                await client.call_tool("trigger", {})
            await raw.until(lambda r: r.messages, 5)
            assert raw.messages[0]["method"] == "notifications/tools/list_changed", raw.messages
        finally:
            await raw.aclose()
        with trio.fail_after(5):
            await client.delete()


# -- 2026-07-28 --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hypercorn", "h11"])
async def test_2026_silent_call_becomes_an_sse_stream_with_comments(kind: str) -> None:
    async with served(kind) as (url, app, _), http_client() as http:
        params = {"name": "silent", "arguments": {"seconds": SILENCE}}
        raw = await post_modern(http, url, "tools/call", params)
        try:
            assert raw.response.status_code == 200
            assert raw.response.headers["content-type"] == "text/event-stream"
            await raw.to_end(SILENCE + 5)
        finally:
            await raw.aclose()
        assert result_of(raw, 7)["content"][0]["text"] == f"slept {SILENCE}"
        assert raw.raw.startswith(COMMENT) and raw.comments >= AT_LEAST, raw.raw
        stats = app.statistics()
        assert stats["keepalive_watched"] == 0 and stats["keepalive_comments"] >= AT_LEAST, stats

        # A call answered within the interval is still one JSON body.
        body, headers = modern_request(8, "tools/call", {"name": "silent", "arguments": {"seconds": 0}})
        with trio.fail_after(5):
            quick = await http.post(url, content=body, headers=headers)
        assert quick.headers["content-type"] == "application/json", quick.headers
        assert quick.json()["result"]["content"][0]["text"] == "slept 0.0"


async def test_2026_call_silent_after_a_notification_gets_comments() -> None:
    async with served() as (url, app, _), http_client() as http:
        params = {
            "name": "speak_then_silent",
            "arguments": {"seconds": SILENCE},
            "_meta": {"progressToken": "p"},
        }
        raw = await post_modern(http, url, "tools/call", params)
        try:
            assert raw.response.headers["content-type"] == "text/event-stream"
            await raw.until(lambda r: r.messages, 5)
            assert raw.messages[0]["method"] == "notifications/progress", raw.messages
            await raw.until(lambda r: silent_for(r) >= AT_LEAST, SILENCE + 5)
            await raw.to_end(SILENCE + 5)
        finally:
            await raw.aclose()
        assert result_of(raw, 7)["content"][0]["text"] == "done"
        assert app.statistics()["keepalive_watched"] == 0


async def test_listen_stream_gets_comments_and_still_its_notifications() -> None:
    async with served() as (url, _app, _), http_client() as http:
        wanted = {"notifications": {"toolsListChanged": True}}
        raw = await post_modern(http, url, "subscriptions/listen", wanted)
        try:
            assert raw.response.headers["content-type"] == "text/event-stream"
            await raw.until(lambda r: r.messages, 5)
            assert raw.messages[0]["method"] == "notifications/subscriptions/acknowledged"
            await raw.until(lambda r: silent_for(r) >= AT_LEAST, SILENCE + 5)
            body, headers = modern_request(9, "tools/call", {"name": "trigger", "arguments": {}})
            with trio.fail_after(5):
                assert (await http.post(url, content=body, headers=headers)).status_code == 200
            await raw.until(lambda r: len(r.messages) == 2, 5)
            assert raw.messages[1]["method"] == "notifications/tools/list_changed", raw.messages
        finally:
            await raw.aclose()


async def test_json_mode_answers_have_no_comments() -> None:
    """One JSON body cannot carry comments: a proxy in front of a server in JSON mode must wait for the
    longest call (docs/deploy/proxies.md)."""
    async with served(json_response=True) as (url, app, _), http_client() as http:
        raw = await post_modern(http, url, "tools/call", {"name": "silent", "arguments": {"seconds": 0.6}})
        try:
            with trio.fail_after(1):
                await trio.sleep(0.5)
                assert app.statistics()["keepalive_watched"] == 0  # not even watched
            await raw.to_end(5)
        finally:
            await raw.aclose()
        assert raw.response.headers["content-type"] == "application/json"
        assert COMMENT not in raw.raw and json.loads(raw.raw)["result"]["content"][0]["text"] == "slept 0.6"
        assert app.statistics()["keepalive_comments"] == 0


async def test_a_client_gone_during_the_comments_cancels_its_call() -> None:
    async with served() as (url, app, cancelled), http_client() as http:
        raw = await post_modern(http, url, "tools/call", {"name": "silent", "arguments": {"seconds": 30}})
        try:
            await raw.until(lambda r: r.comments >= AT_LEAST, 5)
        finally:
            await raw.aclose()  # the client goes
        with trio.fail_after(5):
            while app.statistics()["modern_inflight"] or app.statistics()["keepalive_watched"]:  # noqa: ASYNC110
                await trio.sleep(0.02)
        assert cancelled == ["silent"]


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_mcp_trio_s_client_reads_a_silent_call_s_stream(mode: str) -> None:
    """The client takes an answer that began with comments (a 2026 one that became an SSE stream, a
    2025 POST stream) as any other."""
    async with served() as (url, app, _):
        with trio.fail_after(SILENCE + 10):
            async with open_client_session(url, mode=mode) as session:
                result = await session.call_tool("silent", {"seconds": SILENCE})
        assert result.content[0].text == f"slept {SILENCE}"  # type: ignore[union-attr]
        if mode == "modern":
            assert app.statistics()["keepalive_comments"] >= AT_LEAST
