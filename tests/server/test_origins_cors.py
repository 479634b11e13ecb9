"""Host/Origin checks (DNS-rebinding protection) by each branch of the rule, and CORS: preflights
allowed and refused, the CORS headers of every kind of response, off by default."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import RemoteProtocolError
from mcp_trio.testing import ASGIClient, Response, open_asgi_client

from .conftest import POST_HEADERS, Client, call_body, init_body

LOOPBACK = ("127.0.0.1", 8000)
PUBLIC = ("10.1.2.3", 8000)
APP_ORIGIN = "https://app.example"
PREFLIGHT_HEADERS = {"origin": APP_ORIGIN, "access-control-request-method": "POST"}
EXPOSED = "Mcp-Session-Id, WWW-Authenticate, Retry-After, RateLimit-Limit, RateLimit-Remaining"


@asynccontextmanager
async def serving(
    server: tuple[str, int] = LOOPBACK, **config: Any
) -> AsyncIterator[tuple[ASGIClient, MCPApp]]:
    app = MCPApp(build_demo_server(), ServerConfig(**config))
    async with open_asgi_client(app, server=server) as asgi:
        yield asgi, app


async def init_status(asgi: ASGIClient, **headers: str) -> int:
    response = await asgi.request("POST", headers={**POST_HEADERS, **headers}, body=init_body())
    await response.read()
    return response.status


# -- DNS-rebinding protection: the rule ------------------------------------------------------------


async def test_auto_checks_requests_on_a_loopback_connection() -> None:
    async with serving(LOOPBACK) as (asgi, _):
        assert await init_status(asgi, host="127.0.0.1:8000", origin="http://localhost:5173") == 200
        assert await init_status(asgi, host="mcp.example.com") == 421
        assert await init_status(asgi, origin="https://mcp.example.com") == 403


async def test_auto_leaves_other_connections_alone_without_allow_lists() -> None:
    async with serving(PUBLIC) as (asgi, _):
        assert await init_status(asgi, host="anything.example", origin="https://evil.example") == 200


async def test_a_proxy_on_the_same_machine_needs_the_public_name_allowed() -> None:
    """nginx on this machine forwards to 127.0.0.1 with the client's ``Host: mcp.example.com``."""
    async with serving(LOOPBACK) as (asgi, _):
        assert await init_status(asgi, host="mcp.example.com") == 421
    async with serving(LOOPBACK, allowed_hosts=frozenset({"mcp.example.com"})) as (asgi, _):
        assert await init_status(asgi, host="mcp.example.com") == 200
        assert await init_status(asgi, host="MCP.example.com:443") == 200
        assert await init_status(asgi, host="localhost:8000") == 200  # loopback names stay allowed
        assert await init_status(asgi, host="other.example.com") == 421


async def test_allow_lists_turn_auto_protection_on_everywhere() -> None:
    async with serving(PUBLIC, allowed_hosts=frozenset({"mcp.example.com:8443"})) as (asgi, _):
        assert await init_status(asgi, host="mcp.example.com:8443") == 200
        assert await init_status(asgi, host="mcp.example.com:8444") == 421
        assert await init_status(asgi, host="10.1.2.3:8000") == 421
        assert await init_status(asgi, host="mcp.example.com:8443", origin="https://evil.example") == 403
    async with serving(PUBLIC, allowed_origins=frozenset({"https://app.example:*"})) as (asgi, _):
        assert await init_status(asgi, host="localhost", origin="https://app.example:3000") == 200
        assert await init_status(asgi, host="localhost", origin="https://evil.example") == 403
        assert await init_status(asgi, host="10.1.2.3:8000") == 421


async def test_protection_on_checks_every_connection() -> None:
    async with serving(PUBLIC, dns_rebinding_protection=True) as (asgi, _):
        assert await init_status(asgi, host="localhost:8000") == 200
        assert await init_status(asgi, host="mcp.example.com") == 421
        assert await init_status(asgi, host="localhost:8000", origin="https://evil.example") == 403


async def test_protection_off_checks_nothing_even_with_allow_lists() -> None:
    config = {"dns_rebinding_protection": False, "allowed_hosts": frozenset({"mcp.example.com"})}
    async with serving(LOOPBACK, **config) as (asgi, _):
        assert await init_status(asgi, host="evil.example", origin="https://evil.example") == 200


