"""The one clock of request bodies' deadlines (mcp_trio._transport.bodies.BodyDeadlines), on its own."""

from __future__ import annotations

import math

import pytest
import trio

from mcp_trio._transport.bodies import BodyDeadlines

pytestmark = pytest.mark.deadline(3600)  # virtual seconds (the autojump clock)


async def test_a_late_body_has_its_scope_cancelled_on_time(autojump_clock: object) -> None:
    clock = BodyDeadlines(30.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(clock.run)
        assert clock.running
        start = trio.current_time()
        with trio.CancelScope() as late:
            clock.watch(late)
            await trio.sleep_forever()
        assert late.cancelled_caught
        assert trio.current_time() - start == pytest.approx(30.0)
        assert len(clock) == 0
        nursery.cancel_scope.cancel()


async def test_a_body_read_in_time_is_left_alone_and_later_ones_keep_their_own_time(
    autojump_clock: object,
) -> None:
    clock = BodyDeadlines(10.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(clock.run)
        start = trio.current_time()
        with trio.CancelScope() as quick:
            clock.watch(quick)
            await trio.sleep(9)
            clock.unwatch(quick)  # its body came
            with trio.CancelScope() as slow:
                clock.watch(slow)  # due at 19 s, not at the first one's 10 s
                await trio.sleep_forever()
            assert slow.cancelled_caught
            assert trio.current_time() - start == pytest.approx(19.0)
            await trio.sleep(30)
        assert not quick.cancelled_caught
        nursery.cancel_scope.cancel()


async def test_the_app_ending_cancels_what_its_clock_watched(autojump_clock: object) -> None:
    clock = BodyDeadlines(30.0)
    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(clock.run)
        clock.watch(scope)
        nursery.cancel_scope.cancel()
    assert not clock.running and len(clock) == 0
    assert scope.cancel_called  # nothing waits on a clock that is gone


async def test_no_clock_without_a_timeout() -> None:
    clock = BodyDeadlines(math.inf)
    async with trio.open_nursery() as nursery:
        await nursery.start(clock.run)
        assert not clock.running  # the app gives its scopes no deadline then, as before
        nursery.cancel_scope.cancel()
