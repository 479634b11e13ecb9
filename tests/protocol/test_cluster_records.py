"""Session records as workers keep them in Redis for adoption: their JSON read as strictly as a message
from a socket, and their signature by the key ring, made for their key and under a label of their own."""

from __future__ import annotations

import json

import pytest

from mcp_trio._protocol.cluster import (
    RECORD_LIMIT,
    ClusterKeys,
    ForgedMessage,
    SessionRecord,
    decode_session_record,
    encode_session_record,
    lease_key,
    open_session_record,
    record_key,
    seal_session_record,
    seal_task_record,
)
from mcp_trio._protocol.cluster.messages import seal_record

KEYS = ClusterKeys([b"k" * 32])
OTHER_RING = ClusterKeys([b"o" * 32])
RECORD = SessionRecord(
    revision="2025-11-25",
    initialized=True,
    owner="p1:abc",
    client_info={"name": "c", "version": "1"},
    client_capabilities={"elicitation": {}},
    log_level="warning",
    subscriptions=("file:///a", "file:///b"),
)
KEY = record_key("mcp-trio", "0123abcd")


def test_round_trip_and_key_names() -> None:
    assert decode_session_record(encode_session_record(RECORD)) == RECORD
    data = encode_session_record(RECORD)
    sealed = seal_session_record(KEYS, KEY, data, 7)
    assert open_session_record(KEYS, KEY, sealed) == (RECORD, 7, data)
    assert open_session_record(KEYS, KEY, sealed.decode()) == (RECORD, 7, data)  # as some clients return it
    assert KEY == "mcp-trio:session:0123abcd"
    assert lease_key("mcp-trio", "0123abcd") == "mcp-trio:lease:0123abcd"
    with pytest.raises(ValueError):
        record_key("bad prefix!", "x")


def fields(**changed: object) -> bytes:
    value = json.loads(encode_session_record(RECORD))
    value.update(changed)
    return json.dumps(value).encode()


@pytest.mark.parametrize(
    "data",
    [
        fields(v=2),
        fields(revision="2026-07-28"),  # a modern revision has no sessions
        fields(revision="1999-01-01"),
        fields(initialized="yes"),
        fields(owner=7),
        fields(owner="x" * 257),
        fields(client_info=[]),
        fields(client_capabilities="all"),
        fields(log_level="loud"),
        fields(subscriptions="file:///a"),
        fields(subscriptions=["file:///a", 3]),
        fields(extra=1),
        b"[]",
        b"{not json",
        b'{"v": 1, "revision": NaN}',
        b" " * (RECORD_LIMIT + 1),
    ],
)
def test_malformed_records_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_session_record(data)


def test_a_record_not_signed_for_its_key_by_the_ring_is_forged() -> None:
    data = encode_session_record(RECORD)
    sealed = seal_session_record(KEYS, KEY, data, 3)
    with pytest.raises(ForgedMessage):  # copied to another session's key
        open_session_record(KEYS, record_key("mcp-trio", "ffff"), sealed)
    with pytest.raises(ForgedMessage):  # another ring's
        open_session_record(KEYS, KEY, seal_session_record(OTHER_RING, KEY, data, 3))
    with pytest.raises(ForgedMessage):  # a task record of the same key is not a session record
        open_session_record(KEYS, KEY, seal_task_record(KEYS, KEY, data))
    altered = sealed.replace(b'"owner":"p1:abc"', b'"owner":"p1:evil"')
    assert altered != sealed
    with pytest.raises(ForgedMessage):  # its owner changed
        open_session_record(KEYS, KEY, altered)
    with pytest.raises(ForgedMessage):
        open_session_record(KEYS, KEY, data)  # unsigned
    with pytest.raises(ForgedMessage):  # its epoch changed (written back as a later one)
        open_session_record(KEYS, KEY, sealed.replace(b" 3 {", b" 4 {"))
    with pytest.raises(ValueError):
        open_session_record(KEYS, KEY, 42)
    for epochless in (data, b"03 " + data, b"x " + data):  # signed, but without a valid epoch
        with pytest.raises(ValueError, match="epoch"):
            open_session_record(KEYS, KEY, seal_record(KEYS, b"session record", KEY, epochless))
