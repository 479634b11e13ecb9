"""A 2025 session's custody as a state machine (``_protocol.custody``): the whole table walked, every
state with every event; what its end leaves in Redis never changes back once decided."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_trio._protocol.custody import ENDING, RECORDED, Custody, CustodyEvent, transition
from mcp_trio.errors import LocalProtocolError

S, E = Custody, CustodyEvent

EXPECTED: dict[tuple[Custody, CustodyEvent], Custody] = {
    (S.SERVING, E.HAND_OVER): S.MOVING,
    (S.SERVING, E.LOSE): S.LOST,
    (S.SERVING, E.CLOSE): S.CLOSING,  # a DELETE, the idle timeout: record and events go
    (S.MOVING, E.RELEASE): S.LEAVING,
    (S.MOVING, E.LOSE): S.LOST,
    (S.MOVING, E.CLOSE): S.MOVED,  # the app ends during a hand-over: it ends as handed over
    (S.LEAVING, E.LOSE): S.LOST,
    (S.LEAVING, E.CLOSE): S.MOVED,  # the hand-over's own end
    (S.MOVED, E.RELEASE): S.MOVED,  # the hand-over of a session closed meanwhile gives up its lease
    (S.MOVED, E.LOSE): S.LOST,
    (S.MOVED, E.CLOSE): S.MOVED,
    (S.LOST, E.LOSE): S.LOST,
    (S.LOST, E.CLOSE): S.LOST,
    (S.CLOSING, E.LOSE): S.LOST,  # taken by another worker while it ended here: its events stay
    (S.CLOSING, E.CLOSE): S.CLOSING,
}
"""The table as the design says it, written out apart from the code's."""


@pytest.mark.parametrize("event", list(CustodyEvent), ids=lambda e: e.name)
@pytest.mark.parametrize("state", list(Custody), ids=lambda s: s.name)
def test_every_state_with_every_event(state: Custody, event: CustodyEvent) -> None:
    expected = EXPECTED.get((state, event))
    if expected is None:
        with pytest.raises(LocalProtocolError, match=f"cannot {event.value} when {state.value}"):
            transition(state, event)
    else:
        assert transition(state, event) is expected


def test_what_is_refused_is_a_bug_the_flags_allowed() -> None:
    refused = {(state, event) for state in S for event in E} - EXPECTED.keys()
    assert refused == {
        (S.MOVING, E.HAND_OVER),  # a second hand-over of a session being handed over
        (S.LEAVING, E.HAND_OVER),
        (S.MOVED, E.HAND_OVER),
        (S.LOST, E.HAND_OVER),
        (S.CLOSING, E.HAND_OVER),  # handing over a session that ends here
        (S.SERVING, E.RELEASE),  # giving up a lease without a hand-over
        (S.LEAVING, E.RELEASE),  # ... twice
        (S.LOST, E.RELEASE),  # ... that another worker holds
        (S.CLOSING, E.RELEASE),  # ... of a session whose record went
    }


def test_every_state_is_reachable_from_serving() -> None:
    reachable, frontier = {S.SERVING}, [S.SERVING]
    while frontier:
        state = frontier.pop()
        for event in E:
            try:
                new = transition(state, event)
            except LocalProtocolError:
                continue
            if new not in reachable:
                reachable.add(new)
                frontier.append(new)
    assert reachable == set(Custody)


def test_the_sets_the_transport_reads() -> None:
    # Session.closing: exactly where a close lands, whatever the state
    assert {transition(state, E.CLOSE) for state in S} == ENDING
    # the record follows the session's changes until a hand-over takes it (or it ends, or is lost)
    assert {S.SERVING, transition(S.SERVING, E.HAND_OVER)} == RECORDED


@given(st.lists(st.sampled_from(list(CustodyEvent)), max_size=16))
def test_any_sequence_keeps_what_the_end_leaves(events: list[CustodyEvent]) -> None:
    """Once ending, a session never serves again; once its record is not this worker's to write (the
    hand-over's, or another worker's), it never is again, and its end never takes them with it."""
    state = S.SERVING
    for event in events:
        try:
            new = transition(state, event)
        except LocalProtocolError:
            continue
        if state in ENDING:
            assert new in ENDING
        if state not in RECORDED:
            assert new not in RECORDED
            assert new is not S.CLOSING or state is S.CLOSING
        if state is S.LOST:
            assert new is S.LOST  # nothing takes a lost session back
        state = new
    if E.HAND_OVER not in events and E.LOSE not in events:
        assert state in (S.SERVING, S.CLOSING)
