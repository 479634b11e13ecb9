"""Parsing of ``WWW-Authenticate`` (RFC 9110 section 11.6.1, RFC 6750, RFC 9728) and the URL rules of
the OAuth client's discovery: what is read from well-formed and odd headers, and that no header, however
hostile, makes the parser raise or take long."""

from __future__ import annotations

import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_trio.auth.client._challenge import (
    BearerChallenge,
    Challenge,
    bearer_challenge,
    parse_www_authenticate,
)
from mcp_trio.auth.client._urls import (
    canonical_url,
    resource_matches,
    resource_metadata_urls,
    server_metadata_urls,
)


def parse(*values: str) -> list[Challenge]:
    return parse_www_authenticate(values)


def test_the_mcp_challenge() -> None:
    [challenge] = parse(
        'Bearer error="insufficient_scope", scope="files:read files:write",'
        ' resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource",'
        ' error_description="File write permission required"'
    )
    assert challenge.scheme == "bearer"
    assert challenge.params == {
        "error": "insufficient_scope",
        "scope": "files:read files:write",
        "resource_metadata": "https://mcp.example.com/.well-known/oauth-protected-resource",
        "error_description": "File write permission required",
    }


def test_several_challenges_in_one_value_and_in_several_headers() -> None:
    found = parse('Basic realm="a, b", Bearer realm="x", scope=read', 'DPoP algs="ES256 RS256"')
    assert [(c.scheme, dict(c.params)) for c in found] == [
        ("basic", {"realm": "a, b"}),
        ("bearer", {"realm": "x", "scope": "read"}),
        ("dpop", {"algs": "ES256 RS256"}),
    ]


def test_token68_quoting_case_and_repeats() -> None:
    assert parse("Negotiate a87421000492aa874209af8bc028==") == [
        Challenge("negotiate", {}, "a87421000492aa874209af8bc028==")
    ]
    [challenge] = parse('BEARER Scope="a\\"b\\\\c" , SCOPE="second", error = invalid_token')
    assert challenge.scheme == "bearer"
    assert challenge.params == {"scope": 'a"b\\c', "error": "invalid_token"}  # the first repeat wins
    assert parse("Bearer, Basic") == [Challenge("bearer"), Challenge("basic")]


def test_odd_but_readable_headers() -> None:
    assert parse('Bearer scope="unterminated') == [Challenge("bearer", {"scope": "unterminated"})]
    assert parse(",,, ,Bearer   realm=x,,") == [Challenge("bearer", {"realm": "x"})]
    assert parse('Bearer realm="x"junk, error="e"')[0].params["realm"] == "x"
    assert parse("", "   ", '"""', "(((") == []


def headers(*values: str) -> httpx.Headers:
    return httpx.Headers([("www-authenticate", v) for v in values])


def test_bearer_challenge_picks_the_bearer_one() -> None:
    found = bearer_challenge(
        headers('Basic realm="r"', 'Bearer resource_metadata="https://x/prm", scope="a b a"')
    )
    assert found == BearerChallenge(resource_metadata="https://x/prm", scope=("a", "b"))
    assert bearer_challenge(headers()) == BearerChallenge()
    # no Bearer challenge: one with parameters will do (a server naming its scheme oddly)
    assert bearer_challenge(headers('Custom error="invalid_token"')).error == "invalid_token"
    assert bearer_challenge(headers('Bearer scope=""')).scope is None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=4))
def test_no_header_makes_the_parser_raise(values: list[str]) -> None:
    for challenge in parse_www_authenticate(values):
        assert challenge.scheme and challenge.scheme == challenge.scheme.lower()
        assert all(name == name.lower() for name in challenge.params)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
            st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=40),
        ),
        min_size=1,
        max_size=5,
        unique_by=lambda pair: pair[0],
    )
)
def test_quoted_parameters_read_back(params: list[tuple[str, str]]) -> None:
    quoted = ", ".join(
        f'{name}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for name, value in params
    )
    [challenge] = parse(f"Bearer {quoted}")
    assert dict(challenge.params) == dict(params)


@pytest.mark.parametrize(
    "value",
    [
        "a" * 100_000,
        "Bearer " + "x=" * 50_000,
        "Bearer " + ", " * 50_000,
        'Bearer scope="' + "\\" * 100_000,
        "Bearer " + "a " * 50_000,
        "=" * 100_000,
    ],
)
def test_hostile_headers_are_cheap(value: str) -> None:
    started = time.perf_counter()
    parse(value)
    assert time.perf_counter() - started < 1.0


def test_urls() -> None:
    assert canonical_url("HTTPS://MCP.Example.com/") == "https://mcp.example.com"
    assert canonical_url("https://mcp.example.com/Path/mcp#frag") == "https://mcp.example.com/Path/mcp"
    assert resource_metadata_urls("https://h.example/public/mcp", "https://h.example/prm") == [
        "https://h.example/prm",
        "https://h.example/.well-known/oauth-protected-resource/public/mcp",
        "https://h.example/.well-known/oauth-protected-resource",
    ]
    # a header value that is not an http(s) URL is ignored; a server at the root has one candidate
    assert resource_metadata_urls("https://h.example", "javascript:alert(1)") == [
        "https://h.example/.well-known/oauth-protected-resource"
    ]
    assert server_metadata_urls("https://auth.example.com/tenant1") == [
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.example.com/.well-known/openid-configuration/tenant1",
        "https://auth.example.com/tenant1/.well-known/openid-configuration",
    ]
    assert server_metadata_urls("https://auth.example.com") == [
        "https://auth.example.com/.well-known/oauth-authorization-server",
        "https://auth.example.com/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize(
    ("resource", "server", "matches"),
    [
        ("https://h.example/mcp", "https://h.example/mcp", True),
        ("https://h.example", "https://h.example/mcp", True),
        ("https://h.example/", "https://h.example/mcp", True),
        ("https://H.EXAMPLE:443/mcp", "https://h.example/mcp", True),
        ("https://h.example/mcp", "https://h.example/mcp/", True),
        ("https://h.example/mc", "https://h.example/mcp", False),
        ("https://h.example/mcp/other", "https://h.example/mcp", False),
        ("https://evil.example/mcp", "https://h.example/mcp", False),
        ("http://h.example/mcp", "https://h.example/mcp", False),
        ("https://h.example:8443/mcp", "https://h.example/mcp", False),
        ("https://h.example/mcp#x", "https://h.example/mcp", False),
        ("not a url", "https://h.example/mcp", False),
        ("https://h.example:99999/mcp", "https://h.example/mcp", False),
    ],
)
def test_resource_matches(resource: str, server: str, matches: bool) -> None:
    assert resource_matches(resource, server) is matches
