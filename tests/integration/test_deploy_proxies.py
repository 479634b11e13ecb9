"""The reverse-proxy configurations of ``docs/deploy/`` (``nginx.conf``, ``Caddyfile``, ``haproxy.cfg``),
each run for real in front of ``mcp-trio demo --allowed-hosts mcp.example.com``.

Each proxy gets the shipped file with only these substitutions (each must match exactly once, so an edit
of the file that breaks one fails here instead of testing something else):

- its listen address becomes a free port of 127.0.0.1, and the upstream ``127.0.0.1:8000`` the demo's
  port;
- nginx: the file (made for the ``http {}`` context) is included by a small main configuration of the
  test's own (foreground, pid and temp files in the test's directory);
- Caddy: the admin endpoint moves to a free port; the site ``mcp.example.com`` (automatic HTTPS) becomes
  ``http://mcp.example.com:PORT`` bound to 127.0.0.1 (no certificate can be had in a test), with its
  HOME and XDG directories in the test's directory;
- HAProxy: it logs to stderr instead of ``/dev/log``.

``mcp.example.com`` stays: the client connects to the proxy on 127.0.0.1 and sends ``Host:
mcp.example.com``.  Through each proxy: a whole 2025 session (initialize, initialized, the GET stream
and its priming event, a ``tools/call`` whose SSE answer carries progress, DELETE, then the GET stream
ends cleanly), a few more sessions on the proxy's kept-alive upstream connections, and a stateless
2026-07-28 call with progress.  Both tool calls run the demo's ``count`` tool, which sleeps between its
progress notifications: each must arrive when it is sent, not when the result comes (a buffering proxy
hands them over together at the end; HAProxy without ``option http-no-delay`` held each ~200 ms).  A
body of exactly ``max_body_size`` bytes goes through, one byte more gets 413.  The same ``initialize``
through the same configuration to a server started without ``--allowed-hosts`` gets 421 (the flag is
what makes it work).  With the proxy stopped, the server is back at its baseline (no session, no
connection, its sockets and tasks as before).

The proxies come from Debian's packages (``nginx-light`` or ``nginx``, ``caddy``, ``haproxy``).  A
missing one skips its test when run by hand, and fails it under the test command (``tests/required.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp_http import (
    POST_HEADERS,
    Baseline,
    DemoServer,
    MCPClient,
    SSEResponse,
    assert_back_to_baseline,
    fetch_stats,
    full_session,
    http_client,
    serve_demo,
    tcp_states,
)
from tests.required import missing, not_applicable

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason=not_applicable("inspects the server's sockets through /proc (Linux only)"),
)

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"
PUBLIC_HOST = "mcp.example.com"
UPSTREAM = "127.0.0.1:8000"
MODERN = "2026-07-28"
PROXY_STARTUP = 10.0
"""Seconds a proxy gets to listen (Caddy, a Go binary, takes the longest: some 100 ms)."""
PROXY_STOP = 5.0
SESSIONS = 5
"""Sessions after the first one, so that the proxy reuses its kept-alive upstream connections."""
STEPS = 3
DELAY = 0.4
"""The ``count`` tool's pause after each progress notification: notification k (0, 1, 2) leaves the
server (STEPS - k) x DELAY before the result."""
LATE = 0.1
"""How late, compared with the result, one notification at least must arrive.  Each comes as late as
the proxy holds it: a buffering proxy holds all of them until the result (1.2 s, 0.8 s, 0.4 s), and
HAProxy without ``option http-no-delay`` held each some 200 ms; through a proxy that passes them on,
each is (nearly) on time."""
MAX_BODY = 4 * 1024 * 1024
"""``ServerConfig.max_body_size``'s default, which each shipped file repeats."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def substitute(text: str, old: str, new: str) -> str:
    """Replace ``old``, which must occur exactly once in the shipped file."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in the shipped file, not once"
    return text.replace(old, new)


# -- the proxies ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    command: list[str]
    env: dict[str, str] | None = None
    stop_signal: int = signal.SIGTERM


NGINX_MAIN = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log stderr warn;

events {{
    worker_connections 1024;
}}

http {{
    access_log off;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;

    # docs/deploy/nginx.conf, its ports changed:
    include {tmp}/mcp.conf;
}}
"""


