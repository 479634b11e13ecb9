"""The sans-IO request checks, and the rule that the protocol core does no I/O."""

from __future__ import annotations

import ast
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_trio._protocol import http, versions
from mcp_trio._protocol.session import (
    SessionEvent,
    SessionState,
    make_event_id,
    new_session_id,
    parse_event_id,
    transition,
)
from mcp_trio.errors import RemoteProtocolError

PROTOCOL_DIR = pathlib.Path(versions.__file__).parent
FORBIDDEN = {"trio", "hypercorn", "httpx", "httpcore", "anyio", "asyncio", "h11", "socket"}


@pytest.mark.parametrize(
    "path", sorted(PROTOCOL_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(PROTOCOL_DIR))
)
def test_protocol_core_is_sans_io(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)), path
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        assert not {n.split(".")[0] for n in names} & FORBIDDEN, (path.name, names)


@pytest.mark.parametrize(
    ("accept", "json_ok", "sse_ok"),
    [
        ("application/json, text/event-stream", True, True),
        ("text/event-stream;q=0.9, application/json", True, True),
        ("*/*", True, True),
        ("application/*", True, False),
        ("text/*, application/json;q=0", False, True),
        ("APPLICATION/JSON", True, False),
        ("", False, False),
        (None, False, False),
    ],
)
def test_accept(accept: str | None, json_ok: bool, sse_ok: bool) -> None:
    assert http.accepts(accept, "application/json") is json_ok
    assert http.accepts(accept, "text/event-stream") is sse_ok


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_accept_never_raises(accept: str) -> None:
    http.accepts(accept, "application/json")


def facts(**kw: object) -> http.RequestFacts:
    return http.RequestFacts(**{"method": "POST", **kw})  # type: ignore[arg-type]


def test_json_only_mode_needs_only_json() -> None:
    http.check_post(
        facts(accept="application/json", content_type="application/json"), max_body_size=10, json_only=True
    )
    with pytest.raises(RemoteProtocolError):
        http.check_post(facts(accept="application/json", content_type="application/json"), max_body_size=10)


@pytest.mark.parametrize("padding", [0, 400], ids=["cached", "longer-than-cached"])
def test_check_post_verdicts_same_for_long_header_values(padding: int) -> None:
    """Accept and Content-Type verdicts are cached only for short values; long ones get the same answer."""
    pad = ", text/plain;q=0.5" * (padding // 18)
    both = f"application/json, text/event-stream{pad}"
    http.check_post(facts(accept=both, content_type="application/json; charset=utf-8"), max_body_size=10)
    with pytest.raises(RemoteProtocolError) as refused:
        http.check_post(
            facts(accept=f"application/json{pad}", content_type="application/json"), max_body_size=10
        )
    assert refused.value.http_status == 406
    with pytest.raises(RemoteProtocolError) as refused:
        http.check_post(facts(accept=both, content_type=f"text/plain;{'x' * padding}"), max_body_size=10)
    assert refused.value.http_status == 415


def test_facts_from_headers_first_wins_and_bad_length_ignored() -> None:
    got = http.RequestFacts.from_headers(
        "POST",
        [
            (b"mcp-session-id", b"a"),
            (b"mcp-session-id", b"b"),
            (b"content-length", b"x1"),
            (b"x-other", b"1"),
        ],
    )
    assert got.session_id == "a" and got.content_length is None


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost", True),
        ("localhost:1234", True),
        ("127.0.0.1:80", True),
        ("[::1]:8000", True),
        ("[::1]", True),
        ("LOCALHOST:1", True),
        ("evil.example", False),
        ("localhost.evil.example", False),
        ("127.0.0.2", False),
    ],
)
def test_loopback_hosts(host: str, allowed: bool) -> None:
    assert http.OriginPolicy.loopback().host_allowed(host) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:5173", True),
        ("http://localhost:3000/", True),
        ("http://evil.example", False),
        ("null", False),
        ("file://localhost", False),
    ],
)
def test_loopback_origins(origin: str, allowed: bool) -> None:
    assert http.OriginPolicy.loopback().origin_allowed(origin) is allowed


def test_policy_off_allows_anything() -> None:
    policy = http.OriginPolicy.off()
    assert policy.host_allowed("anything") and policy.origin_allowed("anything")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        (None, False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str | None, loopback: bool) -> None:
    assert http.is_loopback(host) is loopback


