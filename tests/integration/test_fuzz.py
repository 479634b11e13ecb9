"""Hypothesis fuzzes ``mcp-trio demo`` over real sockets, in both eras (run on hypercorn and, in the test
command's second pass, on ``serve_h11``).

Every example is one HTTP request (a POST, GET or DELETE) with mutated headers and body: garbage bytes,
truncated JSON, wrong JSON-RPC types, lone surrogate escapes, huge numbers, NaN, deep nesting, batches,
unknown methods, calls of the demo's tools with random arguments; on a live 2025-11-25 session, or as a
stateless 2026-07-28 request.  For every example:

- the status is below 500;
- a whole HTTP response arrives (status, headers and the complete body, SSE included: the connection is
  never dropped), within a deadline; a JSON body or SSE event is strict JSON;
- a session the example created (a valid ``initialize``) is deleted right away.

After all examples the live session still answers ``echo``, is deleted, and the server is back to its
baseline (no session, stream, connection or task left behind).

``@given`` cannot drive an async test under pytest-trio, so hypothesis runs a sync function in a worker
thread (``trio.to_thread``) and each example sends its request back in the test's Trio run
(``trio.from_thread.run``): the fixtures, the ``httpx.AsyncClient`` and the ``trio.fail_after``
deadlines are the other integration tests' own.  ``derandomize=True`` and no example database: every CI
run tries the same examples.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_http import (
    POST_HEADERS,
    Baseline,
    DemoServer,
    MCPClient,
    SSEResponse,
    assert_back_to_baseline,
    fetch_stats,
    http_client,
)

from mcp_trio._protocol import versions

# Both tests fuzz one demo, and one python-sdk server hosted by mcp-trio serve (on hypercorn: conftest.py).
pytestmark = [pytest.mark.shared_demo_server, pytest.mark.also_hosted, pytest.mark.hosted_once]

SESSION_VERSION = "2025-11-25"
MODERN = versions.LATEST_MODERN.name
EXAMPLES = 150
DEADLINE = 10.0
"""Seconds one example gets for its whole exchange (the httpx timeout is the same)."""
LINGER = 0.05
"""Seconds a long-lived stream (a GET, ``subscriptions/listen``) is read before the client leaves it."""

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


class Live:
    """Stands for the live session's id in a generated case (it is known only when the case is sent)."""

    def __repr__(self) -> str:
        return "LIVE"


LIVE = Live()
HeaderValue = bytes | Live
HeaderSpec = tuple[str, HeaderValue, st.SearchStrategy[HeaderValue]]
"""A header of a case: its name, its right value, and the other values a mutation picks from."""


@dataclass(frozen=True)
class Case:
    """One generated request."""

    method: str
    headers: tuple[tuple[str, HeaderValue], ...]
    body: bytes = b""


# -- JSON text with what json.dumps never writes ---------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text put into a body as is (huge numbers, NaN, surrogate escapes, deep nesting, junk)."""

    text: str


def dump(value: Any, ascii_only: bool) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (f"{dump(key, ascii_only)}:{dump(item, ascii_only)}" for key, item in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(item, ascii_only) for item in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


def encode(value: Any, ascii_only: bool) -> bytes:
    # A lone surrogate in a str becomes an escape (ascii_only) or bytes that are no UTF-8 (surrogatepass).
    return dump(value, ascii_only).encode("utf-8", "surrogatepass")


RAW_LITERALS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "1e-999",
    "-0",
    "0.0e0",
    '"\\ud800"',
    '"\\udfff"',
    '"a\\udbffb"',
    '"\\udc00\\ud800"',
    '"\\u0000"',
    '"\\ud83d\\ude00"',
    '"\\\\ud800"',
    "tru",
    "nul",
    "01",
    "1.",
    ".5",
    "+1",
    "0x10",
    "'x'",
    "[1,]",
    "{,}",
    '{"a":1,}',
    "[",
    "{",
    '"',
    '"\\x"',
    '{"a":1,"a":2}',
]


def nested(depth: int, kind: str, inner: str) -> Raw:
    if kind == "list":
        return Raw("[" * depth + inner + "]" * depth)
    return Raw('{"x":' * depth + inner + "}" * depth)