def nginx(binary: str, port: int, upstream_port: int, tmp: Path) -> Launch:
    site = (DEPLOY / "nginx.conf").read_text()
    site = substitute(site, "    listen 80;\n", f"    listen 127.0.0.1:{port};\n")
    site = substitute(site, f"server {UPSTREAM};", f"server 127.0.0.1:{upstream_port};")
    (tmp / "mcp.conf").write_text(site)
    for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / name).mkdir()
    (tmp / "nginx.conf").write_text(NGINX_MAIN.format(tmp=tmp))
    return Launch([binary, "-p", str(tmp), "-e", "stderr", "-c", str(tmp / "nginx.conf")])


def caddy(binary: str, port: int, upstream_port: int, tmp: Path) -> Launch:
    config = (DEPLOY / "Caddyfile").read_text()
    config = substitute(config, "\tadmin 127.0.0.1:2019\n", f"\tadmin 127.0.0.1:{free_port()}\n")
    # The site: plain HTTP on a loopback port instead of automatic HTTPS on ports 80 and 443.
    config = substitute(
        config, f"\n{PUBLIC_HOST} {{\n", f"\nhttp://{PUBLIC_HOST}:{port} {{\n\tbind 127.0.0.1\n"
    )
    config = substitute(config, f"reverse_proxy {UPSTREAM} {{", f"reverse_proxy 127.0.0.1:{upstream_port} {{")
    (tmp / "Caddyfile").write_text(config)
    home = tmp / "home"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
    }
    command = [binary, "run", "--config", str(tmp / "Caddyfile"), "--adapter", "caddyfile"]
    return Launch(command, env)


def haproxy(binary: str, port: int, upstream_port: int, tmp: Path) -> Launch:
    config = (DEPLOY / "haproxy.cfg").read_text()
    config = substitute(config, "    log /dev/log local0\n", "    log stderr format raw local0\n")
    config = substitute(config, "    bind :80\n", f"    bind 127.0.0.1:{port}\n")
    config = substitute(config, f"server mcp {UPSTREAM}\n", f"server mcp 127.0.0.1:{upstream_port}\n")
    (tmp / "haproxy.cfg").write_text(config)
    return Launch([binary, "-db", "-f", str(tmp / "haproxy.cfg")])


@dataclass(frozen=True)
class Proxy:
    name: str
    binary: str
    package: str
    """The Debian package that has it."""
    launch: Callable[[str, int, int, Path], Launch]

    def find(self) -> str:
        found = shutil.which(self.binary) or next(
            (
                path
                for path in (f"/usr/sbin/{self.binary}", f"/usr/local/sbin/{self.binary}")
                if os.access(path, os.X_OK)
            ),
            None,
        )
        if found is None:
            missing(f"{self.binary} is not installed (Debian package {self.package})")
        return found


PROXIES = [
    Proxy("nginx", "nginx", "nginx-light", nginx),
    Proxy("caddy", "caddy", "caddy", caddy),
    Proxy("haproxy", "haproxy", "haproxy", haproxy),
]


def prepare(proxy: Proxy, port: int, upstream_port: int, tmp: Path) -> Launch:
    """Write the proxy's configuration into ``tmp`` (a new directory): how to start it."""
    binary = proxy.find()
    tmp.mkdir()
    return proxy.launch(binary, port, upstream_port, tmp)


@asynccontextmanager
async def running(proxy: Proxy, upstream_port: int, tmp: Path) -> AsyncIterator[tuple[str, trio.Process]]:
    """The proxy in the foreground in front of ``upstream_port``; yields its MCP URL and its process.
    Stopped (by its pid) on exit, killed if it does not stop in time."""
    port = free_port()
    launch = prepare(proxy, port, upstream_port, tmp)
    log = tmp / f"{proxy.name}.log"
    with log.open("wb") as output:
        process = await trio.lowlevel.open_process(
            launch.command, stdin=subprocess.DEVNULL, stdout=output, stderr=output, env=launch.env
        )
        try:
            await _wait_listening(proxy, port, process, log)
            yield f"http://127.0.0.1:{port}/mcp", process
        finally:
            if process.returncode is None:
                process.send_signal(launch.stop_signal)
                with trio.move_on_after(PROXY_STOP):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True), trio.move_on_after(PROXY_STOP):
                    await process.wait()


