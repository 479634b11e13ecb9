from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.testing import ASGIClient, Response, open_asgi_client

POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
VERSION = "2025-11-25"


def init_body(version: str = VERSION, request_id: int | str = 1) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
    ).encode()


def call_body(request_id: int | str, tool: str, arguments: dict[str, Any], **meta: Any) -> bytes:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


class Client:
    """Speaks the 2025 transport to an app through the in-memory ASGI client."""

    def __init__(self, asgi: ASGIClient, app: MCPApp) -> None:
        self.asgi = asgi
        self.app = app
        self.session_id: str | None = None
        self.version = VERSION

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {**POST_HEADERS, "mcp-protocol-version": self.version}
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        headers.update(extra)
        return headers

    async def initialize(self, version: str = VERSION, *, initialized: bool = True) -> dict[str, Any]:
        response = await self.asgi.request("POST", headers=POST_HEADERS, body=init_body(version))
        assert response.status == 200, await response.read()
        self.session_id = response.headers["mcp-session-id"]
        message = await self.read_message(response)
        self.version = message["result"]["protocolVersion"]
        if initialized:
            await self.notify("notifications/initialized")
        return message

    async def read_message(self, response: Response) -> dict[str, Any]:
        if response.headers.get("content-type") == "application/json":
            result: dict[str, Any] = await response.json()
            return result
        message = await response.next_message()
        assert message is not None
        return message

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> Response:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        response = await self.asgi.request("POST", headers=self.headers(), body=json.dumps(body).encode())
        assert response.status == 202, await response.read()
        assert await response.read() == b""
        return response

    async def post(self, body: bytes, **headers: str) -> Response:
        return await self.asgi.request("POST", headers=self.headers(**headers), body=body)

    async def request(
        self, request_id: int | str, method: str, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        response = await self.post(json.dumps(body).encode())
        assert response.status == 200
        return await self.read_message(response)

    async def get_stream(self, **headers: str) -> Response:
        base = {"accept": "text/event-stream", "mcp-protocol-version": self.version}
        if self.session_id is not None:
            base["mcp-session-id"] = self.session_id
        return await self.asgi.request("GET", headers={**base, **headers})

    async def delete(self) -> Response:
        assert self.session_id is not None
        return await self.asgi.request("DELETE", headers={"mcp-session-id": self.session_id})


async def settle() -> None:
    """Let every runnable task run (the app's tasks react to a change)."""
    for _ in range(20):
        await trio.testing.wait_all_tasks_blocked()


@pytest.fixture
def config() -> ServerConfig:
    return ServerConfig()


@pytest.fixture
async def app(config: ServerConfig) -> MCPApp:
    return MCPApp(build_demo_server(), config)


@pytest.fixture
async def client(app: MCPApp) -> AsyncIterator[Client]:
    async with open_asgi_client(app) as asgi:
        yield Client(asgi, app)
