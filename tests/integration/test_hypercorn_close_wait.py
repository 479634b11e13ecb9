"""hypercorn 0.18's trio worker left a connection that the client closed while idle in CLOSE_WAIT until
keep_alive_timeout ran out; ``mcp_trio._http.hypercorn_close_wait`` fixes it (see its docstring).

The in-process tests run hypercorn with the fix applied (it is process-global and meant to stay
applied). The bug itself is shown in a fresh interpreter that never imports mcp_trio, so no global
state has to be undone.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from mcp_http import count_tasks, fast_path_idle_timers, read_until, wait_until
from tests.required import not_applicable

from mcp_trio._http.hypercorn_server import hypercorn_fixes_available, serve_hypercorn

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason=not_applicable("inspects sockets through /proc (Linux only)"),
)

SRC = Path(__file__).resolve().parents[2]
RELEASE_BUDGET = 1.0  # seconds a closed idle connection may linger with the fix

# Task names trio gives hypercorn's per-connection tasks.
CONNECTION_TASK = "_highlevel_serve_listeners._run_handler"  # runs TCPServer.run, one per connection
IDLE_TASK = "TCPServer._idle_timeout"  # the keep-alive idle timer of a connection

TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


def server_connection_states(port: int) -> list[str]:
    """TCP states of the sockets this process holds for accepted connections on ``port``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    states = []
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            state = TCP_STATES.get(fields[3], fields[3])
            if local_port == port and state != "LISTEN" and fields[9] in inodes:
                states.append(state)
    return states


def armed_fast_path_timers() -> int:
    """Under the hypercorn fast path (on by default in mcp_trio's server), a connection's idle timer is
    the deadline of its read loop, armed (finite) while the connection is idle: no task."""
    return fast_path_idle_timers()[1]


@dataclass
class Server:
    port: int
    client_ports: list[int] = field(default_factory=list)  # peer port of each request served

    def released(self) -> bool:
        return (
            server_connection_states(self.port) == []
            and count_tasks(CONNECTION_TASK) == 0
            and count_tasks(IDLE_TASK) == 0
            and fast_path_idle_timers() == (0, 0)
        )

    def idle_connections(self) -> int:
        return count_tasks(IDLE_TASK) + armed_fast_path_timers()


def make_app(server_ref: list[Server]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http"
        server_ref[0].client_ports.append(scope["client"][1])
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for chunk in (b"one,", b"two,", b"three"):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await trio.sleep(0.01)
            await send({"type": "http.response.body", "body": b""})
        else:
            body = scope["path"].encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})

    return app