async def _wait_listening(proxy: Proxy, port: int, process: trio.Process, log: Path) -> None:
    with trio.move_on_after(PROXY_STARTUP):
        while process.returncode is None:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.02)
                continue
            await stream.aclose()
            return
    raise AssertionError(
        f"{proxy.name} did not listen on {port} (exit {process.returncode}): {read_log(log)}"
    )


def read_log(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:]


# -- what goes through them ----------------------------------------------------------------------


async def timed_count(
    stream: SSEResponse, request_id: int, start: float
) -> tuple[list[float], float, dict[str, Any]]:
    """Read a ``count`` call's SSE answer: when each progress notification and the result arrived
    (seconds since ``start``), and the result."""
    progress: list[float] = []
    while (message := await stream.next_message()) is not None:
        if message.get("method") == "notifications/progress":
            assert message["params"]["progressToken"] == f"count-{request_id}", message
            progress.append(trio.current_time() - start)
        elif message.get("id") == request_id:
            assert await stream.rest() == [], "events after the response"
            return progress, trio.current_time() - start, message
    raise AssertionError("the stream ended without a response")


def assert_unbuffered(progress: list[float], done: float, answer: dict[str, Any], proxy: str) -> None:
    assert answer["result"]["content"][0]["text"] == f"counted to {STEPS}", answer
    assert len(progress) == STEPS, progress
    # The result ends the response, so every proxy passes it on at once; how late each notification
    # arrived compared with it (the least of the three, so that one delayed by a busy machine does
    # not count) shows whether the proxy held the events back.
    late = min((STEPS - k) * DELAY - (done - arrived) for k, arrived in enumerate(progress))
    assert late < LATE, (
        f"{proxy} held the events back ({late:.3f} s at least): progress at "
        f"{[round(t, 3) for t in progress]}, the result at {done:.3f} s (seconds since the request)"
    )


async def session_with_progress(http: httpx.AsyncClient, url: str, proxy: str) -> None:
    """A whole 2025-11-25 session; its tool call streams progress, each event as it happens."""
    client = MCPClient(http, url)
    with trio.fail_after(5):
        await client.initialize()
        await client.initialized()
        get = await client.open_get()  # checks the priming event
    try:
        request_id = 7
        message = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": "count",
                "arguments": {"steps": STEPS, "delay": DELAY},
                "_meta": {"progressToken": f"count-{request_id}"},
            },
        }
        with trio.fail_after(5 + STEPS * DELAY):
            start = trio.current_time()
            stream = await client.post_stream(message)
            try:
                assert stream.status_code == 200, (stream.status_code, await stream.response.aread())
                assert stream.response.headers["content-type"].startswith("text/event-stream")
                progress, done, answer = await timed_count(stream, request_id, start)
            finally:
                await stream.aclose()
        assert_unbuffered(progress, done, answer, proxy)
        with trio.fail_after(5):
            await client.delete()
            leftover = await get.rest()  # the GET stream ends cleanly (a cut body raises)
        assert get.ended and leftover == [], leftover
    finally:
        await get.aclose()


