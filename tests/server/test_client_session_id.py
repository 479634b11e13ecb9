"""A client's own session id (``Mcp-Client-Session-Id`` and ``_meta.clientSessionId``, following
SEP-2822, a proposal) on the server: taken from the header of an HTTP POST (over the body's ``_meta``)
or from ``_meta`` alone, in both eras and over a message connection; given to handlers as
``ctx.client_session_id`` and, scoped by the principal, ``ctx.client_session_key``; a malformed one is
ignored (the request is served) and logged, rate-limited; recorded on the SERVER span and in the
request log (JSON and text)."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import mcp_types as mt
import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig
from mcp_trio._observe.logs import JSONFormatter
from mcp_trio._protocol import clientsession
from mcp_trio._protocol.http import RequestFacts, check_duplicates
from mcp_trio._runtime.peerlog import RateLimitedLog
from mcp_trio._transport import clientsession as transport_clientsession
from mcp_trio._transport.config import HTTPRequestInfo
from mcp_trio.testing import open_asgi_client

from ..otel import SpanLog
from .conftest import Client, call_body, init_body
from .test_message_connection import ChannelConnection
from .test_modern import Modern, headers_for
from .test_stdio_server import modern_meta

CSID = "7b0c6a52-3f7e-4d0a-9d3e-0f6a1c2b3d4e"
OTHER = "0d9c1f3e-5a6b-4c7d-8e9f-a0b1c2d3e4f5"


def build() -> MCPServer:
    server = MCPServer("csid")

    @server.tool()
    async def whoami(ctx: Context) -> dict[str, Any]:
        return {"id": ctx.client_session_id, "key": ctx.client_session_key}

    return server


async def authenticate(info: HTTPRequestInfo) -> object:
    return info.header("x-user")


def structured(message: dict[str, Any]) -> dict[str, Any]:
    assert "result" in message, message
    found: dict[str, Any] = message["result"]["structuredContent"]
    return found


async def legacy_call(client: Client, **headers: str) -> dict[str, Any]:
    response = await client.asgi.request(
        "POST", headers=client.headers(**headers), body=call_body(2, "whoami", {})
    )
    assert response.status == 200, await response.read()
    return structured(await client.read_message(response))


async def legacy_call_meta(client: Client, meta: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = await client.asgi.request(
        "POST", headers=client.headers(**headers), body=call_body(3, "whoami", {}, **meta)
    )
    assert response.status == 200, await response.read()
    return structured(await client.read_message(response))


async def modern_call(modern: Modern, meta: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "whoami", "arguments": {}}
    if meta is not None:
        params["_meta"] = meta
    status, message = await modern.call(
        "tools/call", params, headers=headers_for("tools/call", "whoami", **headers)
    )
    assert status == 200, message
    return structured(message)


@pytest.fixture
def quiet_log(monkeypatch: pytest.MonkeyPatch) -> RateLimitedLog:
    """A fresh rate-limited log of malformed ids for the test (the module's keeps its window)."""
    log = RateLimitedLog(transport_clientsession.logger)
    monkeypatch.setattr(transport_clientsession, "malformed_log", log)
    return log


# -- the form ---------------------------------------------------------------------------------------


def test_the_form_of_an_id() -> None:
    assert clientsession.parse(CSID.upper()) == CSID
    assert clientsession.parse(str(uuid.uuid7() if hasattr(uuid, "uuid7") else uuid.uuid1())) is not None
    for bad in ("", "not-a-uuid", CSID[:-1], CSID + "0", CSID.replace("-", ""), f"{CSID[:-1]}g", 42, None):
        assert clientsession.parse(bad) is None, bad
    fresh = clientsession.new_id()
    assert clientsession.parse(fresh) == fresh and uuid.UUID(fresh).version == 4
    assert clientsession.from_meta({"clientSessionId": CSID}) == CSID
    assert clientsession.from_meta({"clientSessionId": ["x"]}) is None
    assert clientsession.from_meta(None) is None


def test_conflicting_header_copies_are_ignored_never_refused() -> None:
    facts = RequestFacts.from_headers(
        "POST", [(b"mcp-client-session-id", CSID.encode()), (b"mcp-client-session-id", OTHER.encode())]
    )
    check_duplicates(facts)  # no 400: the id is no transport header
    assert "mcp-client-session-id" in facts.conflicts
    request = mt.JSONRPCRequest(
        jsonrpc="2.0", id=1, method="ping", params={"_meta": {"clientSessionId": OTHER}}
    )
    transport_clientsession.take_header(facts, [request])
    assert request.params == {"_meta": {"clientSessionId": OTHER}}  # the header's copies: ignored
    alias = RequestFacts.from_headers("POST", [(b"x-mcp-client-session-id", CSID.encode())])
    plain = mt.JSONRPCRequest(jsonrpc="2.0", id=2, method="ping")
    transport_clientsession.take_header(alias, [plain])
    assert plain.params == {"_meta": {"clientSessionId": CSID}}


# -- HTTP, both eras ------------------------------------------------------------------------------------


async def test_the_header_reaches_a_2025_handler() -> None:
    app = MCPApp(build(), ServerConfig(shutdown_grace=1))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        assert await legacy_call(client, **{"mcp-client-session-id": CSID.upper()}) == {
            "id": CSID,
            "key": f"/{CSID}",
        }
        # the meta alone; and the header over the meta
        assert (await legacy_call_meta(client, {"clientSessionId": OTHER}))["id"] == OTHER
        found = await legacy_call_meta(client, {"clientSessionId": OTHER}, **{"mcp-client-session-id": CSID})
        assert found["id"] == CSID
        assert await legacy_call(client) == {"id": None, "key": None}


async def test_the_header_reaches_a_2026_handler() -> None:
    app = MCPApp(build(), ServerConfig(shutdown_grace=1))
    async with open_asgi_client(app) as asgi:
        modern = Modern(asgi)
        meta = modern_meta()
        assert await modern_call(modern, meta, **{"mcp-client-session-id": CSID}) == {
            "id": CSID,
            "key": f"/{CSID}",
        }
        assert (await modern_call(modern, {**meta, "clientSessionId": OTHER}))["id"] == OTHER
        found = await modern_call(
            modern, {**meta, "clientSessionId": OTHER}, **{"mcp-client-session-id": CSID}
        )
        assert found["id"] == CSID
        assert (await modern_call(modern, meta, **{"x-mcp-client-session-id": CSID}))["id"] == CSID


async def test_a_malformed_id_is_served_ignored_and_logged_rate_limited(
    quiet_log: RateLimitedLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, transport_clientsession.logger.name)
    app = MCPApp(build(), ServerConfig(shutdown_grace=1))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        modern = Modern(asgi)
        for n in range(8):
            found = await legacy_call(client, **{"mcp-client-session-id": f"evil\nline {n}"})
            assert found == {"id": None, "key": None}
            meta = {**modern_meta(), "clientSessionId": "not-a-uuid"}
            assert await modern_call(modern, meta) == {"id": None, "key": None}
    lines = [r.getMessage() for r in caplog.records if r.name == transport_clientsession.logger.name]
    assert len(lines) == quiet_log.burst == 10  # 16 malformed ids, 10 lines a minute
    assert all("\n" not in line for line in lines)
    assert "'evil\\\\nline 0'" in lines[0] or "evil\\nline 0" in lines[0]
    assert any("not-a-uuid" in line for line in lines)


async def test_the_key_is_scoped_by_the_principal() -> None:
    app = MCPApp(build(), ServerConfig(shutdown_grace=1, authenticate=authenticate))
    async with open_asgi_client(app) as asgi:
        keys = []
        for user in ("alice", "bob"):
            client = Client(asgi, app)
            response = await asgi.request(
                "POST", headers={**client.headers(), "x-user": user}, body=init_body()
            )
            client.session_id = response.headers["mcp-session-id"]
            await response.read()
            legacy = await legacy_call(client, **{"mcp-client-session-id": CSID, "x-user": user})
            modern = await modern_call(
                Modern(asgi), modern_meta(), **{"mcp-client-session-id": CSID, "x-user": user}
            )
            assert legacy["id"] == modern["id"] == CSID
            assert legacy["key"] == modern["key"]  # one principal: the same key in both eras
            assert legacy["key"].endswith(f"/{CSID}") and legacy["key"].startswith("p1:")
            keys.append(legacy["key"])
        assert keys[0] != keys[1]  # the same id, two principals: two keys


# -- a message connection (stdio, WebSocket): the meta alone ------------------------------------------


async def test_the_meta_over_a_message_connection(
    quiet_log: RateLimitedLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, transport_clientsession.logger.name)
    send, receive = trio.open_memory_channel[bytes](100)
    connection = ChannelConnection(build(), receive)

    async def call(request_id: int, meta: dict[str, Any]) -> dict[str, Any]:
        params = {"name": "whoami", "arguments": {}, "_meta": meta}
        request = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        await send.send(json.dumps(request).encode())
        return structured(json.loads(await connection.out_receive.receive()))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(connection.run)
            init = {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            }
            await send.send(
                json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode()
            )
            await connection.out_receive.receive()
            assert await call(2, {"clientSessionId": CSID}) == {"id": CSID, "key": f"/{CSID}"}
            assert await call(3, {**modern_meta(), "clientSessionId": OTHER}) == {
                "id": OTHER,
                "key": f"/{OTHER}",
            }
            assert await call(4, {"clientSessionId": "nope"}) == {"id": None, "key": None}
            await send.aclose()
    assert any(
        "nope" in r.getMessage() for r in caplog.records if r.name == transport_clientsession.logger.name
    )


# -- spans and the request log ----------------------------------------------------------------------


async def test_recorded_on_the_span_and_in_the_request_log(
    spans: SpanLog, caplog: pytest.LogCaptureFixture
) -> None:
    server = build()
    server.telemetry.request_log = True
    caplog.set_level(logging.INFO, "mcp_trio.requests")
    app = MCPApp(server, ServerConfig(shutdown_grace=1))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        await legacy_call(client, **{"mcp-client-session-id": CSID})
        await modern_call(Modern(asgi), {**modern_meta(), "clientSessionId": OTHER})
        await legacy_call(client)
    calls = sorted(spans.named("tools/call whoami"), key=lambda span: span.start_time or 0)
    assert [dict(span.attributes or {}).get("mcp.client.session.id") for span in calls] == [CSID, OTHER, None]
    records = [
        r for r in caplog.records if r.name == "mcp_trio.requests" and r.getMessage().startswith("tools/call")
    ]
    assert [r.__dict__["mcp"].get("client_session_id") for r in records] == [CSID, OTHER, None]
    assert records[0].getMessage().endswith(f" client_session={CSID}")
    assert "client_session=" not in records[2].getMessage()
    line = json.loads(JSONFormatter().format(records[1]))
    assert line["client_session_id"] == OTHER and line["message"].endswith(f"client_session={OTHER}")


def test_adopt_takes_every_shape_of_message() -> None:
    notification = mt.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
    empty_meta = mt.JSONRPCRequest(jsonrpc="2.0", id=1, method="tools/list", params={"cursor": "c"})
    bad_meta = mt.JSONRPCRequest(jsonrpc="2.0", id=2, method="tools/list", params={"_meta": "not a map"})
    answer = mt.JSONRPCResponse(jsonrpc="2.0", id=9, result={})
    assert clientsession.adopt(CSID, [notification, empty_meta, bad_meta, answer]) == ()
    assert notification.params == {"_meta": {"clientSessionId": CSID}}
    assert empty_meta.params == {"cursor": "c", "_meta": {"clientSessionId": CSID}}
    assert bad_meta.params == {"_meta": "not a map"}  # left as it came, for the request's own checks
    assert clientsession.adopt("nope", [empty_meta]) == ("nope",)
    assert empty_meta.params == {"cursor": "c", "_meta": {"clientSessionId": CSID}}  # the bad header: ignored
    assert clientsession.adopt(None, [notification, bad_meta]) == ()


def test_a_key_needs_an_owner_key_when_there_is_a_principal() -> None:
    from types import SimpleNamespace

    from mcp_trio._protocol import versions
    from mcp_trio._transport.modern import RequestPeer

    meta = {"clientSessionId": CSID}
    anonymous = Context(1, "tools/call", SimpleNamespace(principal=None), meta)  # type: ignore[arg-type]
    assert anonymous.client_session_key == f"/{CSID}"
    someone = Context(1, "tools/call", SimpleNamespace(principal="alice"), meta)  # type: ignore[arg-type]
    assert someone.client_session_id == CSID and someone.client_session_key is None  # never a shared key
    peer = RequestPeer(versions.LATEST_MODERN, {}, None, "alice")  # type: ignore[arg-type]
    assert peer.owner is None
