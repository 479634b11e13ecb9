"""Hostile input: every malformed byte a peer can send is refused with our error (a 400 and the right
JSON-RPC code), never an unexpected exception (a 500), and nothing we send can fail to encode."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import mcp_types as mt
import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mcp_trio import MCPApp, MCPServer
from mcp_trio._protocol import http, jsonrpc, modern, versions
from mcp_trio._protocol.session import make_event_id, parse_event_id
from mcp_trio.errors import RemoteProtocolError

V = "2026-07-28"


def parse_error(body: bytes) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as excinfo:
        jsonrpc.parse_body(body, allow_batch=True)
    assert excinfo.value.code == mt.PARSE_ERROR and excinfo.value.http_status == 400
    return excinfo.value


def request_with(params: str) -> bytes:
    return ('{"jsonrpc":"2.0","id":1,"method":"m","params":' + params + "}").encode()


# -- jsonrpc.parse_body ---------------------------------------------------------------------------


def test_overlong_integer_is_a_parse_error() -> None:
    error = parse_error(request_with('{"n":' + "1" * 5000 + "}"))
    assert "digits" in error.message and "set_int_max_str_digits" not in error.message
    # the bound is the decoder's own (1000 digits), not the process-wide int_max_str_digits
    assert "digits" in parse_error(request_with('{"n":' + "1" * 1001 + "}")).message
    (message,) = jsonrpc.parse_body(request_with('{"n":' + "1" * 1000 + "}"), allow_batch=False).messages
    assert isinstance(message, mt.JSONRPCRequest) and message.params == {"n": int("1" * 1000)}


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "[1.5e999]"])
def test_non_finite_numbers_are_parse_errors(literal: str) -> None:
    parse_error(request_with('{"x":' + literal + "}"))


def test_finite_floats_still_parse() -> None:
    (message,) = jsonrpc.parse_body(request_with('{"x":[1.5,-0.0,1e308,5e-324]}'), allow_batch=False).messages
    assert isinstance(message, mt.JSONRPCRequest) and message.params == {"x": [1.5, -0.0, 1e308, 5e-324]}


@pytest.mark.parametrize(
    "params",
    [
        r'{"s":"\ud800"}',
        r'{"s":"\uDBFF"}',
        r'{"s":"\udc00"}',
        r'{"s":"a\ud800b"}',
        r'{"s":"\udc00\ud800"}',  # a pair in the wrong order
        r'{"s":"\ud800\u0041"}',
        r'{"\ud800":1}',  # in a key
        r'{"s":[[[{"t":["\uDfFf"]}]]]}',
    ],
)
def test_lone_surrogate_escapes_are_parse_errors(params: str) -> None:
    assert "surrogate" in parse_error(request_with(params)).message


def test_encoded_surrogates_are_not_utf8() -> None:
    parse_error(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"\xed\xa0\x80"}}')
    body = '{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"X"}}'.encode("utf-16-le")
    parse_error(body.replace("X".encode("utf-16-le"), b"\x00\xd8"))


@pytest.mark.parametrize(
    ("params", "text"),
    [
        (r'{"s":"\ud83d\ude00"}', "\U0001f600"),  # a proper pair is one character
        (r'{"s":"\\ud800"}', "\\ud800"),  # an escaped backslash, then plain letters
        (r'{"s":"\ud7ff\ue000"}', "\ud7ff\ue000"),  # either side of the surrogate range
    ],
)
def test_text_that_only_looks_like_a_surrogate_parses(params: str, text: str) -> None:
    (message,) = jsonrpc.parse_body(request_with(params), allow_batch=False).messages
    assert isinstance(message, mt.JSONRPCRequest) and message.params == {"s": text}


def test_deep_nesting_with_a_surrogate_escape_is_walked_without_recursion() -> None:
    deep = "[" * 50_000 + r'"\ud800"' + "]" * 50_000
    parse_error(request_with('{"x":' + deep + "}"))


json_atoms = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(exclude_categories=()), max_size=6)  # surrogates included
)
hostile_values = st.recursive(
    json_atoms,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(st.characters(exclude_categories=()), max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(hostile_values, st.booleans())
def test_parse_then_encode_never_raises_anything_else(value: Any, ascii_only: bool) -> None:
    """Any JSON-ish text (surrogates, NaN, infinities included) parses or is -32700/-32600; whatever
    parses encodes again as strict UTF-8 JSON."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"v": value}}, ensure_ascii=ascii_only
    )
    try:
        incoming = jsonrpc.parse_body(body.encode("utf-8", "surrogatepass"), allow_batch=True)
    except RemoteProtocolError as exc:
        assert exc.code in (mt.PARSE_ERROR, mt.INVALID_REQUEST) and exc.http_status == 400
        return
    (message,) = incoming.messages
    assert isinstance(message, mt.JSONRPCRequest)
    again = jsonrpc.encode(jsonrpc.request(1, "m", message.params))
    assert json.loads(again.decode("utf-8"))["params"] == message.params


