"""The OAuth client's URL policy (auth.client._urls.URLPolicy): where a server may send the client
during discovery, and what the client refuses before any connection.

Against the stub authorization server and protected resource (oauth_stub.py, real hypercorn on
127.0.0.1) with the OAuth client's own ``httpx.AsyncClient`` on a transport that records every request
it sends (so a refused URL is shown never to have been connected to); the https rules, which need an
MCP server named by https and other hosts, run :func:`discover` on an in-memory ``httpx.MockTransport``
network (the tests never connect to anything but loopback).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from mcp_trio.auth import OAuth, OAuthError
from mcp_trio.auth.client._challenge import BearerChallenge
from mcp_trio.auth.client._discovery import discover
from mcp_trio.auth.client._flow import read_callback
from mcp_trio.auth.client._urls import URLPolicy, host_kind

from .conftest import IGNORE_HTTPX_ASYNCGEN_WARNINGS
from .oauth_stub import BrowserRedirect, oauth_world

pytestmark = IGNORE_HTTPX_ASYNCGEN_WARNINGS


class Recording(httpx.AsyncHTTPTransport):
    """httpx's own transport, noting the URL of every request before it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[httpx.URL] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(request.url)
        return await super().handle_async_request(request)

    def hosts(self) -> set[str]:
        return {url.host for url in self.urls}


async def authorize(rs_url: str) -> tuple[Recording, httpx.Response | OAuthError]:
    """One request to the protected resource through OAuth (its own client recording); the response, or
    the OAuthError it raised."""
    recording = Recording()
    async with httpx.AsyncClient(transport=recording, timeout=10.0) as as_client:
        auth = OAuth(redirect=BrowserRedirect(), http=as_client)
        async with httpx.AsyncClient(timeout=10.0, auth=auth) as client:
            with trio.fail_after(10):
                try:
                    return recording, await client.post(f"{rs_url}/mcp", content=b"{}")
                except OAuthError as exc:
                    return recording, exc


# -- the rules --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.1", "loopback"),  # the socket layer's legacy IPv4 forms
        ("2130706433", "loopback"),
        ("0x7f000001", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "loopback"),
        ("localhost", "loopback"),
        ("LOCALHOST.", "loopback"),
        ("api.localhost", "loopback"),
        ("169.254.169.254", "link-local"),
        ("0xa9fea9fe", "link-local"),
        ("::ffff:169.254.169.254", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("10.0.0.1", "private"),
        ("192.168.1.2", "private"),
        ("172.16.0.1", "private"),
        ("100.64.0.1", "private"),  # shared address space: not global
        ("fd00::1", "private"),
        ("224.0.0.1", "forbidden"),
        ("ff02::1", "forbidden"),
        ("240.0.0.1", "forbidden"),
        ("8.8.8.8", "public"),
        ("2001:4860:4860::8888", "public"),
        ("auth.example.com", "public"),
        ("deadbeef", "public"),  # a name (inet_aton refuses it), not an address
    ],
)
def test_host_kinds(host: str, kind: str) -> None:
    assert host_kind(host) == kind


@pytest.mark.parametrize(
    ("server", "target", "refusal"),
    [
        ("https://mcp.example.com/mcp", "https://auth.example.com/", None),
        ("https://mcp.example.com/mcp", "http://auth.example.com/", "uses https"),
        ("https://mcp.example.com/mcp", "http://127.0.0.1:9000/", "loopback address"),  # https-exempt only
        ("https://127.0.0.1/mcp", "http://127.0.0.1:9000/", None),  # loopback: http allowed
        ("https://localhost/mcp", "http://[::1]:9000/", None),
        ("http://mcp.example.com/mcp", "http://auth.example.com/", None),
        ("http://127.0.0.1:8000/mcp", "http://169.254.169.254/latest", "link-local address"),
        ("http://127.0.0.1:8000/mcp", "http://10.0.0.1/", "private address"),
        ("http://10.0.0.5/mcp", "http://10.0.0.1/", None),  # a private server may use a private AS
        ("http://10.0.0.5/mcp", "http://169.254.169.254/", "link-local address"),
        ("http://10.0.0.5/mcp", "http://localhost:8080/", "loopback address"),
        ("https://mcp.example.com/mcp", "https://[fd00::1]/", "private address"),
        ("https://mcp.example.com/mcp", "https://224.0.0.1/", "multicast"),
        ("http://127.0.0.1/mcp", "http://0.0.0.0/", None),
        ("https://mcp.example.com/mcp", "ftp://auth.example.com/", "not an http(s) URL"),
        ("https://mcp.example.com/mcp", "https://[::1/", "not a URL"),
    ],
)
def test_the_policy(server: str, target: str, refusal: str | None) -> None:
    why = URLPolicy(server).refusal(target)
    if refusal is None:
        assert why is None
    else:
        assert why is not None and refusal in why