huge_numbers = st.builds(
    lambda digits, form: Raw(form.format("9" * digits)),
    st.integers(18, 6000),
    st.sampled_from(["{}", "-{}", "1{}.5", "0.{}1", "1e{}", "{}e-5"]),
)
deep_values = st.builds(
    nested,
    st.integers(1, 40) | st.sampled_from([200, 400, 999, 1000, 1001, 3000, 20000]),
    st.sampled_from(["list", "dict"]),
    st.sampled_from(["1", "null", '"\\ud800"', "[]", "NaN", '{"text":"x"}']),
)
raw_values = st.sampled_from([Raw(text) for text in RAW_LITERALS]) | huge_numbers | deep_values
any_text = st.text(st.characters(exclude_categories=()), max_size=10)  # lone surrogates included
BOUNDED_KEYS = frozenset({"steps", "delay", "seconds"})
"""Arguments of the demo's slow tools: only the tool strategies below give them (bounded) values."""
keys = (any_text | st.sampled_from(["text", "a", "b", "name", "_meta", "region", "priority", "id"])).filter(
    lambda key: key not in BOUNDED_KEYS
)
atoms = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | any_text
    | st.sampled_from(["", "x" * 70_000, "\x00", "\u2028", "\ufeff"])
)
json_values = st.recursive(
    atoms | raw_values,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=10,
)
plain_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
plain_keys = plain_text.filter(lambda key: key not in BOUNDED_KEYS)
plain_numbers = st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False)
plain_values = st.recursive(
    st.none() | st.booleans() | plain_numbers | plain_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_keys, inner, max_size=3),
    max_leaves=6,
)
junk = st.none() | st.booleans() | st.sampled_from(["", "abc", "1e", "-", "0x1", "3."]) | st.lists(st.none())
"""Values of the wrong type that no validator coerces into a big number."""


@dataclass(frozen=True)
class Values:
    """What one kind of example is made of: ``HOSTILE`` (anything) or ``PLAIN`` (what parses)."""

    text: st.SearchStrategy[str]
    number: st.SearchStrategy[Any]
    anything: st.SearchStrategy[Any]
    keys: st.SearchStrategy[str]
    hostile: bool


HOSTILE = Values(any_text, st.floats() | st.integers() | huge_numbers, json_values, keys, True)
PLAIN = Values(plain_text, plain_numbers, plain_values, plain_keys, False)


def maybe(strategy: st.SearchStrategy[Any], kind: Values) -> st.SearchStrategy[Any]:
    """``strategy`` most of the time, else any value of ``kind`` (of the wrong type, likely)."""
    return st.one_of(strategy, strategy, strategy, kind.anything)


# -- JSON-RPC messages -------------------------------------------------------------------------------


def tool_names(era: str) -> list[str]:
    names = ["echo", "add", "count", "sleep", "json_schema_2020_12_tool", "test_custom_headers"]
    names += ["test_simple_text", "test_error_handling", "test_image_content", "no_such_tool"]
    if era == MODERN:  # these ask the client: an input-required result now, a request on the stream in 2025
        names += [
            "test_elicitation",
            "test_sampling",
            "test_missing_capability",
            "test_streaming_elicitation",
            "test_logging_tool",
            "test_input_required_result_request_state",
            "test_input_required_result_multiple_inputs",
        ]
    return names


def arguments_of(name: str, kind: Values) -> st.SearchStrategy[Any]:
    """Arguments for the demo tool ``name``: the right keys (all of them for ``PLAIN``), mostly of the
    right type; the slow tools' durations stay short."""
    no_true = junk.filter(lambda value: value is not True)  # True is 1 (second)
    if name == "count" and kind.hostile:
        fixed = {"steps": st.integers(-3, 4) | junk, "delay": st.floats(-1.0, 0.01) | no_true}
    elif name == "count":
        fixed = {"steps": st.integers(0, 4), "delay": st.floats(0.0, 0.01)}
    elif name == "sleep":
        fixed = {"seconds": (st.floats(-1e9, 0.02) | no_true) if kind.hostile else st.floats(0.0, 0.02)}
    elif name == "echo":
        fixed = {"text": maybe(kind.text, kind)}
    elif name == "add":
        fixed = {"a": maybe(kind.number, kind), "b": maybe(kind.number, kind)}
    elif name == "test_custom_headers":
        fixed = {"region": maybe(kind.text, kind), "priority": maybe(st.integers(), kind)}
    elif name == "json_schema_2020_12_tool":
        address = st.fixed_dictionaries({"street": maybe(kind.text, kind), "city": maybe(kind.text, kind)})
        fixed = {
            "name": maybe(kind.text, kind),
            "contactMethod": maybe(st.sampled_from(["phone", "email", "fax"]), kind),
            "phone": maybe(kind.text, kind),
            "email": maybe(kind.text, kind),
            "address": maybe(address, kind),
        }
    else:
        return st.dictionaries(kind.keys, kind.anything, max_size=3)
    extra = st.dictionaries(kind.keys, kind.anything, max_size=2 if kind.hostile else 1)
    found = st.fixed_dictionaries({}, optional=fixed) if kind.hostile else st.fixed_dictionaries(fixed)
    return st.builds(lambda extra, found: {**extra, **found}, extra, found)


