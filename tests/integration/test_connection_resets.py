"""No connection can kill the server: clients that reset (``SO_LINGER`` 0) at every stage of a request,
against ``mcp-trio demo`` over real sockets (on hypercorn and, in the test command's second pass, on
``serve_h11``).

- Thousands of clients connect and reset at once (a reset can reach the server before it looks at the
  accepted socket: ``getpeername()`` then fails with ``ENOTCONN``, which used to end ``serve_h11``).
- Resets at each stage of a request: after connecting, mid request line, mid headers, after the
  headers, mid body (fixed length and chunked), after the whole request before the response (the
  handler is running), mid SSE response, between keep-alive requests, and during a WebSocket upgrade
  (mid handshake, before the 101 is read, mid frame after it).

After each stage the server answers a normal request and returns to its idle baseline (sockets,
tasks, sessions, streams: ``assert_back_to_baseline``), and it has logged no traceback.  A last test
checks the log of a flood of misbehaving peers: at most a few lines, no traceback.
"""

from __future__ import annotations

import json
import re
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio
from mcp_http import (
    POST_HEADERS,
    Baseline,
    DemoServer,
    assert_back_to_baseline,
    coverage_paused,
    wait_for,
)

from mcp_trio._protocol import versions
from mcp_trio._runtime.peerlog import PEER_LOG_BURST

# The tests without server flags share one demo; the resets at each stage hit a hosted python-sdk server
# too (conftest.py), the volume and log tests (about the HTTP servers alone) the demo only.
pytestmark = [pytest.mark.shared_demo_server, pytest.mark.also_hosted]

MODERN = versions.LATEST_MODERN.name
CLIENTS = 2000
"""Connect-and-reset clients of the volume test."""
CONCURRENT = 50
"""...at most this many at once."""
PER_STAGE = 12
"""Clients that reset at each stage (in flight together where the stage waits for the server)."""
WS_KEY = b"dGhlIHNhbXBsZSBub25jZQ=="


def modern_call(name: str, arguments: dict[str, Any], *, progress: bool = False) -> bytes:
    """A whole 2026 (stateless) ``tools/call`` request as raw bytes."""
    meta: dict[str, Any] = {versions.PROTOCOL_VERSION_META_KEY: MODERN, mt.CLIENT_CAPABILITIES_META_KEY: {}}
    if progress:
        meta["progressToken"] = "p"
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta},
        }
    ).encode()
    headers = {
        **POST_HEADERS,
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": name,
        "content-length": str(len(body)),
    }
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}\r\n".encode() + body


def websocket_upgrade(subprotocol: bytes = b"mcp") -> bytes:
    return (
        b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
        b"sec-websocket-version: 13\r\nsec-websocket-key: " + WS_KEY + b"\r\n"
        b"sec-websocket-protocol: " + subprotocol + b"\r\n\r\n"
    )


