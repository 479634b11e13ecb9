"""Floor for ``bench_server.py``: a plain ASGI app (no framework, no MCP) on the same hypercorn trio worker.

    python3 benchmarks/baseline_bare_asgi.py --bind 127.0.0.1:0

Prints ``bare-asgi: serving on http://HOST:PORT/mcp`` once listening; stops on SIGINT or SIGTERM.

Every POST body is decoded as JSON only to read its ``id``.  ``initialize`` gets a fixed result and a
fixed ``mcp-session-id`` header; a notification (no ``id``) gets 202; any other request gets the fixed
``tools/call`` result ``{"content":[{"type":"text","text":"hi"}]}`` (a 2026-07-28 request, one whose
``params._meta`` names a protocol version, gets it with ``resultType`` and ``_meta``; ``server/discover``
gets a fixed discover result), always as ``application/json`` (never SSE).  DELETE gets 200; GET streams
are not supported (405), so the harness skips ``churn`` for it (and, in 2026, mrtr and listen).  Like
``baseline_python_sdk.py`` it uses ``hypercorn.trio.serve`` with a default ``Config`` (access log off) and
mcp_trio's hypercorn CLOSE_WAIT fix and request-path patches, as ``mcp-trio`` applies them
(``--no-hypercorn-fast-path`` leaves out the patches, ``--no-hypercorn-fix`` both).  Its throughput is
the floor of the stack: what hypercorn + trio cost with nothing on top.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import trio
from hypercorn_baseline import add_hypercorn_options, serve_baseline

SESSION_ID = b"bare-asgi-session"
INITIALIZE_RESULT = (
    b'"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},'
    b'"serverInfo":{"name":"bare-asgi","version":"0.1.0"}}}'
)
CALL_RESULT = b'"result":{"content":[{"type":"text","text":"hi"}]}}'
# 2026-07-28 (a request whose params._meta names a protocol version): every result carries resultType and
# the server's info; server/discover gets a fixed discover result.
MODERN_META = b'"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"bare-asgi","version":"0.1.0"}}'
MODERN_CALL_RESULT = (
    b'"result":{"content":[{"type":"text","text":"hi"}],"resultType":"complete",' + MODERN_META + b"}}"
)
DISCOVER_RESULT = (
    b'"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"ttlMs":0,'
    b'"cacheScope":"private","resultType":"complete",' + MODERN_META + b"}}"
)
JSON_HEADERS = [(b"content-type", b"application/json")]


def _modern(request: dict[str, Any]) -> bool:
    """A 2026-07-28 request: its params._meta names a protocol version."""
    params = request.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and "io.modelcontextprotocol/protocolVersion" in meta


async def _respond(
    send: Any, status: int, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    all_headers = [*(headers or []), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return  # http.disconnect
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    method = scope["method"]
    if method == "DELETE":
        await _respond(send, 200)
        return
    if method != "POST":
        await _respond(send, 405)
        return
    try:
        request = json.loads(body)
    except ValueError:
        await _respond(send, 400)
        return
    if not isinstance(request, dict) or "id" not in request:
        await _respond(send, 202)
        return
    head = b'{"jsonrpc":"2.0","id":' + json.dumps(request["id"]).encode() + b","
    kind = request.get("method")
    if kind == "initialize":
        await _respond(send, 200, head + INITIALIZE_RESULT, [*JSON_HEADERS, (b"mcp-session-id", SESSION_ID)])
    elif kind == "server/discover":
        await _respond(send, 200, head + DISCOVER_RESULT, JSON_HEADERS)
    else:
        await _respond(
            send, 200, head + (MODERN_CALL_RESULT if _modern(request) else CALL_RESULT), JSON_HEADERS
        )


async def _main(args: argparse.Namespace) -> None:
    await serve_baseline("bare-asgi", app, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_hypercorn_options(parser)
    args = parser.parse_args()
    trio.run(_main, args)


if __name__ == "__main__":
    main()