# -- jsonrpc.encode -------------------------------------------------------------------------------


def strict_loads(data: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(data.decode("utf-8"), parse_constant=refuse)


def test_encode_escapes_lone_surrogates() -> None:
    data = jsonrpc.encode(jsonrpc.response(1, {"text": "a\ud800b", "\udfff": "ok", "pair": "\U0001f600"}))
    assert strict_loads(data)["result"] == {"text": "a\ud800b", "\udfff": "ok", "pair": "\U0001f600"}
    assert "\U0001f600".encode() in data  # valid text stays unescaped


def test_encode_sends_non_finite_floats_as_null() -> None:
    data = jsonrpc.encode(jsonrpc.response(1, {"x": [math.nan, math.inf, -math.inf, 1.5], "y": (math.nan,)}))
    assert strict_loads(data)["result"] == {"x": [None, None, None, 1.5], "y": [None]}


def test_encode_still_refuses_what_is_no_json() -> None:
    circular: list[Any] = [math.nan]
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular"):
        jsonrpc.encode({"x": circular})
    with pytest.raises(TypeError):
        jsonrpc.encode({"x": object()})


def test_error_body_with_a_surrogate_in_its_message() -> None:
    body = jsonrpc.error_body(RemoteProtocolError("bad \ud800", data={"n": math.inf}))
    assert strict_loads(body)["error"] == {
        "code": mt.INVALID_REQUEST,
        "message": "bad \ud800",
        "data": {"n": None},
    }


@settings(max_examples=300, deadline=None)
@given(hostile_values)
def test_encode_always_gives_strict_utf8_json(value: Any) -> None:
    strict_loads(jsonrpc.encode(jsonrpc.notification("n", {"v": value})))


# -- Last-Event-ID and Content-Length -------------------------------------------------------------


@pytest.mark.parametrize(
    "event_id", ["0-²", "²-0", "1-\u0661", "\u0661-1", "1-1\n", "+1-1", "1- 1", "1-\uff11"]
)
def test_event_ids_take_ascii_digits_only(event_id: str) -> None:
    assert parse_event_id(event_id) is None


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=45))
@example("0-\u00b2")
@example("7-" + "9" * 38)
def test_parse_event_id_never_raises(event_id: str) -> None:
    found = parse_event_id(event_id)
    if found is not None:
        assert event_id.isascii() and found == tuple(int(part) for part in event_id.split("-"))
        assert parse_event_id(make_event_id(*found)) == found


def test_event_id_length_bound_is_kept() -> None:
    assert parse_event_id("1" * 19 + "-" + "2" * 20) == (int("1" * 19), int("2" * 20))
    assert parse_event_id("1" * 20 + "-" + "2" * 20) is None


@pytest.mark.parametrize(
    ("value", "length"),
    [
        (b"12", 12),
        (b"0", 0),
        (b"000123", 123),
        ("²".encode(), None),
        ("\u0661\u0662".encode(), None),  # Arabic-Indic digits: int() would take them
        (b"+12", None),
        (b"1_2", None),
        (b"", None),
        (b"9" * 5000, 10**18),  # more digits than int() takes: far too large, not a crash
        (b"0" * 5000 + b"7", 7),
    ],
)
def test_content_length_takes_ascii_digits_only(value: bytes, length: int | None) -> None:
    facts = http.RequestFacts.from_headers("POST", [(b"content-length", value)])
    assert facts.content_length == length


def test_huge_content_length_is_413() -> None:
    facts = http.RequestFacts.from_headers(
        "POST",
        [(b"content-length", b"9" * 5000), (b"accept", b"*/*"), (b"content-type", b"application/json")],
    )
    with pytest.raises(RemoteProtocolError) as excinfo:
        http.check_post(facts, max_body_size=1000)
    assert excinfo.value.http_status == 413