async def connect(port: int) -> trio.socket.SocketType:
    sock = trio.socket.socket()
    try:
        await sock.connect(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


def reset(sock: trio.socket.SocketType) -> None:
    """Close with ``SO_LINGER`` 0: the kernel sends RST, not FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def read_until(sock: trio.socket.SocketType, marker: bytes, within: float = 10.0) -> bytes:
    data = b""
    with trio.fail_after(within):
        while marker not in data:
            chunk = await sock.recv(65536)
            if not chunk:
                raise AssertionError(f"closed before {marker!r}: {data!r}")
            data += chunk
    return data


async def serves_normally(server: DemoServer) -> None:
    """A normal 2026 ``tools/call echo`` on a fresh connection, closed afterwards."""
    request = modern_call("echo", {"text": "still here"})
    head, _, body = request.partition(b"\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    headers["connection"] = "close"
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(server.url, content=body, headers=headers)
    assert response.status_code == 200, (response.status_code, response.text)
    assert "still here" in response.text, response.text


def assert_no_traceback(server: DemoServer) -> None:
    log = server.log()
    assert "Traceback" not in log and not re.search(r"^(ERROR|CRITICAL) ", log, re.MULTILINE), log


# -- thousands of connect-and-reset clients -------------------------------------------------------------


@pytest.mark.demo_without_coverage
@pytest.mark.demo_only
@pytest.mark.server_flags()  # a demo of its own: its stderr is this test's alone
async def test_thousands_of_clients_that_connect_and_reset(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    port = demo_server.port
    done = 0

    async def client_loop(count: int) -> None:
        nonlocal done
        for _ in range(count):
            reset(await connect(port))
            done += 1

    with trio.fail_after(120), coverage_paused():
        async with trio.open_nursery() as nursery:
            for _ in range(CONCURRENT):
                nursery.start_soon(client_loop, CLIENTS // CONCURRENT)
    assert done == CLIENTS
    assert demo_server.process.poll() is None, demo_server.log()
    with trio.fail_after(20):
        await serves_normally(demo_server)
        await assert_back_to_baseline(demo_server, baseline, within=10)
    assert_no_traceback(demo_server)


# -- a reset at every stage of a request -----------------------------------------------------------------


async def stage_connect(port: int, _server: DemoServer) -> None:
    reset(await connect(port))


def sends(data: bytes, *, then_read: bytes | None = None) -> Callable[[int, DemoServer], Awaitable[None]]:
    """A stage: send ``data`` (and read until ``then_read`` if given), then reset."""

    async def stage(port: int, _server: DemoServer) -> None:
        sock = await connect(port)
        try:
            await sock.send(data)
            if then_read is not None:
                await read_until(sock, then_read)
        finally:
            reset(sock)

    return stage


CALL = modern_call("echo", {"text": "x"})
CALL_HEAD, _, CALL_BODY = CALL.partition(b"\r\n\r\n")
CHUNKED = (
    CALL_HEAD.replace(b"content-length: %d" % len(CALL_BODY), b"transfer-encoding: chunked")
    + b"\r\n\r\n"
    + b"%x\r\n" % len(CALL_BODY)
    + CALL_BODY[:10]
)


async def stage_handler_running(port: int, server: DemoServer) -> None:
    """The whole request is in and its handler runs (``sleep 600``): every client resets then."""
    sockets = []
    try:
        for _ in range(PER_STAGE):
            sock = await connect(port)
            sockets.append(sock)
            await sock.send(modern_call("sleep", {"seconds": 600}))
        await wait_for(
            server, lambda s: s.get("modern_inflight", 0) >= PER_STAGE, within=10, what="in flight"
        )
    finally:
        for sock in sockets:
            reset(sock)


async def stage_keep_alive(port: int, _server: DemoServer) -> None:
    """A whole exchange on a keep-alive connection, then a reset while it is idle."""
    sock = await connect(port)
    try:
        await sock.send(CALL)
        await read_until(sock, b'"x"')
    finally:
        reset(sock)


async def stage_websocket_open(port: int, _server: DemoServer) -> None:
    """The upgrade is accepted (101), then half a frame, then a reset."""
    sock = await connect(port)
    try:
        await sock.send(websocket_upgrade())
        head = await read_until(sock, b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        await sock.send(b"\x81\xfe\x01\x00\x00\x00\x00\x00" + b"{" * 10)  # masked text frame of 256, cut
    finally:
        reset(sock)


STAGES: dict[str, Callable[[int, DemoServer], Awaitable[None]]] = {
    "after connect": stage_connect,
    "mid request line": sends(b"POST /mc"),
    "mid headers": sends(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-ty"),
    "after headers": sends(CALL_HEAD + b"\r\n\r\n"),
    "mid body": sends(CALL[: len(CALL) - len(CALL_BODY) // 2]),
    "mid chunked body": sends(CHUNKED),
    "after the request, handler running": stage_handler_running,
    "mid SSE response": sends(
        modern_call("count", {"steps": 1000, "delay": 0.05}, progress=True), then_read=b"data:"
    ),
    "idle keep-alive": stage_keep_alive,
    "mid WebSocket handshake": sends(websocket_upgrade()[:60]),
    "WebSocket handshake before the 101": sends(websocket_upgrade()),
    "mid WebSocket frame": stage_websocket_open,
}


HTTP_STAGES = {"after connect", "mid request line", "mid headers", "after headers", "mid body"}
HTTP_STAGES |= {"mid chunked body", "mid WebSocket handshake", "WebSocket handshake before the 101"}
"""Stages where no server has seen the request yet: the HTTP server's alone (not run hosted)."""


@pytest.mark.parametrize(
    "stage", [pytest.param(stage, marks=[pytest.mark.demo_only] * (stage in HTTP_STAGES)) for stage in STAGES]
)
async def test_a_reset_at_each_stage_leaves_the_server_serving(
    demo_server: DemoServer, baseline: Baseline, stage: str
) -> None:
    run = STAGES[stage]
    with trio.fail_after(60):
        if run is stage_handler_running:
            await run(demo_server.port, demo_server)
        else:
            async with trio.open_nursery() as nursery:
                for _ in range(PER_STAGE):
                    nursery.start_soon(run, demo_server.port, demo_server)
        assert demo_server.process.poll() is None, demo_server.log()
        await serves_normally(demo_server)
        await assert_back_to_baseline(demo_server, baseline, within=10)
    assert_no_traceback(demo_server)


# -- the log of a flood of misbehaving peers -------------------------------------------------------------

FLOOD = 500
MALFORMED = [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,  # TLS on the plain port
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx\xff: y\r\n\r\n",
    b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n folded\r\n\r\n",
]


async def misbehave(port: int, kind: str, index: int) -> None:
    sock = await connect(port)
    try:
        if kind == "malformed requests":
            await sock.send(MALFORMED[index % len(MALFORMED)])
        elif kind == "ambiguous framing":
            await sock.send(CALL_HEAD + b"\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n")
        elif kind == "non-ASCII WebSocket subprotocol":
            await sock.send(websocket_upgrade(["mcp, \u00e9", "m\u00e9cp"][index % 2].encode()))
        else:  # resets at a stage of a request
            await sock.send(CALL[: index % len(CALL)])
        if kind != "resets":
            with trio.move_on_after(2):
                await sock.recv(65536)  # the answer (a 400), or the close
    finally:
        reset(sock)


def full_log(server: DemoServer) -> str:
    server.stderr.flush()
    server.stderr.seek(0)
    return server.stderr.read().decode(errors="replace")


FLOOD_KINDS = [
    "malformed requests",
    "resets",
    "ambiguous framing",
    "non-ASCII WebSocket subprotocol",
]


@pytest.mark.demo_only
@pytest.mark.server_flags("--log-level", "INFO")  # peer misbehaviour is logged at INFO at most
@pytest.mark.parametrize("kind", FLOOD_KINDS)
async def test_a_flood_of_misbehaving_peers_is_a_few_log_lines(
    demo_server: DemoServer, baseline: Baseline, kind: str
) -> None:
    before = full_log(demo_server).splitlines()
    limiter = trio.CapacityLimiter(CONCURRENT)

    async def one(index: int) -> None:
        async with limiter:
            await misbehave(demo_server.port, kind, index)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for index in range(FLOOD):
                nursery.start_soon(one, index)
        await serves_normally(demo_server)
        await assert_back_to_baseline(demo_server, baseline, within=10)
    lines = full_log(demo_server).splitlines()[len(before) :]
    assert not any("Traceback" in line or line.startswith(("ERROR", "CRITICAL")) for line in lines), lines
    assert len(lines) <= PEER_LOG_BURST + 1, lines  # a burst, then at most the count of those left out
