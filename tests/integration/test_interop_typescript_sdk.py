"""Interoperability: the official TypeScript SDK client against an in-process mcp_trio server.

The server runs with ``serve()`` on a real hypercorn socket at 127.0.0.1:0; ``ts_client/client.mjs``
(``Client`` + ``StreamableHTTPClientTransport`` of ``@modelcontextprotocol/sdk``, the exact version
pinned in ``ts_client/package.json``) runs against it in a Node 22 subprocess and prints a JSON
summary of everything it saw, which is asserted on here.

Node 22 and the npm packages come from ``scripts/install-node-deps.sh`` (``.node22/`` and
``ts_client/node_modules/``).  When they are missing the test skips when run by hand and fails under
the test command (``tests/required.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from interop_server import SERVER_NAME, SERVER_VERSION, build_server, serving, wait_until
from tests.required import missing

from mcp_trio import MCPApp, MCPServer

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / ".node22" / "node_modules" / "node" / "bin" / "node"
CLIENT_DIR = Path(__file__).resolve().parent / "ts_client"
CLIENT = CLIENT_DIR / "client.mjs"
SDK_PACKAGE = CLIENT_DIR / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
INSTALL = "bash scripts/install-node-deps.sh"

DEADLINE = 45.0  # Node's start-up and module loading included
CLIENT_DEADLINE = 30.0


def pinned_sdk_version() -> str:
    package = json.loads((CLIENT_DIR / "package.json").read_text())
    version: str = package["dependencies"]["@modelcontextprotocol/sdk"]
    return version


@pytest.fixture
def node_client() -> None:
    """Skip (by hand) or fail (under the test command: ``tests/required.py``) unless Node 22 and the
    pinned SDK are installed.

    A plain (sync) fixture, so the skip or failure is reported as such, outside the Trio run."""
    problem = None
    if not NODE.is_file() or not os.access(NODE, os.X_OK):
        problem = f"Node 22 is not installed at {NODE.relative_to(ROOT)}"
    elif not SDK_PACKAGE.is_file():
        problem = f"the npm packages are not installed in {CLIENT_DIR.relative_to(ROOT)}/node_modules"
    else:
        installed, pinned = json.loads(SDK_PACKAGE.read_text())["version"], pinned_sdk_version()
        if installed != pinned:
            problem = f"@modelcontextprotocol/sdk {installed} is installed, package.json pins {pinned}"
    if problem is None:
        return
    missing(f"{problem}: run `{INSTALL}`")


def without_meta(params: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in params.items() if key != "_meta"}


def text_of(result: dict[str, Any]) -> str:
    assert not result.get("isError"), result
    [content] = result["content"]
    assert content["type"] == "text", content
    text: str = content["text"]
    return text


def hosted() -> MCPApp:
    from sdk_interop_server import build_hosted

    return build_hosted()


@pytest.mark.deadline(DEADLINE + 5)
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # the SDK's sampling API
@pytest.mark.parametrize(  # our own server, and its twin written with the python-sdk's API, hosted
    "make_server", [pytest.param(build_server, id="mcp_trio"), pytest.param(hosted, id="hosted-python-sdk")]
)
async def test_typescript_sdk_client_full_session(
    node_client: None, make_server: Callable[[], MCPServer | MCPApp]
) -> None:
    with trio.fail_after(DEADLINE):
        async with serving(make_server()) as (app, url):
            with trio.fail_after(CLIENT_DEADLINE):  # run_process kills node if this expires
                proc = await trio.run_process(
                    [str(NODE), str(CLIENT), url],
                    cwd=CLIENT_DIR,
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            stderr = proc.stderr.decode(errors="replace")
            assert proc.returncode == 0, f"client.mjs exited {proc.returncode}; stderr:\n{stderr}"
            summary = json.loads(proc.stdout.decode().strip().splitlines()[-1])

            assert summary["sdkVersion"] == pinned_sdk_version()
            assert summary["nodeVersion"].startswith("v22."), summary["nodeVersion"]
            assert summary["errors"] == [], summary["errors"]

            # -- initialize --
            assert summary["protocolVersion"] == "2025-11-25"
            assert summary["serverInfo"] == {"name": SERVER_NAME, "version": SERVER_VERSION}
            assert summary["instructions"] == "an interop test server"
            assert summary["capabilities"].keys() >= {"tools", "resources", "prompts", "logging"}
            assert summary["sessionId"]

            # -- tools --
            tools = {tool["name"]: tool for tool in summary["tools"]}
            assert tools.keys() == {"add", "count", "ask_model", "ask_name"}
            assert tools["add"]["inputSchema"]["properties"].keys() == {"a", "b"}
            assert text_of(summary["add"]) == "42"

            # -- progress and logging on a tool call --
            assert text_of(summary["count"]) == "counted to 3"
            # (a notification carries its trace context in _meta when traced, as this process is)
            assert [without_meta(p) for p in summary["progress"]] == [
                {"progress": i, "total": 3, "message": f"step {i}"} for i in (1, 2, 3)
            ]
            assert [without_meta(entry) for entry in summary["logs"]] == [
                {"level": "info", "logger": "count", "data": f"step {i} of 3"} for i in (1, 2, 3)
            ]

            # -- resources --
            assert [(r["uri"], r["name"], r.get("mimeType")) for r in summary["resources"]] == [
                ("test://readme", "readme", "text/plain")
            ]
            assert [(t["uriTemplate"], t["name"]) for t in summary["resourceTemplates"]] == [
                ("test://users/{user_id}/profile", "profile")
            ]
            assert summary["readme"]["contents"] == [
                {"uri": "test://readme", "mimeType": "text/plain", "text": "hello from mcp_trio"}
            ]
            assert summary["profile"]["contents"] == [
                {"uri": "test://users/42/profile", "mimeType": "application/json", "text": '{"user": "42"}'}
            ]

            # -- prompts --
            assert [p["name"] for p in summary["prompts"]] == ["greet"]
            assert summary["prompts"][0]["arguments"] == [
                {"name": "name", "description": "who to greet", "required": True}
            ]
            assert summary["prompt"]["messages"] == [
                {"role": "user", "content": {"type": "text", "text": "Please greet Trio warmly."}}
            ]

            # -- sampling and elicitation: server -> client requests answered by the client's handlers --
            assert text_of(summary["askModel"]) == "fake-model: echo: what is 2+2?"
            [sampled] = summary["sampled"]
            assert sampled["maxTokens"] == 64
            assert sampled["systemPrompt"] == "be brief"
            assert sampled["messages"] == [
                {"role": "user", "content": {"type": "text", "text": "what is 2+2?"}}
            ]
            assert text_of(summary["askName"]) == "accept: Grace"
            [elicited] = summary["elicited"]
            assert elicited["mode"] == "form"
            assert elicited["message"] == "What is your name?"
            assert elicited["requestedSchema"]["required"] == ["name"]

            # -- the end: terminateSession() sent DELETE, and the server let the session go --
            http = [tuple(exchange) for exchange in summary["http"]]
            assert http[0] == ("POST", 200), http  # initialize
            assert ("GET", 200) in http, http  # the standalone stream, opened after initialized
            assert http[-1] == ("DELETE", 200), http
            assert all(status < 400 for _, status in http), http
            assert summary["sessionIdAfterTerminate"] is None
            # racing the server's end of the GET stream, close() may abort the stream itself first
            assert all("AbortError" in error for error in summary["errorsOnClose"]), summary["errorsOnClose"]
            await wait_until(lambda: app.statistics()["sessions"] == 0, what="server back to zero sessions")
            stats = app.statistics()
            assert (stats["streams"], stats["connections"], stats["inflight"]) == (0, 0, 0), stats
