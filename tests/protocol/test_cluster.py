"""The sans-IO rules of several workers: worker ids, session ids that name their owner, the
``requestState`` key ring from the environment, and the notification bus's messages."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_trio._protocol import cluster
from mcp_trio._protocol.modern import RequestState
from mcp_trio._protocol.session import new_session_id


@pytest.mark.parametrize("good", ["a", "w1", "worker_7", "eu-west-1", "x" * 32, "A-Z_09"])
def test_good_worker_ids(good: str) -> None:
    assert cluster.check_worker_id(good) == good


@pytest.mark.parametrize("bad", ["", "x" * 33, "a.b", "a b", "ä", "a/b", "a:b", "a\n", None, 7, b"a"])
def test_bad_worker_ids(bad: Any) -> None:
    with pytest.raises(ValueError, match="worker id"):
        cluster.check_worker_id(bad)


def test_the_owner_of_a_session_id() -> None:
    session_id = f"w1.{new_session_id()}"
    assert cluster.session_owner(session_id) == "w1"
    assert cluster.session_owner(session_id, {"w1", "w2"}) == "w1"
    assert cluster.session_owner(session_id, ("w2",)) is None  # a worker we do not know: not ours
    assert cluster.session_owner("a.b.c") == "a"  # the random part may hold dots (a custom factory's)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "noworker",  # today's ids, without an owner
        pytest.param(new_session_id(), id="random-id"),  # a fixed test id for a random value
        ".abc",  # no owner
        "w1.",  # nothing after it
        "w 1.abc",
        "w1 .abc",
        "ä.abc",
        "w1.ab c",
        "w1.abc\n",
        "w1.abc\x7f",
        "x" * 33 + ".abc",
        "w1." + "a" * 224,  # longer than a session id may be
        "w1:abc",
        "../../etc.passwd",
    ],
)
def test_malformed_session_ids_have_no_owner(bad: str) -> None:
    assert cluster.session_owner(bad) is None


@given(st.text(max_size=300))
def test_session_owner_never_raises_and_only_returns_valid_ids(text: str) -> None:
    owner = cluster.session_owner(text)
    assert owner is None or (cluster.WORKER_ID.fullmatch(owner) and text.startswith(owner + "."))


# -- the key ring --------------------------------------------------------------------------------


def test_a_ring_of_base64_keys() -> None:
    one, two = secrets.token_bytes(32), secrets.token_bytes(48)
    standard = base64.b64encode(one).decode()
    urlsafe = base64.urlsafe_b64encode(two).decode().rstrip("=")
    assert cluster.parse_secret_ring(standard) == (one,)
    assert cluster.parse_secret_ring(f" {standard} , {urlsafe} ") == (one, two)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        (" , ", "empty"),
        (base64.b64encode(b"k" * 32).decode() + ",", "key 2 is empty"),
        ("not base64!", "key 1 is not base64"),
        ("a", "not base64"),  # base64 cannot end with a lone character
        (base64.b64encode(b"short").decode(), "key 1 has 5 bytes"),
    ],
)
def test_a_bad_ring_says_what_is_wrong_but_not_the_key(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as raised:
        cluster.parse_secret_ring(text)
    assert cluster.REQUEST_STATE_SECRET_ENV in str(raised.value)
    if len(text.strip(" ,")) > 8:
        assert text.strip(" ,") not in str(raised.value)


def test_the_first_key_seals_and_every_key_verifies() -> None:
    old, new = b"o" * 32, b"n" * 32
    sealed_old = RequestState(old).seal("tools/call:x", {"a": 1}, expires_at=2e9)
    rotated = RequestState.ring([new, old])
    assert rotated.open(sealed_old, "tools/call:x", now=1e9) == {"a": 1}
    sealed_new = rotated.seal("tools/call:x", {"b": 2}, expires_at=2e9)
    assert RequestState(new).open(sealed_new, "tools/call:x", now=1e9) == {"b": 2}
    with pytest.raises(ValueError, match="verification"):
        RequestState(old).open(sealed_new, "tools/call:x", now=1e9)  # sealed with the new key
    with pytest.raises(ValueError, match="verification"):
        RequestState.ring([b"x" * 32, b"y" * 32]).open(sealed_old, "tools/call:x", now=1e9)
    with pytest.raises(ValueError):
        RequestState.ring([])


# -- the bus's messages ----------------------------------------------------------------------------


TOOLS = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
UPDATED = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://a"}}


def test_bus_messages_round_trip() -> None:
    data = cluster.encode_bus_message("w1-abc", TOOLS, None)
    assert data is not None
    assert json.loads(data) == {"v": 1, "from": "w1-abc", "message": TOOLS}
    assert cluster.decode_bus_message(data) == cluster.BusMessage("w1-abc", TOOLS, None)
    data = cluster.encode_bus_message("w1-abc", UPDATED, "test://a")
    assert data is not None
    assert cluster.decode_bus_message(data) == cluster.BusMessage("w1-abc", UPDATED, "test://a")


def test_the_bus_carries_only_server_notifications_it_knows() -> None:
    assert cluster.encode_bus_message("w", {"jsonrpc": "2.0", "method": "notifications/other"}, None) is None
    assert cluster.encode_bus_message("w", UPDATED, "test://other") is None  # would be refused
    huge = {**UPDATED, "params": {"uri": "test://a", "x": "y" * cluster.BUS_MESSAGE_LIMIT}}
    assert cluster.encode_bus_message("w", huge, "test://a") is None


def _envelope(**changes: Any) -> bytes:
    envelope: dict[str, Any] = {"v": 1, "from": "w1", "message": TOOLS, **changes}
    return json.dumps({k: v for k, v in envelope.items() if v is not ...}).encode()


@pytest.mark.parametrize(
    "data",
    [
        "a str",
        b"",
        b"not json",
        b"\xff\xfe\x00",
        b"[1, 2]",
        b'"text"',
        b"{" * 5000 + b"}" * 5000,
        b'{"v": 1, "from": "w1", "message": {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", '
        b'"params": {"x": NaN}}}',
        b"x" * (cluster.BUS_MESSAGE_LIMIT + 1),
        _envelope(v=2),
        _envelope(v=True),
        _envelope(v="1"),
        _envelope(v=...),
        _envelope(extra=1),
        _envelope(**{"from": ...}),
        _envelope(**{"from": "has space"}),
        _envelope(**{"from": "x" * 65}),
        _envelope(**{"from": 7}),
        _envelope(message=...),
        _envelope(message="notifications/tools/list_changed"),
        _envelope(message={"method": "notifications/tools/list_changed"}),  # no jsonrpc member
        _envelope(message={**TOOLS, "id": 1}),  # a request
        _envelope(message={"jsonrpc": "2.0", "id": 1, "result": {}}),
        _envelope(message={"jsonrpc": "2.0", "method": "notifications/message", "params": {}}),
        _envelope(message={"jsonrpc": "2.0", "method": "tools/call", "params": {}}),
        _envelope(message={**TOOLS, "params": [1]}),
        _envelope(uri="test://a"),  # a uri on a list change
        _envelope(message=UPDATED),  # an update without its uri
        _envelope(message=UPDATED, uri="test://b"),  # ... or with another one
        _envelope(message=UPDATED, uri=""),
        _envelope(message=UPDATED, uri=7),
        _envelope(message={**UPDATED, "params": {"uri": "x" * 9000}}, uri="x" * 9000),
    ],
)
def test_malformed_bus_messages_are_refused(data: Any) -> None:
    with pytest.raises(ValueError):
        cluster.decode_bus_message(data)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_decoding_never_raises_anything_but_value_error(data: bytes) -> None:
    try:
        cluster.decode_bus_message(data)
    except ValueError:
        pass


@given(
    st.dictionaries(
        st.sampled_from(["v", "from", "message", "uri", "x"]),
        st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.just(TOOLS) | st.just(UPDATED),
    )
)
def test_decoding_arbitrary_envelopes(envelope: dict[str, Any]) -> None:
    try:
        found = cluster.decode_bus_message(json.dumps(envelope).encode())
    except ValueError:
        return
    assert found.message["method"] in cluster.FORWARDED_METHODS


@pytest.mark.parametrize("bad", ["", "a b", "x" * 65, "ä"])
def test_bad_instance_ids_and_prefixes(bad: str) -> None:
    with pytest.raises(ValueError):
        cluster.check_instance_id(bad)
    with pytest.raises(ValueError):
        cluster.check_channel_prefix(bad)
