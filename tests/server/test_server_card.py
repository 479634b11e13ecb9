"""The server card and the AI Catalog (the server card extension, SEP-2127, a draft), in memory.

The card is made from the server's own ``server/discover`` answer: these tests fetch both from one app
and hold them against each other, and check the headers the draft names (media types, CORS for any
origin, ``Cache-Control``, ``ETag`` and ``304``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import trio

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio.auth import AccessToken, ProtectedResource
from mcp_trio.errors import RPCError
from mcp_trio.server import ServerCard
from mcp_trio.testing import ASGIClient, open_asgi_client

from .test_modern import Modern

CARD = "/mcp/server-card"
CATALOG = "/.well-known/ai-catalog.json"
DOCS_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "server-card.md").read_text()
SCHEMA = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
CAPABILITIES = "io.github.mcp-trio/capabilities"
DRAFT_CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "GET",
    "access-control-allow-headers": "Content-Type, If-None-Match",
    "access-control-expose-headers": "ETag",
}


def weather(**options: Any) -> MCPServer:
    server = MCPServer("weather", "1.4.2", instructions="Forecasts for any city.\nAsk by name.", **options)

    @server.tool()
    async def forecast(city: str) -> str:
        return f"sunny in {city}"

    @server.prompt()
    async def plan(city: str) -> str:
        return f"plan a day in {city}"

    return server


def card_app(card: ServerCard | None = None, server: MCPServer | None = None, **config: Any) -> MCPApp:
    return MCPApp(server or weather(), ServerConfig(server_card=card or ServerCard(), **config))


async def discover(asgi: ASGIClient) -> dict[str, Any]:
    status, body = await Modern(asgi).call("server/discover")
    assert status == 200, body
    result: dict[str, Any] = body["result"]
    return result


def check_card_shape(card: dict[str, Any]) -> None:
    """The draft schema's constraints on what mcp_trio fills in (schema.ts)."""
    assert card["$schema"] == SCHEMA
    assert re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", card["name"]) and 3 <= len(card["name"]) <= 200
    assert 1 <= len(card["description"]) <= 100
    assert len(card["version"]) <= 255
    for remote in card.get("remotes", []):
        assert remote["type"] == "streamable-http"
        assert re.fullmatch(r"https?://\S+", remote["url"])


async def test_the_card_says_what_server_discover_says() -> None:
    async with open_asgi_client(card_app()) as asgi:
        response = await asgi.request("GET", CARD, headers={"accept": "application/mcp-server-card+json"})
        assert response.status == 200
        assert response.headers["content-type"] == "application/mcp-server-card+json"
        card = await response.json()
        result = await discover(asgi)
    check_card_shape(card)
    info = result["_meta"][SERVER_INFO]
    assert card["name"] == f"localhost/{info['name']}"  # the host reversed (loopback: localhost)
    assert card["version"] == info["version"] == "1.4.2"
    assert card["description"] == "Forecasts for any city."  # the instructions' first line
    [remote] = card["remotes"]
    assert remote == {
        "type": "streamable-http",
        "url": "http://127.0.0.1:8000/mcp",
        "supportedProtocolVersions": result["supportedVersions"],
    }
    assert remote["supportedProtocolVersions"] == ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]
    assert card["_meta"] == {CAPABILITIES: result["capabilities"]}
    assert {"tools", "prompts", "logging"} <= set(result["capabilities"])
    assert "headers" not in remote  # no authentication: nothing to send


async def test_the_card_follows_the_server_as_it_changes(autojump_clock: trio.abc.Clock) -> None:
    server = weather()
    async with open_asgi_client(card_app(server=server)) as asgi:
        first = await asgi.request("GET", CARD)
        card = await first.json()
        assert "resources" not in card["_meta"][CAPABILITIES]

        @server.resource("file:///readme")
        async def readme() -> str:
            return "hello"

        await trio.sleep(1.5)  # past DISCOVER_MAX_AGE: the next card asks server/discover again
        second = await asgi.request("GET", CARD, headers={"if-none-match": first.headers["etag"]})
        assert second.status == 200 and second.headers["etag"] != first.headers["etag"]
        changed = await second.json()
        assert changed["_meta"][CAPABILITIES] == (await discover(asgi))["capabilities"]
        assert "resources" in changed["_meta"][CAPABILITIES]


