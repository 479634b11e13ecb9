"""The event entries a Redis event store writes: signed for their session's key, stream and seq, under a
label of their own."""

from __future__ import annotations

import pytest

from mcp_trio._protocol.cluster import (
    EVENT_ENTRY_HEADER,
    EVENT_SEQ_LIMIT,
    SESSION_TAG,
    ClusterKeys,
    ForgedMessage,
    events_key,
    open_event_entry,
    open_task_record,
    seal_event_entry,
    seal_task_record,
)

OLD, NEW, OTHER = b"o" * 32, b"n" * 32, b"x" * 32
KEYS = ClusterKeys([OLD])
DATA = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"a b  c"}}'
KEY = events_key("p", KEYS.tag(SESSION_TAG, b"a.session"))


def test_events_key() -> None:
    tag = KEYS.tag(SESSION_TAG, b"a.session")
    assert f"p:events:{tag}" == KEY and "session" not in tag
    for bad in ("a.session", tag.upper(), tag[:-1], ""):
        with pytest.raises(ValueError):
            events_key("p", bad)
    with pytest.raises(ValueError):
        events_key("p q", tag)


def test_round_trip_and_header() -> None:
    sealed = seal_event_entry(KEYS, KEY, 3, 41, DATA)
    assert sealed.startswith(b"mte1 ") and sealed[EVENT_ENTRY_HEADER:] == DATA
    assert len(sealed) == EVENT_ENTRY_HEADER + len(DATA)
    assert sealed[EVENT_ENTRY_HEADER - 17 : EVENT_ENTRY_HEADER] == b"0000000000000041 "
    assert open_event_entry(KEYS, KEY, 3, sealed) == (41, DATA)
    assert open_event_entry(KEYS, KEY, 3, sealed.decode()) == (41, DATA)
    assert open_event_entry(ClusterKeys([NEW, OLD]), KEY, 3, sealed) == (41, DATA)  # a rotated ring
    assert open_event_entry(KEYS, KEY, 0, seal_event_entry(KEYS, KEY, 0, 0, b"")) == (0, b"")
    last = EVENT_SEQ_LIMIT - 1
    assert open_event_entry(KEYS, KEY, last, seal_event_entry(KEYS, KEY, last, last, b"x")) == (last, b"x")
    for stream_id, seq in ((-1, 0), (0, -1), (EVENT_SEQ_LIMIT, 0), (0, EVENT_SEQ_LIMIT)):
        with pytest.raises(ValueError):
            seal_event_entry(KEYS, KEY, stream_id, seq, DATA)


def test_entries_are_bound_to_session_stream_and_seq() -> None:
    sealed = seal_event_entry(KEYS, KEY, 3, 41, DATA)
    other_session = events_key("p", KEYS.tag(SESSION_TAG, b"a.other"))
    kid, signature = KEYS.sign(b"task record", KEY.encode(), b"3", b"0000000000000041", DATA)
    forged = [
        DATA,  # unsigned
        b"",
        seal_event_entry(ClusterKeys([OTHER]), KEY, 3, 41, DATA),  # another ring's
        sealed.replace(b"a b  c", b"a b  d"),  # altered data
        sealed.replace(b"0000000000000041", b"0000000000000042"),  # another seq
        seal_event_entry(KEYS, other_session, 3, 41, DATA),  # copied from another session's key
        seal_event_entry(KEYS, KEY.replace("p:", "q:", 1), 3, 41, DATA),  # another prefix's
        sealed.replace(b"mte1", b"mtr1", 1),
        sealed[:5] + b"0" * 16 + sealed[21:],  # an unknown key id
        sealed.replace(sealed.split(b" ")[2], sealed.split(b" ")[2].upper()),
        seal_task_record(KEYS, KEY, DATA),  # a task record is no event entry
        b" ".join((b"mte1", kid.encode(), signature.encode(), b"0000000000000041", DATA)),  # another label
    ]
    for value in forged:
        with pytest.raises(ForgedMessage):
            open_event_entry(KEYS, KEY, 3, value)
    with pytest.raises(ForgedMessage):
        open_event_entry(KEYS, KEY, 4, sealed)  # moved to another stream
    with pytest.raises(ForgedMessage):
        open_task_record(KEYS, KEY, sealed)  # nor is an event entry a task record
    for not_a_string in (None, 7, [sealed]):
        with pytest.raises(ForgedMessage):
            open_event_entry(KEYS, KEY, 3, not_a_string)
