"""``mcp-trio serve MODULE:ATTR`` of python-sdk servers, as processes on 127.0.0.1: an SDK ``MCPServer``,
a low-level ``Server`` and a factory returning one are served in both eras and stop cleanly on SIGTERM;
``--http h11``, ``--admin-bind``, ``--log-format json``, the limits (``--max-body-size``,
``--max-sessions``) and the OAuth options each take effect for a hosted server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

import mcp_trio

from .peers import Legacy, Modern

STARTUP_DEADLINE = 20.0
SRC = str(Path(mcp_trio.__file__).resolve().parents[1])
"""Where this test run's mcp_trio is imported from (the child imports the same)."""

MODULE = """
import logging

import mcp_types as mt
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer

server = MCPServer("cli-sdk", version="3.1.4")


@server.tool()
async def shout(text: str) -> str:
    logging.getLogger("hosted_cli").warning("shouting %s", text)
    return text.upper()


async def list_tools(ctx, params):
    return mt.ListToolsResult(tools=[mt.Tool(name="count", input_schema={"type": "object"})])


async def call_tool(ctx, params):
    text = str(len(params.arguments or {}))
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)])


lowlevel = Server("cli-lowlevel", version="2.0", on_list_tools=list_tools, on_call_tool=call_tool)


def make():
    made = MCPServer("from-factory", version="0.1")

    @made.tool()
    async def shout(text: str) -> str:
        return text.upper() + "!"

    return made
"""