def test_host_port_takes_ascii_digits_only() -> None:
    policy = http.OriginPolicy.loopback()
    assert policy.host_allowed("localhost:8000")
    assert not policy.host_allowed("localhost:²")
    assert not policy.host_allowed("localhost:\u0668\u0660")


header_names = st.sampled_from(
    [b"host", b"accept", b"content-length", b"mcp-session-id", b"mcp-param-x", b"mcp-method", b"x-y"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(header_names, st.binary(max_size=12)), max_size=8))
def test_from_headers_never_raises(headers: list[tuple[bytes, bytes]]) -> None:
    facts = http.RequestFacts.from_headers("POST", headers)
    assert facts.content_length is None or facts.content_length >= 0
    assert len(set(facts.conflicts)) == len(facts.conflicts)


# -- duplicate headers ----------------------------------------------------------------------------


def test_single_headers_have_no_conflicts() -> None:
    facts = http.RequestFacts.from_headers("POST", [(b"mcp-session-id", b"a"), (b"mcp-param-x", b"1")])
    assert facts.conflicts == () and facts.mcp_params == (("x", "1"),)


def test_identical_duplicates_are_no_conflict() -> None:
    facts = http.RequestFacts.from_headers(
        "POST", [(b"mcp-session-id", b"a"), (b"mcp-session-id", b" a "), (b"mcp-param-x", b"1")] * 2
    )
    assert facts.conflicts == () and facts.session_id == "a" and facts.mcp_params == (("x", "1"),)
    http.check_duplicates(facts)


@pytest.mark.parametrize(
    "name",
    [
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "mcp-session-id",
        "last-event-id",
        "content-type",
        "content-length",
        "host",
        "origin",
        "mcp-param-region",
        "mcp-client-session-id",
    ],
)
def test_conflicting_duplicates_are_recorded_once(name: str) -> None:
    key = name.encode()
    facts = http.RequestFacts.from_headers(
        "POST", [(key, b"1"), (b"x-other", b"z"), (key, b"2"), (key, b"3")]
    )
    assert facts.conflicts == (name,)


@pytest.mark.parametrize(
    "name", ["mcp-session-id", "last-event-id", "content-type", "content-length", "host", "origin"]
)
def test_check_duplicates_refuses_conflicting_transport_headers(name: str) -> None:
    facts = http.RequestFacts.from_headers("GET", [(name.encode(), b"1"), (name.encode(), b"2")])
    with pytest.raises(RemoteProtocolError) as excinfo:
        http.check_duplicates(facts)
    error = excinfo.value
    assert (error.http_status, error.code) == (400, mt.INVALID_REQUEST)
    assert error.message == f"Bad Request: conflicting duplicate {name} headers"


@pytest.mark.parametrize("name", ["mcp-method", "mcp-name", "mcp-param-x", "mcp-protocol-version"])
def test_check_duplicates_leaves_metadata_headers_to_their_era(name: str) -> None:
    http.check_duplicates(
        http.RequestFacts.from_headers("POST", [(name.encode(), b"1"), (name.encode(), b"2")])
    )


def test_conflicting_protocol_versions_are_refused_by_the_legacy_era() -> None:
    facts = http.RequestFacts.from_headers(
        "POST", [(b"mcp-protocol-version", b"2025-06-18"), (b"mcp-protocol-version", b"2025-11-25")]
    )
    with pytest.raises(RemoteProtocolError) as excinfo:
        http.check_protocol_version(facts)
    assert (excinfo.value.http_status, excinfo.value.code) == (400, mt.INVALID_REQUEST)


def test_repeated_accept_headers_are_joined() -> None:
    facts = http.RequestFacts.from_headers(
        "POST",
        [
            (b"accept", b"application/json"),
            (b"accept", b"text/event-stream"),
            (b"content-type", b"application/json"),
        ],
    )
    assert facts.accept == "application/json, text/event-stream" and facts.conflicts == ()
    http.check_post(facts, max_body_size=10)


# -- the modern era: metadata headers, Mcp-Param-*, requestState ------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "flag": {"type": "boolean", "x-mcp-header": "Flag"},
    },
}


def modern_check(arguments: dict[str, Any], *headers: tuple[bytes, bytes]) -> versions.Revision:
    params = {
        "_meta": {versions.PROTOCOL_VERSION_META_KEY: V, mt.CLIENT_CAPABILITIES_META_KEY: {}},
        "name": "t",
        "arguments": arguments,
    }
    facts = http.RequestFacts.from_headers(
        "POST",
        [
            (b"mcp-protocol-version", V.encode()),
            (b"mcp-method", b"tools/call"),
            (b"mcp-name", b"t"),
            *headers,
        ],
    )
    return modern.check_headers(facts, 7, "tools/call", params, modern.header_parameters(SCHEMA))


