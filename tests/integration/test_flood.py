"""A flood of slow connections from one address does not shut other clients out, on both servers.

The server runs as ``mcp-trio demo`` with its descriptor limit at 1024 (what many hosts give a process).
1500 connections from 127.0.0.2 each trickle a request head, one byte every half second (a head that
would take minutes to complete), and come back a moment after the server closes them; meanwhile a
client on 127.0.0.1 makes a few MCP sessions (initialize, then a tool call), each of which must succeed
within :data:`CALL_BOUND`.

- The embedded h11 server counts connections per address: 127.0.0.2 may hold a quarter of what the
  descriptors allow (224 of 1024), the rest of its connections are refused at once (503), and a head
  must be whole within ``read_timeout`` of its first byte.
- hypercorn closes a connection whose head is not whole ``keep_alive_timeout`` (5 s) after it opened (its
  idle timer runs until a request is whole), and waits out ``EMFILE`` at accept (``trio.serve_listeners``).

After the flood, the server's sockets go back to what they were before it.
"""

from __future__ import annotations

import errno
import resource
import socket
from dataclasses import dataclass

import pytest
import trio
from mcp_http import MCPClient, count_sockets, coverage_paused, http_client, serve_demo, wait_until

FLOOD = 1500
FLOOD_SOURCE = "127.0.0.2"
SERVER_DESCRIPTORS = 1024
TRICKLE = 0.5
"""Seconds between two bytes of a flood connection's head."""
COME_BACK = 2.0
"""Seconds a flood connection waits, once closed, before it connects again."""
HEAD = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: " + b"a" * 400 + b"\r\n\r\n"
"""Never whole within the test: one byte every TRICKLE seconds."""
CALLS = 3
CALL_BOUND = 15.0
"""Seconds one legitimate session (initialize, initialized, a tool call) may take during the flood."""
FLOOD_SETTLES = 20.0
"""Seconds the flood's first connections may take to be attempted (connects wait for the backlog)."""
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
            except OSError as exc:  # closed by the server: a write fails (EPIPE, ECONNRESET)
                assert exc.errno in (errno.EPIPE, errno.ECONNRESET), exc
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


@pytest.mark.usefixtures("descriptors_for_the_flood")
@pytest.mark.parametrize("http", ["h11", "hypercorn"])
async def test_a_slow_flood_from_one_address_does_not_shut_others_out(http: str) -> None:
    async with serve_demo("--http", http, measure_coverage=False, descriptors=SERVER_DESCRIPTORS) as server:
        with open(f"/proc/{server.pid}/limits") as limits:
            assert any(
                line.startswith("Max open files") and line.split()[3] == str(SERVER_DESCRIPTORS)
                for line in limits
            ), "the server's descriptor limit is not 1024"
        baseline = count_sockets(server.pid)
        stats = FloodStats()
        took: list[float] = []
        with coverage_paused():
            async with trio.open_nursery() as nursery:
                for _ in range(FLOOD):
                    nursery.start_soon(flood_connection, server.port, stats)
                with trio.fail_after(FLOOD_SETTLES):
                    while stats.attempted < FLOOD:  # noqa: ASYNC110 - counts kept by the flood's tasks
                        await trio.sleep(0.1)
                await trio.sleep(2 * TRICKLE)
                during = count_sockets(server.pid)
                for n in range(CALLS):
                    start = trio.current_time()
                    with trio.fail_after(CALL_BOUND):
                        await legitimate_session(server.url, n)
                    took.append(trio.current_time() - start)
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