# -- against the stub servers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam",
        "http://10.0.0.1/.well-known/oauth-protected-resource",
        "http://[::ffff:a9fe:a9fe]/x",
        "http://0xa9fea9fe/x",
    ],
)
async def test_a_resource_metadata_url_on_a_non_public_address_is_never_fetched(url: str) -> None:
    async with oauth_world() as (authz, rs):
        rs.metadata_url_override = url
        recording, outcome = await authorize(rs.url)
        assert isinstance(outcome, OAuthError)
        assert "refusing the metadata URL" in outcome.message and "URL policy" in outcome.message
        assert recording.hosts() == set()  # refused before anything was sent
        assert sum(authz.hits.values()) == 0


async def test_an_authorization_server_on_a_private_address_is_skipped() -> None:
    async with oauth_world() as (authz, rs):
        rs.authorization_servers_override = ["http://10.0.0.1/", "http://169.254.169.254"]
        recording, outcome = await authorize(rs.url)
        assert isinstance(outcome, OAuthError)
        assert "no authorization server metadata" in outcome.message
        assert "http://10.0.0.1/ refused: it names a private address" in outcome.message
        assert "link-local" in outcome.message
        assert recording.hosts() == {"127.0.0.1"}  # the resource metadata only
        assert sum(authz.hits.values()) == 0


async def test_a_usable_authorization_server_after_a_refused_one_is_used() -> None:
    async with oauth_world() as (authz, rs):
        rs.authorization_servers_override = ["http://10.0.0.1/", authz.url]
        recording, outcome = await authorize(rs.url)
        assert isinstance(outcome, httpx.Response) and outcome.status_code == 200
        assert recording.hosts() == {"127.0.0.1"}


@pytest.mark.parametrize("endpoint", ["token_endpoint", "registration_endpoint", "authorization_endpoint"])
@pytest.mark.parametrize("host", ["10.0.0.1", "[::ffff:169.254.169.254]", "224.0.0.1"])
async def test_metadata_naming_an_endpoint_the_policy_refuses_is_refused(endpoint: str, host: str) -> None:
    async with oauth_world() as (authz, rs):
        authz.metadata_override[endpoint] = f"http://{host}/{endpoint}"
        recording, outcome = await authorize(rs.url)
        assert isinstance(outcome, OAuthError)
        assert f"refusing the {endpoint}" in outcome.message
        assert recording.hosts() == {"127.0.0.1"}
        assert authz.hits["/register"] == 0 and authz.hits["/token"] == 0
        assert authz.hits["/.well-known/oauth-authorization-server"] == 1


async def test_redirects_are_followed_up_to_three_each_checked() -> None:
    async with oauth_world() as (_, rs):
        rs.redirect_hops = 3
        _, outcome = await authorize(rs.url)
        assert isinstance(outcome, httpx.Response) and outcome.status_code == 200
        assert [rs.hits[f"/hop/{n}"] for n in (3, 2, 1)] == [1, 1, 1]


async def test_a_fourth_redirect_is_refused() -> None:
    async with oauth_world() as (authz, rs):
        rs.redirect_hops = 4
        _, outcome = await authorize(rs.url)
        assert isinstance(outcome, OAuthError) and "more than 3 redirects" in outcome.message
        assert [rs.hits[f"/hop/{n}"] for n in (4, 3, 2, 1)] == [1, 1, 1, 1]  # three redirects followed
        assert rs.hits["/.well-known/oauth-protected-resource"] == 0  # the fourth was not
        assert sum(authz.hits.values()) == 0


async def test_a_redirect_to_a_link_local_address_is_refused_before_it_is_followed() -> None:
    async with oauth_world() as (authz, rs):
        rs.redirect_hops = 1
        rs.redirect_last_to = "http://169.254.169.254/latest/meta-data?token=x"
        recording, outcome = await authorize(rs.url)
        assert isinstance(outcome, OAuthError)
        assert "refusing the redirect from" in outcome.message and "link-local" in outcome.message
        assert "token=x" not in outcome.message  # a URL's query is never quoted
        assert recording.hosts() == {"127.0.0.1"}
        assert sum(authz.hits.values()) == 0


# -- https (an in-memory network: these hosts are never connected to) -------------------------------


