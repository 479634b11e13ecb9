"""The inbox entries workers forward through Redis, and the key ring that signs them and the bus's
messages and a task store's records (``_protocol.cluster``): validated like socket input, and refused
unless signed."""

from __future__ import annotations

import pytest

from mcp_trio._protocol.cluster import (
    INBOX_MESSAGE_LIMIT,
    MESSAGE_MAX_AGE,
    PRINCIPAL_TAG,
    ClusterKeys,
    ForgedMessage,
    InboxEntry,
    decode_inbox_entry,
    encode_inbox_entry,
    heartbeat_key,
    inbox_bytes_key,
    inbox_key,
    open_bus_message,
    open_task_record,
    seal_bus_message,
    seal_task_record,
    sessions_key,
)

ANSWER = b'{"jsonrpc": "2.0", "id": 3, "result": {"action": "accept"}}'
OLD, NEW, OTHER = b"o" * 32, b"n" * 32, b"x" * 32
KEYS = ClusterKeys([OLD])
NOW = 1_800_000_000.0
TAG = KEYS.tag(PRINCIPAL_TAG, b"none")


def test_keys() -> None:
    assert heartbeat_key("mcp-trio", "a") == "mcp-trio:worker:a"
    assert inbox_key("mcp-trio", "a") == "mcp-trio:inbox:a"
    assert inbox_bytes_key("mcp-trio", "a") == "mcp-trio:inbox-bytes:a"
    assert sessions_key("mcp-trio", "a") == "mcp-trio:sessions:a"
    with pytest.raises(ValueError):
        inbox_key("mcp-trio", "a:b")


def entry(
    body: bytes = ANSWER, session: str = "a.xyz", keys: ClusterKeys = KEYS, **changed: bytes
) -> dict[str, bytes]:
    fields = encode_inbox_entry(keys, "a", session, body, TAG, NOW)
    return {**fields, **changed}


def test_round_trip() -> None:
    fields = entry()
    assert set(fields) == {"v", "kid", "sig", "ts", "session", "principal", "body"}
    assert decode_inbox_entry(fields, "a", KEYS, NOW) == InboxEntry("a.xyz", ANSWER, TAG)
    as_bytes = {k.encode(): v for k, v in fields.items()}  # what XREAD returns
    assert decode_inbox_entry(as_bytes, "a", KEYS, NOW + 1) == InboxEntry("a.xyz", ANSWER, TAG)
    # a session another worker made, that this one adopted
    assert decode_inbox_entry(entry(session="b.xyz"), "a", KEYS, NOW) == InboxEntry("b.xyz", ANSWER, TAG)


def test_a_rotated_ring_verifies_entries_of_either_key() -> None:
    rotated = ClusterKeys([NEW, OLD])
    assert decode_inbox_entry(entry(), "a", rotated, NOW).body == ANSWER  # signed with the old key
    signed_new = entry(keys=rotated)
    assert signed_new["kid"] != entry()["kid"]
    assert decode_inbox_entry(signed_new, "a", ClusterKeys([OLD, NEW]), NOW).body == ANSWER
    with pytest.raises(ForgedMessage):
        decode_inbox_entry(signed_new, "a", KEYS, NOW)  # a worker without the new key


@pytest.mark.parametrize(
    "fields",
    [
        {"v": b"1", "session": b"a.xyz", "body": ANSWER},  # unsigned (the old format)
        entry(keys=ClusterKeys([OTHER])),  # signed with a key not in the ring
        entry(body=b'{"jsonrpc": "2.0", "id": 4, "result": {}}', sig=entry()["sig"]),  # body changed
        entry(session="a.other", sig=entry()["sig"]),  # session changed
        entry(principal=KEYS.tag(PRINCIPAL_TAG, b"str:bob").encode(), sig=entry()["sig"]),
        entry(ts=str(int(NOW * 1000) + 1).encode(), sig=entry()["sig"]),
        entry(kid=b"0" * 16),
        entry(sig=b"0" * 64),
        {**entry(), "v": b"1"},
        {k: v for k, v in entry().items() if k != "sig"},
    ],
)
def test_forged_entries_are_refused(fields: dict[str, bytes]) -> None:
    with pytest.raises(ForgedMessage):
        decode_inbox_entry(fields, "a", KEYS, NOW)