def header_value(text: str) -> bytes:
    """``text`` as a client mirrors it: plain when it can be, else in the base64 form."""
    if text.isascii() and text.isprintable() and text == text.strip() and not text.startswith("=?base64?"):
        return text.encode()
    return b"=?base64?" + base64.b64encode(text.encode()) + b"?="


def mismatch(arguments: dict[str, Any], *headers: tuple[bytes, bytes]) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as excinfo:
        modern_check(arguments, *headers)
    error = excinfo.value
    assert (error.http_status, error.code, error.request_id) == (400, mt.HEADER_MISMATCH, 7)
    return error


def test_modern_check_baseline() -> None:
    assert modern_check({"region": "eu"}, (b"mcp-param-region", b"eu")).name == V


@pytest.mark.parametrize(
    "header",
    [
        (b"mcp-method", b"tools/list"),
        (b"mcp-name", b"other"),
        (b"mcp-protocol-version", b"2025-11-25"),
        (b"mcp-param-region", b"us"),
        (b"mcp-param-undeclared", b"x"),
    ],
)
def test_conflicting_metadata_headers_are_a_mismatch(header: tuple[bytes, bytes]) -> None:
    name = header[0]
    first = {b"mcp-method": b"tools/call", b"mcp-name": b"t", b"mcp-protocol-version": V.encode()}.get(
        name, b"eu"
    )
    error = mismatch({"region": "eu"}, (name, first), header)
    assert error.message == f"Header mismatch: conflicting duplicate {name.decode()} headers"


def test_conflicts_are_checked_before_anything_else() -> None:
    facts = http.RequestFacts.from_headers("POST", [(b"mcp-method", b"a"), (b"mcp-method", b"b")])
    with pytest.raises(RemoteProtocolError, match="conflicting duplicate mcp-method") as excinfo:
        modern.check_headers(facts, 1, "a", None)
    assert excinfo.value.code == mt.HEADER_MISMATCH


def test_transport_conflicts_are_not_the_modern_checks_business() -> None:
    modern_check({}, (b"mcp-session-id", b"a"), (b"mcp-session-id", b"b"))


@pytest.mark.parametrize("arguments", [{}, {"region": None}])
@pytest.mark.parametrize(
    "value", [b"bad\x01", "Grüße".encode(), b"=?base64?***?=", b"=?base64?/w==?=", b"=?base64?QQ?="]
)
def test_malformed_param_header_is_refused_even_without_a_body_value(
    arguments: dict[str, Any], value: bytes
) -> None:
    assert "Mcp-Param-region header: invalid" in mismatch(arguments, (b"mcp-param-region", value)).message


@pytest.mark.parametrize("arguments", [{}, {"region": None}])
def test_param_header_without_a_body_value_is_a_mismatch(arguments: dict[str, Any]) -> None:
    assert "no value" in mismatch(arguments, (b"mcp-param-region", b"eu")).message
    modern_check(arguments)  # omitted, as a conforming client does: fine


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("42", 42),
        ("42.0", 42),
        ("42.000", 42),
        ("-7", -7),
        ("0", 0),
        ("-0", 0),
        ("0.5", 0.5),
        ("0.1", 0.1),  # a float body value was rounded when parsed: the header is rounded alike
        ("1.50", 1.5),
        ("9007199254740993", 9007199254740993),
        (str(2**80), 2**80),
    ],
)
def test_numeric_params_compare_exactly(header: str, value: int | float) -> None:
    modern_check({"count": value}, (b"mcp-param-count", header_value(header)))


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("+42", 42),
        ("4_2", 42),
        ("4.2e1", 42),
        ("042", 42),
        ("42.", 42),
        (".5", 0.5),
        ("0x2a", 42),
        ("nan", math.nan),
        ("inf", math.inf),
        ("Infinity", math.inf),
        ("9007199254740993", 9007199254740992),  # equal as floats, not as numbers
        ("42.5", 42),
        ("42.0000000000000000000001", 42),  # equal as floats, not as numbers
        (" 42", 42),
        ("\uff11\uff12", 12),
        ("true", 1),
        ("1", True),
        ("0", False),
        ("True", True),
        ("false ", False),
    ],
)
def test_numbers_and_booleans_outside_the_strict_grammar_mismatch(header: str, value: Any) -> None:
    name = "flag" if isinstance(value, bool) else "count"
    raw = header_value(header)
    assert "does not match" in mismatch({name: value}, (f"mcp-param-{name}".encode(), raw)).message


