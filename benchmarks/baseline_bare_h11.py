"""Floor below the floor for ``bench_server.py``: the bare-asgi answers on a plain Trio + h11 loop (no ASGI).

    python3 benchmarks/baseline_bare_h11.py --bind 127.0.0.1:0

Prints ``bare-h11: serving on http://HOST:PORT/mcp`` once listening; stops on SIGINT or SIGTERM.

Answers exactly like ``baseline_bare_asgi.py``: every POST body is decoded as JSON only to read its
``id``.  ``initialize`` gets a fixed result and a fixed ``mcp-session-id`` header; a notification (no
``id``) gets 202; any other request gets the fixed ``tools/call`` result
``{"content":[{"type":"text","text":"hi"}]}`` (a 2026-07-28 request, one whose ``params._meta`` names a
protocol version, gets it with ``resultType`` and ``_meta``; ``server/discover`` gets a fixed discover
result), always as ``application/json`` (never SSE).  DELETE gets 200; GET streams are not supported
(405), so the harness skips ``churn`` for it (and, in 2026, mrtr and listen).  The path is ignored.

No ASGI and no hypercorn: ``trio.serve_tcp`` runs one task per connection; each task owns an
``h11.Connection``, reads with ``receive_some``, and writes each whole response (head and body) with a
single ``send_all``.  Connections are kept alive as long as the client wants (no request limit, no idle
timeout); any h11 protocol error closes the connection.  No ``date`` or ``server`` header is sent.  Its
throughput is what Trio + h11 alone cost, so ``bare-asgi`` minus ``bare-h11`` is hypercorn's own share.
"""

from __future__ import annotations

import argparse
import json
import signal
from functools import partial
from typing import Any

import h11
import trio

SESSION_ID = b"bare-h11-session"
INITIALIZE_RESULT = (
    b'"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},'
    b'"serverInfo":{"name":"bare-h11","version":"0.1.0"}}}'
)
CALL_RESULT = b'"result":{"content":[{"type":"text","text":"hi"}]}}'
# 2026-07-28 (a request whose params._meta names a protocol version): every result carries resultType and
# the server's info; server/discover gets a fixed discover result.
MODERN_META = b'"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"bare-h11","version":"0.1.0"}}'
MODERN_CALL_RESULT = (
    b'"result":{"content":[{"type":"text","text":"hi"}],"resultType":"complete",' + MODERN_META + b"}}"
)
DISCOVER_RESULT = (
    b'"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"ttlMs":0,'
    b'"cacheScope":"private","resultType":"complete",' + MODERN_META + b"}}"
)
JSON_HEADERS = [(b"content-type", b"application/json")]
MAX_RECV = 65536


def _answer(method: bytes, body: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """Status, body and extra headers for one complete request."""
    if method == b"DELETE":
        return 200, b"", []
    if method != b"POST":
        return 405, b"", []
    try:
        request = json.loads(body)
    except ValueError:
        return 400, b"", []
    if not isinstance(request, dict) or "id" not in request:
        return 202, b"", []
    head = b'{"jsonrpc":"2.0","id":' + json.dumps(request["id"]).encode() + b","
    kind = request.get("method")
    if kind == "initialize":
        return 200, head + INITIALIZE_RESULT, [*JSON_HEADERS, (b"mcp-session-id", SESSION_ID)]
    if kind == "server/discover":
        return 200, head + DISCOVER_RESULT, JSON_HEADERS
    return 200, head + (MODERN_CALL_RESULT if _modern(request) else CALL_RESULT), JSON_HEADERS


def _modern(request: dict[str, Any]) -> bool:
    """A 2026-07-28 request: its params._meta names a protocol version."""
    params = request.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and "io.modelcontextprotocol/protocolVersion" in meta


async def _serve_connection(stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    method = b""
    body = bytearray()
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(MAX_RECV))  # b"" is EOF
            elif isinstance(event, h11.Request):
                method = event.method.upper()
                body.clear()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                status, payload, headers = _answer(method, bytes(body))
                headers = [*headers, (b"content-length", str(len(payload)).encode())]
                out = conn.send(h11.Response(status_code=status, headers=headers))
                if payload:
                    out += conn.send(h11.Data(data=payload))
                out += conn.send(h11.EndOfMessage())
                await stream.send_all(out)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # MUST_CLOSE: the client asked for connection: close (or HTTP/1.0)
                conn.start_next_cycle()
            else:  # ConnectionClosed (or PAUSED, which a finished cycle never leaves us in)
                return
    except h11.ProtocolError:
        return  # malformed request (or our own misuse): drop the connection
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def _wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async for _ in received:
            return


async def _main(args: argparse.Namespace) -> None:
    host, _, port = args.bind.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _serve_connection, int(port), host=host))
        for listener in listeners:
            bound = listener.socket.getsockname()
            shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            print(f"bare-h11: serving on http://{shown}:{bound[1]}/mcp", flush=True)
        await _wait_for_signal()
        nursery.cancel_scope.cancel()
    print("bare-h11: stopped", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bind", default="127.0.0.1:0")
    args = parser.parse_args()
    trio.run(_main, args)


if __name__ == "__main__":
    main()
