"""The SSE writers' queue and their one keep-alive clock (mcp_trio._transport.queues), on their own."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from mcp_trio._protocol.session import END, Outgoing
from mcp_trio._transport.queues import KeepAliveClock, StreamQueue

pytestmark = pytest.mark.deadline(4 * 3600)  # virtual seconds, where a test has the autojump clock


def item(seq: int) -> Outgoing:
    return Outgoing(seq, b"%d" % seq)


async def test_queue_hands_items_over_in_order_and_is_bounded() -> None:
    queue = StreamQueue(2)
    assert queue.get_nowait() is None
    queue.put_nowait(item(0))
    queue.put_nowait(item(1))
    with pytest.raises(trio.WouldBlock):  # two not taken: the connection has fallen behind
        queue.put_nowait(item(2))
    assert [queue.get_nowait(), await queue.get()] == [item(0), item(1)]
    assert queue.get_nowait() is None


async def test_a_waiting_writer_is_woken_by_a_put_a_nudge_or_the_close() -> None:
    queue = StreamQueue(1)
    got: list[Outgoing | None] = []

    async def writer() -> None:
        for _ in range(3):
            got.append(await queue.get())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        queue.put_nowait(item(7))
        await trio.testing.wait_all_tasks_blocked()
        queue.nudge()  # the keep-alive clock: nothing queued, a comment is due
        await trio.testing.wait_all_tasks_blocked()
        queue.close()
    assert got == [item(7), None, END]


async def test_a_closed_queue_drops_what_it_held_and_refuses_more() -> None:
    queue = StreamQueue(4)
    queue.put_nowait(item(0))
    queue.close()
    assert queue.get_nowait() is END
    assert await queue.get() is END
    with pytest.raises(trio.ClosedResourceError):
        queue.put_nowait(item(1))


async def test_a_cancelled_wait_leaves_no_waiter_behind() -> None:
    queue = StreamQueue(1)
    with trio.move_on_after(0.01):
        await queue.get()
    queue.nudge()  # nobody waits: nothing happens
    queue.put_nowait(item(3))
    assert queue.get_nowait() == item(3)


async def test_the_clock_nudges_a_silent_connection_every_interval(autojump_clock: object) -> None:
    clock = KeepAliveClock(15.0)
    queue = StreamQueue(4)
    woken: list[float] = []

    async def writer() -> None:
        clock.rearm(queue)
        start = trio.current_time()
        for _ in range(3):
            assert await queue.get() is None
            woken.append(trio.current_time() - start)
            clock.rearm(queue)  # the comment was written

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        await writer()
        assert len(clock) == 1
        clock.unwatch(queue)
        assert len(clock) == 0
        nursery.cancel_scope.cancel()
    assert woken == pytest.approx([15.0, 30.0, 45.0])


async def test_a_write_puts_the_next_comment_off(autojump_clock: object) -> None:
    clock = KeepAliveClock(10.0)
    busy, idle = StreamQueue(4), StreamQueue(4)
    nudged: dict[str, float] = {}

    async def wait(name: str, queue: StreamQueue) -> None:
        assert await queue.get() is None
        nudged[name] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        start = trio.current_time()
        clock.rearm(busy)
        clock.rearm(idle)
        nursery.start_soon(wait, "busy", busy)
        nursery.start_soon(wait, "idle", idle)
        await trio.sleep(6)
        clock.rearm(busy)  # busy wrote something at 6 s: its comment is due at 16 s, not 10 s
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    assert nudged["idle"] - start == pytest.approx(10.0)
    assert nudged["busy"] - start == pytest.approx(16.0)


async def test_an_infinite_interval_never_watches(autojump_clock: object) -> None:
    clock = KeepAliveClock(math.inf)
    queue = StreamQueue(1)
    clock.rearm(queue)
    assert len(clock) == 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        with trio.move_on_after(3600) as waited:
            await queue.get()
        assert waited.cancelled_caught  # no comment ever
        nursery.cancel_scope.cancel()