async def test_server_discover_runs_at_most_once_a_second(autojump_clock: trio.abc.Clock) -> None:
    calls = 0

    class Counting(MCPServer):
        async def _discover(self, ctx: Any, params: Any) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            return await super()._discover(ctx, params)

    async with open_asgi_client(card_app(server=Counting("counted", "1"))) as asgi:
        for _ in range(20):
            assert (await asgi.request("GET", CARD)).status == 200
            assert (await asgi.request("GET", CATALOG)).status == 200
        assert calls == 1
        await trio.sleep(1.01)
        assert (await asgi.request("GET", CARD)).status == 200
        assert calls == 2


async def test_concurrent_requests_share_one_server_discover(autojump_clock: trio.abc.Clock) -> None:
    calls = 0

    class Slow(MCPServer):
        async def _discover(self, ctx: Any, params: Any) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            await trio.sleep(0.5)  # an answer that takes its time: the other requests come meanwhile
            return await super()._discover(ctx, params)

    statuses: list[int] = []
    async with open_asgi_client(card_app(server=Slow("slow", "1"))) as asgi:

        async def fetch(path: str) -> None:
            statuses.append((await asgi.request("GET", path)).status)

        async with trio.open_nursery() as nursery:
            for n in range(10):
                nursery.start_soon(fetch, CARD if n % 2 else CATALOG)
    assert statuses == [200] * 10 and calls == 1


async def test_cors_for_any_origin_and_the_preflight() -> None:
    async with open_asgi_client(card_app()) as asgi:
        for path in (CARD, CATALOG):
            response = await asgi.request("GET", path, headers={"origin": "https://elsewhere.example"})
            assert response.status == 200
            assert {name: response.headers[name] for name in DRAFT_CORS} == DRAFT_CORS
            preflight = await asgi.request(
                "OPTIONS",
                path,
                headers={
                    "origin": "https://elsewhere.example",
                    "access-control-request-method": "GET",
                    "access-control-request-headers": "if-none-match",
                },
            )
            assert preflight.status == 204 and await preflight.read() == b""
            assert {name: preflight.headers[name] for name in DRAFT_CORS} == DRAFT_CORS
            assert preflight.headers["access-control-max-age"] == "7200"


async def test_the_card_is_public_whatever_the_endpoint_checks() -> None:
    # the endpoint's Origin check and its own CORS list do not apply to the public documents
    app = card_app(
        allowed_hosts=frozenset({"mcp.example.com"}), cors_origins=frozenset({"https://app.example.com"})
    )
    async with open_asgi_client(app) as asgi:
        response = await asgi.request(
            "GET", CARD, headers={"origin": "https://evil.example", "host": "mcp.example.com"}
        )
        assert response.status == 200 and response.headers["access-control-allow-origin"] == "*"
        assert (await response.json())["remotes"][0]["url"] == "http://mcp.example.com/mcp"
        endpoint = await asgi.request("GET", "/mcp", headers={"origin": "https://evil.example"})
        assert endpoint.status == 403  # the endpoint itself is still guarded


async def test_caching_headers_and_conditional_requests() -> None:
    async with open_asgi_client(card_app()) as asgi:
        for path in (CARD, CATALOG):
            response = await asgi.request("GET", path)
            body = await response.read()
            etag = response.headers["etag"]
            assert response.headers["cache-control"] == "public, max-age=3600"
            assert re.fullmatch(r'"[0-9a-f]{32}"', etag)
            assert int(response.headers["content-length"]) == len(body)
            for condition in (etag, f"W/{etag}", f'"other", {etag}', "*"):
                again = await asgi.request("GET", path, headers={"if-none-match": condition})
                assert again.status == 304 and await again.read() == b""
                assert again.headers["etag"] == etag
                assert again.headers["cache-control"] == "public, max-age=3600"
                assert again.headers["access-control-allow-origin"] == "*"
            stale = await asgi.request("GET", path, headers={"if-none-match": '"other"'})
            assert stale.status == 200 and await stale.read() == body
            head = await asgi.request("HEAD", path)
            assert head.status == 200 and await head.read() == b""
            assert head.headers["etag"] == etag and head.headers["content-length"] == str(len(body))