def network(documents: dict[str, Any], redirects: dict[str, str] | None = None) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        if redirects and url in redirects:
            return httpx.Response(302, headers={"location": redirects[url]})
        if url in documents:
            return httpx.Response(200, json=documents[url])
        return httpx.Response(404)

    return httpx.MockTransport(answer)


PRM_URL = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


def as_metadata(issuer: str, **endpoints: str) -> dict[str, Any]:
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        **endpoints,
    }


async def discover_with(
    documents: dict[str, Any], redirects: dict[str, str] | None = None
) -> tuple[list[str], Any]:
    seen: list[str] = []
    transport = network(documents, redirects)

    async def note(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async with httpx.AsyncClient(transport=transport, event_hooks={"request": [note]}) as client:
        try:
            return seen, await discover(client, "https://mcp.example.com/mcp", BearerChallenge())
        except OAuthError as exc:
            return seen, exc


async def test_an_https_server_with_an_https_authorization_server_is_fine() -> None:
    issuer = "https://auth.example.com"
    seen, found = await discover_with(
        {
            PRM_URL: {"resource": "https://mcp.example.com/mcp", "authorization_servers": [issuer]},
            f"{issuer}/.well-known/oauth-authorization-server": as_metadata(issuer),
        }
    )
    assert not isinstance(found, OAuthError), found
    assert found.metadata.token_endpoint == f"{issuer}/token"
    assert seen == [PRM_URL, f"{issuer}/.well-known/oauth-authorization-server"]


async def test_an_https_server_naming_an_http_authorization_server_is_refused() -> None:
    seen, outcome = await discover_with(
        {
            PRM_URL: {
                "resource": "https://mcp.example.com/mcp",
                "authorization_servers": ["http://auth.example.com"],
            }
        }
    )
    assert isinstance(outcome, OAuthError)
    assert "the MCP server uses https, so every authorization URL must too" in outcome.message
    assert seen == [PRM_URL]


async def test_an_https_server_whose_authorization_server_has_an_http_token_endpoint_is_refused() -> None:
    issuer = "https://auth.example.com"
    seen, outcome = await discover_with(
        {
            PRM_URL: {"resource": "https://mcp.example.com/mcp", "authorization_servers": [issuer]},
            f"{issuer}/.well-known/oauth-authorization-server": as_metadata(
                issuer, token_endpoint="http://auth.example.com/token"
            ),
        }
    )
    assert isinstance(outcome, OAuthError)
    assert "refusing the token_endpoint" in outcome.message and "must too" in outcome.message
    assert all(url.startswith("https://") for url in seen)


async def test_a_redirect_from_https_to_http_is_refused() -> None:
    issuer = "https://auth.example.com"
    metadata = f"{issuer}/.well-known/oauth-authorization-server"
    seen, outcome = await discover_with(
        {PRM_URL: {"resource": "https://mcp.example.com/mcp", "authorization_servers": [issuer]}},
        {metadata: "http://auth.example.com/metadata.json"},
    )
    assert isinstance(outcome, OAuthError)
    assert "refusing the redirect from" in outcome.message and "must too" in outcome.message
    assert seen == [PRM_URL, metadata]


# -- secrets and hostile answers --------------------------------------------------------------------


def test_a_callback_url_that_is_not_a_url_is_not_quoted() -> None:
    with pytest.raises(OAuthError) as caught:
        read_callback("http://[::1?code=SECRET-CODE&state=s", state="s", issuer="x", iss_supported=False)
    assert "SECRET-CODE" not in str(caught.value)


@pytest.mark.parametrize(
    ("part", "raw", "match"),
    [
        ("metadata", b"[" * 100_000 + b"]" * 100_000, "no authorization server metadata"),
        (
            "metadata",
            json.dumps({"issuer": "x"}).encode()[:-1] + b', "n": ' + b"9" * 9000 + b"}",
            "no authorization",
        ),
        (
            "token",
            b'{"access_token": "a", "token_type": "Bearer", "x": ' + b"[" * 50_000 + b"}",
            "token request",
        ),
        ("token", b'{"access_token": "\\ud800", "token_type": "Bearer"}', "token request"),
        ("token", b'{"access_token": "a", "token_type": "Bearer", "expires_in": 1e999}', "token request"),
    ],
    ids=["deep-metadata", "long-number", "deep-token", "surrogate-token", "inf-token"],
)
async def test_hostile_authorization_server_answers_are_oauth_errors(
    part: str, raw: bytes, match: str
) -> None:
    async with oauth_world() as (authz, rs):
        if part == "metadata":
            authz.metadata_raw = raw
        else:
            authz.token_raw = raw
        _, outcome = await authorize(rs.url)
        assert isinstance(outcome, OAuthError) and match in outcome.message, outcome