@st.composite
def tool_call_params(draw: st.DrawFn, era: str, kind: Values) -> dict[str, Any]:
    name = draw(st.sampled_from(tool_names(era)))
    params: dict[str, Any] = {"name": name, "arguments": draw(maybe(arguments_of(name, kind), kind))}
    if draw(st.booleans()):
        token = kind.anything if kind.hostile else st.integers(0, 2**53) | plain_text
        params["_meta"] = {"progressToken": draw(token)}
    if era == MODERN and draw(st.integers(0, 19)) == 0:
        params["requestState"] = draw(kind.text | st.sampled_from(["a.b", "x." + "A" * 43]))
    if era == MODERN and draw(st.integers(0, 19)) == 0:
        params["inputResponses"] = draw(kind.anything)
    return params


RESOURCE_URIS = [
    "test://static-text",
    "test://static-binary",
    "test://watched-resource",
    "test://template/7/data",
]
PROMPTS = ["test_simple_prompt", "test_prompt_with_arguments", "test_prompt_with_embedded_resource"]
PROMPTS += ["test_prompt_with_image", "no_such_prompt"]
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency", "loud"]


def params_of(method: str, era: str, kind: Values) -> st.SearchStrategy[Any]:
    text = kind.text
    uri = st.sampled_from(RESOURCE_URIS) | text.map(lambda text: f"test://template/{text}/data") | text
    prompts = [*PROMPTS, "test_input_required_result_prompt"] if era == MODERN else PROMPTS
    if method == "tools/call":
        return tool_call_params(era, kind)
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        return st.fixed_dictionaries({"uri": maybe(uri, kind)})
    if method == "prompts/get":
        return st.fixed_dictionaries(
            {"name": maybe(st.sampled_from(prompts), kind)},
            optional={"arguments": maybe(st.dictionaries(kind.keys, maybe(text, kind), max_size=3), kind)},
        )
    if method == "completion/complete":
        ref = st.fixed_dictionaries(
            {"type": maybe(st.sampled_from(["ref/prompt", "ref/resource"]), kind)},
            optional={"name": maybe(st.sampled_from(prompts), kind), "uri": maybe(uri, kind)},
        )
        argument = st.fixed_dictionaries({"name": maybe(text, kind), "value": maybe(text, kind)})
        return st.fixed_dictionaries({"ref": maybe(ref, kind), "argument": maybe(argument, kind)})
    if method == "logging/setLevel":
        return st.fixed_dictionaries({"level": maybe(st.sampled_from(LEVELS), kind)})
    if method == "initialize":
        version = st.sampled_from(["2025-11-25", "2025-06-18", "2025-03-26", MODERN])
        return st.fixed_dictionaries(
            {
                "protocolVersion": maybe(version, kind),
                "capabilities": maybe(st.just({}), kind),
                "clientInfo": maybe(st.just({"name": "fuzz", "version": "1"}), kind),
            }
        )
    if method == "notifications/cancelled":
        request_id = maybe(st.integers(0, 2**53) | text, kind)
        return st.fixed_dictionaries({"requestId": request_id}, optional={"reason": maybe(text, kind)})
    if method == "notifications/progress":
        token = maybe(st.integers(0, 2**53) | text, kind)
        return st.fixed_dictionaries({"progressToken": token, "progress": maybe(kind.number, kind)})
    if method == "subscriptions/listen":
        notifications = st.fixed_dictionaries(
            {},
            optional={
                "toolsListChanged": maybe(st.booleans(), kind),
                "resourceSubscriptions": maybe(st.lists(uri, max_size=2), kind),
            },
        )
        return st.fixed_dictionaries({}, optional={"notifications": maybe(notifications, kind)})
    return st.none() | st.fixed_dictionaries({}, optional={"cursor": maybe(text, kind)}) | kind.anything


