"""The acute symptom of kotlin-sdk #922: behind a reverse proxy with a keep-alive upstream pool, a GET
stream whose HTTP response never ends pins a pooled upstream connection for good; once the pool is
used up, new sessions hang.  Here 100 sessions (initialize, initialized, GET, tools/call, DELETE) go
through a real nginx (``keepalive 16``) one after another; every one must complete in time, and the
server must be back at its baseline afterwards.

nginx comes from the distribution (``scripts/test.sh`` installs it).  Without nginx the test is skipped
when run by hand, and fails under the test command (``tests/required.py``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import pytest
import trio
from mcp_http import (
    Baseline,
    DemoServer,
    assert_back_to_baseline,
    count_sockets,
    fetch_stats,
    full_session,
    http_client,
    tcp_states,
)
from tests.required import missing, not_applicable

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason=not_applicable("inspects the server's sockets through /proc (Linux only)"),
)

SESSIONS = 100
UPSTREAM_KEEPALIVE = 16
PER_SESSION = 5.0
"""Deadline of one whole session through the proxy (normally some milliseconds)."""
NGINX_STARTUP = 5.0

NGINX_CONF = """\
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

    upstream mcp {{
        server 127.0.0.1:{upstream_port};
        keepalive {keepalive};
    }}

    server {{
        listen 127.0.0.1:{port};

        location / {{
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # The server checks Host against loopback names (DNS-rebinding protection): pass the
            # client's 127.0.0.1:PORT through instead of nginx's default, the upstream's name "mcp".
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            proxy_read_timeout 60s;
            proxy_send_timeout 60s;
        }}
    }}
}}
"""


def nginx_binary() -> str:
    found = shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(path, os.X_OK)), None
    )
    if found is None:
        missing("nginx is not installed (scripts/test.sh installs it)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def running_nginx(upstream_port: int, tmp: Path) -> AsyncIterator[tuple[int, trio.Process]]:
    """nginx in the foreground (no master process), proxying 127.0.0.1:PORT to the MCP server."""
    binary = nginx_binary()
    port = free_port()
    for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / name).mkdir()
    conf = tmp / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(tmp=tmp, upstream_port=upstream_port, port=port, keepalive=UPSTREAM_KEEPALIVE)
    )
    log = tmp / "nginx.log"
    with _open_log(log) as stderr:
        command = [binary, "-p", str(tmp), "-e", "stderr", "-c", str(conf)]
        process = await trio.lowlevel.open_process(command, stdout=stderr, stderr=stderr)
        try:
            await _wait_listening(port, process, log)
            yield port, process
        finally:
            if process.returncode is None:
                process.terminate()  # SIGTERM: fast shutdown
                with trio.move_on_after(5):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()


async def _wait_listening(port: int, process: trio.Process, log: Path) -> None:
    with trio.move_on_after(NGINX_STARTUP):
        while process.returncode is None:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.02)
                continue
            await stream.aclose()
            return
    raise AssertionError(f"nginx did not listen on {port} (exit {process.returncode}): {_read_log(log)}")


def _open_log(path: Path) -> IO[bytes]:
    return path.open("wb")


def _read_log(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:]


@pytest.mark.deadline(60)
async def test_sessions_through_nginx_keepalive_pool(
    demo_server: DemoServer, baseline: Baseline, tmp_path: Path
) -> None:
    peak = 0
    with trio.fail_after(50):
        async with running_nginx(demo_server.port, tmp_path) as (port, nginx):
            url = f"http://127.0.0.1:{port}/mcp"
            async with http_client() as http:
                for n in range(SESSIONS):
                    with trio.fail_after(PER_SESSION):
                        await full_session(http, url, n)
                    peak = max(peak, count_sockets(demo_server.pid) - baseline.sockets)
            # nginx keeps at most `keepalive` idle upstream connections (plus those in use); a GET
            # that never ended would show up as one more connection per session.
            assert peak <= UPSTREAM_KEEPALIVE + 2, (
                f"server sockets grew by {peak}: {tcp_states(demo_server.pid)}"
            )
            stats = await fetch_stats(demo_server)
            assert stats["sessions"] == 0 and stats["session_tasks"] == 0, stats
            assert stats["connections"] == 0 and stats["sessions_created"] == SESSIONS, stats
            assert nginx.returncode is None, _read_log(tmp_path / "nginx.log")
        # nginx is gone, and with it its pooled upstream connections.
        sockets, stats = await assert_back_to_baseline(demo_server, baseline)
    print(
        f"\n{SESSIONS} sessions through nginx: server sockets {baseline.sockets} -> {sockets} (peak +{peak}"
        f" while nginx held its pool), process_tasks {baseline.process_tasks} -> {stats['process_tasks']},"
        f" session_tasks {baseline.session_tasks} -> {stats['session_tasks']}"
    )


def test_nginx_runs() -> None:
    """The nginx found runs (under the test command a missing one is a failure: ``tests/required.py``)."""
    binary = nginx_binary()
    assert subprocess.run([binary, "-v"], capture_output=True, check=False).returncode == 0
