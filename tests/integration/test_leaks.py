"""Every way a session ends leaves nothing behind: no socket, no task, no session, stream or connection.

The seed is kotlin-sdk #922: closing a session closed the GET stream's output but never the coroutine
behind it, so each session leaked one server socket (and behind a keep-alive proxy, one pooled upstream
connection, see test_proxy.py).  Here the real ``mcp-trio demo`` runs on hypercorn in a subprocess;
we count its sockets in ``/proc/<pid>/fd`` and its tasks through ``/stats`` before and after.

Each test first measures the idle server (``baseline``), then closes every client connection before
checking it is back there (an idle keep-alive connection is a server socket too).  The tests marked
``also_hosted`` run on a python-sdk server hosted by ``mcp-trio serve`` too (conftest.py): its
sessions run the SDK's kernel, and leave nothing behind either.
"""

from __future__ import annotations

import signal
import socket
import struct
import sys

import h11
import pytest
import trio
from mcp_http import (
    STEP,
    Baseline,
    DemoServer,
    MCPClient,
    SSEResponse,
    assert_back_to_baseline,
    count_sockets,
    coverage_paused,
    end_cleanly,
    fetch_stats,
    full_session,
    http_client,
    wait_for,
)
from tests.required import not_applicable

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason=not_applicable("inspects the server's sockets through /proc (Linux only)"),
)

SEQUENTIAL_SESSIONS = 200
SESSIONS = 20
RESETS = 50
SHORT = 0.5
"""The short idle / init timeout the expiry tests run the server with."""


