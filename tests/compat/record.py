"""Record what real MCP clients send, as the compatibility suite's data (``tests/compat/clients``).

    PYTHONPATH=. python3 -m tests.compat.record [python-sdk] [typescript-sdk]

Serves the demo server on 127.0.0.1 with hypercorn behind a recording ASGI wrapper, runs each client
against it, and writes one JSON-lines file per client and mode: a first line describing the client
(``client``, ``mode``, ``source``), then one line per HTTP request as the server received it: the
HTTP method, the headers that matter (:data:`KEPT`; ``Mcp-Session-Id`` as ``{session}``, a client
session id as ``{client_session}``) and the JSON body.  The clients that cannot run here (Claude Code,
Codex, the MCP Inspector, the TypeScript SDK's 2026 client) are written by hand from their published
source and issues: each file's first line names them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._http.hypercorn_server import serve_hypercorn
from mcp_trio.demo import build_demo_server
from mcp_trio.server import hypercorn_config

HERE = Path(__file__).resolve().parent
CLIENTS = HERE / "clients"
KEPT = (
    "accept",
    "content-type",
    "mcp-protocol-version",
    "mcp-session-id",
    "mcp-method",
    "mcp-name",
    "mcp-client-session-id",
    "x-mcp-client-session-id",
    "last-event-id",
)
"""The request headers a recording keeps (and ``mcp-param-*``): the ones an MCP server reads."""

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Recorder:
    """An ASGI wrapper that records each HTTP request (its head and body) and passes it on."""

    def __init__(self, app: MCPApp) -> None:
        self.app = app
        self.steps: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode().lower(): v.decode("latin-1") for k, v in scope["headers"]}
        kept = {k: v for k, v in headers.items() if k in KEPT or k.startswith("mcp-param-")}
        if "mcp-session-id" in kept:
            kept["mcp-session-id"] = "{session}"
        for name in ("mcp-client-session-id", "x-mcp-client-session-id"):
            if name in kept:
                kept[name] = "{client_session}"
        self.steps.append(
            {"http": scope["method"], "headers": kept, "body": json.loads(body) if body else None}
        )
        replayed = False

        async def receive_again() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, receive_again, send)


async def record(run: Callable[[str], Awaitable[None]]) -> list[dict[str, Any]]:
    recorder = Recorder(MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1)))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve_hypercorn(
                recorder,
                hypercorn_config(["127.0.0.1:0"]),
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        with trio.fail_after(60):
            await run(urls[0].rstrip("/") + "/mcp")
        stop.set()
    return recorder.steps


def write(name: str, header: dict[str, Any], steps: list[dict[str, Any]]) -> None:
    lines = [json.dumps(header)] + [json.dumps(step) for step in steps]
    (CLIENTS / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    print(f"{name}: {len(steps)} requests", file=sys.stderr)


# -- the python-sdk client (mcp), both modes --------------------------------------------------------


def python_sdk(mode: str) -> Callable[[str], Awaitable[None]]:
    async def run(url: str) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with (
            httpx2.AsyncClient(timeout=10) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            await client.list_tools()
            await client.call_tool("echo", {"text": "hello"})
            await client.list_resources()
            await client.list_resource_templates()
            await client.list_prompts()
            if mode == "legacy":  # ping is gone from 2026-07-28
                await client.send_ping()

    return run


def python_sdk_header(mode: str) -> dict[str, Any]:
    import importlib.metadata

    version = importlib.metadata.version("mcp")
    return {
        "client": "python-sdk",
        "mode": "legacy" if mode == "legacy" else "modern",
        "source": f"recorded: mcp {version} (mcp.Client over streamable_http_client, mode={mode!r}) "
        "against the demo server, by tests/compat/record.py",
    }


# -- the TypeScript SDK client (1.x: 2025 era only) ------------------------------------------------------

TS_DIR = HERE.parent / "integration" / "ts_client"
NODE = HERE.parent.parent / ".node22" / "bin" / "node"


def typescript_sdk(url: str) -> Callable[[str], Awaitable[None]]:
    async def run(url: str) -> None:
        node = str(NODE) if NODE.exists() else "node"
        await trio.run_process(
            [node, str(TS_DIR / "compat_client.mjs"), url], stdout=sys.stderr, env=dict(os.environ)
        )

    return run


def main(which: list[str]) -> None:
    if not which or "python-sdk" in which:
        for mode in ("legacy", "auto"):
            steps = trio.run(record, python_sdk(mode))
            write(f"python-sdk-{'legacy' if mode == 'legacy' else 'modern'}", python_sdk_header(mode), steps)
    if not which or "typescript-sdk" in which:
        version = json.loads((TS_DIR / "package.json").read_text())["dependencies"][
            "@modelcontextprotocol/sdk"
        ]
        steps = trio.run(record, typescript_sdk(""))
        header = {
            "client": "typescript-sdk",
            "mode": "legacy",
            "source": f"recorded: @modelcontextprotocol/sdk {version} (Client over "
            "StreamableHTTPClientTransport, tests/integration/ts_client/compat_client.mjs) against the demo "
            "server, by tests/compat/record.py",
        }
        write("typescript-sdk-legacy", header, steps)


if __name__ == "__main__":
    main(sys.argv[1:])
