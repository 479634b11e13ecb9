"""A flood of slow connections from one address does not shut other clients out, on both servers.

The server runs as ``mcp-trio demo`` with its descriptor limit at 1024 (what many hosts give a process).
1500 connections from 127.0.0.2 each trickle a request head, one byte every half second (a head that
would take minutes to complete), and come back a moment after the server closes them; meanwhile a
client on 127.0.0.1 makes a few MCP sessions (initialize, then a tool call), a few seconds apart, each
of which must succeed within :data:`CALL_BOUND`.

- The embedded h11 server counts connections per address: 127.0.0.2 may hold a quarter of what the
  descriptors allow (224 of 1024), the rest of its connections are refused at once (503), and a head
  must be whole within ``read_timeout`` of its first byte.
- hypercorn closes a connection whose head is not whole ``keep_alive_timeout`` (5 s) after it opened (its
  idle timer runs until a request is whole), and waits out ``EMFILE`` at accept (``trio.serve_listeners``).

After the flood, the server's sockets go back to what they were before it.

Each test names its server (``--http``): the module uses ``mcp_http.serve_demo`` through the module, so
that the test command's second pass (``MCP_TRIO_TEST_HTTP=h11``, which keeps the modules that import
``serve_demo`` itself) does not run it twice.
"""

from __future__ import annotations

import resource
import socket
from dataclasses import dataclass

import mcp_http
import pytest
import trio
from mcp_http import MCPClient, count_sockets, coverage_paused, http_client, wait_until

FLOOD = 1500
FLOOD_SOURCE = "127.0.0.2"
SERVER_DESCRIPTORS = 1024
TRICKLE = 0.5
"""Seconds between two bytes of a flood connection's head."""
COME_BACK = 2.0
"""Seconds a flood connection waits, once closed, before it connects again."""
HEAD = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: " + b"a" * 400 + b"\r\n\r\n"
"""Never whole within the test: one byte every TRICKLE seconds."""
CALLS = 4
BETWEEN_CALLS = 3.0
"""Seconds between two legitimate sessions: together they span the flood's churn (hypercorn closes
the flood's connections after 5 s, and they come back)."""
CALL_BOUND = 15.0
"""Seconds one legitimate session (initialize, initialized, a tool call) may take during the flood."""
FLOOD_SETTLES = 10.0
"""Seconds the legitimate sessions wait at most for every flood connection's first connect to end."""
OWN_DESCRIPTORS = FLOOD + 1000

_IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
"""Linux: a socket bound to 127.0.0.2 gets its port at connect (unique by four-tuple), so that the
flood's reconnections cannot run out of ports bound to the address."""


@dataclass
class FloodStats:
    attempted: int = 0
    """Flood connections whose first connect has ended (connected or failed)."""
    connected: int = 0
    open: int = 0
    closed_by_server: int = 0
    most_open: int = 0