METHODS = [
    "tools/call",
    "tools/list",
    "ping",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "initialize",
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "tasks/get",
    "no/such/method",
]


@dataclass
class Message:
    """A JSON-RPC request before its fields are mutated: what the 2026 headers mirror."""

    method: str
    params: Any
    value: Any
    """The message as sent (maybe mutated)."""


def meta_variants(kind: Values) -> st.SearchStrategy[Any]:
    """``_meta`` of a 2026 request: mostly right, sometimes wrong or missing (None: left out)."""
    right = {versions.PROTOCOL_VERSION_META_KEY: MODERN, mt.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}}}
    return st.one_of(
        st.just(right),
        st.just(right),
        st.just(right),
        st.just(right),
        st.builds(
            lambda version, capabilities, level, extra: {
                **extra,
                versions.PROTOCOL_VERSION_META_KEY: version,
                mt.CLIENT_CAPABILITIES_META_KEY: capabilities,
                **level,
            },
            maybe(st.sampled_from([MODERN, SESSION_VERSION, "2099-01-01"]), kind),
            maybe(st.sampled_from([{}, {"sampling": {}, "elicitation": {}, "roots": {}}]), kind),
            st.fixed_dictionaries({}, optional={mt.LOG_LEVEL_META_KEY: maybe(st.sampled_from(LEVELS), kind)}),
            st.dictionaries(kind.keys, kind.anything, max_size=2),
        ),
        st.none(),
        kind.anything,
    )


@st.composite
def messages(draw: st.DrawFn, era: str, mutate: bool) -> Message:
    """A request (or notification) for one of the server's methods (any method name too if ``mutate``),
    with parameters of the right shape, mostly; if ``mutate``, each field is sometimes dropped or of any
    type (huge, NaN, a surrogate...)."""
    methods = st.sampled_from([*METHODS, None]) if mutate else st.sampled_from(METHODS)
    method = draw(st.just("tools/call") | methods) or draw(any_text)  # half of them call a tool
    kind = HOSTILE if mutate else PLAIN
    params = draw(params_of(method, era, kind))
    if era == MODERN and (isinstance(params, dict) or params is None):
        meta = draw(meta_variants(kind))
        if meta is not None:
            params = dict(params or {})
            old = params.get("_meta")  # a progress token
            params["_meta"] = {**old, **meta} if isinstance(old, dict) and isinstance(meta, dict) else meta
    value: dict[str, Any] = {"jsonrpc": "2.0"}
    if not method.startswith("notifications/") or draw(st.integers(0, 9)) == 0:
        value["id"] = draw(st.integers(1, 2**31))
    value["method"] = method
    if params is not None:
        value["params"] = params
    if not mutate:
        return Message(method, params, value)
    for name in ("jsonrpc", "id", "method", "params"):
        change = draw(st.sampled_from(["keep"] * 6 + ["drop", "replace"]))
        if change == "drop":
            value.pop(name, None)
        elif change == "replace":
            value[name] = draw(json_values)
    if draw(st.integers(0, 7)) == 0:
        value.update(draw(st.dictionaries(st.sampled_from(["result", "error", "extra"]) | keys, json_values)))
    return Message(method, params, value)


@st.composite
def responses(draw: st.DrawFn) -> Any:
    """A JSON-RPC response (or error) from the client, though the server asked nothing."""
    answer = draw(st.sampled_from(["result", "error"]))
    payload = draw(
        maybe(st.just({"code": -32000, "message": "no"}), HOSTILE)
        if answer == "error"
        else maybe(st.just({}), HOSTILE)
    )
    return {"jsonrpc": "2.0", "id": draw(maybe(st.integers(0, 10**6), HOSTILE)), answer: payload}


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    how = draw(
        st.sampled_from(
            ["keep"] * 8 + ["truncate", "flip", "insert", "garbage", "bom", "utf16", "empty", "twice"]
        )
    )
    if how == "truncate":
        return data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    if how == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    if how == "insert":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if how == "garbage":
        return draw(st.binary(max_size=64))
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    if how == "utf16":
        return data.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass")
    if how == "empty":
        return b""
    if how == "twice":
        return data + data
    return data