async def test_other_methods_are_405() -> None:
    async with open_asgi_client(card_app()) as asgi:
        for method in ("POST", "PUT", "DELETE"):
            response = await asgi.request(method, CARD, body=b"{}")
            assert response.status == 405
            assert response.headers["allow"] == "GET, HEAD, OPTIONS"
            assert response.headers["access-control-allow-origin"] == "*"


async def test_off_by_default() -> None:
    async with open_asgi_client(MCPApp(weather())) as asgi:
        for path in (CARD, CATALOG, "/.well-known/mcp/catalog.json"):
            response = await asgi.request("GET", path)
            assert response.status == 404
            assert "access-control-allow-origin" not in response.headers


async def test_the_catalog_links_to_the_card() -> None:
    async with open_asgi_client(card_app(ServerCard(name="com.example/weather"))) as asgi:
        response = await asgi.request("GET", CATALOG, headers={"host": "mcp.example.com"})
        assert response.status == 200
        assert response.headers["content-type"] == "application/ai-catalog+json"
        catalog = await response.json()
        assert catalog == {
            "specVersion": "1.0",
            "entries": [
                {
                    "identifier": "urn:air:mcp.example.com:mcp:weather",
                    "type": "application/mcp-server-card+json",
                    "url": "http://mcp.example.com/mcp/server-card",
                }
            ],
        }
        earlier = await asgi.request(
            "GET", "/.well-known/mcp/catalog.json", headers={"host": "mcp.example.com"}
        )
        assert await earlier.json() == catalog  # the earlier drafts' location: the same document
        card = await asgi.request("GET", CARD, headers={"host": "mcp.example.com"})
        assert (await card.json())["name"] == "com.example/weather"


async def test_what_the_card_adds_and_what_server_info_keeps() -> None:
    card = ServerCard(
        name="com.example/weather",
        url="https://mcp.example.com/mcp",
        title="Weather",
        description="Forecasts, by city.",
        website_url="https://example.com/weather",
        icons=[{"src": "https://example.com/icon.png", "mimeType": "image/png", "sizes": ["48x48"]}],
        repository={"url": "https://github.com/example/weather", "source": "github"},
        meta={"com.example/tier": "free"},
    )
    async with open_asgi_client(card_app(card)) as asgi:
        document = await (await asgi.request("GET", CARD)).json()
        result = await discover(asgi)
    check_card_shape(document)
    assert document["name"] == "com.example/weather"
    assert document["version"] == result["_meta"][SERVER_INFO]["version"]
    assert document["title"] == "Weather" and document["description"] == "Forecasts, by city."
    assert document["websiteUrl"] == "https://example.com/weather"
    assert document["icons"] == [
        {"src": "https://example.com/icon.png", "mimeType": "image/png", "sizes": ["48x48"]}
    ]
    assert document["repository"] == {"url": "https://github.com/example/weather", "source": "github"}
    assert document["remotes"][0]["url"] == "https://mcp.example.com/mcp"
    assert document["_meta"] == {"com.example/tier": "free", CAPABILITIES: result["capabilities"]}


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("mcp.example.com", "com.example.mcp/weather"),
        ("mcp.example.com:8443", "com.example.mcp/weather"),
        ("[::1]:8000", "localhost/weather"),
        ("192.0.2.7", "192.0.2.7/weather"),
        ("[2001:db8::7]", "2001-db8--7/weather"),
        ("bad host\\name", "localhost/weather"),  # not a host: the server's own address
    ],
)
async def test_the_default_name_is_the_host_reversed(host: str, name: str) -> None:
    async with open_asgi_client(card_app()) as asgi:
        card = await (await asgi.request("GET", CARD, headers={"host": host})).json()
        assert card["name"] == name
        check_card_shape(card)


async def test_a_server_name_of_the_card_form_is_kept() -> None:
    server = MCPServer("io.github.someone/my server!", "2")
    async with open_asgi_client(card_app(server=server)) as asgi:
        card = await (await asgi.request("GET", CARD)).json()
        assert card["name"] == "localhost/io.github.someone-my-server"
        assert card["description"] == "io.github.someone/my server!, an MCP server"
    server = MCPServer("io.github.someone/weather", "2", instructions="x" * 101)
    async with open_asgi_client(card_app(server=server)) as asgi:
        card = await (await asgi.request("GET", CARD)).json()
        assert card["name"] == "io.github.someone/weather"
        assert card["description"] == "io.github.someone/weather, an MCP server"  # instructions too long
        check_card_shape(card)


