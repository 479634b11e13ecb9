"""JSON-RPC framing: hypothesis says parsing never raises anything but our error, with the right code."""

from __future__ import annotations

import json

import mcp_types as mt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_trio._protocol import jsonrpc
from mcp_trio.errors import RemoteProtocolError

finite_floats = st.floats(allow_nan=False, allow_infinity=False)  # NaN and infinities are no JSON: -32700
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite_floats | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.one_of(st.integers(), st.text(max_size=5), st.none(), st.booleans(), finite_floats),
        "method": st.one_of(st.text(max_size=10), st.integers()),
        "params": json_values,
        "result": json_values,
        "error": st.one_of(json_values, st.fixed_dictionaries({"code": st.integers(), "message": st.text()})),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_parse_or_fail_with_our_error(body: bytes) -> None:
    try:
        jsonrpc.parse_body(body, allow_batch=True)
    except RemoteProtocolError as exc:
        assert exc.code in (mt.PARSE_ERROR, mt.INVALID_REQUEST)
        assert exc.http_status == 400


@settings(max_examples=500, deadline=None)
@given(st.one_of(envelopes, st.lists(envelopes, max_size=3), json_values))
def test_arbitrary_json_parses_to_valid_envelopes_or_invalid_request(value: object) -> None:
    body = json.dumps(value).encode()
    try:
        incoming = jsonrpc.parse_body(body, allow_batch=True)
    except RemoteProtocolError as exc:
        assert exc.code == mt.INVALID_REQUEST
        return
    for message in incoming.messages:
        assert message.jsonrpc == "2.0"
        if isinstance(message, mt.JSONRPCRequest):
            assert isinstance(message.id, (int, str)) and not isinstance(message.id, bool)
            assert isinstance(message.method, str)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.integers(), st.text(max_size=10)),
    st.text(min_size=1, max_size=20),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
def test_request_round_trip(request_id: int | str, method: str, params: dict[str, int]) -> None:
    body = jsonrpc.encode(jsonrpc.request(request_id, method, params))
    (message,) = jsonrpc.parse_body(body, allow_batch=False).messages
    assert isinstance(message, mt.JSONRPCRequest)
    assert (message.id, message.method, message.params) == (request_id, method, params)


def test_kinds_of_message() -> None:
    parsed = jsonrpc.parse_body(
        b'[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"},'
        b'{"jsonrpc":"2.0","id":2,"result":{}},{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}]',
        allow_batch=True,
    )
    kinds = [type(m) for m in parsed.messages]
    assert kinds == [mt.JSONRPCRequest, mt.JSONRPCNotification, mt.JSONRPCResponse, mt.JSONRPCError]
    assert parsed.batch and [r.id for r in parsed.requests] == [1]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", mt.PARSE_ERROR),
        (b"\xc3\x28", mt.PARSE_ERROR),
        (b"[" * 100_000, mt.PARSE_ERROR),
        (b"[]", mt.INVALID_REQUEST),
        (b'[{"jsonrpc":"2.0","method":"a"}]', None),
    ],
)
def test_edge_bodies(body: bytes, code: int | None) -> None:
    if code is None:
        assert jsonrpc.parse_body(body, allow_batch=True).batch
        with pytest.raises(RemoteProtocolError) as excinfo:
            jsonrpc.parse_body(body, allow_batch=False)
        assert excinfo.value.code == mt.INVALID_REQUEST
        return
    with pytest.raises(RemoteProtocolError) as excinfo:
        jsonrpc.parse_body(body, allow_batch=True)
    assert excinfo.value.code == code


def test_invalid_request_keeps_the_id_when_it_can() -> None:
    with pytest.raises(RemoteProtocolError) as excinfo:
        jsonrpc.parse_body(b'{"jsonrpc":"2.0","id":5,"method":"x","params":[1]}', allow_batch=False)
    assert excinfo.value.request_id == 5
    body = json.loads(jsonrpc.error_body(excinfo.value))
    assert body["id"] == 5 and body["error"]["code"] == mt.INVALID_REQUEST


def test_error_envelope_omits_null_data() -> None:
    assert jsonrpc.error_envelope(None, -1, "m") == {"jsonrpc": "2.0", "error": {"code": -1, "message": "m"}}
    assert jsonrpc.error_envelope(1, -1, "m", {"x": 1})["error"]["data"] == {"x": 1}
    assert jsonrpc.notification("n", None) == {"jsonrpc": "2.0", "method": "n"}
