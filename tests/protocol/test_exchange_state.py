"""The ownership of one HTTP response as a state machine (``_protocol.exchange``): every change of
hands is a row of the table; nothing goes back; the writer side ends exactly once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_trio._protocol.exchange import ExchangeEvent, ExchangeState, transition
from mcp_trio.errors import LocalProtocolError

S, E = ExchangeState, ExchangeEvent


@pytest.mark.parametrize(
    ("events", "end"),
    [
        ([E.CLAIM, E.START, E.FINISH], S.FINISHED),  # a writer sends the whole response
        ([E.ABANDON, E.END], S.CLOSED),  # nobody wrote it: the request task answers (404)
        ([E.CLAIM, E.RELEASE, E.END], S.CLOSED),  # the writer gave up before the head
        ([E.CLAIM, E.START, E.RELEASE, E.END], S.CLOSED),  # ... or mid-stream: the request task ends it
    ],
)
def test_the_ways_a_response_ends(events: list[ExchangeEvent], end: ExchangeState) -> None:
    state = S.PENDING
    for event in events:
        state = transition(state, event)
    assert state is end


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (S.PENDING, E.START),  # a head from a writer that never claimed
        (S.CLAIMED, E.CLAIM),  # a second writer
        (S.STREAMING, E.CLAIM),
        (S.ABANDONED, E.CLAIM),  # a writer waking up after its exchange was abandoned
        (S.FINISHED, E.END),  # the request task ending a finished response again
        (S.FINISHED, E.RELEASE),
        (S.CLOSED, E.END),
        (S.STREAMING, E.END),  # the request task may not take over a stream its writer still owns
    ],
)
def test_what_is_refused(state: ExchangeState, event: ExchangeEvent) -> None:
    with pytest.raises(LocalProtocolError):
        transition(state, event)


@given(st.lists(st.sampled_from(list(ExchangeEvent)), max_size=12))
def test_any_sequence_moves_forward_only(events: list[ExchangeEvent]) -> None:
    order = [S.PENDING, S.CLAIMED, S.STREAMING, S.FINISHED]
    over = {S.FINISHED, S.ABANDONED, S.CLOSED}  # the writer side is over
    state = S.PENDING
    ended = 0
    for event in events:
        try:
            new = transition(state, event)
        except LocalProtocolError:
            continue
        if state in order and new in order:
            assert order.index(new) > order.index(state)  # never back
        assert state is not S.CLOSED and state is not S.FINISHED  # terminal states have no rows
        assert new in over or state not in over  # once the writer side is over, it stays over
        ended += new in over and state not in over
        state = new
    assert ended <= 1


def test_every_state_is_reachable_and_has_a_way_out_or_is_terminal() -> None:
    reachable = {S.PENDING}
    frontier = [S.PENDING]
    while frontier:
        state = frontier.pop()
        for event in ExchangeEvent:
            try:
                new = transition(state, event)
            except LocalProtocolError:
                continue
            if new not in reachable:
                reachable.add(new)
                frontier.append(new)
    assert reachable == set(ExchangeState)