def test_booleans_match_exactly() -> None:
    modern_check({"flag": True}, (b"mcp-param-flag", b"true"))
    modern_check({"flag": False}, (b"mcp-param-flag", b"false"))


SECRET = modern.RequestState(b"k" * 32)


@pytest.mark.parametrize(
    "state",
    [
        "é",
        "abc.é",
        "é.abc",
        "",
        ".",
        "abc",
        "abc.def",
        "a.b.c",
        "\ud800.x",
        "abc." + "A" * 43 + "\n",
        "abc." + "A" * 42 + "é",
    ],
)
def test_malformed_request_state_fails_verification(state: str) -> None:
    with pytest.raises(ValueError, match="requestState failed verification"):
        SECRET.open(state, "b", 0)


def test_tampered_request_state_fails_verification() -> None:
    state = SECRET.seal("b", {"q": 1}, 100)
    assert SECRET.open(state, "b", 0) == {"q": 1}
    body, _, signature = state.partition(".")
    for bad in (state + "A", body + "é." + signature, state[:-1] + "é", "A" + state):
        with pytest.raises(ValueError, match="requestState failed verification"):
            SECRET.open(bad, "b", 0)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=80))
@example("\u00e9.\u00e9")
def test_request_state_open_raises_only_value_error(state: str) -> None:
    with pytest.raises(ValueError):
        SECRET.open(state, "b", 0)


# -- end to end through MCPApp: no 500, and check_duplicates is wired ------------------------------

POST = [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]
INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
).encode()


def exchange(
    method: str, headers: list[tuple[bytes, bytes]], body: bytes = b""
) -> tuple[int, dict[str, Any]]:
    """One request through a fresh :class:`MCPApp` (of a server with no tools); status and JSON body."""
    sent: list[dict[str, Any]] = []
    bodies = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if bodies:
            return bodies.pop()
        await trio.sleep_forever()  # a client that stays: only a response that is not ours waits here
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), *headers],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }

    async def main() -> None:
        app = MCPApp(MCPServer("hostile"))
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(app.run)
                await app(scope, receive, send)
                nursery.cancel_scope.cancel()

    trio.run(main)
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (request_with('{"n":' + "9" * 5000 + "}"), "too many digits"),
        (request_with('{"n":NaN}'), "NaN"),
        (request_with(r'{"s":"\ud800"}'), "surrogate"),
    ],
)
def test_hostile_bodies_are_400_parse_errors(body: bytes, message: str) -> None:
    status, answer = exchange("POST", POST, body)
    assert (
        status == 400 and answer["error"]["code"] == mt.PARSE_ERROR and message in answer["error"]["message"]
    )


def test_conflicting_duplicate_headers_are_400() -> None:
    headers = [*POST, (b"mcp-session-id", b"a"), (b"mcp-session-id", b"b")]
    status, answer = exchange("POST", headers, INIT)
    assert status == 400 and answer["error"] == {
        "code": mt.INVALID_REQUEST,
        "message": "Bad Request: conflicting duplicate mcp-session-id headers",
    }


def test_conflicting_modern_headers_are_header_mismatch() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/list",
        "params": {"_meta": {versions.PROTOCOL_VERSION_META_KEY: V, mt.CLIENT_CAPABILITIES_META_KEY: {}}},
    }
    headers = [
        *POST,
        (b"mcp-protocol-version", V.encode()),
        (b"mcp-method", b"tools/list"),
        (b"mcp-method", b"x"),
    ]
    status, answer = exchange("POST", headers, json.dumps(body).encode())
    assert status == 400 and answer["id"] == 3 and answer["error"]["code"] == mt.HEADER_MISMATCH


def test_hostile_content_length_is_not_a_crash() -> None:
    status, answer = exchange("DELETE", [(b"content-length", "²".encode())])
    assert status == 400 and "Mcp-Session-Id header is required" in answer["error"]["message"]
    status, answer = exchange("POST", [*POST, (b"content-length", b"9" * 5000)], INIT)
    assert status == 413 and answer["error"]["code"] == mt.INVALID_REQUEST