@st.composite
def bodies(draw: st.DrawFn, era: str) -> tuple[bytes, Message | None]:
    """A POST body and the request it holds (None for a batch, a response or junk).  Half of them are
    well-formed requests (with arguments of any type), the other half anything."""
    mutate = draw(st.booleans())
    shape = draw(st.sampled_from(["message"] * 5 + ["batch", "response", "value"])) if mutate else "message"
    message: Message | None = None
    if shape == "message":
        message = draw(messages(era, mutate))
        value: Any = message.value
    elif shape == "batch":
        batch = messages(era, draw(st.booleans())).map(lambda found: found.value) | responses()
        value = draw(st.lists(batch, max_size=3))
    elif shape == "response":
        value = draw(responses())
    else:
        value = draw(json_values)
    data = encode(value, draw(st.booleans()))
    return (draw(mutated_bytes(data)) if mutate else data), message


# -- headers -------------------------------------------------------------------------------------------

WHITESPACE = frozenset(b" \t\n\r\x0b\x0c\x00")
header_words = st.binary(min_size=1, max_size=16).map(
    lambda data: bytes(b"x"[0] if byte in WHITESPACE else byte for byte in data)
)
random_values = st.lists(header_words, max_size=3).map(b" ".join)
"""Any header value h11 lets a client send: no NUL, CR or LF, no whitespace at either end."""
token = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~", min_size=1)
FRAMING = frozenset({"content-length", "transfer-encoding", "upgrade", "expect", "connection", "host", "te"})


def sendable(value: bytes) -> bytes:
    """A header value h11 lets a client send (a generated one may come from body text)."""
    return bytes(b"x"[0] if byte in b"\x00\r\n\x0b\x0c" else byte for byte in value).strip(b" \t")


def values(*choices: str | bytes) -> st.SearchStrategy[bytes]:
    fixed = [choice.encode() if isinstance(choice, str) else choice for choice in choices]
    return st.sampled_from(fixed) | random_values


ACCEPT = values(
    POST_HEADERS["accept"],
    "application/json",
    "text/event-stream",
    "*/*",
    "application/*, text/*",
    "",
    "application/json;q=0, text/event-stream;q=0",
    "APPLICATION/JSON, TEXT/EVENT-STREAM",
    "text/event-stream;q=0.5, application/json;q=1",
)
CONTENT_TYPE = values(
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "APPLICATION/JSON",
    "text/plain",
    "application/json-rpc",
    "application/json;;;",
    "",
)
VERSIONS = values(
    SESSION_VERSION,
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
    MODERN,
    "2099-01-01",
    "",
    "2025-11-25, 2025-11-25",
)
SESSION_IDS = values("0" * 32, "", "x" * 5000, b"\xff\xfe", "../../etc/passwd", "null")
EVENT_IDS = (
    st.sampled_from(
        ["0-0", "0-1", "1-0", "1-1", "2-3", "-1-0", "1-", "-", "0-\u00b2", "\u00b2-0", "1-\u0661"]
    ).map(lambda text: text.encode())
    | st.builds(lambda a, b: f"{a}-{b}".encode(), st.integers(0, 2**70), st.integers(0, 2**70))
    | random_values
)
EXTRA_NAMES: dict[str, st.SearchStrategy[bytes]] = {
    "last-event-id": EVENT_IDS,
    "mcp-session-id": SESSION_IDS,
    "mcp-protocol-version": VERSIONS,
    "mcp-method": values("tools/call", "ping", "tools/list"),
    "mcp-name": values("echo", "=?base64?ZWNobw==?=", "=?base64?!!?="),
    "mcp-param-region": values("eu", "=?base64?ZXU=?="),
    "mcp-param-priority": values("1", "-0", "1.0"),
    "origin": values("http://evil.example", "null", "http://127.0.0.1"),
    "content-encoding": values("gzip", "identity", "br"),
    "accept-encoding": values("gzip", "identity;q=0", "*;q=0"),
    "authorization": values("Bearer x", "Basic"),
    "cookie": values("a=b"),
}


