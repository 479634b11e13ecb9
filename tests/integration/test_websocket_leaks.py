"""Leak test of the WebSocket transport: 1 000 connections to ``mcp-trio demo`` opened and closed, cleanly
and by dropping the TCP connection in the middle of a request; afterwards the server holds as many sockets
and runs as many tasks as when idle, and every handler that was in flight is gone.

The demo runs as a subprocess (the ``demo_server`` fixture: on hypercorn, and on the embedded h11 server in
the test command's second pass); its sockets are counted in ``/proc/<pid>/fd`` and its tasks read from
``/stats`` (``process_tasks``: every task of its Trio run, the WebSocket connections' handlers included,
and ``websocket_connections``).  The 1 000 connections go in batches of ``BATCH`` at once, each batch of
one kind:

* ``clean``: our client (``open_websocket_client``, legacy and modern mode in turn): initialize (legacy),
  a ``tools/call echo``, the close handshake on leaving the block;
* ``close``: a raw wsproto client starts ``tools/call sleep 600`` (a 2025 session, or a 2026 request, in
  turn), then sends a close frame; the server must answer it and close the TCP connection;
* ``fin`` / ``rst``: the same request, then the client drops the TCP connection without a close frame
  (a plain close: FIN; ``SO_LINGER`` 0: a reset).

Each batch is checked at three points: all ``BATCH`` connections open (``websocket_connections``); for the
raw kinds, every ``sleep`` in flight (the connection answered a ``ping`` sent after it, so the handler was
started: the process runs at least one more task per connection than with the same connections idle);
and after they end: no WebSocket connection left within ``CLOSED`` seconds (the app forgets a connection
only once its nursery, every handler included, has ended), and back to the idle baseline (sockets,
``process_tasks``) within ``SETTLE`` seconds: far less than the 600 s a handler that was not cancelled
would still sleep.

``test_closed_connection_tasks_end_at_once`` checks that a closed connection's tasks end with it under the
default ping interval (15 s): hypercorn as shipped keeps its pinger, and so the connection's tasks, until
the pinger's next wake-up; mcp_trio's hypercorn ends it with the app.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from mcp_http import (
    HTTP_SERVER,
    STEP,
    Baseline,
    DemoServer,
    assert_back_to_baseline,
    count_sockets,
    coverage_paused,
    fetch_stats,
    wait_for,
)
from tests.required import not_applicable
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from mcp_trio import open_websocket_client

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason=not_applicable("inspects the server's sockets through /proc (Linux only)"),
)

CONNECTIONS = 1000
BATCH = 50
"""Connections open at once (one batch)."""
KINDS = ("clean", "close", "fin", "rst")
SLEEP = 600.0
"""What the in-flight handler would sleep: far beyond any bound here, so only a cancellation ends it."""
CLOSED = 2.0
"""Seconds a batch's connections get, once ended, to be gone from the app (``websocket_connections``)."""
SETTLE = 5.0
"""Seconds a batch's connections get, once ended, for the server to be back at its baseline."""
PING_INTERVAL = 0.2
"""The demo's ``--keepalive-interval`` (its WebSocket ping interval) in the volume test."""
FEW = 5
"""Connections of the test with the default ping interval."""
LINGER = 2.0
"""Seconds the tasks of closed connections may take to end, with the default 15 s ping interval."""
LEGACY_VERSION = "2025-11-25"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


