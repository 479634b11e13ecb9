"""An MCPApp mounted under another ASGI application (docs/embedded-server.md), in memory: under
Starlette's ``Mount`` and under a plain path-dispatching router.  A mount that does not forward the
lifespan leaves the app stopped, and it says so (503 naming ``app.running()``); each fix the page gives
(the framework's lifespan, forwarding the lifespan, ``async with app.running():`` around the server)
makes initialize and a tool call through the mount work."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio.testing import ASGIClient

from .conftest import POST_HEADERS, Client, call_body, init_body

NOT_RUNNING = "the MCP app is not running"
ASGIApp = Any


def weather() -> MCPServer:
    server = MCPServer("weather")

    @server.tool(description="Forecast for a city")
    async def forecast(city: str) -> str:
        return f"{city}: sunny"

    return server


async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def starlette(mcp: MCPApp, *, lifespan: bool, prefix: str = "/") -> Starlette:
    @contextlib.asynccontextmanager
    async def start_mcp(web: Starlette) -> AsyncIterator[None]:
        async with mcp.running():
            yield

    routes = [Route("/health", health), Mount(prefix, app=mcp)]
    return Starlette(routes=routes, lifespan=start_mcp if lifespan else None)


def router(mcp: MCPApp, *, forward_lifespan: bool) -> ASGIApp:
    async def other(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"not MCP"})

    async def route(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            if forward_lifespan:
                await mcp(scope, receive, send)
            return  # a router that knows no lifespan: the server goes on without one
        if scope["path"] == "/mcp":
            await mcp(scope, receive, send)
        else:
            await other(scope, receive, send)

    return route


@contextlib.asynccontextmanager
async def lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """What an ASGI server does around serving ``app``: the lifespan's startup, then its shutdown."""
    to_app, app_receives = trio.open_memory_channel[dict[str, Any]](1)
    app_sends, from_app = trio.open_memory_channel[dict[str, Any]](1)
    async with trio.open_nursery() as nursery:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        nursery.start_soon(app, scope, app_receives.receive, app_sends.send)
        await to_app.send({"type": "lifespan.startup"})
        with trio.fail_after(5):
            assert (await from_app.receive())["type"] == "lifespan.startup.complete"
        yield
        await to_app.send({"type": "lifespan.shutdown"})
        with trio.fail_after(5):
            assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"


@contextlib.asynccontextmanager
async def client_of(app: ASGIApp, mcp: MCPApp) -> AsyncIterator[Client]:
    async with trio.open_nursery() as nursery:
        yield Client(ASGIClient(app, nursery, server=("127.0.0.1", 8000)), mcp)
        nursery.cancel_scope.cancel()


async def assert_serves(client: Client, path: str = "/mcp") -> None:
    """initialize and a tool call of a 2025 session, through the mount."""
    request = client.asgi.request
    client.asgi.request = _on_path(request, path)  # type: ignore[method-assign]
    try:
        with trio.fail_after(5):
            await client.initialize()
            params = {"name": "forecast", "arguments": {"city": "Oslo"}}
            answer = await client.request(2, "tools/call", params)
    finally:
        client.asgi.request = request  # type: ignore[method-assign]
    assert answer["result"]["content"] == [{"type": "text", "text": "Oslo: sunny"}]


def _on_path(request: Any, path: str) -> Any:
    async def on_path(method: str, _: str = "/mcp", **options: Any) -> Any:
        return await request(method, path, **options)

    return on_path


async def assert_not_running(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    with trio.fail_after(5):
        response = await client.asgi.request("POST", headers=POST_HEADERS, body=init_body())
        body = json.loads(await response.read())
    assert response.status == 503
    assert NOT_RUNNING in body["error"]["message"] and "app.running()" in body["error"]["message"]
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].name.startswith("mcp_trio.")
    assert "app.running()" in errors[0].getMessage()


async def test_a_starlette_mount_without_the_lifespan_answers_503_naming_app_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mcp = MCPApp(weather())
    web = starlette(mcp, lifespan=False)
    async with lifespan(web), client_of(web, mcp) as client:  # Starlette's lifespan runs, not the app's
        await assert_not_running(client, caplog)
        response = await client.asgi.request("GET", "/health")
        assert (response.status, await response.read()) == (200, b"ok")


async def test_a_starlette_mount_serves_when_its_lifespan_starts_the_app() -> None:
    mcp = MCPApp(weather())
    web = starlette(mcp, lifespan=True)
    async with lifespan(web), client_of(web, mcp) as client:
        await assert_serves(client)
        response = await client.asgi.request("GET", "/health")
        assert (response.status, await response.read()) == (200, b"ok")


async def test_a_mount_under_a_prefix_names_the_full_path() -> None:
    """The app sees the ASGI ``path`` with the mount's ``root_path`` in it."""
    mcp = MCPApp(weather(), ServerConfig(path="/api/mcp"))
    web = starlette(mcp, lifespan=True, prefix="/api")
    async with lifespan(web), client_of(web, mcp) as client:
        await assert_serves(client, "/api/mcp")


async def test_running_the_app_around_the_server_mends_a_mount_without_lifespan() -> None:
    mcp = MCPApp(weather())
    web = starlette(mcp, lifespan=False)
    async with mcp.running(), lifespan(web), client_of(web, mcp) as client:
        await assert_serves(client)


async def test_a_router_that_drops_the_lifespan_answers_503(caplog: pytest.LogCaptureFixture) -> None:
    mcp = MCPApp(weather())
    app = router(mcp, forward_lifespan=False)
    async with lifespan_ignored(app), client_of(app, mcp) as client:
        await assert_not_running(client, caplog)


async def test_a_router_that_forwards_the_lifespan_serves() -> None:
    mcp = MCPApp(weather())
    app = router(mcp, forward_lifespan=True)
    async with lifespan(app), client_of(app, mcp) as client:
        await assert_serves(client)
        response = await client.asgi.request("GET", "/elsewhere")
        assert (response.status, await response.read()) == (200, b"not MCP")
        body = call_body(1, "x", {})
        other = await client.asgi.request("POST", "/elsewhere", headers=POST_HEADERS, body=body)
        assert await other.read() == b"not MCP"


@contextlib.asynccontextmanager
async def lifespan_ignored(app: ASGIApp) -> AsyncIterator[None]:
    """The lifespan of an app that returns without answering it (the server then serves without one)."""
    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError(f"the router answered the lifespan: {message}")

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    yield