@pytest.mark.deadline(60)
@pytest.mark.also_hosted
@pytest.mark.hosted_once  # (on hypercorn: conftest.py)
async def test_sequential_sessions_leave_no_socket_or_task(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    """kotlin-sdk #922: 200 sessions one after another, each with an open GET stream closed by DELETE."""
    peak = 0
    with trio.fail_after(45), coverage_paused():  # this process's side (the client): nothing to measure
        async with http_client() as http:
            for n in range(SEQUENTIAL_SESSIONS):
                await full_session(http, demo_server.url, n)
                # While the client keeps its pool (at most the GET's and the POSTs' connections, both
                # reused by the next session), the server's socket count stays flat.
                peak = max(peak, count_sockets(demo_server.pid) - baseline.sockets)
            assert peak <= 3, f"server sockets grew by {peak} over the baseline during the run"
            stats = await fetch_stats(demo_server)
            assert stats["sessions"] == 0 and stats["connections"] == 0, stats
            assert stats["sessions_created"] == SEQUENTIAL_SESSIONS, stats
        sockets, stats = await assert_back_to_baseline(demo_server, baseline)
    print(
        f"\n{SEQUENTIAL_SESSIONS} sessions: sockets {baseline.sockets} -> {sockets} (peak +{peak} with the"
        f" client's pool open), process_tasks {baseline.process_tasks} -> {stats['process_tasks']},"
        f" session_tasks {baseline.session_tasks} -> {stats['session_tasks']}"
    )


@pytest.mark.also_hosted
@pytest.mark.server_flags("--idle-timeout", SHORT)
async def test_idle_sessions_expire(demo_server: DemoServer, baseline: Baseline) -> None:
    """python-sdk #1283: a session with no open request or stream is closed after the idle timeout."""
    with trio.fail_after(15):
        async with http_client() as http:
            clients = []
            for n in range(SESSIONS):
                client = MCPClient(http, demo_server.url)
                with trio.fail_after(STEP):
                    await client.initialize()
                    await client.initialized()
                    await client.call_tool("add", {"a": n, "b": 1})
                clients.append(client)
            await wait_for(demo_server, lambda s: s["sessions"] == 0, within=SHORT + 3, what="idle expiry")
            for client in clients:
                with trio.fail_after(STEP):
                    assert await client.status_of("DELETE") == 404
        await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.server_flags("--idle-timeout", SHORT)
async def test_open_stream_holds_off_idle_expiry(demo_server: DemoServer, baseline: Baseline) -> None:
    """An open GET stream is activity: the session outlives several idle timeouts while it is open,
    and expires once the client drops it."""
    with trio.fail_after(15):
        async with http_client() as http:
            client = MCPClient(http, demo_server.url)
            with trio.fail_after(STEP):
                await client.initialize()
                await client.initialized()
                get = await client.open_get()
            try:
                await trio.sleep(3 * SHORT)
                stats = await fetch_stats(demo_server)
                assert stats["sessions"] == 1 and stats["connections"] == 1, stats
                with trio.fail_after(STEP):
                    assert await client.echo("still here") == "still here"
            finally:
                await get.aclose()  # the client disconnects; no DELETE
            await wait_for(demo_server, lambda s: s["sessions"] == 0, within=SHORT + 3, what="idle expiry")
        await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.server_flags("--init-timeout", SHORT)
async def test_sessions_never_initialized_time_out(demo_server: DemoServer, baseline: Baseline) -> None:
    """A session whose client never sends notifications/initialized ends after the init timeout; a
    GET stream it opened meanwhile ends cleanly with it.  An initialized session is not affected."""
    with trio.fail_after(15):
        async with http_client() as http:
            initialized = MCPClient(http, demo_server.url)
            with trio.fail_after(STEP):
                await initialized.initialize()
                await initialized.initialized()
            clients, streams = [], []
            try:
                for n in range(SESSIONS):
                    client = MCPClient(http, demo_server.url)
                    with trio.fail_after(STEP):
                        await client.initialize()
                        if n % 2:
                            streams.append(await client.open_get())
                    clients.append(client)
                for stream in streams:
                    await end_cleanly(stream, within=SHORT + STEP)
            finally:
                for stream in streams:
                    await stream.aclose()
            await wait_for(demo_server, lambda s: s["sessions"] == 1, within=SHORT + 3, what="init timeout")
            for client in clients:
                with trio.fail_after(STEP):
                    assert await client.status_of("GET") == 404
            with trio.fail_after(STEP):
                assert await initialized.echo("ok") == "ok"
                await initialized.delete()
        await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.also_hosted
async def test_shutdown_ends_every_open_stream_cleanly(demo_server: DemoServer, served: str) -> None:
    """python-sdk #2150: on SIGINT every open GET and POST stream ends with a clean end of its HTTP
    response (no cut connection), each call still in flight once the grace has run out answered
    -32000 on its own stream first, and the process exits 0 within the shutdown grace + margin.

    A hosted python-sdk server's process gets 0.8 s more to exit: the interpreter's own teardown of the
    modules ``mcp.server.mcpserver`` loads takes that long (after ``mcp-trio: stopped``; measured with
    ``python -c 'import mcp.server.mcpserver'`` alone)."""
    grace = demo_server.shutdown_grace
    teardown = 0.8 if served == "hosted" else 0.0
    ended: list[float] = []
    with trio.fail_after(20):
        async with http_client() as http:
            streams = []
            try:
                for _ in range(SESSIONS):
                    client = MCPClient(http, demo_server.url)
                    with trio.fail_after(STEP):
                        await client.initialize()
                        await client.initialized()
                        streams.append(await client.open_get())
                        post = await client.start_tool_call("sleep", {"seconds": 60})
                        streams.append(post)
                        priming = await post.next_event()
                        assert priming is not None and priming.data == "", priming
                stats = await fetch_stats(demo_server)
                assert stats["sessions"] == SESSIONS, stats
                assert stats["connections"] == 2 * SESSIONS and stats["inflight"] == SESSIONS, stats

                start = trio.current_time()

                async def read_to_end(stream: SSEResponse, last_words: list[str]) -> None:
                    assert await end_cleanly(stream, within=grace + 2) == last_words
                    ended.append(trio.current_time() - start)

                shutting_down = (
                    '{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"Server shutting down"}}'
                )
                async with trio.open_nursery() as nursery:
                    for n, stream in enumerate(streams):  # GET, POST, GET, POST...
                        nursery.start_soon(read_to_end, stream, [shutting_down] if n % 2 else [])
                    exit_time = await demo_server.stop(signal.SIGINT)
            finally:
                for stream in streams:
                    await stream.aclose()
    assert len(ended) == 2 * SESSIONS
    assert max(ended) < grace + 1, f"streams ended {max(ended):.2f} s after SIGINT"
    assert exit_time < grace + 1.5 + teardown, f"the server took {exit_time:.2f} s to exit"
    print(f"\nshutdown: {len(ended)} streams ended within {max(ended):.3f} s, exit after {exit_time:.3f} s")


async def test_client_disconnect_of_get_stream_is_noticed(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    """go-sdk #1093 / hypercorn drops send() after a disconnect: the server must notice a client that
    closes its GET stream (the writer ends, the connection is no longer counted), and the session
    stays usable: a new GET works, and DELETE ends it."""
    with trio.fail_after(20):
        async with http_client() as http:
            for n in range(SESSIONS):
                client = MCPClient(http, demo_server.url)
                with trio.fail_after(STEP):
                    await client.initialize()
                    await client.initialized()
                    get = await client.open_get()
                await wait_for(demo_server, lambda s: s["connections"] == 1, within=STEP)
                await get.aclose()  # the body has not ended: httpx drops the connection
                stats = await wait_for(
                    demo_server, lambda s: s["connections"] == 0, within=STEP, what="disconnect noticed"
                )
                assert stats["sessions"] == 1, stats
                with trio.fail_after(STEP):
                    again = await client.open_get()
                try:
                    with trio.fail_after(STEP):
                        assert await client.echo(str(n)) == str(n)
                        await client.delete()
                    await end_cleanly(again, within=STEP)
                finally:
                    await again.aclose()
        await assert_back_to_baseline(demo_server, baseline)


async def test_second_get_replaces_the_first(demo_server: DemoServer, baseline: Baseline) -> None:
    """kotlin-sdk #715 (stale GET mapping): the documented policy is that a new GET stream replaces the
    old one, whose response ends cleanly; only one connection is counted."""
    with trio.fail_after(20):
        async with http_client() as http:
            for n in range(SESSIONS):
                client = MCPClient(http, demo_server.url)
                with trio.fail_after(STEP):
                    await client.initialize()
                    await client.initialized()
                    first = await client.open_get()
                try:
                    with trio.fail_after(STEP):
                        second = await client.open_get()
                    try:
                        assert await end_cleanly(first, within=STEP) == []
                        stats = await fetch_stats(demo_server)
                        assert stats["sessions"] == 1 and stats["connections"] == 1, stats
                        with trio.fail_after(STEP):
                            assert await client.echo(str(n)) == str(n)
                            await client.delete()
                        assert await end_cleanly(second, within=STEP) == []
                    finally:
                        await second.aclose()
                finally:
                    await first.aclose()
        await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.also_hosted
@pytest.mark.server_flags("--idle-timeout", SHORT)
async def test_sessions_abandoned_without_delete_expire(demo_server: DemoServer, baseline: Baseline) -> None:
    """python-sdk #3300's cousin: a client that just goes away (closes its connections, open GET
    included, and never sends DELETE) leaves a session that idle-expires, and nothing else."""
    with trio.fail_after(20):
        for n in range(SESSIONS):
            async with http_client() as http:
                client = MCPClient(http, demo_server.url)
                with trio.fail_after(STEP):
                    await client.initialize()
                    await client.initialized()
                    get = await client.open_get()
                    try:
                        assert await client.echo(str(n)) == str(n)
                    finally:
                        await get.aclose()
        await wait_for(demo_server, lambda s: s["sessions"] == 0, within=SHORT + 3, what="idle expiry")
        await assert_back_to_baseline(demo_server, baseline)


async def request_then_reset(port: int, target: str, headers: list[tuple[str, str]]) -> int:
    """One HTTP/1.1 request on a new connection; read the response head, then close the socket with
    SO_LINGER 0, so the kernel resets the connection (RST) at once.  That is what a client that closes
    a response it has not read (``async with httpx.AsyncClient().stream(...) as r: r.status_code``)
    ends up doing: closing a socket with unread bytes in its buffer resets the connection."""
    client = h11.Connection(h11.CLIENT)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        request = h11.Request(method="GET", target=target, headers=[("host", f"127.0.0.1:{port}"), *headers])
        await stream.send_all(client.send(request) + client.send(h11.EndOfMessage()))
        while True:
            event = client.next_event()
            if event is h11.NEED_DATA:
                client.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                return event.status_code
    finally:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()


async def test_client_reset_during_a_response_is_released(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    """A client that resets its connection (RST) while the server is finishing a short response must
    not leave the connection behind.

    Fails under hypercorn 0.18 even with ``hypercorn_close_wait`` (seen: 20-35 of 50 such connections left
    for 5 s).  The reset ends hypercorn's read loop with BrokenResourceError, so h11 is never fed the
    EOF and still thinks the client is DONE with its request; when the app's task then closes the
    stream, ``H11Protocol._maybe_recycle`` sees DONE/DONE, starts a new cycle and sends
    ``Updated(idle=True)``, which re-arms the keep-alive timer on the dead socket after the patched
    ``_read_data`` already stopped it.  The socket (state CLOSE, so absent from /proc/net/tcp) and the
    connection's tasks stay until ``keep_alive_timeout`` (5 s).  The same reset once the connection
    is idle is released at once (the close-wait fix covers that case).
    """
    headers = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", "no-such-session"),
        ("mcp-protocol-version", "2025-11-25"),
    ]
    with trio.fail_after(15):
        for _ in range(RESETS):
            assert await request_then_reset(demo_server.port, "/mcp", headers) == 404
        await assert_back_to_baseline(demo_server, baseline, within=1.0)