async def test_a_card_with_oauth_names_the_resource_and_the_token() -> None:
    class NoTokens:
        async def verify(self, token: str) -> AccessToken | None:
            return None

    oauth = ProtectedResource(
        resource="https://mcp.example.com/mcp",
        authorization_servers=["https://as.example.com"],
        verifier=NoTokens(),
    )
    async with open_asgi_client(card_app(oauth=oauth)) as asgi:
        response = await asgi.request("GET", CARD)  # no token: the card is public
        assert response.status == 200
        card = await response.json()
        refused = await asgi.request("POST", "/mcp", body=b"{}")
        assert refused.status == 401  # the endpoint is not
    check_card_shape(card)
    [remote] = card["remotes"]
    assert remote["url"] == "https://mcp.example.com/mcp"
    [header] = remote["headers"]
    assert header["name"] == "Authorization" and header["isRequired"] and header["isSecret"]
    assert header["value"] == "Bearer {token}"
    assert "https://mcp.example.com/.well-known/oauth-protected-resource/mcp" in header["description"]
    assert card["name"] == "com.example.mcp/weather"


async def test_an_endpoint_at_any_path() -> None:
    async with open_asgi_client(card_app(path=None)) as asgi:
        card = await (await asgi.request("GET", "/tenant/a/server-card")).json()
        assert card["remotes"][0]["url"] == "http://127.0.0.1:8000/tenant/a"
        root = await (await asgi.request("GET", "/server-card")).json()
        assert root["remotes"][0]["url"] == "http://127.0.0.1:8000/"
        catalog = await (await asgi.request("GET", CATALOG)).json()
        assert catalog["entries"][0]["url"] == "http://127.0.0.1:8000/server-card"
    async with open_asgi_client(card_app(path="/api/mcp/")) as asgi:
        assert (await asgi.request("GET", "/api/mcp/server-card")).status == 200
        assert (await asgi.request("GET", "/other/server-card")).status == 404


async def test_ambiguous_framing_is_refused() -> None:
    async with open_asgi_client(card_app()) as asgi:
        response = await asgi.request(
            "GET", CARD, headers={"content-length": "0", "transfer-encoding": "chunked"}
        )
        assert response.status == 400 and response.headers["connection"] == "close"


@pytest.mark.parametrize("failure", [RPCError(-32603, "no"), KeyError("bug")])
async def test_a_server_that_fails_discover_gets_503(
    failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    class Failing(MCPServer):
        async def _discover(self, ctx: Any, params: Any) -> dict[str, Any]:
            raise failure

    async with open_asgi_client(card_app(server=Failing("failing", "1"))) as asgi:
        response = await asgi.request("GET", CARD)
        assert response.status == 503 and response.headers["retry-after"] == "1"
        assert json.loads(await response.read()) == {"error": "unavailable"}
    assert any("server/discover" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "weather"}, "namespace/name"),
        ({"name": "a/" + "b" * 200}, "namespace/name"),
        ({"url": "ftp://example.com/mcp"}, "http"),
        ({"website_url": "example.com"}, "http"),
        ({"description": ""}, "1 to 100"),
        ({"title": "t" * 101}, "1 to 100"),
        ({"repository": {"url": "https://github.com/x/y"}}, "source"),
        ({"meta": {CAPABILITIES: {}}}, "server/discover"),
        ({"requests_per_minute": -1}, "requests_per_minute"),
        ({"requests_per_minute": 10**10}, "requests_per_minute"),
        ({"requests_per_minute": 2.5}, "requests_per_minute"),
    ],
)
def test_a_card_that_cannot_be_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerCard(**options)
    with pytest.raises(TypeError):
        ServerCard(meta={"com.example/x": object()})
    with pytest.raises(TypeError, match="ServerCard"):
        ServerConfig(server_card={"name": "com.example/x"})  # type: ignore[arg-type]


def card_scope(headers: list[tuple[bytes, bytes]], server: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "scheme": "https",
        "path": CARD,
        "headers": headers,
        "server": server,
        "client": ("127.0.0.1", 5000),
    }