@st.composite
def extra_headers(draw: st.DrawFn) -> list[tuple[str, HeaderValue]]:
    """0 to 3 headers more: MCP and HTTP names with odd values, or any name at all."""
    found: list[tuple[str, HeaderValue]] = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            name = draw(st.sampled_from(sorted(EXTRA_NAMES)))
            found.append((name, draw(EXTRA_NAMES[name])))
        else:
            name = draw(token.filter(lambda name: name.lower() not in FRAMING))
            found.append((name, draw(random_values)))
    if draw(st.integers(0, 9)) == 0:
        host = draw(values("127.0.0.1", "evil.example", "localhost:1", "[::1]"))
        found.append(("host", host))
    if draw(st.integers(0, 9)) == 0:
        found.append(("connection", draw(st.sampled_from([b"close", b"keep-alive", b"close, close"]))))
    return found


@st.composite
def mutated_headers(draw: st.DrawFn, base: Sequence[HeaderSpec]) -> tuple[tuple[str, HeaderValue], ...]:
    """``base`` (name, right value, other values) as is, half the time; else each header mostly kept,
    else dropped, changed, sent twice (alike or conflicting) or re-cased, then a few headers more."""
    if not draw(st.booleans()):
        return tuple((name, value) for name, value, _ in base)
    found: list[tuple[str, HeaderValue]] = []
    for name, value, others in base:
        change = draw(st.sampled_from(["keep"] * 8 + ["drop", "replace", "twice", "conflict", "case"]))
        if change == "drop":
            continue
        if change == "replace":
            found.append((name, draw(others)))
        elif change == "twice":
            found += [(name, value), (name, value)]
        elif change == "conflict":
            pair = [(name, value), (name, draw(others))]
            found += pair if draw(st.booleans()) else pair[::-1]
        elif change == "case":
            found.append((draw(st.sampled_from([name.upper(), name.title()])), value))
        else:
            found.append((name, value))
    found += draw(extra_headers())
    return tuple(found)


LIVE_OR_NOT = st.just(LIVE) | SESSION_IDS


@st.composite
def session_posts(draw: st.DrawFn) -> Case:
    """A 2025 POST on the live session."""
    body, _ = draw(bodies(SESSION_VERSION))
    base: list[HeaderSpec] = [
        ("accept", POST_HEADERS["accept"].encode(), ACCEPT),
        ("content-type", b"application/json", CONTENT_TYPE),
        ("mcp-session-id", LIVE, SESSION_IDS),
        ("mcp-protocol-version", SESSION_VERSION.encode(), VERSIONS),
    ]
    return Case("POST", draw(mutated_headers(base)), body)


@st.composite
def session_gets(draw: st.DrawFn) -> Case:
    base: list[HeaderSpec] = [
        ("accept", b"text/event-stream", ACCEPT),
        ("mcp-session-id", LIVE, SESSION_IDS),
        ("mcp-protocol-version", SESSION_VERSION.encode(), VERSIONS),
    ]
    if draw(st.booleans()):
        base.append(("last-event-id", draw(EVENT_IDS), EVENT_IDS))
    return Case("GET", draw(mutated_headers(base)))


@st.composite
def deletes(draw: st.DrawFn) -> Case:
    """A DELETE; it names the live session now and then (the session is then opened again)."""
    session = draw(st.one_of(st.just(LIVE), SESSION_IDS, SESSION_IDS, SESSION_IDS))
    base: list[HeaderSpec] = [
        ("mcp-session-id", session, LIVE_OR_NOT),
        ("mcp-protocol-version", SESSION_VERSION.encode(), VERSIONS),
    ]
    return Case("DELETE", draw(mutated_headers(base)))


def header_value(value: Any) -> bytes:
    """How a 2026 client mirrors a body value in a header (base64 unless plain visible ASCII)."""
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int | float):
        return json.dumps(value).encode()
    text = value if isinstance(value, str) else dump(value, True)
    if text and all(0x21 <= ord(c) <= 0x7E for c in text):
        return text.encode()
    return b"=?base64?" + base64.b64encode(text.encode("utf-8", "surrogatepass")) + b"?="


PARAM_VALUES = values(
    "=?base64?!!?=", "=?base64??=", "=?base64?/w==?=", "+1", "4.2e1", "1_0", "0x1", "nan", "eu"
)