def test_an_entry_for_another_worker_or_too_old_is_refused() -> None:
    with pytest.raises(ForgedMessage, match="signature"):
        decode_inbox_entry(entry(), "b", KEYS, NOW)  # signed for worker a's inbox
    for now in (NOW + MESSAGE_MAX_AGE + 1, NOW - MESSAGE_MAX_AGE - 1):
        with pytest.raises(ForgedMessage, match="away from now"):
            decode_inbox_entry(entry(), "a", KEYS, now)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (entry(session="no-worker-prefix"), "not a session id"),
        (entry(body=b"{nope"), "JSON-RPC"),
        (entry(body=b'{"jsonrpc":"2.0","id":1,"method":"ping"}'), "request"),
        (entry(body=b" " * (INBOX_MESSAGE_LIMIT + 1)), "more than"),
        ([1, 2], "field map"),
    ],
)
def test_signed_but_invalid_entries_are_refused(fields: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as raised:
        decode_inbox_entry(fields, "a", KEYS, NOW)
    assert not isinstance(raised.value, ForgedMessage)


def test_bus_messages_are_signed_for_their_channel() -> None:
    data = b'{"v":1}'
    sealed = seal_bus_message(KEYS, "p:notifications", data, NOW)
    assert sealed.startswith(b"mt1 ") and sealed.endswith(b" " + data)
    assert open_bus_message(KEYS, "p:notifications", sealed, NOW) == data
    assert open_bus_message(ClusterKeys([NEW, OLD]), "p:notifications", sealed, NOW) == data
    forged = [
        data,  # unsigned
        seal_bus_message(ClusterKeys([OTHER]), "p:notifications", data, NOW),
        seal_bus_message(KEYS, "q:notifications", data, NOW),  # another channel's
        sealed[:-2] + b"2}",  # tampered
        sealed.replace(b"mt1", b"mt2", 1),
    ]
    for message in forged:
        with pytest.raises(ForgedMessage):
            open_bus_message(KEYS, "p:notifications", message, NOW)
    with pytest.raises(ForgedMessage, match="away from now"):
        open_bus_message(KEYS, "p:notifications", sealed, NOW + MESSAGE_MAX_AGE + 1)
    with pytest.raises(ValueError, match="not bytes"):
        open_bus_message(KEYS, "p:notifications", "text", NOW)


RECORD = b'{"task_id":"t1","owner":"o:alice","status":"completed","result":{"a": 1}}'


def test_task_records_are_signed_for_their_key() -> None:
    sealed = seal_task_record(KEYS, "p:task:t1", RECORD)
    assert sealed.startswith(b"mtr1 ") and sealed.endswith(b" " + RECORD)
    assert open_task_record(KEYS, "p:task:t1", sealed) == RECORD
    assert open_task_record(KEYS, "p:task:t1", sealed.decode()) == RECORD  # a client decoding replies
    assert open_task_record(ClusterKeys([NEW, OLD]), "p:task:t1", sealed) == RECORD  # rotated ring
    by_new = seal_task_record(ClusterKeys([NEW, OLD]), "p:task:t1", RECORD)
    assert by_new.split(b" ")[1] == ClusterKeys([NEW]).key_id.encode() != sealed.split(b" ")[1]
    assert open_task_record(ClusterKeys([OLD, NEW]), "p:task:t1", by_new) == RECORD
    channel_message = seal_bus_message(KEYS, "p:task:t1", RECORD, NOW)  # same key, bytes, ring
    kid, signature = KEYS.sign(b"bus", b"p:task:t1", RECORD)
    forged = [
        RECORD,  # unsigned
        b"",
        seal_task_record(ClusterKeys([OTHER]), "p:task:t1", RECORD),  # another ring's
        sealed.replace(b"o:alice", b"o:mallet"),  # tampered: another owner
        sealed[:-2] + b"2}}",  # tampered: another result
        seal_task_record(KEYS, "p:task:t2", RECORD),  # copied from another task's key
        seal_task_record(KEYS, "q:task:t1", RECORD),  # from another prefix's
        sealed.replace(b"mtr1", b"mt1", 1),
        b"mtr1 " + sealed.split(b" ", 2)[2],  # no key id
        b" ".join((b"mtr1", b"0" * 16, sealed.split(b" ")[2], RECORD)),  # an unknown key id
        sealed.replace(sealed.split(b" ")[2], sealed.split(b" ")[2].upper()),
        channel_message,  # a bus message is no record, nor any signature under another label
        b" ".join((b"mtr1", kid.encode(), signature.encode(), RECORD)),
    ]
    for value in forged:
        with pytest.raises(ForgedMessage):
            open_task_record(KEYS, "p:task:t1", value)
    with pytest.raises(ForgedMessage):
        open_bus_message(KEYS, "p:task:t1", sealed, NOW)  # nor is a record a bus message
    for not_a_string in (None, 7, {b"f": b"v"}):
        with pytest.raises(ValueError, match="does not hold a string") as raised:
            open_task_record(KEYS, "p:task:t1", not_a_string)
        assert not isinstance(raised.value, ForgedMessage)


def test_the_ring_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_TRIO_REQUEST_STATE_SECRET", raising=False)
    with pytest.raises(ValueError, match="MCP_TRIO_REQUEST_STATE_SECRET") as raised:
        ClusterKeys.of(None)
    assert "openssl rand" in str(raised.value)
    assert ClusterKeys.of(OLD).key_id == KEYS.key_id
    assert ClusterKeys.of([NEW, OLD]).key_id == ClusterKeys([NEW]).key_id
    monkeypatch.setenv("MCP_TRIO_REQUEST_STATE_SECRET", "bm5u" * 11)  # base64 of "nnn" * 11
    assert ClusterKeys.of(None).key_id == ClusterKeys([b"nnn" * 11]).key_id
    for bad in ([], [b""], [OLD, "text"]):
        with pytest.raises(ValueError):
            ClusterKeys(bad)  # type: ignore[arg-type]


def test_tags_hide_their_value_and_match_under_any_key() -> None:
    tag = KEYS.tag(PRINCIPAL_TAG, b"str:alice")
    assert len(tag) == 32 and "alice" not in tag
    assert ClusterKeys([NEW, OLD]).matches(PRINCIPAL_TAG, b"str:alice", tag)
    assert not ClusterKeys([NEW]).matches(PRINCIPAL_TAG, b"str:alice", tag)
    assert not KEYS.matches(PRINCIPAL_TAG, b"str:bob", tag)
    assert not KEYS.matches(PRINCIPAL_TAG, b"str:alice", None)
    assert KEYS.tag(b"session", b"str:alice") != tag  # each label its own
    assert len({ClusterKeys([k]).key_id for k in (OLD, NEW, OTHER)}) == 3
    assert OLD.hex()[:16] != KEYS.key_id
