"""mcp_trio.serve() in-process on a real hypercorn socket, and the CLI as users run it."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
import trio

from mcp_trio import (
    MCPApp,
    MCPServer,
    ServerConfig,
    serve,
)

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]
POST = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def sse_messages(body: str) -> list[dict]:
    return [
        json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


async def test_serve_in_process_ends_streams_on_shutdown() -> None:
    server = MCPServer("inproc")

    @server.tool()
    async def hello(name: str) -> str:
        return f"hello {name}"

    app = MCPApp(server, ServerConfig(shutdown_grace=2))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        (url,) = urls
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp"), url  # the endpoint
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.post(url, json=INIT, headers=POST)
            assert response.status_code == 200
            session = {
                "mcp-session-id": response.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            response = await client.post(
                url,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers={**POST, **session},
            )
            assert response.status_code == 202
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "hello", "arguments": {"name": "trio"}},
            }
            response = await client.post(url, json=call, headers={**POST, **session})
            assert sse_messages(response.text)[-1]["result"]["content"][0]["text"] == "hello trio"
            async with client.stream("GET", url, headers={"accept": "text/event-stream", **session}) as get:
                assert get.status_code == 200
                chunks = get.aiter_bytes()
                assert b"id: 0-0" in await chunks.__anext__()
                assert app.statistics()["connections"] == 1
                stop.set()  # shut the server down while the GET stream is open
                with trio.fail_after(3):
                    rest = b"".join([chunk async for chunk in chunks])  # ends cleanly, no protocol error
                assert rest == b""
    assert app.statistics()["sessions"] == 0


@pytest.mark.deadline(30)
async def test_cli_serve_module_attr_and_sigterm(tmp_path: Path) -> None:
    (tmp_path / "my_mcp_server.py").write_text(
        textwrap.dedent(
            """
            from mcp_trio import MCPServer

            server = MCPServer("from-cli", "9.9.9")

            @server.tool()
            async def shout(text: str) -> str:
                return text.upper()
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    start = functools.partial(
        subprocess.Popen,
        [*CLI, "serve", "my_mcp_server:server", "--bind", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    proc = await trio.to_thread.run_sync(start)
    try:
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line.startswith("mcp-trio: serving on http://127.0.0.1:"), line
        url = line.split()[-1]
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.post(url, json=INIT, headers=POST)
            result = sse_messages(response.text)[0]["result"]
            assert result["serverInfo"] == {"name": "from-cli", "version": "9.9.9"}
        proc.send_signal(signal.SIGTERM)
        code = await trio.to_thread.run_sync(lambda: proc.wait(timeout=10))
        assert code == 0
        assert "mcp-trio: stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_cli_rejects_bad_targets(tmp_path: Path) -> None:
    from mcp_trio._cli import load_app

    (tmp_path / "not_a_server.py").write_text("thing = 42\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(SystemExit, match="neither"):
            load_app("not_a_server:thing", ServerConfig())
        with pytest.raises(SystemExit, match="MODULE:ATTR"):
            load_app("not_a_server", ServerConfig())
    finally:
        sys.path.remove(str(tmp_path))