@pytest.fixture
def descriptors_for_the_flood() -> object:
    """This process needs a descriptor per flood connection: its soft limit raised up to the hard one;
    a hard limit too low for the flood fails (the test does not skip itself)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < OWN_DESCRIPTORS:
        pytest.fail(
            f"the flood test needs {OWN_DESCRIPTORS} open files in the test process and the hard limit "
            f"(ulimit -Hn) is {hard}: raise it (e.g. `ulimit -n {OWN_DESCRIPTORS}` as root, or in "
            "/etc/security/limits.conf) to run it"
        )
    if soft != resource.RLIM_INFINITY and soft < OWN_DESCRIPTORS:
        resource.setrlimit(resource.RLIMIT_NOFILE, (OWN_DESCRIPTORS, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def flood_connection(port: int, stats: FloodStats) -> None:
    """One slow client: connect from FLOOD_SOURCE, trickle HEAD; once closed, come back.  Runs until
    cancelled; its socket is closed whatever ends it."""
    first = True
    while True:
        sock = trio.socket.socket()
        try:
            sock.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
            await sock.bind((FLOOD_SOURCE, 0))
            try:
                await sock.connect(("127.0.0.1", port))
            except OSError:
                continue  # (the finally closes it, then it waits to come back)
            finally:
                if first:
                    stats.attempted += 1
                    first = False
            stats.connected += 1
            stats.open += 1
            stats.most_open = max(stats.most_open, stats.open)
            try:
                for byte in HEAD:
                    await sock.send(bytes((byte,)))
                    await trio.sleep(TRICKLE)
            except OSError:  # closed by the server: a write fails (EPIPE, ECONNRESET)
                stats.closed_by_server += 1
            finally:
                stats.open -= 1
        finally:
            sock.close()
        await trio.sleep(COME_BACK)


async def legitimate_session(url: str, n: int) -> None:
    async with http_client() as http:
        client = MCPClient(http, url)
        await client.initialize()
        await client.initialized()
        assert await client.echo(f"call {n}") == f"call {n}"
        await client.delete()


@pytest.mark.deadline(90)
@pytest.mark.usefixtures("descriptors_for_the_flood")
@pytest.mark.parametrize("http", ["h11", "hypercorn"])
async def test_a_slow_flood_from_one_address_does_not_shut_others_out(http: str) -> None:
    flags = ("--http", http)
    async with mcp_http.serve_demo(*flags, measure_coverage=False, descriptors=SERVER_DESCRIPTORS) as server:
        limit = resource.prlimit(server.pid, resource.RLIMIT_NOFILE)
        assert limit == (SERVER_DESCRIPTORS, SERVER_DESCRIPTORS), limit
        baseline = count_sockets(server.pid)
        stats = FloodStats()
        took: list[float] = []
        with coverage_paused():
            async with trio.open_nursery() as nursery:
                for _ in range(FLOOD):
                    nursery.start_soon(flood_connection, server.port, stats)
                with trio.move_on_after(FLOOD_SETTLES):  # (connects beyond hypercorn's backlog wait long)
                    while stats.attempted < FLOOD:  # noqa: ASYNC110 - counts kept by the flood's tasks
                        await trio.sleep(0.1)
                await trio.sleep(2 * TRICKLE)
                during = count_sockets(server.pid)
                for n in range(CALLS):
                    start = trio.current_time()
                    try:
                        with trio.fail_after(CALL_BOUND):
                            await legitimate_session(server.url, n)
                    except trio.TooSlowError:
                        sockets = count_sockets(server.pid)
                        raise AssertionError(
                            f"{http}: legitimate session {n} took over {CALL_BOUND} s (those before: "
                            f"{took}); {stats}; the server has {sockets} sockets; log:\n{server.log()}"
                        ) from None
                    took.append(trio.current_time() - start)
                    await trio.sleep(BETWEEN_CALLS)
                nursery.cancel_scope.cancel()
        # The flood was real: the server held many of its connections and closed others.
        assert stats.most_open > 200, stats
        assert stats.closed_by_server > 0, stats
        assert during > 200, (during, stats)
        if http == "h11":
            # 224 from 127.0.0.2 at most (a quarter of 1024 less an eighth), a few of its own besides
            assert during <= 224 + baseline + 16, (during, baseline, stats)
        # Once the flood is over, its connections are all closed on the server's side too.
        with trio.fail_after(20.0):
            await wait_until(lambda: count_sockets(server.pid) <= baseline, within=15.0)
        print(f"{http}: legitimate sessions took {[round(t, 2) for t in took]} s; {stats}; {during} sockets")


async def test_when_descriptors_run_out_the_oldest_idle_connections_make_room() -> None:
    """No caps (``--max-connections 0``), 128 descriptors: 150 idle connections from 127.0.0.2 make
    ``accept`` fail (EMFILE); the server closes the oldest idle ones, in the order they were opened, and
    a new client still gets its session."""
    flags = ("--http", "h11", "--max-connections", "0", "--max-connections-per-address", "0")
    async with mcp_http.serve_demo(*flags, measure_coverage=False, descriptors=128) as server:
        idle: list[socket.socket] = []
        try:
            for _ in range(150):
                idle.append(socket.create_connection(("127.0.0.1", server.port), 5, (FLOOD_SOURCE, 0)))
            await trio.sleep(0.5)  # the server accepts what it can
            with trio.fail_after(CALL_BOUND):
                await legitimate_session(server.url, 0)
            closed = [n for n, sock in enumerate(idle) if _closed(sock)]
        finally:
            for sock in idle:
                sock.close()
        assert closed, "no idle connection was closed: the server never ran out of descriptors"
        assert closed == list(range(len(closed))), f"not the oldest first: {closed}"
        assert len(closed) < 100, closed
        assert "closing the oldest idle connection" in server.log()
        print(f"closed {len(closed)} of {len(idle)} idle connections, the oldest first")


def _closed(sock: socket.socket) -> bool:
    """The server has closed ``sock`` (end of file or reset); it has sent nothing on it."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