class Gate:
    """Where the connections of a batch wait for one another: the test looks at the server once all
    ``count`` arrived, then lets them go on."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.arrived = 0
        self.all_here = trio.Event()
        self.go = trio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.count:
            self.all_here.set()
        await self.go.wait()

    async def wait_all(self) -> None:
        """Wait (bounded) for every connection to arrive (``go`` lets them on)."""
        with trio.fail_after(STEP * 3):
            await self.all_here.wait()


# -- a raw WebSocket client (wsproto on a trio socket) -----------------------------------------


@dataclass(eq=False)
class RawClient:
    """One WebSocket connection without a client library, so that it can end in any way: a close frame,
    or a TCP connection dropped (FIN or RST) with no close frame."""

    stream: trio.SocketStream
    ws: WSConnection = field(default_factory=lambda: WSConnection(ConnectionType.CLIENT))
    _messages: list[dict[str, Any]] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)
    _next_id: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        try:
            request = Request(host=f"127.0.0.1:{port}", target="/mcp", subprotocols=["mcp"])
            await client.stream.send_all(client.ws.send(request))
            while True:
                for event in client.ws.events():
                    if isinstance(event, AcceptConnection):
                        assert event.subprotocol == "mcp", event
                        return client
                    assert not isinstance(event, RejectConnection), f"upgrade refused: {event}"
                await client._receive_data()
        except BaseException:
            await client.stream.aclose()
            raise

    async def _receive_data(self) -> None:
        data = await self.stream.receive_some(65536)
        assert data, "the server closed the TCP connection"
        self.ws.receive_data(data)

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(json.dumps(message))))

    async def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Send a request; return its id (without waiting for the answer)."""
        request_id = next(self._next_id)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return request_id

    async def receive(self) -> dict[str, Any]:
        """The next message from the server (pings are answered on the way)."""
        while not self._messages:
            for event in self.ws.events():
                if isinstance(event, TextMessage):
                    self._text.append(event.data)
                    if event.message_finished:
                        self._messages.append(json.loads("".join(self._text)))
                        self._text.clear()
                elif isinstance(event, Ping):
                    await self.stream.send_all(self.ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    raise AssertionError(f"the server closed the connection: {event}")
            if not self._messages:
                await self._receive_data()
        return self._messages.pop(0)

    async def response(self, request_id: int) -> dict[str, Any]:
        while True:
            message = await self.receive()
            if message.get("id") == request_id and "method" not in message:
                return message

    async def initialize(self) -> None:
        params = {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "ws-leaks", "version": "1"},
        }
        answer = await self.response(await self.request("initialize", params))
        assert answer["result"]["protocolVersion"] == LEGACY_VERSION, answer
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def start_sleep(self, modern: bool) -> None:
        """``tools/call sleep`` (no answer expected), then a ``ping`` whose answer shows the server has
        read the call and started its handler (a connection reads its messages one after another)."""
        params: dict[str, Any] = {"name": "sleep", "arguments": {"seconds": SLEEP}}
        if modern:
            params["_meta"] = MODERN_META
        sleeping = await self.request("tools/call", params)
        ping = await self.request("ping")
        while (message := await self.receive()).get("id") != ping or "method" in message:
            assert message.get("id") != sleeping, f"the sleep was answered: {message}"
        assert message.get("result") == {}, message

    async def close_handshake(self) -> None:
        """Send a close frame; the server must answer it and then close the TCP connection, each within
        ``STEP`` seconds."""
        await self.stream.send_all(self.ws.send(CloseConnection(code=1000)))
        answered = closed = False
        try:
            with trio.move_on_after(STEP):
                while not closed:
                    for event in self.ws.events():
                        if isinstance(event, CloseConnection):
                            answered = True
                    data = await self.stream.receive_some(65536)
                    closed = not data
                    self.ws.receive_data(data or None)
        finally:
            await self.stream.aclose()
        assert answered, f"the server did not answer the close frame (TCP connection closed: {closed})"
        assert closed, f"the server answered the close frame but kept the TCP connection {STEP} s"

    async def drop(self, reset: bool) -> None:
        """Close the socket without a close frame: a FIN, or (``reset``) a RST at once."""
        if reset:
            self.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await self.stream.aclose()


# -- one batch ------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the run saw, for the summary line."""

    connections: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    in_flight: int = 0
    """Handlers seen in flight (a task each) just before their connections ended."""
    extra_tasks: list[int] = field(default_factory=list)
    """Per batch: how many more tasks the server ran with the sleeps in flight than without."""
    closed: list[float] = field(default_factory=list)
    """Per batch: seconds from its connections' end to ``websocket_connections`` 0."""
    settle: list[float] = field(default_factory=list)
    """Per batch: seconds from its connections' end to the baseline."""


async def clean_connection(server: DemoServer, n: int, opened: Gate | None = None) -> None:
    """Our client: open, (initialize,) a call, wait for the batch (if any), the close handshake."""
    mode = "legacy" if n % 2 else "modern"
    # Bounded: the upgrade by connect_timeout, the close handshake by close_timeout (2 s).
    async with open_websocket_client(server.url, mode=mode, connect_timeout=STEP) as session:
        with trio.fail_after(STEP):
            result = await session.call_tool("echo", {"text": f"hello {n}"})
        assert result.content[0].text == f"hello {n}", result  # type: ignore[union-attr]
        if opened is not None:
            await opened.arrive()


async def raw_connection(server: DemoServer, n: int, kind: str, opened: Gate, busy: Gate) -> None:
    """A raw client: open (a 2025 session, or 2026 requests), wait for the batch, start a long ``sleep``,
    wait for the batch, then end as ``kind`` says with the sleep in flight."""
    modern = n % 2 == 0
    with trio.fail_after(STEP):
        client = await RawClient.connect(server.port)
    try:
        with trio.fail_after(STEP):
            if not modern:
                await client.initialize()
        await opened.arrive()
        with trio.fail_after(STEP):
            await client.start_sleep(modern)
        await busy.arrive()
    except BaseException:
        await client.drop(reset=True)
        raise
    if kind == "close":
        await client.close_handshake()  # bounded by itself
    else:
        await client.drop(reset=kind == "rst")