@st.composite
def modern_posts(draw: st.DrawFn) -> Case:
    """A stateless 2026-07-28 POST whose headers mirror its body, both mutated."""
    body, message = draw(bodies(MODERN))
    base: list[HeaderSpec] = [
        ("accept", POST_HEADERS["accept"].encode(), ACCEPT),
        ("content-type", b"application/json", CONTENT_TYPE),
        ("mcp-protocol-version", MODERN.encode(), VERSIONS),
    ]
    method = message.method if message is not None else draw(st.sampled_from(METHODS))
    base.append(("mcp-method", method.encode("utf-8", "surrogatepass"), values(*METHODS)))
    params = message.params if message is not None and isinstance(message.params, dict) else {}
    for key in ("name", "uri"):
        if key in params:
            base.append(("mcp-name", header_value(params[key]), values("echo", "=?base64?ZWNobw==?=", "")))
    arguments = params.get("arguments")
    if isinstance(arguments, dict):
        for key in ("region", "priority"):
            if key in arguments:
                base.append((f"mcp-param-{key}", header_value(arguments[key]), PARAM_VALUES))
    headers = draw(mutated_headers(base))
    if draw(st.integers(0, 9)) == 0:  # a 2026 request that names a session, the live one or another
        headers += (("mcp-session-id", draw(LIVE_OR_NOT)),)
    return Case("POST", headers, body)


@st.composite
def modern_others(draw: st.DrawFn) -> Case:
    """GET and DELETE without a session (2026 has none): refused, whatever the headers."""
    base: list[HeaderSpec] = [
        ("accept", b"text/event-stream", ACCEPT),
        ("mcp-protocol-version", MODERN.encode(), VERSIONS),
    ]
    return Case(draw(st.sampled_from(["GET", "DELETE"])), draw(mutated_headers(base)))


session_cases = st.one_of(session_posts(), session_posts(), session_posts(), session_gets(), deletes())
modern_cases = st.one_of(modern_posts(), modern_posts(), modern_posts(), modern_posts(), modern_others())


# -- sending a case --------------------------------------------------------------------------------------


class Body(httpx.AsyncByteStream):
    """A request body that httpx sends from a plain async iterator: its own is an async generator that
    is garbage collected unfinished (a ResourceWarning) when the server answers before reading the body
    and the write fails."""

    def __init__(self, data: bytes) -> None:
        self.chunks = [data]

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if not self.chunks:
            raise StopAsyncIteration
        return self.chunks.pop()


