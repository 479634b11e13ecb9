"""The embedded server's request-head deadline, connection caps and shedding, on real loopback sockets.

In-process (``serve(app, http="h11")`` on 127.0.0.1:0); clients connect from 127.0.0.1 and 127.0.0.2 to
be two addresses.  The counts alone: ``tests/server/test_h11_limits.py``; a flood against a server whose
descriptor limit is 1024, on both servers: ``test_flood.py``.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from test_h11_server import INIT, build_app, post, read_responses, read_until_closed, running

from mcp_trio.server import H11Config

GET = b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
ANSWER = b"HTTP/1.1 406 "
"""What the app answers GET (it does not accept text/event-stream), the connection kept alive."""


@asynccontextmanager
async def client(port: int, source: str = "127.0.0.1") -> AsyncIterator[trio.SocketStream]:
    """A raw connection from ``source``; closed on exit."""
    sock = trio.socket.socket()
    try:
        await sock.bind((source, 0))
        await sock.connect(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    async with trio.SocketStream(sock) as stream:
        yield stream


async def closed_without_answer(stream: trio.SocketStream, within: float = 3.0) -> bool:
    """The server closes ``stream`` (end of file or reset) within ``within`` seconds, having sent nothing."""
    with trio.fail_after(within):
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return True
    assert data == b"", data[:200]
    return True


async def still_open(stream: trio.SocketStream, wait: float = 0.3) -> bool:
    """Nothing arrives on ``stream`` (no answer, no end of file) for ``wait`` seconds."""
    with trio.move_on_after(wait):
        data = await stream.receive_some(65536)
        raise AssertionError(f"expected an open, silent connection; got {data[:200]!r}")
    return True


async def refused(stream: trio.SocketStream) -> bool:
    """The server answered 503 at once and closed."""
    data = b""
    with trio.fail_after(3):
        try:
            while chunk := await stream.receive_some(65536):
                data += chunk
        except trio.BrokenResourceError:  # the close reset it (it had sent bytes): what came is enough
            pass
    assert data.startswith(b"HTTP/1.1 503 "), data[:200]
    assert b"retry-after: 1" in data.lower() and b"connection: close" in data.lower(), data
    return True


async def served(stream: trio.SocketStream) -> bool:
    await stream.send_all(GET)
    data = await read_responses(stream, 1)
    assert data.startswith(ANSWER), data[:200]
    return True


# -- the request head's deadline ----------------------------------------------------------------


async def test_a_trickled_head_is_closed_within_read_timeout_of_its_first_byte() -> None:
    """One byte every 0.1 s (each well within read_timeout): the whole head still has read_timeout."""
    config = H11Config(keep_alive_timeout=5.0, read_timeout=0.5)
    async with running(build_app(), config) as (_, port, _stop, _), client(port) as stream:
        start = trio.current_time()

        async def trickle() -> None:
            for byte in b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: " + b"a" * 100:
                try:
                    await stream.send_all(bytes((byte,)))
                except trio.BrokenResourceError:
                    return  # closed under it
                await trio.sleep(0.1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle)
            assert await closed_without_answer(stream, within=3.0)
            nursery.cancel_scope.cancel()
        assert 0.4 < trio.current_time() - start < 2.0


async def test_idle_time_before_a_head_does_not_count_against_read_timeout() -> None:
    """Idle (before the first request, and between two) is the keep-alive timeout's: a head sent whole
    after longer than read_timeout of silence is served."""
    config = H11Config(keep_alive_timeout=3.0, read_timeout=0.2)
    async with running(build_app(), config) as (_, port, _stop, _), client(port) as stream:
        await trio.sleep(0.5)
        assert await served(stream)
        await trio.sleep(0.5)
        assert await served(stream)  # the same keep-alive connection


async def test_a_head_in_parts_within_read_timeout_is_served() -> None:
    config = H11Config(keep_alive_timeout=3.0, read_timeout=1.0)
    async with running(build_app(), config) as (_, port, _stop, _), client(port) as stream:
        for part in (GET[:10], GET[10:20], GET[20:]):
            await stream.send_all(part)
            await trio.sleep(0.1)
        data = await read_responses(stream, 1)
        assert data.startswith(ANSWER), data[:200]


# -- the caps ------------------------------------------------------------------------------------


async def test_one_address_beyond_its_cap_is_refused_and_others_are_served() -> None:
    config = H11Config(max_connections=100, max_connections_per_address=2)
    async with (
        running(build_app(), config) as (_, port, _stop, _),
        client(port, "127.0.0.2") as first,
        client(port, "127.0.0.2") as second,
    ):
        assert await served(first) and await served(second)
        async with client(port, "127.0.0.2") as third:
            assert await refused(third)
        async with client(port) as other:  # 127.0.0.1: its own count
            assert await served(other)
        await first.aclose()
        # its count is released once the server has closed its side: a new one gets in
        with trio.fail_after(3):
            while not (await status_line(port, "127.0.0.2")).startswith(ANSWER):  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert await served(second)


async def status_line(port: int, source: str) -> bytes:
    """The status line a health check on a new connection from ``source`` gets (b"" if reset at once)."""
    async with client(port, source) as stream:
        with trio.fail_after(3):
            return await status_line_of(stream)


async def test_at_the_total_cap_the_oldest_idle_or_incomplete_connection_makes_room() -> None:
    config = H11Config(max_connections=3, max_connections_per_address=0)
    async with (
        running(build_app(), config) as (_, port, _stop, _),
        client(port) as idle_a,
        client(port) as incomplete_b,
        client(port) as idle_c,
    ):
        await incomplete_b.send_all(b"POST /mcp HTTP/1.1\r\n")  # a head begun, not whole
        assert await still_open(idle_a) and await still_open(idle_c)
        async with client(port) as d:
            assert await served(d)  # room made: the oldest (a) closed
            assert await closed_without_answer(idle_a)
            assert await still_open(incomplete_b)
            async with client(port) as e:
                assert await served(e)  # then b, whose head is not whole
                assert await closed_without_answer(incomplete_b)
                assert await still_open(idle_c, 0.1)


async def test_a_connection_serving_a_request_is_never_shed() -> None:
    """Two connections in the middle of a request (heads whole, bodies not): nothing to shed, so a
    third is refused; both requests are then answered."""
    config = H11Config(max_connections=2, max_connections_per_address=0)
    body = json.dumps(INIT).encode()
    request = post(b"/mcp", body)
    cut = len(request) - len(body) + 5
    async with (
        running(build_app(json_response=True), config) as (_, port, _stop, _),
        client(port) as x,
        client(port) as y,
    ):
        await x.send_all(request[:cut])
        await y.send_all(request[:cut])
        await trio.sleep(0.2)  # both heads are whole at the server
        async with client(port) as z:
            assert await refused(z)
        for stream in (x, y):
            await stream.send_all(request[cut:])
            data = await read_responses(stream, 1)
            assert data.startswith(b"HTTP/1.1 200 "), data[:300]
            assert b'"protocolVersion"' in data


async def test_no_count_is_left_behind_whatever_ends_a_connection() -> None:
    """Connections from one address that end every way (a reset at once, in the head, in the body,
    after a response; a close while idle; a malformed request; a shed one) each give their count back:
    the address can then open its whole quota again."""
    config = H11Config(max_connections=4, max_connections_per_address=3)
    body = json.dumps(INIT).encode()
    request = post(b"/mcp", body)
    async with running(build_app(json_response=True), config) as (_, port, _stop, _):

        async def reset(stream: trio.SocketStream) -> None:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()

        for _ in range(5):
            async with client(port, "127.0.0.2") as stream:
                await reset(stream)
            async with client(port, "127.0.0.2") as stream:
                await stream.send_all(b"POST /mcp HTT")
                await reset(stream)
            async with client(port, "127.0.0.2") as stream:
                await stream.send_all(request[:-10])
                await reset(stream)
            async with client(port, "127.0.0.2") as stream:
                assert await served(stream)
                await reset(stream)
            async with client(port, "127.0.0.2") as stream:
                assert await served(stream)  # then closed while idle
            async with client(port, "127.0.0.2") as stream:
                await stream.send_all(b"NOT HTTP\r\n\r\n")
                assert (await read_until_closed(stream)).startswith(b"HTTP/1.1 400 ")
            await shed_one(port)
        # all of them closed: 127.0.0.2 may hold its three again, at once
        with trio.fail_after(5):
            while True:
                async with (
                    client(port, "127.0.0.2") as a,
                    client(port, "127.0.0.2") as b,
                    client(port, "127.0.0.2") as c,
                ):
                    lines = [await status_line_of(stream) for stream in (a, b, c)]
                if all(line.startswith(ANSWER) for line in lines):
                    break
                await trio.sleep(0.05)
        await shed_one(port)  # and the total cap is still 4 (no shed connection is still counted)


async def shed_one(port: int) -> None:
    """Four idle connections (the total cap), each from an address of its own (under the per-address cap),
    then a fifth: the oldest is closed to make room."""
    async with (
        client(port, "127.0.0.3") as a,
        client(port, "127.0.0.4") as b,
        client(port, "127.0.0.5") as c,
        client(port, "127.0.0.6") as d,
    ):
        for stream in (a, b, c, d):
            assert await served(stream)
        await trio.sleep(0.1)  # their tasks wait for the next request (idle) again
        async with client(port, "127.0.0.7") as e:
            assert await served(e)
            assert await closed_without_answer(a)
            assert await still_open(b, 0.05)


async def status_line_of(stream: trio.SocketStream) -> bytes:
    data = b""
    try:
        await stream.send_all(GET)
        while b"\r\n" not in data and (chunk := await stream.receive_some(65536)):
            data += chunk
    except trio.BrokenResourceError:
        pass
    return data.partition(b"\r\n")[0]
