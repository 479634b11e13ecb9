"""The inbox entries workers forward through Redis (``_protocol.cluster``): validated like socket input."""

from __future__ import annotations

import pytest

from mcp_trio._protocol.cluster import (
    INBOX_MESSAGE_LIMIT,
    decode_inbox_entry,
    encode_inbox_entry,
    heartbeat_key,
    inbox_key,
)

ANSWER = b'{"jsonrpc": "2.0", "id": 3, "result": {"action": "accept"}}'


def test_keys() -> None:
    assert heartbeat_key("mcp-trio", "a") == "mcp-trio:worker:a"
    assert inbox_key("mcp-trio", "a") == "mcp-trio:inbox:a"
    with pytest.raises(ValueError):
        inbox_key("mcp-trio", "a:b")


def test_round_trip() -> None:
    fields = encode_inbox_entry("a.xyz", ANSWER)
    assert decode_inbox_entry(fields, "a") == ("a.xyz", ANSWER)
    as_bytes = {k.encode(): v for k, v in fields.items()}  # what XREAD returns
    assert decode_inbox_entry(as_bytes, "a") == ("a.xyz", ANSWER)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"v": b"1", "session": b"b.xyz", "body": ANSWER}, "not a session id of this worker"),
        ({"v": b"2", "session": b"a.xyz", "body": ANSWER}, "version"),
        ({"v": b"1", "session": b"a.xyz", "body": ANSWER, "x": b""}, "fields"),
        ({"v": b"1", "session": b"a.xyz", "body": b"{nope"}, "JSON-RPC"),
        ({"v": b"1", "session": b"a.xyz", "body": b'{"jsonrpc":"2.0","id":1,"method":"ping"}'}, "request"),
        ({"v": b"1", "session": b"a.\xff", "body": ANSWER}, "ASCII"),
        ({"v": b"1", "session": b"a.xyz", "body": b" " * (INBOX_MESSAGE_LIMIT + 1)}, "more than"),
        ([1, 2], "field map"),
    ],
)
def test_refused(fields: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_inbox_entry(fields, "a")