async def run_batch(server: DemoServer, baseline: Baseline, kind: str, first: int, tally: Tally) -> None:
    opened, busy = Gate(BATCH), Gate(BATCH)
    async with trio.open_nursery() as nursery:
        for n in range(first, first + BATCH):
            if kind == "clean":
                nursery.start_soon(clean_connection, server, n, opened)
            else:
                nursery.start_soon(raw_connection, server, n, kind, opened, busy)
        await opened.wait_all()
        idle = await fetch_stats(server)
        assert idle["websocket_connections"] == BATCH, idle
        assert count_sockets(server.pid) >= baseline.sockets + BATCH
        opened.go.set()
        if kind != "clean":
            await busy.wait_all()
            working = await fetch_stats(server)
            assert working["websocket_connections"] == BATCH, working
            assert working["websocket_requests"] == BATCH, working  # each connection's sleep
            # Each sleeping handler is a task (at least) of its connection's nursery.
            handlers = working["process_tasks"] - idle["process_tasks"]
            assert handlers >= BATCH, f"{handlers} more tasks with {BATCH} sleeps in flight: {idle} {working}"
            tally.in_flight += BATCH
            tally.extra_tasks.append(handlers)
            busy.go.set()
    ended = trio.current_time()
    tally.connections[kind] += BATCH
    # The app forgets a connection once everything of it has ended (its nursery: every handler), so
    # this alone shows that no sleep is left running.
    await wait_for(server, lambda s: s["websocket_connections"] == 0, within=CLOSED, what=f"{kind}: closed")
    tally.closed.append(trio.current_time() - ended)
    # Back to the idle server: no socket or task left (a sleep still running would be a task).
    sockets, stats = await assert_back_to_baseline(server, baseline, within=SETTLE)
    assert stats["websocket_connections"] == 0 and stats["websocket_requests"] == 0, stats
    assert sockets == baseline.sockets and stats["process_tasks"] == baseline.process_tasks, stats
    tally.settle.append(trio.current_time() - ended)


@pytest.mark.deadline(90)
@pytest.mark.also_hosted  # and a python-sdk server hosted: its handlers cancelled the same way
@pytest.mark.hosted_once  # (on hypercorn: conftest.py)
@pytest.mark.demo_without_coverage  # a volume test: 1 000 connections, nothing new to measure
@pytest.mark.server_flags("--keepalive-interval", PING_INTERVAL)  # pings under way during the volume
async def test_websocket_connections_leave_no_socket_or_task(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    """1 000 WebSocket connections, a quarter each ended cleanly by our client, by a close frame with a
    ``sleep 600`` in flight, and by a dropped TCP connection (FIN, RST) with one in flight: after every
    batch the server is back at its idle baseline within seconds (every in-flight handler cancelled).
    The demo pings every ``PING_INTERVAL`` seconds, so pings cross the requests and the closes."""
    tally = Tally()
    start = trio.current_time()
    with trio.fail_after(75), coverage_paused():  # this process's side (the clients): nothing to measure
        for batch in range(CONNECTIONS // BATCH):
            await run_batch(demo_server, baseline, KINDS[batch % len(KINDS)], batch * BATCH, tally)
        stats = await fetch_stats(demo_server)
    took = trio.current_time() - start
    assert sum(tally.connections.values()) == CONNECTIONS, tally
    assert tally.in_flight == CONNECTIONS * 3 // 4, tally
    assert stats["websocket_connections"] == 0 and stats["sessions"] == 0, stats
    print(
        f"\n{HTTP_SERVER}: {CONNECTIONS} WebSocket connections {tally.connections} in {took:.1f} s;"
        f" {tally.in_flight} sleeps in flight at their end ({min(tally.extra_tasks)} to"
        f" {max(tally.extra_tasks)} more tasks per batch of {BATCH}); after each batch no connection"
        f" left within {max(tally.closed):.2f} s (mean {sum(tally.closed) / len(tally.closed):.2f} s),"
        f" back to baseline (sockets {baseline.sockets}, process_tasks {baseline.process_tasks}) within"
        f" {max(tally.settle):.2f} s (mean {sum(tally.settle) / len(tally.settle):.2f} s)"
    )


async def test_closed_connection_tasks_end_at_once(demo_server: DemoServer, baseline: Baseline) -> None:
    """With the default ping interval (15 s), the tasks of closed WebSocket connections end with them:
    the server is back at its baseline within ``LINGER`` seconds."""
    with trio.fail_after(STEP * 3), coverage_paused():
        async with trio.open_nursery() as nursery:
            for n in range(FEW):
                nursery.start_soon(clean_connection, demo_server, n)
    with trio.fail_after(CLOSED + LINGER + STEP):
        await wait_for(demo_server, lambda s: s["websocket_connections"] == 0, within=CLOSED)
        await assert_back_to_baseline(demo_server, baseline, within=LINGER)
