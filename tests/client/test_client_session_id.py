"""The client session id end to end (``Mcp-Client-Session-Id``, following SEP-2822, a proposal): a
:class:`ClientSession` makes one UUID (or takes the one it is given), sends it as the header of every
HTTP request and as ``_meta.clientSessionId`` of every request in both eras and over WebSocket and
stdio; the server's handler, its SERVER span, the client's CLIENT span and the server's request log all
carry it.

Against the real server (hypercorn and the embedded h11 server, in this Trio run; ``serve_stdio`` in a
child process); what the client sent is read from its own ``httpx`` client's request hook."""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx
import pytest
import trio
from opentelemetry.trace import SpanKind

from mcp_trio import (
    Context,
    MCPApp,
    MCPServer,
    ServerConfig,
    open_client_session,
    open_stdio_client,
    open_websocket_client,
)
from mcp_trio._protocol.clientsession import HEADER, META_KEY
from mcp_trio._serve import serve
from tests.client.conftest import IGNORE_HTTPX_ASYNCGEN_WARNINGS
from tests.otel import SpanLog

pytestmark = IGNORE_HTTPX_ASYNCGEN_WARNINGS

ATTRIBUTE = "mcp.client.session.id"


def build() -> MCPServer:
    server = MCPServer("csid")

    @server.tool()
    async def whoami(ctx: Context) -> dict[str, Any]:
        return {"id": ctx.client_session_id, "key": ctx.client_session_key}

    server.telemetry.request_log = True
    return server


@asynccontextmanager
async def serving(kind: Literal["hypercorn", "h11"]) -> AsyncIterator[str]:
    app = MCPApp(build(), ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, http=kind, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield urls[0]
        stop.set()


class Sent:
    """Every HTTP request the client sent: (method, headers, JSON body or None)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, httpx.Headers, Any]] = []

    async def __call__(self, request: httpx.Request) -> None:
        content = request.content if request.method == "POST" else b""
        self.requests.append((request.method, request.headers, json.loads(content) if content else None))


def whoami(result: Any) -> dict[str, Any]:
    found: dict[str, Any] = result.structured_content
    return found


@pytest.mark.parametrize("kind", ["hypercorn", "h11"])
@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_end_to_end_over_http(
    kind: Literal["hypercorn", "h11"],
    mode: Literal["legacy", "modern"],
    spans: SpanLog,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "mcp_trio.requests")
    sent = Sent()
    with trio.fail_after(20):
        async with (
            serving(kind) as url,
            httpx.AsyncClient(
                timeout=httpx.Timeout(10.0, read=None), event_hooks={"request": [sent]}
            ) as http,
            open_client_session(url, mode=mode, http=http) as session,
        ):
            csid = session.client_session_id
            assert uuid.UUID(csid).version == 4 and str(uuid.UUID(csid)) == csid
            assert whoami(await session.call_tool("whoami", {})) == {"id": csid, "key": f"/{csid}"}
            await session.list_tools()
    assert session.modern is (mode == "modern")
    assert sent.requests
    for method, headers, message in sent.requests:  # every HTTP request, GET and DELETE too
        assert headers.get(HEADER) == csid, (method, message)
        if isinstance(message, dict) and "id" in message and "method" in message:  # every request
            assert message["params"]["_meta"][META_KEY] == csid, message
    methods = {message.get("method") for _, _, message in sent.requests if isinstance(message, dict)}
    assert {"tools/call", "tools/list"} <= methods
    assert ("initialize" in methods) is (mode == "legacy")
    calls = spans.named("tools/call whoami")
    assert {span.kind for span in calls} == {SpanKind.CLIENT, SpanKind.SERVER}
    assert all(dict(span.attributes or {}).get(ATTRIBUTE) == csid for span in calls)
    logged = [
        r.__dict__["mcp"] for r in caplog.records if r.name == "mcp_trio.requests" and "mcp" in r.__dict__
    ]
    assert {record["method"] for record in logged} >= {"tools/call", "tools/list"}
    assert all(record.get("client_session_id") == csid for record in logged)


async def test_a_given_id_and_a_malformed_one() -> None:
    given = str(uuid.uuid4())
    with trio.fail_after(20):
        async with serving("h11") as url:
            async with open_client_session(url, mode="legacy", client_session_id=given.upper()) as session:
                assert session.client_session_id == given
                assert whoami(await session.call_tool("whoami", {}))["id"] == given
            with pytest.raises(ValueError, match="client_session_id must be a UUID"):
                async with open_client_session(url, client_session_id="conversation-1"):
                    pass  # pragma: no cover - refused before anything is sent


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_over_websocket_the_meta_alone(mode: Literal["legacy", "modern"]) -> None:
    with trio.fail_after(20):
        async with serving("h11") as url, open_websocket_client(url, mode=mode) as session:
            csid = session.client_session_id
            assert whoami(await session.call_tool("whoami", {})) == {"id": csid, "key": f"/{csid}"}


WHOAMI_STDIO = textwrap.dedent(
    """
    import json
    import trio
    from mcp_trio import Context, MCPServer, serve_stdio

    server = MCPServer("whoami")

    @server.tool(description="The client session id this request named, and its key.")
    async def whoami(ctx: Context) -> str:
        return json.dumps({"id": ctx.client_session_id, "key": ctx.client_session_key})

    trio.run(serve_stdio, server)
    """
)


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_over_stdio_the_meta_alone(mode: Literal["legacy", "modern"]) -> None:
    with trio.fail_after(20):
        async with open_stdio_client([sys.executable, "-c", WHOAMI_STDIO], mode=mode) as session:
            csid = session.client_session_id
            text = (await session.call_tool("whoami", {})).content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == {"id": csid, "key": f"/{csid}"}