@asynccontextmanager
async def running_server(
    keep_alive_timeout: float = 5.0, *, allow_stock: bool = False
) -> AsyncIterator[Server]:
    """hypercorn's trio worker on 127.0.0.1 (ephemeral port), stopped on exit."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = keep_alive_timeout
    config.graceful_timeout = 1.0
    server_ref: list[Server] = []
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve_hypercorn(
                make_app(server_ref),
                config,
                shutdown_trigger=stop.wait,
                task_status=task_status,
                allow_stock=allow_stock,
            )
        )
        server = Server(port=int(binds[0].rsplit(":", 1)[1]))
        server_ref.append(server)
        try:
            yield server
        finally:
            stop.set()


async def request(stream: trio.SocketStream, path: str = "/") -> None:
    await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())


async def get(stream: trio.SocketStream, buffer: bytearray, path: str) -> bytes:
    """Send a keep-alive GET and return the body of the (content-length) response."""
    await request(stream, path)
    head = await read_until(stream, buffer, b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return await read_until(stream, buffer, path.encode())


def test_fix_is_available_and_hypercorn_untouched() -> None:
    # hypercorn is pinned to 0.18.0: if this fails, the installed hypercorn is not the code the fix was
    # written for; check whether upstream fixed the bug (see hypercorn_close_wait's docstring).
    assert hypercorn_fixes_available() is None
    assert TCPServer._read_data.__module__ == "hypercorn.trio.tcp_server"
    assert TCPServer.protocol_send.__module__ == "hypercorn.trio.tcp_server"


@pytest.mark.parametrize("requests_before_close", [1, 0])
async def test_client_closing_idle_connection_is_released_at_once(requests_before_close: int) -> None:
    with trio.fail_after(5):
        async with running_server(keep_alive_timeout=5.0) as server:
            assert server.released()
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            buffer = bytearray()
            for _ in range(requests_before_close):
                assert await get(stream, buffer, "/ping") == b"/ping"
            # Idle: the response is done and the keep-alive timer is armed again.
            await wait_until(lambda: server.idle_connections() == 1, within=1.0)
            assert server_connection_states(server.port) == ["ESTABLISHED"]

            await stream.aclose()
            released_after = await wait_until(server.released, within=RELEASE_BUDGET)
            assert released_after < RELEASE_BUDGET


async def test_keep_alive_reuse_pipelining_and_streaming_still_work() -> None:
    with trio.fail_after(5):
        async with running_server(keep_alive_timeout=5.0) as server:
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
                buffer = bytearray()
                assert await get(stream, buffer, "/first") == b"/first"
                await wait_until(lambda: server.idle_connections() == 1, within=1.0)
                assert await get(stream, buffer, "/second") == b"/second"

                # Two pipelined requests in one write, answered in order.
                await stream.send_all(
                    b"GET /third HTTP/1.1\r\nHost: test\r\n\r\nGET /fourth HTTP/1.1\r\nHost: test\r\n\r\n"
                )
                assert (await read_until(stream, buffer, b"/third")).endswith(b"\r\n\r\n/third")
                assert (await read_until(stream, buffer, b"/fourth")).endswith(b"\r\n\r\n/fourth")

                # A streamed (chunked) response.
                await request(stream, "/stream")
                streamed = await read_until(stream, buffer, b"0\r\n\r\n")
                assert b"transfer-encoding: chunked" in streamed.lower()
                assert b"one," in streamed and b"two," in streamed and b"three" in streamed

                assert len(server.client_ports) == 5
                assert len(set(server.client_ports)) == 1  # all on the one connection
                assert count_tasks(CONNECTION_TASK) == 1
                await wait_until(lambda: server.idle_connections() == 1, within=1.0)
            await wait_until(server.released, within=RELEASE_BUDGET)


async def test_keep_alive_timeout_still_closes_an_idle_connection_left_open() -> None:
    keep_alive_timeout = 0.5
    with trio.fail_after(5):
        async with (
            running_server(keep_alive_timeout=keep_alive_timeout) as server,
            await trio.open_tcp_stream("127.0.0.1", server.port) as stream,
        ):
            buffer = bytearray()
            assert await get(stream, buffer, "/ping") == b"/ping"
            start = trio.current_time()
            with trio.fail_after(keep_alive_timeout + 2):
                assert await stream.receive_some(65536) == b""  # the server closed it
            closed_after = trio.current_time() - start
            assert keep_alive_timeout - 0.1 <= closed_after <= keep_alive_timeout + 1.0
            await wait_until(server.released, within=RELEASE_BUDGET)


async def test_graceful_shutdown_still_closes_idle_connections() -> None:
    with trio.fail_after(5):
        stream = None
        try:
            start = trio.current_time()
            async with running_server(keep_alive_timeout=5.0) as server:
                stream = await trio.open_tcp_stream("127.0.0.1", server.port)
                buffer = bytearray()
                assert await get(stream, buffer, "/ping") == b"/ping"
                await wait_until(lambda: server.idle_connections() == 1, within=1.0)
                start = trio.current_time()
            # serve() returned: the idle connection was closed by the shutdown, not by the timeout.
            assert trio.current_time() - start < 1.0
            assert await stream.receive_some(65536) == b""
            assert server.released()
        finally:
            if stream is not None:
                await stream.aclose()


# Run in a fresh interpreter: serve, make one keep-alive request, wait until the connection is idle,
# close the client, then report the server-side socket states shortly after and how long the server
# took to release the socket. With argv[1] == "fixed" the fix is applied first; otherwise mcp_trio is
# never imported, so hypercorn runs unpatched.
EXPERIMENT = r"""
import json, os, sys
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as stock_serve
from hypercorn.trio.tcp_server import TCPServer

# "stock": mcp_trio is never imported.  "beside": an mcp_trio server runs first in the same process,
# then stock hypercorn is measured (it must behave as shipped).  "fixed": mcp_trio's server is measured.
MODE = sys.argv[1]
if MODE != "stock":
    from mcp_trio._http.hypercorn_server import serve_hypercorn

KEEP_ALIVE = float(sys.argv[2])

