"""Keep-alive comments keep quiet streams open through a real HAProxy whose ``timeout server`` and
``timeout client`` are 2 s, in front of ``mcp-trio demo``:

- with ``--keepalive-interval 0.5``: a 2025 ``tools/call`` silent for 5 s (its SSE answer) and a 2026 one
  (its answer becomes an SSE stream) complete; a 2025 GET stream and a 2026 ``subscriptions/listen``
  stream, open for 5 s, still deliver a ``tools/list_changed`` notification;
- with ``--keepalive-interval 60`` (longer than the timeouts) HAProxy cuts the same four: the comments are
  what keeps them open.

HAProxy is a Debian package; without it the test is skipped when run by hand and fails under the test
command (``tests/required.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp_http import POST_HEADERS, MCPClient, http_client, serve_demo
from test_keepalive import Raw, modern_request
from tests.required import missing

TIMEOUT = 2
"""HAProxy's ``timeout server`` and ``timeout client`` (seconds)."""
SILENCE = 5.0
"""How long the calls stay silent, and the streams stay open before their notification."""
STARTUP = 10.0
COMMENTS = 3
"""Comments a stream delivered through HAProxy must have carried at least (some ten are due)."""

CONFIG = """\
global
    log stderr format raw local0

defaults
    mode http
    log global
    timeout connect 5s
    timeout http-request 10s
    timeout server {timeout}s
    timeout client {timeout}s

frontend mcp
    bind 127.0.0.1:{port}
    default_backend mcp_trio

backend mcp_trio
    option http-no-delay
    server mcp 127.0.0.1:{upstream}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def haproxy(upstream: int, tmp: Path) -> AsyncIterator[str]:
    """HAProxy in the foreground (config in ``tmp``) in front of 127.0.0.1:``upstream``: its MCP URL."""
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.access(binary, os.X_OK):
        missing("haproxy is not installed (Debian package haproxy)")
    port = free_port()
    config = tmp / "haproxy.cfg"
    config.write_text(CONFIG.format(timeout=TIMEOUT, port=port, upstream=upstream))
    log = tmp / "haproxy.log"
    with log.open("wb") as output:
        process = await trio.lowlevel.open_process(
            [binary, "-db", "-f", str(config)], stdin=subprocess.DEVNULL, stdout=output, stderr=output
        )
    try:
        with trio.fail_after(STARTUP):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    assert process.returncode is None, f"haproxy exited: {log.read_text()[-2000:]}"
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await process.wait()
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await process.wait()


async def outcome(raw: Raw, wanted: Any, within: float) -> str:
    """Read ``raw`` until ``wanted(raw)`` ("delivered, N comments"), or until HAProxy cuts it ("cut": a
    504, or a body that ends or breaks off first)."""
    if raw.response.status_code == 504:
        return "cut"
    assert raw.response.status_code == 200, raw.response.status_code
    try:
        await raw.until(wanted, within)
    except httpx.HTTPError:
        return "cut"
    except AssertionError:
        if raw.ended:  # ended without what it was waiting for
            return "cut"
        raise
    return "delivered" if raw.comments >= COMMENTS else f"delivered with {raw.comments} comments"


def answered(request_id: int) -> Any:
    return lambda raw: any(m.get("id") == request_id and "result" in m for m in raw.messages)


def tools_changed(raw: Raw) -> bool:
    return any(m.get("method") == "notifications/tools/list_changed" for m in raw.messages)


async def quiet_streams(url: str, http: httpx.AsyncClient) -> dict[str, str]:
    """The four quiet streams through HAProxy at once: what became of each."""
    client = MCPClient(http, url)
    with trio.fail_after(5):
        await client.initialize()
        await client.initialized()
    results: dict[str, str] = {}
    opened = trio.current_time()
    within = SILENCE + 5

    async def call_2025() -> None:
        message = {
            "jsonrpc": "2.0",
            "id": 11,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": SILENCE}},
        }
        body = json.dumps(message).encode()
        request = http.build_request("POST", url, content=body, headers=client.headers(**POST_HEADERS))
        raw = Raw(await http.send(request, stream=True))
        try:
            results["2025 POST"] = await outcome(raw, answered(11), within)
        finally:
            await raw.aclose()

    async def call_2026() -> None:
        body, headers = modern_request(12, "tools/call", {"name": "sleep", "arguments": {"seconds": SILENCE}})
        raw = Raw(
            await http.send(http.build_request("POST", url, content=body, headers=headers), stream=True)
        )
        try:
            results["2026 answer"] = await outcome(raw, answered(12), within)
        finally:
            await raw.aclose()

    async def notify_after_the_silence() -> None:
        await trio.sleep_until(opened + SILENCE)
        body, headers = modern_request(
            13, "tools/call", {"name": "test_trigger_tool_change", "arguments": {}}
        )
        with trio.fail_after(5):
            response = await http.post(url, content=body, headers=headers)
        assert response.status_code == 200, response.text

    async def get_stream() -> None:
        request = http.build_request("GET", url, headers=client.headers(accept="text/event-stream"))
        raw = Raw(await http.send(request, stream=True))
        try:
            results["2025 GET"] = await outcome(raw, tools_changed, within)
        finally:
            await raw.aclose()

    async def listen_stream() -> None:
        body, headers = modern_request(
            14, "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
        )
        raw = Raw(
            await http.send(http.build_request("POST", url, content=body, headers=headers), stream=True)
        )
        try:
            results["listen"] = await outcome(raw, tools_changed, within)
        finally:
            await raw.aclose()

    async with trio.open_nursery() as nursery:
        for stream in (call_2025, call_2026, get_stream, listen_stream):
            nursery.start_soon(stream)
        nursery.start_soon(notify_after_the_silence)
    with trio.fail_after(5):
        await client.delete()
    return results


@pytest.mark.parametrize(("interval", "expected"), [("0.5", "delivered"), ("60", "cut")])
async def test_quiet_streams_through_haproxy_with_short_timeouts(
    tmp_path: Path, interval: str, expected: str
) -> None:
    async with (
        serve_demo("--keepalive-interval", interval) as demo,
        haproxy(demo.port, tmp_path) as url,
        http_client() as http,
    ):
        results = await quiet_streams(url, http)
    assert results == dict.fromkeys(("2025 POST", "2026 answer", "2025 GET", "listen"), expected), results
