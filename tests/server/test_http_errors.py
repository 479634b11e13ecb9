"""Every rejection: the right HTTP status, a JSON-RPC error body, no session created, no task left."""

from __future__ import annotations

import json

import pytest

from mcp_trio import MCPApp, ServerConfig

from .conftest import POST_HEADERS, Client, init_body, settle


async def assert_rejected(client: Client, response, status: int, code: int = -32600) -> dict:
    assert response.status == status
    assert "mcp-session-id" not in response.headers
    body = await response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body


async def assert_nothing_left(app: MCPApp, sessions: int = 0) -> None:
    await settle()
    stats = app.statistics()
    assert stats["sessions"] == sessions
    assert stats["session_tasks"] == sessions  # one expiry watcher per live session, nothing else


async def test_unsupported_method_is_405_with_allow(client: Client, app: MCPApp) -> None:
    for method in ("PUT", "PATCH", "HEAD", "OPTIONS"):
        response = await client.asgi.request(method, headers=POST_HEADERS, body=init_body())
        await assert_rejected(client, response, 405)
        assert response.headers["allow"] == "GET, POST, DELETE"
    await assert_nothing_left(app)


async def test_wrong_accept_is_406(client: Client, app: MCPApp) -> None:
    for accept in (
        "application/json",
        "text/event-stream",
        "text/html",
        "application/json;q=0, text/event-stream",
    ):
        headers = {**POST_HEADERS, "accept": accept}
        response = await client.asgi.request("POST", headers=headers, body=init_body())
        await assert_rejected(client, response, 406)
    no_accept = {"content-type": "application/json"}
    await assert_rejected(client, await client.asgi.request("POST", headers=no_accept, body=init_body()), 406)
    await assert_nothing_left(app)


async def test_wildcard_accept_is_fine(client: Client) -> None:
    headers = {**POST_HEADERS, "accept": "*/*"}
    response = await client.asgi.request("POST", headers=headers, body=init_body())
    assert response.status == 200


async def test_wrong_content_type_is_415(client: Client, app: MCPApp) -> None:
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/json; charset=latin-1",
    ):
        headers = {**POST_HEADERS, "content-type": content_type}
        response = await client.asgi.request("POST", headers=headers, body=init_body())
        await assert_rejected(client, response, 415)
    headers = {"accept": POST_HEADERS["accept"]}
    await assert_rejected(client, await client.asgi.request("POST", headers=headers, body=init_body()), 415)
    await assert_nothing_left(app)


async def test_content_type_with_utf8_charset_is_fine(client: Client) -> None:
    headers = {**POST_HEADERS, "content-type": "Application/JSON; charset=UTF-8"}
    response = await client.asgi.request("POST", headers=headers, body=init_body())
    assert response.status == 200


@pytest.mark.parametrize("config", [ServerConfig(max_body_size=1000)])
async def test_body_over_limit_is_413(client: Client, app: MCPApp) -> None:
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "a" * 2000}}).encode()
    await assert_rejected(client, await client.asgi.request("POST", headers=POST_HEADERS, body=big), 413)
    declared = {**POST_HEADERS, "content-length": "5000"}
    await assert_rejected(client, await client.asgi.request("POST", headers=declared, body=init_body()), 413)
    await assert_nothing_left(app)


@pytest.mark.parametrize(
    "body", [b"{", b"not json", b"\xff\xfe", b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"'], ids=repr
)
async def test_malformed_json_is_400_parse_error(client: Client, app: MCPApp, body: bytes) -> None:
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=body)
    body_json = await assert_rejected(client, response, 400, code=-32700)
    assert "id" not in body_json
    await assert_nothing_left(app)


@pytest.mark.parametrize(
    "message",
    [
        42,
        "initialize",
        [],
        {"jsonrpc": "1.0", "id": 1, "method": "initialize"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "initialize"},
        {"jsonrpc": "2.0", "id": None, "method": "initialize"},
        {"jsonrpc": "2.0", "id": True, "method": "initialize"},
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": [1, 2]},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0"},
    ],
    ids=repr,
)
async def test_invalid_message_is_400_invalid_request(client: Client, app: MCPApp, message: object) -> None:
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=json.dumps(message).encode())
    await assert_rejected(client, response, 400, code=-32600)
    await assert_nothing_left(app)


async def test_initialize_with_bad_params_creates_no_session(client: Client, app: MCPApp) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"capabilities": 3}})
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=body.encode())
    error = await assert_rejected(client, response, 400, code=-32602)
    assert error["id"] == 9
    await assert_nothing_left(app)


async def test_batched_initialize_is_rejected(client: Client, app: MCPApp) -> None:
    batch = b"[" + init_body() + b"]"
    await assert_rejected(client, await client.asgi.request("POST", headers=POST_HEADERS, body=batch), 400)
    await assert_nothing_left(app)


async def test_missing_session_id_is_400(client: Client, app: MCPApp) -> None:
    await client.initialize()
    ping = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=ping)
    await assert_rejected(client, response, 400)
    response = await client.asgi.request("GET", headers={"accept": "text/event-stream"})
    await assert_rejected(client, response, 400)
    await assert_rejected(client, await client.asgi.request("DELETE"), 400)
    await assert_nothing_left(app, sessions=1)


