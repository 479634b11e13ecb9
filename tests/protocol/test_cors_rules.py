"""Sans-IO rules of DNS-rebinding protection (when it applies, the allow-lists) and of CORS."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_trio._protocol import http
from mcp_trio.errors import RemoteProtocolError

APP = "https://app.example"


def preflight(
    origin: str | None = APP, requested: str | None = None, method: str = "POST"
) -> http.RequestFacts:
    headers = [(b"access-control-request-method", method.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if requested is not None:
        headers.append((b"access-control-request-headers", requested.encode()))
    return http.RequestFacts.from_headers("OPTIONS", headers)


# -- when protection applies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "allow_lists", "local_address", "applies"),
    [
        (None, False, "127.0.0.1", True),
        (None, False, "::1", True),
        (None, False, "10.1.2.3", False),
        (None, False, None, False),
        (None, True, "10.1.2.3", True),
        (None, True, None, True),
        (True, False, "10.1.2.3", True),
        (False, False, "127.0.0.1", False),
        (False, True, "127.0.0.1", False),
    ],
)
def test_when_protection_applies(
    setting: bool | None, allow_lists: bool, local_address: str | None, applies: bool
) -> None:
    result = http.protection_applies(setting, allow_lists=allow_lists, local_address=local_address)
    assert result is applies


def test_protecting_policy_adds_lists_to_loopback() -> None:
    policy = http.OriginPolicy.protecting(["MCP.example.com"], ["https://Tools.example/"])
    assert policy.host_allowed("mcp.example.com:443") and policy.host_allowed("localhost:1")
    assert not policy.host_allowed("evil.example")
    assert policy.origin_allowed("https://tools.example") and policy.origin_allowed("http://127.0.0.1:9")
    assert not policy.origin_allowed("https://evil.example")


def test_cors_origins_are_allowed_origins() -> None:
    policy = http.OriginPolicy.protecting(cors=http.CORSPolicy.of([APP, "http://dev.example:*"]))
    assert policy.origin_allowed(APP) and policy.origin_allowed("http://dev.example:5173")
    assert not policy.origin_allowed("https://evil.example")
    anyone = http.OriginPolicy.protecting(cors=http.CORSPolicy.of(["*"]))
    assert anyone.origin_allowed("https://evil.example")
    assert not anyone.host_allowed("evil.example")  # the Host check stays


@pytest.mark.parametrize(
    ("entry", "normalized"),
    [
        ("https://App.Example/", "https://app.example"),
        ("http://localhost:*", "http://localhost:*"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("null", "null"),
        ("app.example", None),
        ("https://app.example/path", None),
        ("https://user@app.example", None),
        ("*", None),
        ("", None),
    ],
)
def test_origin_entries(entry: str, normalized: str | None) -> None:
    if normalized is None:
        with pytest.raises(ValueError):
            http.normalize_origin(entry)
    else:
        assert http.normalize_origin(entry) == normalized


@pytest.mark.parametrize(
    ("entry", "normalized"),
    [
        ("MCP.example.com", "mcp.example.com"),
        ("mcp.example.com:8443", "mcp.example.com:8443"),
        ("[::1]:80", "[::1]:80"),
        ("https://mcp.example.com", None),
        ("mcp.example.com/mcp", None),
        ("", None),
    ],
)
def test_host_entries(entry: str, normalized: str | None) -> None:
    if normalized is None:
        with pytest.raises(ValueError):
            http.normalize_host(entry)
    else:
        assert http.normalize_host(entry) == normalized


# -- CORS -------------------------------------------------------------------------------------


def test_star_stands_alone() -> None:
    assert http.CORSPolicy.of(["*"]).any_origin
    with pytest.raises(ValueError, match="cannot be combined"):
        http.CORSPolicy.of(["*", APP])


def test_response_headers_of_an_explicit_list() -> None:
    policy = http.CORSPolicy.of([APP])
    assert policy.response_headers(APP) == [
        (b"access-control-allow-origin", APP.encode()),
        (
            b"access-control-expose-headers",
            b"Mcp-Session-Id, WWW-Authenticate, Retry-After, RateLimit-Limit, RateLimit-Remaining",
        ),
        (b"vary", b"Origin"),
    ]
    assert policy.response_headers("https://evil.example") == [(b"vary", b"Origin")]
    assert policy.response_headers(None) == [(b"vary", b"Origin")]


def test_response_headers_for_any_origin() -> None:
    policy = http.CORSPolicy.of(["*"])
    assert dict(policy.response_headers("https://x.example"))[b"access-control-allow-origin"] == b"*"
    assert policy.response_headers(None) == []


def test_is_preflight() -> None:
    assert http.is_preflight(preflight())
    assert not http.is_preflight(http.RequestFacts.from_headers("OPTIONS", [(b"origin", APP.encode())]))
    post = http.RequestFacts.from_headers("POST", [(b"access-control-request-method", b"POST")])
    assert not http.is_preflight(post)


def test_preflight_headers() -> None:
    headers = dict(
        http.cors_preflight(preflight(requested="Content-Type, MCP-Param-Region"), http.CORSPolicy.of([APP]))
    )
    assert headers == {
        b"access-control-allow-methods": b"GET, POST, DELETE, OPTIONS",
        b"access-control-allow-headers": b"content-type, mcp-param-region",
        b"access-control-max-age": b"7200",
    }


@pytest.mark.parametrize("origin", [None, "https://evil.example", "null"])
def test_preflight_refused(origin: str | None) -> None:
    with pytest.raises(RemoteProtocolError) as excinfo:
        http.cors_preflight(preflight(origin), http.CORSPolicy.of([APP]))
    assert excinfo.value.http_status == 403


def test_conflicting_request_methods_are_left_to_the_preflight() -> None:
    facts = http.RequestFacts.from_headers(
        "OPTIONS",
        [(b"access-control-request-method", b"POST"), (b"access-control-request-method", b"PUT")],
    )
    http.check_duplicates(facts)  # not a transport header
    with pytest.raises(RemoteProtocolError) as excinfo:
        http.cors_preflight(facts, http.CORSPolicy.of(["*"]))
    assert excinfo.value.http_status == 400


names = st.one_of(
    st.sampled_from(sorted(http.CORS_REQUEST_HEADERS)),
    st.from_regex(r"mcp-param-[a-z0-9-]{1,8}", fullmatch=True),
    st.text(min_size=0, max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(names, max_size=6), st.sampled_from([", ", ",", " , "]))
def test_allow_headers_never_names_a_header_mcp_does_not_use(requested: list[str], sep: str) -> None:
    try:
        headers = dict(
            http.cors_preflight(preflight(requested=sep.join(requested)), http.CORSPolicy.of([APP]))
        )
    except (UnicodeEncodeError, RemoteProtocolError):
        return  # not a header value the test can send
    allowed = headers[b"access-control-allow-headers"].decode().split(", ")
    for name in allowed:
        assert name in http.CORS_REQUEST_HEADERS or (name.startswith("mcp-param-") and len(name) > 10)


@pytest.mark.parametrize(
    "build",
    [
        lambda: http.OriginPolicy.protecting(hosts="mcp.example.com"),
        lambda: http.OriginPolicy.protecting(origins="https://app.example"),
        lambda: http.CORSPolicy.of("https://app.example"),
    ],
)
def test_one_string_is_not_a_list(build: Any) -> None:
    with pytest.raises(TypeError, match="collection of strings"):
        build()
