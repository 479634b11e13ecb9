"""``mcp-trio tools URL`` and ``mcp-trio call URL TOOL --arg k=v`` against a running demo server."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio
from mcp_http import DemoServer

from mcp_trio._cli_client import parse_arguments

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]


async def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process([*CLI, *args], capture_stdout=True, capture_stderr=True, check=False)


@pytest.mark.parametrize("mode", ["auto", "legacy", "modern"])
async def test_tools_and_call(demo_server: DemoServer, mode: str) -> None:
    listed = await run_cli("tools", demo_server.url, "--mode", mode)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.decode().splitlines()
    assert "echo: Echo the given text back." in lines
    assert "    text: string" in lines
    called = await run_cli("call", demo_server.url, "add", "--arg", "a=1", "--arg", "b=2.5", "--mode", mode)
    assert called.returncode == 0, called.stderr
    assert '{"sum": 3.5}' in called.stdout.decode()
    echoed = await run_cli("call", demo_server.url, "echo", "--arg", "text=hello world")
    assert echoed.stdout.decode().strip() == "hello world"


async def test_errors_are_clear(demo_server: DemoServer) -> None:
    unknown = await run_cli("call", demo_server.url, "no_such_tool")
    assert unknown.returncode == 2
    assert unknown.stderr.decode().strip() == "mcp-trio: error -32602: Unknown tool: no_such_tool"
    failing = await run_cli("call", demo_server.url, "test_error_handling")
    assert failing.returncode == 1
    assert "intentionally returns an error" in failing.stdout.decode()
    nobody = await run_cli("tools", "http://127.0.0.1:9/mcp")
    assert nobody.returncode == 2 and nobody.stderr.decode().startswith("mcp-trio: ")
    assert "Traceback" not in nobody.stderr.decode()


def test_argument_parsing() -> None:
    assert parse_arguments(["n=42", "flag=true", "xs=[1,2]", "text=hi there", "empty="]) == {
        "n": 42,
        "flag": True,
        "xs": [1, 2],
        "text": "hi there",
        "empty": "",
    }
    with pytest.raises(SystemExit):
        parse_arguments(["novalue"])