class Process:
    """A running ``mcp-trio serve``: its endpoint, its operations listener's URL, its output so far."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.changed = trio.Event()
        self.url = ""
        self.admin = ""

    async def drain(self, stream: trio.abc.ReceiveStream, sink: bytearray) -> None:
        while chunk := await stream.receive_some(65536):
            sink += chunk
            self.changed.set()
            self.changed = trio.Event()

    async def started(self) -> None:
        with trio.fail_after(STARTUP_DEADLINE):
            while not (found := re.search(rb"^mcp-trio: serving on (\S+)$", self.stdout, re.MULTILINE)):
                if self.process.poll() is not None:
                    raise AssertionError(f"exited {self.process.returncode}: {self.stderr.decode()}")
                with trio.move_on_after(0.2):
                    await self.changed.wait()
        self.url = found.group(1).decode()
        admin = re.search(rb"^mcp-trio: operations listener on (\S+)$", self.stdout, re.MULTILINE)
        self.admin = admin.group(1).decode() if admin else ""


@asynccontextmanager
async def mcp_trio_serve(tmp_path: Path, target: str, *flags: str) -> AsyncIterator[Process]:
    """``mcp-trio serve target --bind 127.0.0.1:0 *flags`` in ``tmp_path`` (where hosted_cli.py is); on
    exit SIGTERM, and it must stop by itself, with status 0."""
    await trio.Path(tmp_path / "hosted_cli.py").write_text(MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(tmp_path)])}
    command = [sys.executable, "-c", "from mcp_trio._cli import main; main()", "serve", target]
    command += ["--bind", "127.0.0.1:0", "--shutdown-grace", "1", *flags]
    process = await trio.lowlevel.open_process(
        command, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    served = Process(process)
    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None and process.stderr is not None
            nursery.start_soon(served.drain, process.stdout, served.stdout)
            nursery.start_soon(served.drain, process.stderr, served.stderr)
            await served.started()
            yield served
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(15):
                code = await process.wait()
            assert code == 0, served.stderr.decode()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await process.wait()
    assert served.stdout.decode().endswith("mcp-trio: stopped\n"), served.stdout


def text(answer: dict) -> str:
    return str(answer["result"]["content"][0]["text"])


@pytest.mark.deadline(60)
@pytest.mark.parametrize(
    ("target", "info", "tool", "arguments", "expected"),
    [
        ("hosted_cli:server", {"name": "cli-sdk", "version": "3.1.4"}, "shout", {"text": "hi"}, "HI"),
        ("hosted_cli:lowlevel", {"name": "cli-lowlevel", "version": "2.0"}, "count", {"a": 1, "b": 2}, "2"),
        ("hosted_cli:make", {"name": "from-factory", "version": "0.1"}, "shout", {"text": "hi"}, "HI!"),
    ],
)
async def test_serve_an_sdk_server_a_lowlevel_server_and_a_factory(
    tmp_path: Path, target: str, info: dict, tool: str, arguments: dict, expected: str
) -> None:
    async with mcp_trio_serve(tmp_path, target) as served, httpx.AsyncClient(timeout=10) as http:
        legacy = Legacy(http, served.url)
        assert (await legacy.open())["serverInfo"] == info
        assert text(await legacy.call_tool(tool, arguments)) == expected
        assert await legacy.delete() == 200
        modern = Modern(http, served.url)
        answer = await modern.call_tool(tool, arguments)
        assert text(answer) == expected
        assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"] == info


@pytest.mark.deadline(60)
async def test_h11_admin_bind_json_logs_and_limits_take_effect(tmp_path: Path) -> None:
    flags = ["--http", "h11", "--admin-bind", "127.0.0.1:0", "--log-format", "json"]
    flags += ["--max-body-size", "2000", "--max-sessions", "1"]
    async with (
        mcp_trio_serve(tmp_path, "hosted_cli:server", *flags) as served,
        httpx.AsyncClient(timeout=10) as http,
    ):
        legacy = Legacy(http, served.url)
        await legacy.open()
        assert text(await legacy.call_tool("shout", {"text": "json"})) == "JSON"
        # --max-sessions 1: a second session is refused
        second = await http.post(
            served.url,
            headers=legacy.headers() | {"mcp-session-id": ""},
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "b", "version": "1"},
                },
            },
        )
        assert second.status_code == 503, second.text
        # --max-body-size 2000: a bigger body is refused before the SDK sees it
        modern = Modern(http, served.url)
        big = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "shout", "arguments": {"text": "x" * 3000}},
        }
        refused = await http.post(served.url, headers=modern.headers(big), json=modern.body(big))
        assert refused.status_code == 413
        # --admin-bind: the operations listener; the build info names h11, the tool's series is there
        assert served.admin.startswith("http://127.0.0.1:")
        metrics = (await http.get(served.admin + "/metrics")).text.splitlines()
        (build,) = [line for line in metrics if line.startswith("mcp_trio_build_info{")]
        assert 'http_server="h11"' in build
        assert any(
            line.startswith("mcp_server_operation_duration_seconds_count{")
            and 'gen_ai_tool_name="shout"' in line
            for line in metrics
        )
        assert json.loads((await http.get(served.admin + "/stats")).content)["sessions"] == 1
    # --log-format json: every stderr line is one JSON object; the tool's own record and the request log
    records = [json.loads(line) for line in served.stderr.decode().splitlines() if line.strip()]
    (shouted,) = [r for r in records if r.get("logger") == "hosted_cli"]
    assert shouted["message"] == "shouting json" and shouted["level"] == "WARNING"
    requests = [r for r in records if r.get("logger") == "mcp_trio.requests"]
    assert any("tools/call" in json.dumps(r) and "shout" in json.dumps(r) for r in requests), requests


@pytest.mark.deadline(60)
async def test_the_oauth_options_protect_a_hosted_server(tmp_path: Path) -> None:
    resource = "http://127.0.0.1:8765/mcp"
    issuer = "http://127.0.0.1:9"
    flags = ["--oauth-issuer", issuer, "--resource", resource, "--required-scope", "mcp:tools"]
    async with (
        mcp_trio_serve(tmp_path, "hosted_cli:server", *flags) as served,
        httpx.AsyncClient(timeout=10) as http,
    ):
        modern = Modern(http, served.url)
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "shout", "arguments": {"text": "x"}},
        }
        refused = await http.post(served.url, headers=modern.headers(call), json=modern.body(call))
        assert refused.status_code == 401
        challenge = refused.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and "resource_metadata=" in challenge
        assert 'scope="mcp:tools"' in challenge
        metadata = await http.get(served.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
        assert metadata.status_code == 200
        body = metadata.json()
        assert body["resource"] == resource and body["authorization_servers"] == [issuer]
        assert body["scopes_supported"] == ["mcp:tools"]
    assert b"shouting" not in served.stderr  # the tool never ran