async def test_unknown_session_is_404(client: Client, app: MCPApp) -> None:
    client.session_id = "no-such-session"
    response = await client.post(b'{"jsonrpc":"2.0","id":2,"method":"ping"}')
    await assert_rejected(client, response, 404)
    await assert_rejected(client, await client.get_stream(), 404)
    await assert_rejected(client, await client.delete(), 404)
    await assert_nothing_left(app)


async def test_malformed_session_id_is_400(client: Client) -> None:
    client.session_id = "bad id"  # a space is not visible ASCII
    await assert_rejected(client, await client.post(b'{"jsonrpc":"2.0","id":2,"method":"ping"}'), 400)


async def test_terminated_session_is_404(client: Client, app: MCPApp) -> None:
    await client.initialize()
    assert (await client.delete()).status == 200
    await assert_rejected(client, await client.post(b'{"jsonrpc":"2.0","id":2,"method":"ping"}'), 404)
    await assert_rejected(client, await client.get_stream(), 404)
    await assert_rejected(client, await client.delete(), 404)
    await assert_nothing_left(app)


async def test_unsupported_protocol_version_is_400(client: Client, app: MCPApp) -> None:
    await client.initialize()
    for version in ("1999-01-01", "2024-11-05", "garbage"):
        response = await client.post(
            b'{"jsonrpc":"2.0","id":2,"method":"ping"}', **{"mcp-protocol-version": version}
        )
        body = await assert_rejected(client, response, 400)
        assert "2025-11-25" in body["error"]["data"]["supported"]
        response = await client.get_stream(**{"mcp-protocol-version": version})
        await assert_rejected(client, response, 400)
    await assert_nothing_left(app, sessions=1)


async def test_get_without_event_stream_accept_is_406(client: Client) -> None:
    await client.initialize()
    await assert_rejected(client, await client.get_stream(accept="application/json"), 406)


async def test_batch_rejected_outside_2025_03_26(client: Client) -> None:
    await client.initialize("2025-06-18")
    batch = b'[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]'
    await assert_rejected(client, await client.post(batch), 400)


async def test_other_path_is_404(client: Client) -> None:
    response = await client.asgi.request("POST", "/other", headers=POST_HEADERS, body=init_body())
    await assert_rejected(client, response, 404)


async def test_foreign_host_is_421(client: Client, app: MCPApp) -> None:
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.nip.io"):
        headers = {**POST_HEADERS, "host": host}
        await assert_rejected(
            client, await client.asgi.request("POST", headers=headers, body=init_body()), 421
        )
    await assert_nothing_left(app)


async def test_foreign_origin_is_403(client: Client, app: MCPApp) -> None:
    for origin in ("http://evil.example", "https://localhost.evil.example", "null"):
        headers = {**POST_HEADERS, "origin": origin}
        await assert_rejected(
            client, await client.asgi.request("POST", headers=headers, body=init_body()), 403
        )
    await assert_nothing_left(app)


async def test_loopback_host_and_origin_are_fine(client: Client) -> None:
    for host, origin in (("localhost:8000", "http://localhost:3000"), ("[::1]:8000", "https://[::1]")):
        headers = {**POST_HEADERS, "host": host, "origin": origin}
        response = await client.asgi.request("POST", headers=headers, body=init_body())
        assert response.status == 200


@pytest.mark.parametrize(
    "config",
    [
        ServerConfig(
            allowed_hosts=frozenset({"mcp.example"}), allowed_origins=frozenset({"https://app.example"})
        )
    ],
)
async def test_allow_lists_extend_loopback(client: Client) -> None:
    headers = {**POST_HEADERS, "host": "mcp.example:443", "origin": "https://app.example"}
    assert (await client.asgi.request("POST", headers=headers, body=init_body())).status == 200
    headers = {**POST_HEADERS, "host": "mcp.example", "origin": "https://other.example"}
    assert (await client.asgi.request("POST", headers=headers, body=init_body())).status == 403


async def test_protection_is_off_when_not_bound_to_loopback(app: MCPApp) -> None:
    from mcp_trio.testing import open_asgi_client

    async with open_asgi_client(app, server=("10.1.2.3", 8000)) as asgi:
        headers = {**POST_HEADERS, "host": "mcp.example", "origin": "https://elsewhere.example"}
        assert (await asgi.request("POST", headers=headers, body=init_body())).status == 200


@pytest.mark.parametrize("config", [ServerConfig(max_sessions=2)])
async def test_session_cap_is_503(client: Client, app: MCPApp) -> None:
    for _ in range(2):
        assert (await client.asgi.request("POST", headers=POST_HEADERS, body=init_body())).status == 200
    response = await client.asgi.request("POST", headers=POST_HEADERS, body=init_body())
    await assert_rejected(client, response, 503, code=-32603)
    assert response.headers["retry-after"]
    await assert_nothing_left(app, sessions=2)


@pytest.mark.parametrize("path", ["/mcp", "/elsewhere"])
async def test_content_length_with_transfer_encoding_is_400_and_close(
    client: Client, app: MCPApp, path: str
) -> None:
    # The app's own check (RFC 9112 section 6.3), before routing: any ASGI server that hands it both
    # headers gets the refusal, and Connection: close makes an HTTP/1.1 server close the connection.
    body = init_body()
    headers = {**POST_HEADERS, "content-length": str(len(body)), "transfer-encoding": "chunked"}
    response = await client.asgi.request("POST", path, headers=headers, body=body)
    error = await assert_rejected(client, response, 400)
    assert "Transfer-Encoding" in error["error"]["message"]
    assert response.headers["connection"] == "close"
    await assert_nothing_left(app)