async def modern_call_with_progress(http: httpx.AsyncClient, url: str, proxy: str) -> None:
    """A stateless 2026-07-28 ``tools/call`` of ``count``: no session, progress streamed as it comes."""
    request_id = 9
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "count",
            "arguments": {"steps": STEPS, "delay": DELAY},
            "_meta": {
                "progressToken": f"count-{request_id}",
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {**POST_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": "tools/call"}
    headers["mcp-name"] = "count"
    request = http.build_request("POST", url, content=json.dumps(message).encode(), headers=headers)
    with trio.fail_after(5 + STEPS * DELAY):
        start = trio.current_time()
        stream = SSEResponse(await http.send(request, stream=True))
        try:
            assert stream.status_code == 200, (stream.status_code, await stream.response.aread())
            assert "mcp-session-id" not in stream.response.headers
            progress, done, answer = await timed_count(stream, request_id, start)
        finally:
            await stream.aclose()
    assert_unbuffered(progress, done, answer, proxy)


class Body(httpx.AsyncByteStream):
    """A request body that is not an async generator: httpx's own is garbage collected unfinished (a
    ResourceWarning) when the answer (413) comes before the whole body is sent."""

    def __init__(self, data: bytes) -> None:
        self.chunks = [data]

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if not self.chunks:
            raise StopAsyncIteration
        return self.chunks.pop()


async def body_limit(http: httpx.AsyncClient, url: str) -> None:
    """A body of exactly ``max_body_size`` bytes goes through to the server; one byte more gets 413
    from the proxy (each refuses a declared length over the limit itself)."""
    headers = {**POST_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": "server/discover"}
    for size, status in ((MAX_BODY, 200), (MAX_BODY + 1, 413)):
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "padding": "",
        }
        message = {"jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {"_meta": meta}}
        meta["padding"] = "x" * (size - len(json.dumps(message)))
        body = json.dumps(message).encode()
        assert len(body) == size
        request = http.build_request("POST", url, content=body, headers=headers)
        request.stream = Body(body)
        with trio.fail_after(10):
            response = await http.send(request)
        assert response.status_code == status, (size, response.status_code, response.text[:500])
        if status == 200:
            assert "capabilities" in response.json()["result"], response.text[:500]


async def refused_without_allowed_hosts(proxy: Proxy, tmp: Path) -> None:
    """The same configuration in front of a server started without ``--allowed-hosts``: the public
    Host is refused (421, the server's JSON-RPC error passed on by the proxy)."""
    async with serve_demo() as other, running(proxy, other.port, tmp) as (url, _):
        async with http_client(headers={"host": PUBLIC_HOST}) as http:
            with trio.fail_after(5):
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {},
                            "clientInfo": {"name": "t", "version": "1"},
                        },
                    }
                )
                response = await http.post(url, content=body.encode(), headers=POST_HEADERS)
        assert response.status_code == 421, (response.status_code, response.text)
        assert response.json()["error"]["code"] == -32600, response.text
        stats = await fetch_stats(other)
        assert stats["sessions_created"] == 0, stats


@pytest.fixture
def installed(proxy: Proxy) -> Proxy:
    """The test's proxy, if it is installed: skips (or fails under the test command) before the server
    starts."""
    proxy.find()
    return proxy


@pytest.mark.deadline(60)
@pytest.mark.server_flags("--allowed-hosts", PUBLIC_HOST)
@pytest.mark.parametrize("proxy", PROXIES, ids=[proxy.name for proxy in PROXIES])
async def test_shipped_proxy_configuration(
    installed: Proxy, demo_server: DemoServer, baseline: Baseline, tmp_path: Path
) -> None:
    proxy = installed
    with trio.fail_after(45):
        async with running(proxy, demo_server.port, tmp_path / "allowed") as (url, process):
            async with http_client(headers={"host": PUBLIC_HOST}) as http:
                await session_with_progress(http, url, proxy.name)
                for n in range(SESSIONS):
                    await full_session(http, url, n)  # bounds each step itself
                await modern_call_with_progress(http, url, proxy.name)
                await body_limit(http, url)
            stats = await fetch_stats(demo_server)
            assert stats["sessions"] == 0 and stats["sessions_created"] == 1 + SESSIONS, stats
            assert process.returncode is None, read_log(tmp_path / "allowed" / f"{proxy.name}.log")
        await refused_without_allowed_hosts(proxy, tmp_path / "refused")
        # The proxy is gone, and with it its kept-alive upstream connections.
        sockets, stats = await assert_back_to_baseline(demo_server, baseline)
    print(
        f"\n{proxy.name}: server sockets back to {sockets} ({tcp_states(demo_server.pid)}), "
        f"process_tasks {stats['process_tasks']}"
    )
