"""Our own request path in process: direct ASGI calls, no sockets, no HTTP server.

    python3 benchmarks/bench_inprocess.py [--calls N] [--mode MODE] [--compare SRC [SRC ...]]

``json``, ``sse``, ``modern`` and ``churn`` go through :func:`mcp_trio.testing.open_asgi_client` (its
in-memory HTTP costs are counted too; ``modern`` has no disconnect callback: the handler has a watcher
task, as on other ASGI servers).  ``modern-hook``, ``sse-direct`` and ``churn-direct`` call the app as
mcp_trio's hypercorn does (the disconnect callback and cancellable sends; messages handed over as they
are): a 2026 tools/call, a 2025 tools/call with an SSE answer, a 2025 session (initialize,
notifications/initialized, DELETE).

Prints the wall time per tools/call.  The numbers that survive a noisy machine are instruction counts:
run it under callgrind at two call counts and take the difference per call (``--compare`` does exactly
that for two source trees, e.g. HEAD and an older commit checked out with ``git worktree``)::

    python3 benchmarks/bench_inprocess.py --compare /tmp/old/src src

``--server sdk`` serves the same tool from a python-sdk ``MCPServer`` hosted by mcp_trio
(:func:`mcp_trio.sdk.hosted_app`) instead of mcp_trio's own ``MCPServer``; ``sdk-no-otel`` the same
without the SDK's ``OpenTelemetryMiddleware`` (on by default in every SDK server; dropping it from
``server.middleware`` is the SDK's own opt-out).

Each tree's ``mcp_trio`` is imported from the given ``src`` folder (``PYTHONPATH``), so both run with the
same interpreter and dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

POST = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
MODERN = "2026-07-28"
INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "b", "version": "1"},
        },
    }
).encode()
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()


async def _open_session(client: Any) -> dict[str, str]:
    """initialize + notifications/initialized; the headers of the session's next requests."""
    response = await client.request("POST", headers=POST, body=INIT)
    await response.read()
    headers = {
        **POST,
        "mcp-session-id": response.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    await (await client.request("POST", headers=headers, body=INITIALIZED)).read()
    return headers


def _call(request_id: int, modern: bool) -> bytes:
    params: dict[str, Any] = {"name": "add", "arguments": {"a": request_id, "b": 1}}
    if modern:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


def _app(server: str, config: Any) -> Any:
    """An ``MCPApp`` with the tool ``add``: mcp_trio's own ``MCPServer`` (``ours``) or the python-sdk's
    ``MCPServer`` hosted by mcp_trio (``sdk``, :func:`mcp_trio.sdk.hosted_app`)."""
    if server.startswith("sdk"):
        from mcp.server.mcpserver import MCPServer as SDKServer

        from mcp_trio.sdk import hosted_app

        sdk = SDKServer("bench", version="1", log_level="WARNING")

        @sdk.tool()
        async def add(a: int, b: int) -> str:
            return str(a + b)

        if server == "sdk-no-otel":  # the SDK's documented opt-out of its span per message
            from mcp.server._otel import OpenTelemetryMiddleware

            sdk.middleware[:] = [m for m in sdk.middleware if not isinstance(m, OpenTelemetryMiddleware)]
        return hosted_app(sdk, config)
    from mcp_trio import MCPApp, MCPServer

    ours = MCPServer("bench", "1")

    @ours.tool("add")
    async def add_ours(a: int, b: int) -> str:
        return str(a + b)

    return MCPApp(ours, config)


async def _run(calls: int, mode: str, server: str = "ours") -> float:
    import trio
    import trio._core._run

    # Trio shuffles each batch of runnable tasks with its own random generator: seeded, the same code
    # runs the same steps in the same order every time, and instruction counts repeat (about 5 % apart
    # otherwise between runs of a session churn).
    trio._core._run._r.seed(0)

    from mcp_trio import ServerConfig
    from mcp_trio.testing import open_asgi_client

    app = _app(server, ServerConfig(json_response=mode == "json"))
    if mode in ("modern-hook", "sse-direct", "churn-direct"):
        return await _direct(app, calls, mode)
    async with open_asgi_client(app) as client:
        if mode == "churn":
            return await _churn(client, calls)
        headers = dict(POST)
        if mode == "modern":
            headers["mcp-protocol-version"] = MODERN
            headers["mcp-method"] = "tools/call"
            headers["mcp-name"] = "add"
        else:
            headers = await _open_session(client)
        start = time.perf_counter()
        for i in range(1, calls + 1):
            response = await client.request("POST", headers=headers, body=_call(i, mode == "modern"))
            body = await response.read()
            if response.status != 200 or str(i + 1).encode() not in body:
                raise SystemExit(f"bad answer: {response.status} {body[:200]!r}")
        elapsed = time.perf_counter() - start
        await trio.lowlevel.checkpoint()
    return elapsed


class _Direct:
    """Calls the app as mcp_trio's hypercorn does: the scope offers the disconnect callback (a 2026
    handler runs in the request task, no watcher task) and cancellable sends; receive() hands out the
    body, send() keeps the messages."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.base = [(k.encode(), v.encode()) for k, v in {**POST, "host": "127.0.0.1:8000"}.items()]

    async def request(
        self, method: str, extra: list[tuple[bytes, bytes]], body: bytes = b""
    ) -> list[dict[str, Any]]:
        import trio

        from mcp_trio._runtime.contract import CANCELLABLE_SEND, DISCONNECT_CALLBACK, DisconnectHook

        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": "/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": [*self.base, *extra],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
            "extensions": {CANCELLABLE_SEND: {}, DISCONNECT_CALLBACK: DisconnectHook()},
        }
        await self.app(scope, receive, send)
        return sent

    async def open_session(self) -> list[tuple[bytes, bytes]]:
        """initialize + notifications/initialized; the headers of the session's next requests."""
        sent = await self.request("POST", [], INIT)
        if sent[0]["status"] != 200:
            raise SystemExit(f"initialize: {sent!r:.300}")
        session = dict(sent[0]["headers"])[b"mcp-session-id"]
        headers = [(b"mcp-session-id", session), (b"mcp-protocol-version", b"2025-11-25")]
        sent = await self.request("POST", headers, INITIALIZED)
        if sent[0]["status"] != 202:
            raise SystemExit(f"notifications/initialized: {sent!r:.300}")
        return headers


async def _direct(app: Any, calls: int, mode: str) -> float:
    """``modern-hook`` (2026 tools/call), ``sse-direct`` (2025 tools/call on one session, SSE answers)
    or ``churn-direct`` (2025 sessions: initialize, initialized, DELETE), the app called directly."""
    import trio

    direct = _Direct(app)
    modern = [
        (b"mcp-protocol-version", MODERN.encode()),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", b"add"),
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(app.run)
        session = await direct.open_session() if mode == "sse-direct" else []
        start = time.perf_counter()
        for i in range(1, calls + 1):
            if mode == "churn-direct":
                headers = await direct.open_session()
                sent = await direct.request("DELETE", headers)
                if sent[0]["status"] != 200:
                    raise SystemExit(f"DELETE: {sent!r:.300}")
                continue
            if mode == "modern-hook":
                sent = await direct.request("POST", modern, _call(i, True))
            else:
                sent = await direct.request("POST", session, _call(i, False))
            if sent[0]["status"] != 200 or str(i + 1).encode() not in sent[-1]["body"]:
                raise SystemExit(f"bad answer: {sent!r:.300}")
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return elapsed


async def _churn(client: Any, sessions: int) -> float:
    """Session churn: initialize, notifications/initialized, DELETE (SSE answers)."""
    start = time.perf_counter()
    for _ in range(sessions):
        headers = await _open_session(client)
        response = await client.request("DELETE", headers=headers)
        await response.read()
        if response.status != 200:
            raise SystemExit(f"DELETE: {response.status}")
    return time.perf_counter() - start


def _instructions(src: str, mode: str, calls: int, server: str = "ours") -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--calls",
                str(calls),
                "--mode",
                mode,
                "--server",
                server,
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        with open(out) as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
    raise SystemExit("no callgrind summary")


MODES = ["json", "sse", "modern", "modern-hook", "churn", "sse-direct", "churn-direct"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--mode", choices=MODES, default="json")
    parser.add_argument("--compare", nargs="+", metavar="SRC", help="source trees to compare under callgrind")
    parser.add_argument(
        "--server",
        choices=["ours", "sdk", "sdk-no-otel"],
        default="ours",
        help="mcp_trio's own MCPServer, or the python-sdk's hosted by mcp_trio (mcp_trio.sdk.hosted_app),"
        " with or without the SDK's OpenTelemetry middleware",
    )
    args = parser.parse_args()
    if args.compare:
        low, high = 100, 600
        modes = MODES if args.mode == "json" else [args.mode]
        print(
            "| tree | "
            + " | ".join(
                f"{m}: instructions per session" if m.startswith("churn") else f"{m}: instructions per call"
                for m in modes
            )
            + " |"
        )
        print("|---|" + "---|" * len(modes))
        for src in args.compare:
            cells = []
            for mode in modes:
                high_count = _instructions(src, mode, high, args.server)
                per = (high_count - _instructions(src, mode, low, args.server)) / (high - low)
                cells.append(f"{per / 1e6:.3f} M")
            print(f"| {src} | " + " | ".join(cells) + " |")
        return
    import trio

    elapsed = trio.run(_run, args.calls, args.mode, args.server)
    print(f"{args.server} {args.mode}: {args.calls} calls, {elapsed / args.calls * 1e6:.1f} us per call")


if __name__ == "__main__":
    main()