def states(port):
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            f = line.split()
            if int(f[1].split(":")[1], 16) == port and f[3] != "0A" and f[9] in inodes:
                found.append({"01": "ESTABLISHED", "08": "CLOSE_WAIT"}.get(f[3], f[3]))
    return found

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].split(".")[1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})

async def main(serve):
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    config.keep_alive_timeout = KEEP_ALIVE
    config.graceful_timeout = 1.0
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        port = int(binds[0].rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        data = b""
        while not data.endswith(b"ok"):
            data += await stream.receive_some(65536)
        await trio.sleep(0.1)  # let the server recycle the connection to idle
        await stream.aclose()
        start = trio.current_time()
        after_close = released = None
        for _ in range(2000):
            now = states(port)
            elapsed = trio.current_time() - start
            if after_close is None and elapsed >= 0.3:
                after_close = now
            if released is None and not now:
                released = elapsed
            if released is not None and after_close is not None:
                break
            await trio.sleep(0.005)
        stop.set()
    return {"states_300ms_after_close": after_close, "release_s": released}

async def bounded_main():
    with trio.fail_after(20):
        if MODE == "beside":
            await main(serve_hypercorn)
        outcome = await main(serve_hypercorn if MODE == "fixed" else stock_serve)
    outcome["hypercorn_untouched"] = TCPServer._read_data.__module__ == "hypercorn.trio.tcp_server"
    print(json.dumps(outcome))

trio.run(bounded_main)
"""


async def run_experiment(mode: str, keep_alive_timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    result = await trio.run_process(
        [sys.executable, "-c", EXPERIMENT, mode, str(keep_alive_timeout)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr.decode()
    outcome: dict[str, Any] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return outcome


async def test_unpatched_hypercorn_keeps_closed_idle_connection_until_keep_alive_timeout() -> None:
    # If this fails because the connection was released at once, upstream hypercorn fixed the bug:
    # remove mcp_trio._http.hypercorn_close_wait (see its docstring).
    # "beside": the same holds for stock hypercorn in a process that imported and ran mcp_trio's server.
    keep_alive_timeout = 1.5
    with trio.fail_after(40):
        for mode in ("stock", "beside"):
            unpatched = await run_experiment(mode, keep_alive_timeout)
            assert unpatched["hypercorn_untouched"]
            assert unpatched["states_300ms_after_close"] == ["CLOSE_WAIT"], (mode, unpatched)
            assert unpatched["release_s"] >= keep_alive_timeout - 0.5, (mode, unpatched)

        fixed = await run_experiment("fixed", keep_alive_timeout)
        assert fixed["hypercorn_untouched"]
        assert fixed["states_300ms_after_close"] == [], fixed
        assert fixed["release_s"] < RELEASE_BUDGET, fixed


async def test_an_unexpected_hypercorn_is_refused_or_served_as_shipped_when_allowed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Where the code the fixes rely on is not what they were written for, mcp_trio's server refuses to
    # start (nothing is bound); allowed, it serves with hypercorn as shipped and says so.  (The real
    # thing, an edited copy of hypercorn in a fresh interpreter: test_hypercorn_guard.py.)
    from mcp_trio._http import hypercorn_guard, hypercorn_server

    monkeypatch.setitem(
        hypercorn_guard.expected()["ast"]["hypercorn.trio.tcp_server"], "TCPServer.run", "0" * 16
    )
    hypercorn_guard._installed.cache_clear()
    try:
        assert "TCPServer.run" in (hypercorn_server.hypercorn_fixes_available() or "")
        config = Config()
        config.bind = ["127.0.0.1:0"]
        with pytest.raises(hypercorn_guard.HypercornGuardError, match=r"changed TCPServer\.run"):
            await serve_hypercorn(make_app([]), config)
        with trio.fail_after(5):
            async with running_server(allow_stock=True) as server:
                stream = await trio.open_tcp_stream("127.0.0.1", server.port)
                async with stream:
                    assert await get(stream, bytearray(), "/ping") == b"/ping"
                    # Idle now: hypercorn's own idle-timer task, not the fast path's timer.
                    await wait_until(lambda: count_tasks(IDLE_TASK) == 1, within=1.0)
                    assert fast_path_idle_timers() == (0, 0)
        assert any("WITHOUT MCP_TRIO'S FIXES" in record.getMessage() for record in caplog.records)
    finally:
        monkeypatch.undo()
        hypercorn_guard._installed.cache_clear()
    assert hypercorn_server.hypercorn_fixes_available() is None
