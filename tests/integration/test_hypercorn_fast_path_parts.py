"""The pieces of mcp_trio's hypercorn fast path that keep an open connection small
(``mcp_trio._http.hypercorn_fast_path``), each on its own: the app's queue, the connection's lazy
events, and the read loop's receive on a real loopback TCP connection.  How they serve requests
together is ``test_hypercorn_fast_path.py``'s."""

from __future__ import annotations

import os
import socket
import ssl
import struct

import pytest
import trio
import trio.testing
from tests.required import not_applicable

from mcp_trio._http.hypercorn_fast_path import AppQueue, LazyEvent, SendLock, socket_reader

posix_only = pytest.mark.skipif(
    os.name != "posix", reason=not_applicable("the one-frame receive is POSIX's (os.read on a socket)")
)

# -- the app's queue ------------------------------------------------------------------------------


async def test_app_queue_is_fifo_and_put_waits_while_full() -> None:
    queue = AppQueue(2)
    await queue.put("a")
    await queue.put("b")
    third_put = trio.Event()

    async def put_third() -> None:
        await queue.put("c")
        third_put.set()

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(put_third)
            await trio.testing.wait_all_tasks_blocked()
            assert not third_put.is_set()  # two queued: the third waits for room
            assert await queue.receive() == "a"
            await third_put.wait()
        assert [await queue.receive(), await queue.receive()] == ["b", "c"]


async def test_app_queue_receive_waits_for_a_message() -> None:
    queue = AppQueue(10)
    got: list[object] = []

    async def receiver() -> None:
        got.append(await queue.receive())

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receiver)
            nursery.start_soon(receiver)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            await queue.put({"type": "http.request"})
            await queue.put({"type": "http.disconnect"})
    assert sorted(m["type"] for m in got) == ["http.disconnect", "http.request"]  # type: ignore[index]


async def test_app_queue_cancelled_waits_leave_it_as_it_was() -> None:
    queue = AppQueue(1)
    with trio.move_on_after(0.05) as scope:
        await queue.receive()  # nothing queued: waits, then is cancelled
    assert scope.cancelled_caught
    await queue.put(1)
    with trio.move_on_after(0.05) as scope:
        await queue.put(2)  # full: waits, then is cancelled; 2 is not queued
    assert scope.cancelled_caught
    with trio.fail_after(2):
        assert await queue.receive() == 1
        await queue.put(3)
        assert await queue.receive() == 3
    with trio.move_on_after(0.05) as scope:
        await queue.receive()
    assert scope.cancelled_caught  # nothing else was left in it


# -- the connection's events ----------------------------------------------------------------------


async def test_lazy_event_set_wait_and_clear() -> None:
    event = LazyEvent()
    assert not event.is_set()
    await event.set()
    assert event.is_set()
    with trio.fail_after(1):
        await event.wait()  # already set: returns
    await event.clear()
    assert not event.is_set()
    woken = trio.Event()

    async def waiter() -> None:
        await event.wait()
        woken.set()

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert not woken.is_set()  # cleared: the waiter waits
            await event.set()
            await woken.wait()


async def test_lazy_event_wait_is_a_checkpoint_even_when_set() -> None:
    event = LazyEvent()
    await event.set()
    with trio.CancelScope() as scope:
        scope.cancel()
        await event.wait()
        raise AssertionError("a cancelled wait returned")  # pragma: no cover
    assert scope.cancelled_caught


# -- the connection's send lock ----------------------------------------------------------------------


async def test_send_lock_excludes_and_hands_over_in_arrival_order() -> None:
    lock = SendLock()
    inside: list[int] = []
    order: list[int] = []

    async def writer(n: int) -> None:
        async with lock:
            inside.append(n)
            assert len(inside) == 1, inside  # never two at once
            await trio.sleep(0.01)  # a write that waits for the socket
            order.append(n)
            inside.remove(n)

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(writer, n)
                await trio.testing.wait_all_tasks_blocked()  # each arrives after the one before
    assert order == [0, 1, 2, 3, 4]
    assert not lock.locked()


async def test_send_lock_cancelled_wait_leaves_no_trace_and_entering_is_a_checkpoint() -> None:
    lock = SendLock()
    with trio.fail_after(2):
        async with lock:
            with trio.move_on_after(0.05) as scope:
                async with lock:  # held: waits, then is cancelled
                    raise AssertionError("entered a held lock")  # pragma: no cover
            assert scope.cancelled_caught
            assert lock.locked()
        assert not lock.locked()  # released to nobody: the cancelled waiter is gone
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            async with lock:
                raise AssertionError("a cancelled task entered")  # pragma: no cover
        assert cancelled.cancelled_caught and not lock.locked()
        async with lock:
            assert lock.locked()


# -- the read loop's receive ------------------------------------------------------------------------


async def tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    listener = listeners[0]
    port = listener.socket.getsockname()[1]
    try:
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listener.accept()
    finally:
        await listener.aclose()
    return client, server


@posix_only
async def test_socket_reader_reads_what_arrives_then_eof() -> None:
    client, server = await tcp_pair()
    async with client, server:
        receive = socket_reader(server)
        assert receive is not None
        with trio.fail_after(2):
            await client.send_all(b"GET / HTTP/1.1\r\n\r\n")
            assert await receive() == b"GET / HTTP/1.1\r\n\r\n"  # ready at once

            async def later() -> None:
                await trio.sleep(0.05)
                await client.send_all(b"more")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(later)
                assert await receive() == b"more"  # waited for it
            await client.send_eof()
            assert await receive() == b""


@posix_only
async def test_socket_reader_cancelled_loses_nothing_and_a_closed_stream_raises() -> None:
    client, server = await tcp_pair()
    async with client:
        receive = socket_reader(server)
        assert receive is not None
        with trio.move_on_after(0.05) as scope:
            await receive()
        assert scope.cancelled_caught
        await client.send_all(b"kept")
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            await receive()  # cancelled before it reads: the bytes stay in the socket
        assert cancelled.cancelled_caught
        with trio.fail_after(2):
            assert await receive() == b"kept"

            async def close_soon() -> None:
                await trio.sleep(0.05)
                await server.aclose()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(close_soon)
                with pytest.raises(trio.ClosedResourceError):
                    await receive()  # closed while it waits
        with pytest.raises(trio.ClosedResourceError):
            await receive()  # closed before


@posix_only
async def test_socket_reader_reset_is_a_broken_stream() -> None:
    client, server = await tcp_pair()
    async with server:
        receive = socket_reader(server)
        assert receive is not None
        client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await client.aclose()  # an RST
        with trio.fail_after(2), pytest.raises(trio.BrokenResourceError):
            await receive()


async def test_socket_reader_leaves_tls_to_receive_some() -> None:
    client, server = await tcp_pair()
    async with client, server:
        assert socket_reader(trio.SSLStream(server, ssl.create_default_context())) is None
