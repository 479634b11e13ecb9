"""The app's admission decisions on headers (``_protocol.admission``), without an app."""

from __future__ import annotations

import pytest

from mcp_trio._protocol import admission, http
from mcp_trio.errors import RemoteProtocolError

APP = "https://app.example"


def facts(method: str = "POST", **headers: str) -> http.RequestFacts:
    pairs = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    return http.RequestFacts.from_headers(method, pairs)


def rules(**overrides: object) -> admission.Admission:
    config: dict[str, object] = {
        "path": "/mcp",
        "allowed_hosts": None,
        "allowed_origins": None,
        "cors_origins": None,
        "dns_rebinding_protection": None,
    }
    config.update(overrides)
    return admission.Admission.of(**config)  # type: ignore[arg-type]


def test_path() -> None:
    rules().check_path("/mcp")
    rules().check_path("/mcp/")
    rules(path=None).check_path("/anything")
    with pytest.raises(RemoteProtocolError) as caught:
        rules().check_path("/other")
    assert caught.value.http_status == 404


def test_protection_on_loopback_only_by_default() -> None:
    foreign = facts(host="evil.example", origin="https://evil.example")
    rules().check(foreign, "10.0.0.1")  # not a loopback connection: no protection
    with pytest.raises(RemoteProtocolError) as caught:
        rules().check(foreign, "127.0.0.1")
    assert caught.value.http_status == 421
    rules().check(facts(host="localhost:8000"), "127.0.0.1")


def test_allow_lists_protect_everywhere() -> None:
    listed = rules(allowed_hosts=frozenset({"mcp.example"}))
    listed.check(facts(host="mcp.example"), "10.0.0.1")
    with pytest.raises(RemoteProtocolError):
        listed.check(facts(host="evil.example"), "10.0.0.1")
    off = rules(allowed_hosts=frozenset({"mcp.example"}), dns_rebinding_protection=False)
    off.check(facts(host="evil.example"), "127.0.0.1")


def test_conflicting_duplicates_are_refused() -> None:
    request = http.RequestFacts.from_headers("POST", [(b"host", b"a"), (b"host", b"b")])
    with pytest.raises(RemoteProtocolError, match="conflicting duplicate host"):
        rules().check(request, None)


def test_cors_headers_and_preflight() -> None:
    assert rules().cors_headers(APP) == []
    cors = rules(cors_origins=frozenset({APP}))
    assert cors.cors_headers(APP)
    preflight = facts("OPTIONS", origin=APP, access_control_request_method="POST")
    assert rules().preflight(preflight, None) is None  # CORS off: not answered as a preflight
    assert cors.preflight(facts("POST", origin=APP), None) is None
    headers = cors.preflight(preflight, "127.0.0.1")
    assert headers is not None
    assert (b"access-control-allow-methods", http.CORS_ALLOW_METHODS.encode()) in headers
    foreign = facts("OPTIONS", origin="https://evil.example", access_control_request_method="POST")
    with pytest.raises(RemoteProtocolError) as caught:
        cors.preflight(foreign, None)
    assert caught.value.http_status == 403


def test_modern_revisions_have_no_get_or_delete() -> None:
    admission.refuse_modern(facts("GET"))
    admission.refuse_modern(facts("GET", mcp_protocol_version="2025-06-18"))
    with pytest.raises(RemoteProtocolError) as caught:
        admission.refuse_modern(facts("DELETE", mcp_protocol_version="2026-07-28"))
    assert caught.value.http_status == 405 and ("allow", "POST") in caught.value.headers


def test_stats_method() -> None:
    admission.check_stats_method(facts("GET"))
    with pytest.raises(RemoteProtocolError) as caught:
        admission.check_stats_method(facts("POST"))
    assert caught.value.http_status == 405


def test_refusals() -> None:
    assert admission.AMBIGUOUS_FRAMING.headers == (("connection", "close"),)
    assert admission.body_timeout(2).http_status == 408
    quota = admission.over_quota("principal", 7)
    assert quota.http_status == 429 and quota.request_id == 7 and "principal" in str(quota)
    assert admission.no_more_connections().http_status == 503
    assert "worker w2" in str(admission.lives_elsewhere("w2"))


def test_header_name() -> None:
    assert admission.header_name(facts()) is None
    assert admission.header_name(facts(mcp_name="echo")) == "echo"
