"""An app that was never started (mounted under a router that does not forward the ASGI lifespan) says
so: ``initialize`` and WebSocket upgrades get 503 with a message naming ``app.running()`` and the
lifespan, logged once at ERROR; an app that stopped answers its own 503 (-32000 "Server shutting
down"), and a started app serves."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio

from mcp_trio import MCPApp, MCPServer

from .conftest import POST_HEADERS, init_body

NOT_RUNNING = "the MCP app is not running"


def http_scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in {"host": "127.0.0.1:8000", **headers}.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def call(app: MCPApp, scope: dict[str, Any], first: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one ASGI exchange of ``app`` (not started) and return what it sent."""
    sent: list[dict[str, Any]] = []
    messages = [first]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(5):
        await app(scope, receive, send)
    return sent


async def test_initialize_on_an_app_never_started_is_a_503_that_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = MCPApp(MCPServer("unstarted"))
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    for request_id in (1, 2):
        sent = await call(
            app, http_scope(POST_HEADERS), {"type": "http.request", "body": init_body(request_id=request_id)}
        )
        assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 503
        answer = json.loads(b"".join(message.get("body", b"") for message in sent[1:]))
        assert answer["id"] == request_id
        assert NOT_RUNNING in answer["error"]["message"]
        assert "lifespan" in answer["error"]["message"] and "app.running()" in answer["error"]["message"]
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and "lifespan" in errors[0].getMessage()  # once, however many requests


async def test_a_websocket_upgrade_on_an_app_never_started_is_the_same_503() -> None:
    app = MCPApp(MCPServer("unstarted"))
    scope = {
        **http_scope({"sec-websocket-protocol": "mcp"}),
        "type": "websocket",
        "scheme": "ws",
        "subprotocols": ["mcp"],
        "extensions": {"websocket.http.response": {}},
    }
    del scope["method"]
    sent = await call(app, scope, {"type": "websocket.connect"})
    assert sent[0]["type"] == "websocket.http.response.start" and sent[0]["status"] == 503
    body = b"".join(message.get("body", b"") for message in sent[1:])
    assert NOT_RUNNING in json.loads(body)["error"]["message"]


async def test_a_started_app_serves_and_one_that_stopped_is_busy_not_unstarted() -> None:
    app = MCPApp(MCPServer("started"))
    async with app.running():
        sent = await call(app, http_scope(POST_HEADERS), {"type": "http.request", "body": init_body()})
        assert sent[0]["status"] == 200
    sent = await call(app, http_scope(POST_HEADERS), {"type": "http.request", "body": init_body()})
    assert sent[0]["status"] == 503
    error = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]
    assert error == {"code": -32000, "message": "Server shutting down"}  # not NOT_RUNNING's message
