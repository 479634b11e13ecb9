"""The inbox entries workers forward through Redis, and the key ring that signs them and the bus's
messages and a task store's records (``_protocol.cluster``): validated like socket input, refused
unless signed, and accepted once (a copy written again is a replay, refused whatever the receiver's
memory has to forget)."""

from __future__ import annotations

import pytest

from mcp_trio._protocol.cluster import (
    INBOX_FIELDS,
    INBOX_MESSAGE_LIMIT,
    MESSAGE_MAX_AGE,
    PRINCIPAL_TAG,
    REPLAY_MEMORY,
    ClusterKeys,
    ForgedMessage,
    InboxEntry,
    ReplayedMessage,
    ReplayGuard,
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


def fresh() -> ReplayGuard:
    """A receiver's memory of nonces, made a minute before the messages of these tests were signed."""
    return ReplayGuard(NOW - 60)


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


SIGNED = entry()
"""One signed entry, that the forged ones below change."""


def decode(fields: object, worker: str = "a", keys: ClusterKeys = KEYS, now: float = NOW) -> InboxEntry:
    return decode_inbox_entry(fields, worker, keys, now, seen=fresh())


def test_round_trip() -> None:
    fields = entry()
    assert tuple(fields) == INBOX_FIELDS == ("v", "kid", "sig", "ts", "nonce", "session", "principal", "body")
    assert fields["v"] == b"3" and len(fields["nonce"]) == 32 and fields["nonce"] != entry()["nonce"]
    assert decode(fields) == InboxEntry("a.xyz", ANSWER, TAG)
    as_bytes = {k.encode(): v for k, v in fields.items()}  # what XREAD returns
    assert decode(as_bytes, now=NOW + 1) == InboxEntry("a.xyz", ANSWER, TAG)
    # a session another worker made, that this one adopted
    assert decode(entry(session="b.xyz")) == InboxEntry("b.xyz", ANSWER, TAG)


def test_a_rotated_ring_verifies_entries_of_either_key() -> None:
    rotated = ClusterKeys([NEW, OLD])
    assert decode(entry(), keys=rotated).body == ANSWER  # signed with the old key
    signed_new = entry(keys=rotated)
    assert signed_new["kid"] != entry()["kid"]
    assert decode(signed_new, keys=ClusterKeys([OLD, NEW])).body == ANSWER
    with pytest.raises(ForgedMessage):
        decode(signed_new)  # a worker without the new key


def old_format() -> dict[str, bytes]:
    """An entry of the format before nonces (version 2), signed by the ring: replayable, so refused."""
    ts, session, body = str(int(NOW * 1000)).encode(), b"a.xyz", ANSWER
    kid, signature = KEYS.sign(b"inbox", b"a", ts, session, TAG.encode(), body)
    return {
        "v": b"2",
        "kid": kid.encode(),
        "sig": signature.encode(),
        "ts": ts,
        "session": session,
        "principal": TAG.encode(),
        "body": body,
    }


@pytest.mark.parametrize(
    "fields",
    [
        {"v": b"1", "session": b"a.xyz", "body": ANSWER},  # unsigned (the first format)
        old_format(),
        {**old_format(), "v": b"3"},
        {**old_format(), "v": b"3", "nonce": SIGNED["nonce"]},
        entry(keys=ClusterKeys([OTHER])),  # signed with a key not in the ring
        {**SIGNED, "body": b'{"jsonrpc": "2.0", "id": 4, "result": {}}'},  # body changed
        {**SIGNED, "session": b"a.other"},  # session changed
        {**SIGNED, "principal": KEYS.tag(PRINCIPAL_TAG, b"str:bob").encode()},
        {**SIGNED, "ts": str(int(NOW * 1000) + 1).encode()},
        {**SIGNED, "nonce": entry()["nonce"]},  # another nonce: a copy made to look new
        {**SIGNED, "nonce": SIGNED["nonce"].upper()},
        {**SIGNED, "nonce": b""},
        {**SIGNED, "kid": b"0" * 16},
        {**SIGNED, "sig": b"0" * 64},
        {**SIGNED, "v": b"2"},
        {k: v for k, v in SIGNED.items() if k != "sig"},
        {k: v for k, v in SIGNED.items() if k != "nonce"},
    ],
)
def test_forged_entries_are_refused(fields: dict[str, bytes]) -> None:
    with pytest.raises(ForgedMessage):
        decode(fields)


def test_an_entry_for_another_worker_or_too_old_is_refused() -> None:
    with pytest.raises(ForgedMessage, match="signature"):
        decode(entry(), worker="b")  # signed for worker a's inbox
    for now in (NOW + MESSAGE_MAX_AGE + 1, NOW - MESSAGE_MAX_AGE - 1):
        with pytest.raises(ForgedMessage, match="away from now"):
            decode(entry(), now=now)


def test_an_entry_is_accepted_once() -> None:
    seen = fresh()
    fields = entry()
    assert decode_inbox_entry(fields, "a", KEYS, NOW, seen=seen).body == ANSWER
    copy = {k.encode(): v for k, v in fields.items()}  # the same fields, XADDed again
    for now in (NOW, NOW + 1, NOW + MESSAGE_MAX_AGE):
        with pytest.raises(ReplayedMessage, match="accepted before") as raised:
            decode_inbox_entry(copy, "a", KEYS, now, seen=seen)
        assert not isinstance(raised.value, ForgedMessage)
    with pytest.raises(ForgedMessage, match="away from now"):  # then it is too old anyway
        decode_inbox_entry(copy, "a", KEYS, NOW + MESSAGE_MAX_AGE + 1, seen=seen)
    assert decode_inbox_entry(entry(), "a", KEYS, NOW, seen=seen).body == ANSWER  # another one
    assert len(seen) == 2
    # a worker started after the entry was signed cannot tell it from a copy: refused
    with pytest.raises(ReplayedMessage, match="signed before"):
        decode_inbox_entry(entry(), "a", KEYS, NOW + 2, seen=ReplayGuard(NOW + 1))


def test_a_forged_or_malformed_entry_is_not_remembered() -> None:
    seen = fresh()
    with pytest.raises(ForgedMessage):
        decode_inbox_entry({**SIGNED, "body": b"{}"}, "a", KEYS, NOW, seen=seen)
    assert len(seen) == 0
    assert decode_inbox_entry(SIGNED, "a", KEYS, NOW, seen=seen).body == ANSWER


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
        decode(fields)
    assert not isinstance(raised.value, ForgedMessage | ReplayedMessage)


def test_the_guard_forgets_only_behind_its_floor() -> None:
    """A guard full of nonces forgets the oldest and refuses everything signed up to it; nonces that
    expired are forgotten too, and the floor follows them (a wall clock stepped back does not make
    an expired message acceptable again)."""
    ms = int(NOW * 1000)
    guard = ReplayGuard(NOW - 60, capacity=3)
    assert guard.capacity == 3 and ReplayGuard(NOW).capacity == REPLAY_MEMORY
    for n, ts in enumerate((ms + 30, ms + 10, ms + 20)):
        guard.admit(b"n%d" % n, ts, NOW)
    assert len(guard) == 3 and guard.floor == NOW - 60
    guard.admit(b"n3", ms + 5, NOW)  # the fourth: the oldest (itself) is forgotten at once
    assert len(guard) == 3 and guard.floor == (ms + 6) / 1000
    for nonce, ts in ((b"n3", ms + 5), (b"n9", ms + 6 - 1)):
        with pytest.raises(ReplayedMessage, match="signed before"):
            guard.admit(nonce, ts, NOW)
    for nonce in (b"n0", b"n1", b"n2"):
        with pytest.raises(ReplayedMessage, match="accepted before"):
            guard.admit(nonce, ms + 40, NOW)
    guard.admit(b"n4", ms + 6, NOW)  # at the floor: accepted, and the oldest, so forgotten at once
    assert len(guard) == 3 and guard.floor == (ms + 7) / 1000
    guard.admit(b"n5", ms + 15, NOW)  # now n1 (ms + 10) is the oldest, forgotten
    assert guard.floor == (ms + 11) / 1000
    with pytest.raises(ReplayedMessage, match="signed before"):
        guard.admit(b"n1", ms + 10, NOW)
    later = NOW + MESSAGE_MAX_AGE + 0.025  # n5 (ms + 15) and n2 (ms + 20) expired, n0 (ms + 30) not
    guard.admit(b"n6", ms + 25_000, later)
    assert len(guard) == 2 and guard.floor == (ms + 21) / 1000
    with pytest.raises(ReplayedMessage, match="signed before"):
        guard.admit(b"n2", ms + 20, NOW)  # the clock stepped back: still refused
    with pytest.raises(ValueError, match="at least 1"):
        ReplayGuard(NOW, capacity=0)


def test_bus_messages_are_signed_for_their_channel() -> None:
    data = b'{"v":1}'
    sealed = seal_bus_message(KEYS, "p:notifications", data, NOW)
    assert sealed.startswith(b"mt2 ") and sealed.endswith(b" " + data)
    assert open_bus_message(KEYS, "p:notifications", sealed, NOW, seen=fresh()) == data
    assert open_bus_message(ClusterKeys([NEW, OLD]), "p:notifications", sealed, NOW, seen=fresh()) == data
    ts, nonce = sealed.split(b" ", 5)[3:5]
    old_kid, old_signature = KEYS.sign(b"bus", b"p:notifications", ts, data)
    forged = [
        data,  # unsigned
        seal_bus_message(ClusterKeys([OTHER]), "p:notifications", data, NOW),
        seal_bus_message(KEYS, "q:notifications", data, NOW),  # another channel's
        sealed[:-2] + b"2}",  # tampered
        sealed.replace(b"mt2", b"mt1", 1),
        sealed.replace(nonce, seal_bus_message(KEYS, "p:notifications", data, NOW).split(b" ")[4]),
        sealed.replace(nonce, nonce.upper()),
        sealed.replace(b" " + nonce, b""),
        b" ".join((b"mt1", old_kid.encode(), old_signature.encode(), ts, data)),  # the format before
        b" ".join((b"mt2", old_kid.encode(), old_signature.encode(), ts, data)),
        b" ".join((b"mt2", old_kid.encode(), old_signature.encode(), ts, nonce, data)),
    ]
    for message in forged:
        with pytest.raises(ForgedMessage):
            open_bus_message(KEYS, "p:notifications", message, NOW, seen=fresh())
    with pytest.raises(ForgedMessage, match="away from now"):
        open_bus_message(KEYS, "p:notifications", sealed, NOW + MESSAGE_MAX_AGE + 1, seen=fresh())
    with pytest.raises(ValueError, match="not bytes"):
        open_bus_message(KEYS, "p:notifications", "text", NOW, seen=fresh())
    with pytest.raises(ValueError, match="more than 8"):
        open_bus_message(KEYS, "p:notifications", sealed + b" " * 200, NOW, 8, seen=fresh())


def test_a_bus_message_is_accepted_once() -> None:
    seen = fresh()
    sealed = seal_bus_message(KEYS, "p:notifications", b"{}", NOW)
    assert open_bus_message(KEYS, "p:notifications", sealed, NOW, seen=seen) == b"{}"
    with pytest.raises(ReplayedMessage, match="accepted before") as raised:
        open_bus_message(KEYS, "p:notifications", sealed, NOW + 1, seen=seen)  # published again
    assert not isinstance(raised.value, ForgedMessage)
    again = seal_bus_message(KEYS, "p:notifications", b"{}", NOW)  # the same bytes, sent again
    assert again != sealed and open_bus_message(KEYS, "p:notifications", again, NOW, seen=seen) == b"{}"
    with pytest.raises(ReplayedMessage, match="signed before"):
        open_bus_message(KEYS, "p:notifications", again, NOW, seen=ReplayGuard(NOW + 1))


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
        open_bus_message(KEYS, "p:task:t1", sealed, NOW, seen=fresh())  # nor is a record a bus message
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