@pytest.mark.parametrize(
    ("server", "url"),
    [
        (("::1", 8443), "https://[::1]:8443/mcp"),
        (None, "https://localhost/mcp"),
        (("10.0.0.1", None), "https://10.0.0.1/mcp"),
    ],
)
async def test_without_a_host_the_card_names_the_servers_address(server: Any, url: str) -> None:
    app = card_app()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(card_scope([], server), receive, send)
    assert sent[0]["status"] == 200
    card = json.loads(sent[1]["body"])
    assert card["remotes"][0]["url"] == url


async def test_a_client_gone_ends_the_answer_quietly() -> None:
    app = card_app()
    sends = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal sends
        sends += 1
        raise trio.BrokenResourceError("gone")

    await app(card_scope([(b"host", b"127.0.0.1:8000")], ("127.0.0.1", 8000)), receive, send)
    assert sends == 1  # the head failed: nothing more is tried, nothing raised


@pytest.mark.deadline(300)  # virtual seconds (autojump)
async def test_each_client_address_gets_its_requests_per_minute(autojump_clock: trio.abc.Clock) -> None:
    async with open_asgi_client(card_app(ServerCard(requests_per_minute=3))) as asgi:
        for path in (CARD, CATALOG, CARD):  # a burst of a minute's requests
            assert (await asgi.request("GET", path)).status == 200
        refused = await asgi.request("GET", CATALOG, headers={"origin": "https://elsewhere.example"})
        assert refused.status == 429 and refused.headers["retry-after"] == "20"  # one more each 20 s
        assert refused.headers["access-control-allow-origin"] == "*"  # a page can read why
        assert json.loads(await refused.read()) == {"error": "Too Many Requests"}
        preflight = await asgi.request("OPTIONS", CARD)
        assert preflight.status == 429  # every request counts
        other = await asgi.request("GET", CARD, client=("192.0.2.9", 4000))
        assert other.status == 200  # another address has its own count
        same_64 = [("2001:db8::1", 1), ("2001:db8::2", 2), ("2001:db8::3", 3), ("2001:db8::4", 4)]
        statuses = [(await asgi.request("GET", CARD, client=client)).status for client in same_64]
        assert statuses == [200, 200, 200, 429]  # an IPv6 /64 is one address
        await trio.sleep(15)
        late = await asgi.request("GET", CARD)
        assert late.status == 429 and late.headers["retry-after"] == "5"
        await trio.sleep(5)
        assert (await asgi.request("GET", CARD)).status == 200  # one request more
        assert (await asgi.request("GET", CARD)).status == 429
        await trio.sleep(60)
        statuses = [(await asgi.request("GET", CARD)).status for _ in range(4)]
        assert statuses == [200, 200, 200, 429]  # a minute later: a burst again, no more


@pytest.mark.parametrize("off", [None, 0])
async def test_no_limit_when_turned_off(off: int | None) -> None:
    async with open_asgi_client(card_app(ServerCard(requests_per_minute=off))) as asgi:
        statuses = {(await asgi.request("HEAD", CARD)).status for _ in range(130)}
        assert statuses == {200}


async def test_the_example_of_the_docs_answers_as_shown() -> None:
    """docs/server-card.md's program, and the card and catalog its page shows (its lines joined)."""
    shown = re.search(r"^```text\n(.*?)^```", DOCS_PAGE, re.S | re.M)
    assert shown is not None
    answers = re.split(r"^\$ curl -s \S+\n", shown.group(1), flags=re.M)[1:]
    card_shown, catalog_shown = (json.loads("".join(ln.strip() for ln in a.splitlines())) for a in answers)
    server = MCPServer("weather", "1.4.2", instructions="Forecasts for any city.")

    @server.tool(description="Forecast for a city")
    async def forecast(city: str) -> str:
        return f"{city}: sunny"

    app = MCPApp(server, ServerConfig(server_card=ServerCard(name="com.example/weather", title="Weather")))
    async with open_asgi_client(app) as asgi:
        host = {"host": "127.0.0.1:8000"}
        assert await (await asgi.request("GET", CARD, headers=host)).json() == card_shown
        assert await (await asgi.request("GET", CATALOG, headers=host)).json() == catalog_shown