def strict_json(data: bytes | str, what: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{what}: {name} is not JSON")

    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return json.loads(text, parse_constant=refuse)


class Fuzzer:
    """Sends cases on one ``httpx`` client, keeping one live 2025 session."""

    def __init__(self, http: httpx.AsyncClient, server: DemoServer, live: MCPClient) -> None:
        self.http = http
        self.server = server
        self.live = live
        self.sent = 0

    def resolve(self, case: Case) -> list[tuple[bytes, bytes]]:
        assert self.live.session_id is not None
        session = self.live.session_id.encode()
        return [
            (name.encode(), session if isinstance(value, Live) else sendable(value))
            for name, value in case.headers
        ]

    async def send(self, case: Case) -> None:
        headers = self.resolve(case)
        request = self.http.build_request(
            case.method,
            self.server.url,
            headers=headers,
            content=case.body if case.method == "POST" else None,
        )
        if case.method == "POST":
            request.stream = Body(case.body)  # httpx's own warns if the server answers before reading it
        messages: list[Any] = []
        try:
            with trio.fail_after(DEADLINE):
                response = await self.http.send(request, stream=True)
                try:
                    status = response.status_code
                    if status >= 500:
                        body = await response.aread()
                        raise AssertionError(f"{status}: {body[:500]!r}\nserver stderr:\n{self.server.log()}")
                    long_lived = case.method == "GET" or b"subscriptions/listen" in case.body
                    messages = await self.read(response, long_lived)
                finally:
                    await response.aclose()
        except trio.TooSlowError:
            raise AssertionError(f"no whole response within {DEADLINE} s (a hang)") from None
        except httpx.HTTPError as exc:
            raise AssertionError(f"the connection was dropped: {exc!r}") from exc
        self.sent += 1
        created = response.headers.get("mcp-session-id")
        if created is not None and created != self.live.session_id:
            await self.delete_session(created, messages)
        if case.method == "DELETE" and status == 200 and not await self.alive():
            # the case deleted the live session (it named it right): carry on with a new one
            self.live = await open_session(self.http, self.server.url)

    async def alive(self) -> bool:
        """Whether the live session still answers a ``ping`` (404 once it ended)."""
        body = b'{"jsonrpc":"2.0","id":0,"method":"ping"}'
        with trio.fail_after(DEADLINE):
            response = await self.http.post(
                self.server.url, content=body, headers=self.live.headers(**POST_HEADERS)
            )
        assert response.status_code in (200, 404), (response.status_code, response.text)
        return response.status_code == 200

    async def read(self, response: httpx.Response, long_lived: bool) -> list[Any]:
        """The whole body (what a long-lived stream sends within ``LINGER``); the JSON messages in it."""
        content_type = response.headers.get("content-type", "")
        if not content_type.startswith("text/event-stream"):
            body = await response.aread()
            if content_type.startswith("application/json"):
                return [strict_json(body, f"{response.status_code} body {body[:300]!r}")]
            return []
        stream = SSEResponse(response)
        events = []
        try:
            if long_lived:
                with trio.move_on_after(LINGER):
                    while (event := await stream.next_event()) is not None:
                        events.append(event)
            else:
                events = await stream.rest()
                assert stream.ended
        finally:
            await stream.aclose()
        return [strict_json(event.data, f"event {event.data[:300]!r}") for event in events if event.data]

    async def delete_session(self, session_id: str, messages: list[Any]) -> None:
        """Delete a session a case created (a valid ``initialize``), under the version it negotiated."""
        negotiated = [
            message["result"]["protocolVersion"]
            for message in messages
            if isinstance(message, dict)
            and isinstance(message.get("result"), dict)
            and isinstance(message["result"].get("protocolVersion"), str)
        ]
        for version in [*negotiated, None, SESSION_VERSION, "2025-06-18", "2025-03-26"]:
            headers = {"mcp-session-id": session_id}
            if version is not None:
                headers["mcp-protocol-version"] = version
            with trio.fail_after(DEADLINE):
                response = await self.http.delete(self.server.url, headers=headers)
            assert response.status_code < 500, (response.status_code, response.text)
            if response.status_code in (200, 404):
                return
        raise AssertionError(f"could not delete the session {session_id} a case created")

    async def finish(self) -> None:
        """The live session still answers; then it ends."""
        with trio.fail_after(DEADLINE):
            assert await self.live.echo("still here") == "still here"
            await self.live.delete()


async def open_session(http: httpx.AsyncClient, url: str) -> MCPClient:
    client = MCPClient(http, url)
    with trio.fail_after(DEADLINE):
        await client.initialize()
        await client.initialized()
    return client


async def fuzz(server: DemoServer, baseline: Baseline, cases: st.SearchStrategy[Case]) -> None:
    """Run ``cases`` through hypothesis (in a worker thread), each sent from this Trio run."""
    async with http_client(timeout=httpx.Timeout(DEADLINE)) as http:
        del http.headers["accept"]  # httpx's default: a case that drops Accept must send none
        fuzzer = Fuzzer(http, server, await open_session(http, server.url))

        @FUZZ_SETTINGS
        @given(case=cases)
        def run(case: Case) -> None:
            trio.from_thread.run(fuzzer.send, case)

        await trio.to_thread.run_sync(run)
        assert fuzzer.sent >= EXAMPLES // 2, fuzzer.sent
        await fuzzer.finish()
    await assert_back_to_baseline(server, baseline)
    assert (await fetch_stats(server))["sessions"] == 0


@pytest.mark.deadline(120)  # each example has its own deadline (DEADLINE); all of them take seconds
async def test_fuzz_a_2025_session(demo_server: DemoServer, baseline: Baseline) -> None:
    """Mutated POSTs, GETs and DELETEs on a live 2025-11-25 session."""
    await fuzz(demo_server, baseline, session_cases)


@pytest.mark.deadline(120)
async def test_fuzz_stateless_2026_requests(demo_server: DemoServer, baseline: Baseline) -> None:
    """Mutated stateless 2026-07-28 requests (a live 2025 session meanwhile, named by a few of them)."""
    await fuzz(demo_server, baseline, modern_cases)