async def test_cors_origins_pass_the_origin_check_without_turning_protection_on() -> None:
    async with serving(LOOPBACK, cors_origins=frozenset({APP_ORIGIN})) as (asgi, _):
        assert await init_status(asgi, origin=APP_ORIGIN) == 200
        assert await init_status(asgi, origin="https://evil.example") == 403
        assert await init_status(asgi, host="mcp.example.com", origin=APP_ORIGIN) == 421
    async with serving(PUBLIC, cors_origins=frozenset({APP_ORIGIN})) as (asgi, _):
        assert await init_status(asgi, host="mcp.example.com", origin="https://evil.example") == 200


async def test_cors_for_any_origin_leaves_the_host_check_on() -> None:
    async with serving(LOOPBACK, cors_origins=frozenset({"*"})) as (asgi, _):
        assert await init_status(asgi, origin="https://anyone.example") == 200
        assert await init_status(asgi, host="evil.example", origin="https://anyone.example") == 421


@pytest.mark.parametrize(
    "config",
    [
        {"allowed_hosts": frozenset({"https://mcp.example.com"})},
        {"allowed_origins": frozenset({"app.example"})},
        {"cors_origins": frozenset({"app.example"})},
        {"cors_origins": frozenset({"*", APP_ORIGIN})},
    ],
)
def test_malformed_entries_are_refused_up_front(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        MCPApp(build_demo_server(), ServerConfig(**config))


# -- CORS off -----------------------------------------------------------------------------------


async def test_cors_is_off_by_default() -> None:
    async with serving(LOOPBACK) as (asgi, _):
        response = await asgi.request("OPTIONS", headers=PREFLIGHT_HEADERS)
        assert response.status == 405
        assert response.headers["allow"] == "GET, POST, DELETE"
        assert not cors_headers(response)
        origin = "http://localhost:5173"  # an allowed origin for the Origin check, but no CORS
        response = await asgi.request("POST", headers={**POST_HEADERS, "origin": origin}, body=init_body())
        assert response.status == 200
        assert not cors_headers(response) and "vary" not in response.headers


def cors_headers(response: Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


# -- preflights ---------------------------------------------------------------------------------


async def raw_request(
    app: MCPApp, method: str, headers: dict[str, str] | list[tuple[str, str]]
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One bodiless exchange straight through the ASGI interface (repeated request headers possible):
    the status, the response headers as sent (repeats visible) and the body."""
    pairs = list(headers.items() if isinstance(headers, dict) else headers)
    if not any(name == "host" for name, _ in pairs):
        pairs.insert(0, ("host", "127.0.0.1:8000"))
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": "/mcp",
        "headers": [(k.encode(), v.encode()) for k, v in pairs],
        "server": LOOPBACK,
        "client": ("127.0.0.1", 50000),
    }
    with trio.fail_after(5):
        await app(scope, receive, send)
    start, *bodies = messages
    head = [(k.decode(), v.decode()) for k, v in start["headers"]]
    return start["status"], head, b"".join(m.get("body", b"") for m in bodies)


@pytest.fixture
def cors_app() -> MCPApp:
    return MCPApp(build_demo_server(), ServerConfig(cors_origins=frozenset({APP_ORIGIN})))


async def test_preflight_from_an_allowed_origin(cors_app: MCPApp) -> None:
    requested = "Content-Type, Authorization, MCP-Protocol-Version, Mcp-Method, mcp-name, mcp-param-region"
    status, head, body = await raw_request(
        cors_app, "OPTIONS", {**PREFLIGHT_HEADERS, "access-control-request-headers": requested}
    )
    assert status == 204 and body == b""
    names = [name for name, _ in head]
    assert len(names) == len(set(names)), head  # each header once
    headers = dict(head)
    assert headers["access-control-allow-origin"] == APP_ORIGIN
    assert headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    assert headers["access-control-allow-headers"] == (
        "content-type, authorization, mcp-protocol-version, mcp-method, mcp-name, mcp-param-region"
    )
    assert headers["access-control-max-age"] == "7200"
    assert headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in headers
    assert "content-length" not in headers and "content-type" not in headers


@pytest.mark.parametrize(
    "requested",
    [
        "mcp-session-id, last-event-id, accept",
        "mcp-session-id,mcp-protocol-version,  authorization",
        "mcp-param-a, mcp-param-b-c",
        "mcp-method, mcp-client-session-id",
    ],
)
async def test_preflight_echoes_any_set_of_mcp_headers(cors_app: MCPApp, requested: str) -> None:
    _, head, _ = await raw_request(
        cors_app, "OPTIONS", {**PREFLIGHT_HEADERS, "access-control-request-headers": requested}
    )
    echoed = dict(head)["access-control-allow-headers"]
    assert echoed.split(", ") == [part.strip() for part in requested.split(",")]


@pytest.mark.parametrize("requested", [None, "x-custom, mcp-session-id", "mcp-param-", "content-type, *"])
async def test_preflight_for_other_headers_lists_the_mcp_headers_only(
    cors_app: MCPApp, requested: str | None
) -> None:
    headers = dict(PREFLIGHT_HEADERS)
    if requested is not None:
        headers["access-control-request-headers"] = requested
    status, head, _ = await raw_request(cors_app, "OPTIONS", headers)
    assert status == 204
    allowed = dict(head)["access-control-allow-headers"].split(", ")
    assert allowed == sorted(
        [
            "accept",
            "authorization",
            "content-type",
            "last-event-id",
            "mcp-client-session-id",
            "mcp-method",
            "mcp-name",
            "mcp-protocol-version",
            "mcp-session-id",
        ]
    )


async def test_preflight_from_another_origin_is_403_without_cors_headers(cors_app: MCPApp) -> None:
    for origin in ("https://evil.example", "http://localhost:5173", "null"):
        status, head, body = await raw_request(cors_app, "OPTIONS", {**PREFLIGHT_HEADERS, "origin": origin})
        assert status == 403, origin
        assert not [name for name, _ in head if name.startswith("access-control-")]
        assert dict(head)["vary"] == "Origin"
        error = json.loads(body)["error"]
        assert error["code"] == -32600 and "may not call" in error["message"]
    status, head, _ = await raw_request(cors_app, "OPTIONS", {"access-control-request-method": "POST"})
    assert status == 403  # no Origin at all


async def test_preflight_with_a_foreign_host_is_421(cors_app: MCPApp) -> None:
    status, _, _ = await raw_request(cors_app, "OPTIONS", {**PREFLIGHT_HEADERS, "host": "evil.example"})
    assert status == 421


async def test_options_that_is_not_a_preflight_is_405(cors_app: MCPApp) -> None:
    status, head, _ = await raw_request(cors_app, "OPTIONS", {"origin": APP_ORIGIN})
    assert status == 405
    assert dict(head)["access-control-allow-origin"] == APP_ORIGIN


async def test_preflight_with_conflicting_methods_is_400(cors_app: MCPApp) -> None:
    headers = [
        ("origin", APP_ORIGIN),
        ("access-control-request-method", "POST"),
        ("access-control-request-method", "DELETE"),
    ]
    status, _, _ = await raw_request(cors_app, "OPTIONS", headers)
    assert status == 400
    same = [*headers[:2], ("access-control-request-method", "POST")]
    assert (await raw_request(cors_app, "OPTIONS", same))[0] == 204


async def test_repeated_request_headers_lists_are_joined(cors_app: MCPApp) -> None:
    headers = [
        *PREFLIGHT_HEADERS.items(),
        ("access-control-request-headers", "content-type"),
        ("access-control-request-headers", "mcp-session-id"),
    ]
    status, head, _ = await raw_request(cors_app, "OPTIONS", headers)
    assert status == 204
    assert dict(head)["access-control-allow-headers"] == "content-type, mcp-session-id"


async def test_preflight_is_answered_before_authentication() -> None:
    calls = []

    async def authenticate(info: Any) -> object:
        calls.append(info.method)
        raise RemoteProtocolError(
            "Unauthorized", http_status=401, headers=(("www-authenticate", 'Bearer realm="mcp"'),)
        )

    config = ServerConfig(cors_origins=frozenset({APP_ORIGIN}), authenticate=authenticate)
    app = MCPApp(build_demo_server(), config)
    status, _, _ = await raw_request(app, "OPTIONS", PREFLIGHT_HEADERS)
    assert status == 204 and calls == []
    async with open_asgi_client(app) as asgi:
        response = await asgi.request(
            "POST", headers={**POST_HEADERS, "origin": APP_ORIGIN}, body=init_body()
        )
        assert response.status == 401 and calls == ["POST"]
        assert response.headers["access-control-allow-origin"] == APP_ORIGIN
        assert response.headers["access-control-expose-headers"] == EXPOSED
        assert response.headers["www-authenticate"] == 'Bearer realm="mcp"'


# -- the CORS headers of actual responses ---------------------------------------------------------


def assert_cors(response: Response, origin: str = APP_ORIGIN) -> None:
    assert response.headers.get("access-control-allow-origin") == origin, response.headers
    assert response.headers["access-control-expose-headers"] == EXPOSED
    assert response.headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in response.headers


@pytest.mark.parametrize("json_response", [False, True])
async def test_every_2025_response_to_an_allowed_origin_carries_cors_headers(json_response: bool) -> None:
    config = ServerConfig(cors_origins=frozenset({APP_ORIGIN}), json_response=json_response)
    app = MCPApp(build_demo_server(), config)
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        origin = {"origin": APP_ORIGIN}
        response = await asgi.request("POST", headers={**POST_HEADERS, **origin}, body=init_body())
        assert response.status == 200
        assert_cors(response)
        client.session_id = response.headers["mcp-session-id"]
        await client.read_message(response)
        notified = await client.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', **origin)
        assert notified.status == 202
        assert_cors(notified)
        called = await client.post(call_body(2, "echo", {"text": "hi"}), **origin)
        assert called.status == 200
        assert_cors(called)
        assert (await client.read_message(called))["result"]["content"][0]["text"] == "hi"
        stream = await client.get_stream(**origin)
        assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
        assert stream.headers["cache-control"] == "no-store, no-transform"  # kept out of browser caches
        assert_cors(stream)
        await stream.aclose()
        for rejected, status in [
            (await client.post(b"{nope", **origin), 400),
            (await client.post(call_body(3, "echo", {}), accept="text/html", **origin), 406),
            (await client.post(call_body(4, "echo", {}), **{**origin, "mcp-session-id": "gone"}), 404),
        ]:
            assert rejected.status == status
            assert_cors(rejected)
            assert "error" in await rejected.json()
        deleted = await asgi.request("DELETE", headers={"mcp-session-id": client.session_id, **origin})
        assert deleted.status == 200
        assert_cors(deleted)


async def test_2026_responses_to_an_allowed_origin_carry_cors_headers(cors_app: MCPApp) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        **POST_HEADERS,
        "origin": APP_ORIGIN,
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "echo",
    }
    body = call_body(1, "echo", {"text": "modern"}, **meta)
    async with open_asgi_client(cors_app) as asgi:
        response = await asgi.request("POST", headers=headers, body=body)
        assert response.status == 200
        assert_cors(response)
        text = await response.read()
        assert b"modern" in text
        wrong = await asgi.request("POST", headers={**headers, "mcp-name": "add"}, body=body)
        assert wrong.status == 400
        assert_cors(wrong)
        get = await asgi.request("GET", headers={"origin": APP_ORIGIN, "mcp-protocol-version": "2026-07-28"})
        assert get.status == 405
        assert_cors(get)


async def test_responses_to_other_origins_carry_no_cors_headers() -> None:
    async with serving(PUBLIC, cors_origins=frozenset({APP_ORIGIN})) as (asgi, _):
        for headers in ({"origin": "https://evil.example"}, {}):
            response = await asgi.request("POST", headers={**POST_HEADERS, **headers}, body=init_body())
            assert response.status == 200  # the Origin check is off on this connection
            assert not cors_headers(response)
            assert response.headers["vary"] == "Origin"


async def test_port_patterns_in_cors_origins() -> None:
    async with serving(LOOPBACK, cors_origins=frozenset({"http://localhost:*"})) as (asgi, _):
        origin = "http://localhost:5173"
        response = await asgi.request("OPTIONS", headers={**PREFLIGHT_HEADERS, "origin": origin})
        assert response.status == 204
        assert response.headers["access-control-allow-origin"] == origin


async def test_cors_for_any_origin_answers_a_star() -> None:
    async with serving(LOOPBACK, cors_origins=frozenset({"*"})) as (asgi, _):
        origin = "https://anyone.example"
        response = await asgi.request("OPTIONS", headers={**PREFLIGHT_HEADERS, "origin": origin})
        assert response.status == 204
        assert response.headers["access-control-allow-origin"] == "*"
        assert "vary" not in response.headers
        response = await asgi.request("POST", headers={**POST_HEADERS, "origin": origin}, body=init_body())
        assert response.status == 200
        assert response.headers["access-control-allow-origin"] == "*"
        assert response.headers["access-control-expose-headers"] == EXPOSED
        assert "access-control-allow-credentials" not in response.headers
        response = await asgi.request("POST", headers=POST_HEADERS, body=init_body())
        assert not cors_headers(response)  # not a cross-origin request