def test_the_operations_listeners_host_rule() -> None:
    policy = http.OriginPolicy.protecting(["scrape.example"])
    assert http.local_host(("10.0.0.5", 9464)) == "10.0.0.5:9464"
    assert http.local_host(("FE80::1", 9464)) == "[fe80::1]:9464"
    assert http.local_host(("::ffff:10.0.0.5", 9464)) == "10.0.0.5:9464"
    assert http.local_host(None) is None and http.local_host(("/run/admin.sock", None)) is None

    def check(*hosts: bytes, local: str | None = "10.0.0.5:9464") -> bool:
        facts = http.RequestFacts.from_headers("GET", [(b"host", h) for h in hosts])
        try:
            http.check_listener_host(facts, policy, local)
        except RemoteProtocolError as exc:
            assert exc.http_status == 421 and "host" in exc.message
            return False
        return True

    assert check(b"10.0.0.5:9464") and check(b"localhost:1") and check(b"scrape.example:80") and check()
    assert not check(b"10.0.0.5:9465") and not check(b"10.0.0.5:9464", local=None)
    assert not check(b"rebind.example:9464") and not check(b"10.0.0.5:9464", b"rebind.example")


def test_protocol_version_header() -> None:
    assert http.check_protocol_version(facts()) is versions.REVISIONS["2025-03-26"]
    assert http.check_protocol_version(facts(protocol_version="2025-06-18")).name == "2025-06-18"
    with pytest.raises(RemoteProtocolError) as excinfo:
        http.check_protocol_version(facts(protocol_version="2026-07-28"))
    assert excinfo.value.http_status == 400


def test_revisions_as_data() -> None:
    assert [r.name for r in versions.REVISIONS.values() if r.batches] == ["2025-03-26"]
    assert [r.name for r in versions.REVISIONS.values() if r.priming_event] == ["2025-11-25"]
    assert versions.negotiate("2024-11-05") is versions.LATEST


def test_session_transition_table() -> None:
    state = transition(SessionState.INITIALIZING, SessionEvent.INITIALIZED)
    assert state is SessionState.ACTIVE
    assert transition(state, SessionEvent.CLOSE) is SessionState.CLOSED
    assert transition(SessionState.CLOSED, SessionEvent.INITIALIZED) is SessionState.CLOSED


def test_event_ids() -> None:
    assert parse_event_id(make_event_id(3, 17)) == (3, 17)
    for bad in ("", "3", "-1", "a-1", "1-b", "1-2-3", "9" * 50 + "-1"):
        assert parse_event_id(bad) is None, bad
    ids = {new_session_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) >= 32 for i in ids)


def _schema(**properties: object) -> dict[str, object]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize(
    ("schema", "valid"),
    [
        (_schema(region={"type": "string", "x-mcp-header": "Region"}), True),
        (
            _schema(n={"type": "integer", "x-mcp-header": "N"}, b={"type": "boolean", "x-mcp-header": "B"}),
            True,
        ),
        (
            _schema(outer={"type": "object", "properties": {"x": {"type": "string", "x-mcp-header": "X"}}}),
            True,
        ),
        (_schema(region={"type": "string", "x-mcp-header": ""}), False),
        (_schema(region={"type": "number", "x-mcp-header": "R"}), False),
        (_schema(region={"type": "object", "x-mcp-header": "R"}), False),
        (
            _schema(a={"type": "string", "x-mcp-header": "R"}, b={"type": "string", "x-mcp-header": "r"}),
            False,
        ),
        (_schema(a={"type": "string", "x-mcp-header": "has space"}), False),
        (_schema(a={"type": "string", "x-mcp-header": "Grüße"}), False),
        (_schema(xs={"type": "array", "items": {"type": "string", "x-mcp-header": "X"}}), False),
        ({"type": "object", "anyOf": [_schema(a={"type": "string", "x-mcp-header": "A"})]}, False),
        (_schema(plain={"type": "string"}), True),
    ],
)
def test_x_mcp_header_annotation_rules(schema: dict[str, object], valid: bool) -> None:
    from mcp_trio._protocol.modern import header_annotations_valid

    assert header_annotations_valid(schema) is valid
