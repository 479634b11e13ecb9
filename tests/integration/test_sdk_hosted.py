"""A python-sdk server (``sdk_servers.py``, written with the SDK's own API) hosted by mcp_trio, over each
carrier mcp_trio serves: Streamable HTTP on hypercorn and on the embedded h11 server, WebSocket on both,
and stdio (``mcp-trio serve MODULE:ATTR --stdio``); in both protocol eras (a 2025-11-25 session, and
2026-07-28 requests), with mcp_trio's own client and, over HTTP, the python-sdk's ``mcp.Client``.

Each client lists the tools, calls one, gets a call's progress notifications, answers an elicitation
(a server-to-client request in a session, an input-required result at 2026-07-28), reads a resource,
gets a prompt, and cancels a call (the SDK's handler is cancelled: nothing stays in flight).  Then the
hosted server's limits: resource subscriptions of a 2025 session are bounded as ``MCPServer``'s are, and
a hostile peer (a handler failing with a group of ``BaseException``, a client that stops reading its
answer) costs only its own request.  Everything on real loopback sockets, each server stopped and
checked to return in time (``mcp_http.serve_in_process``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import mcp_types as mt
import pytest
import trio
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_http import HOSTED_SDK_SERVER, INIT, POST_HEADERS, SERVER_COMMAND, serve_in_process
from sdk_servers import build_lowlevel_server, build_server

from mcp_trio import (
    ClientSession,
    MCPApp,
    ServerConfig,
    open_client_session,
    open_stdio_client,
    open_websocket_client,
)
from mcp_trio.sdk import hosted_app

# The python-sdk client's transport leaves httpx2 SSE readers unexhausted; Trio's asyncgen finalizer
# warns about each (see test_interop_python_sdk.py): client-side clean-up, ignored here only.
pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpx2\._(sse|models)\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpcore2\._async\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
]

SERVERS = ["hypercorn", "h11"]
MODES = ["legacy", "auto"]
"""``auto``: ``server/discover``, which a hosted server answers at 2026-07-28."""
DEADLINE = 20.0


def hosted(server: Any = None, **config: Any) -> MCPApp:
    options: dict[str, Any] = {"shutdown_grace": 2.0, **config}
    return hosted_app(build_server() if server is None else server, ServerConfig(**options))


def elicit(params: Any) -> mt.ElicitResult:
    assert params.message == "Who are you?", params
    return mt.ElicitResult(action="accept", content={"name": "Ada"})


def text_of(result: mt.CallToolResult) -> str:
    assert not result.is_error, result
    content = result.content[0]
    assert isinstance(content, mt.TextContent), result
    return content.text


async def until(predicate: Any, within: float = 5.0) -> None:
    with trio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - polls the app's statistics, which have no event
            await trio.sleep(0.01)


def nothing_in_flight(app: MCPApp) -> bool:
    stats = app.statistics()
    return stats["inflight"] == 0 and stats["modern_inflight"] == 0 and stats["websocket_requests"] == 0


async def exercise(session: ClientSession, mode: str, app: MCPApp | None = None) -> None:
    """What every carrier must carry, in ``mode``'s era: list, call, progress, elicitation, a resource,
    a prompt, a cancelled call (``app``: in this process, so that its statistics show the call ended)."""
    assert session.modern is (mode != "legacy")
    assert session.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert session.server_info.get("name") == "sdk-hosted", session.server_info
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert {"echo", "count", "sleep", "test_elicitation"} <= names, names
    assert text_of(await session.call_tool("echo", {"text": "héllo\n"})) == "héllo\n"
    seen: list[tuple[float, float | None, str | None]] = []
    result = await session.call_tool("count", {"steps": 3, "delay": 0}, progress=lambda *p: seen.append(p))
    assert text_of(result) == "counted to 3"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")], seen
    assert text_of(await session.call_tool("test_elicitation", {})) == "hello Ada"
    failed = await session.call_tool("test_error_handling", {})
    assert failed.is_error and "intentionally" in str(failed.content[0]), failed
    contents = (await session.read_resource("test://template/7/data")).contents
    assert json.loads(contents[0].text) == {"id": "7"}, contents  # type: ignore[union-attr]
    prompt = await session.get_prompt("test_simple_prompt")
    assert prompt.messages[0].content.text == "This is a simple prompt for testing.", prompt  # type: ignore[union-attr]
    with trio.move_on_after(0.3) as scope:
        await session.call_tool("sleep", {"seconds": 3600})
    assert scope.cancelled_caught
    if app is not None:  # notifications/cancelled (2025) or the dropped request (2026) reached the handler
        await until(lambda: nothing_in_flight(app))
    assert text_of(await session.call_tool("echo", {"text": "after"})) == "after"


# -- every carrier, both eras, mcp_trio's client ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", SERVERS)
async def test_our_client_over_http(kind: str, mode: str) -> None:
    app = hosted()
    with trio.fail_after(DEADLINE):
        async with serve_in_process(app, kind, stop_within=6) as (url, _port, _stop):
            async with open_client_session(url, mode=mode, elicitation=elicit) as session:  # type: ignore[arg-type]
                await exercise(session, mode, app)
                assert app.statistics()["sessions"] == (1 if mode == "legacy" else 0)
            await until(lambda: app.statistics()["sessions"] == 0 and app.statistics()["connections"] == 0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", SERVERS)
async def test_our_client_over_websocket(kind: str, mode: str) -> None:
    app = hosted()
    with trio.fail_after(DEADLINE):
        async with serve_in_process(app, kind, stop_within=6) as (url, _port, _stop):
            async with open_websocket_client(url, mode=mode, elicitation=elicit) as session:  # type: ignore[arg-type]
                await exercise(session, mode, app)
                assert app.statistics()["websocket_connections"] == 1
            await until(lambda: app.statistics()["websocket_connections"] == 0)


@pytest.mark.parametrize("mode", MODES)
async def test_our_client_over_stdio(mode: str) -> None:
    command = [*SERVER_COMMAND[: SERVER_COMMAND.index("demo")], "serve", HOSTED_SDK_SERVER, "--stdio"]
    with trio.fail_after(DEADLINE):
        async with open_stdio_client(command, mode=mode, elicitation=elicit) as session:  # type: ignore[arg-type]
            await exercise(session, mode)
            process = session._transport.process  # type: ignore[attr-defined]
    assert process.returncode == 0  # closing stdin ended the server cleanly


# -- the python-sdk's own client ------------------------------------------------------------------------


async def sdk_elicit(context: ClientRequestContext, params: Any) -> mt.ElicitResult:
    return elicit(params)


@asynccontextmanager
async def sdk_client(url: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=10) as http,
        Client(
            streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=sdk_elicit
        ) as client,
    ):
        yield client


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("kind", SERVERS)
async def test_the_python_sdk_client_over_http(kind: str, mode: str) -> None:
    app = hosted()
    with trio.fail_after(DEADLINE):
        async with serve_in_process(app, kind, stop_within=6) as (url, _port, _stop):
            async with sdk_client(url, mode) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert {"echo", "count", "test_elicitation"} <= names, names
                assert text_of(await client.call_tool("echo", {"text": "hi"})) == "hi"
                seen: list[float] = []

                async def progress(value: float, total: float | None, message: str | None) -> None:
                    seen.append(value)

                result = await client.call_tool("count", {"steps": 3, "delay": 0}, progress_callback=progress)
                assert text_of(result) == "counted to 3"
                await until(lambda: len(seen) == 3)  # the SDK runs each callback as a task of its own
                assert seen == [1, 2, 3], seen
                assert text_of(await client.call_tool("test_elicitation", {})) == "hello Ada"
                resource = await client.read_resource("test://static-text")
                assert "static text" in resource.contents[0].text  # type: ignore[union-attr]
                assert app.statistics()["sessions"] == (1 if mode == "legacy" else 0)
            await until(lambda: app.statistics()["sessions"] == 0)


# -- the hosted server's limits ---------------------------------------------------------------------------


async def legacy_session(http: httpx.AsyncClient, url: str, version: str = "2025-03-26") -> dict[str, str]:
    init = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}  # type: ignore[dict-item]
    response = await http.post(url, json=init, headers=POST_HEADERS)
    assert response.status_code == 200, response.text
    session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": version}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    response = await http.post(url, json=initialized, headers={**POST_HEADERS, **session})
    assert response.status_code == 202, response.text
    return session


def answers_in(response: httpx.Response) -> dict[int, Any]:
    found = {}
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            found[message["id"]] = message
    return found


async def test_resource_subscriptions_of_a_session_are_bounded() -> None:
    """A low-level ``Server`` that accepts ``resources/subscribe``: a session keeps at most
    ``max_subscriptions`` URIs (1000), each at most 8192 characters long, as with ``MCPServer``; what
    is refused reaches neither the SDK's handler nor the session's record."""
    app = hosted(build_lowlevel_server())
    with trio.fail_after(DEADLINE):
        async with (
            serve_in_process(app, "hypercorn", stop_within=6) as (url, _port, _stop),
            httpx.AsyncClient(timeout=10) as http,
        ):
            session = await legacy_session(http, url)
            headers = {**POST_HEADERS, **session}
            answers: dict[int, Any] = {}
            for start in range(0, 1001, 250):
                batch = [
                    {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "resources/subscribe",
                        "params": {"uri": f"t://{n}"},
                    }
                    for n in range(start, min(start + 250, 1001))
                ]
                answers.update(answers_in(await http.post(url, json=batch, headers=headers)))
            assert len(answers) == 1001, len(answers)
            refused = [n for n, answer in answers.items() if "error" in answer]
            assert len(refused) == 1 and answers[refused[0]]["error"]["code"] == mt.INVALID_PARAMS, refused

            async def one(request_id: int, method: str, uri: str) -> Any:
                message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"uri": uri}}
                return answers_in(await http.post(url, json=message, headers=headers))[request_id]

            assert "result" in await one(2000, "resources/subscribe", "t://7")  # again: no new one
            assert "result" in await one(2001, "resources/unsubscribe", "t://7")
            answer = await one(2002, "resources/subscribe", "t://" + "x" * 8192)
            assert answer["error"]["code"] == mt.INVALID_PARAMS, answer
            answer = await one(2003, "resources/subscribe", 7)  # type: ignore[arg-type]
            assert answer["error"]["code"] == mt.INVALID_PARAMS, answer  # the SDK's own validation
            (peer,) = app._manager.sessions()  # type: ignore[attr-defined]
            assert len(peer.subscriptions) == 999 and "t://7" not in peer.subscriptions
            response = await http.delete(url, headers=session)
            assert response.status_code == 200
