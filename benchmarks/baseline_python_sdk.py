"""Baseline for ``bench_server.py``: the official MCP python-sdk (``mcp==2.3.0``) serving the same ``echo``
tool through its own Streamable HTTP ASGI app, on the same hypercorn trio worker as ``mcp-trio``.

    python3 benchmarks/baseline_python_sdk.py --bind 127.0.0.1:0 [--json-response] [--server uvicorn]

Prints ``python-sdk: serving on http://HOST:PORT/mcp`` once listening; stops on SIGINT or SIGTERM.

What is the same as ``mcp-trio demo``: hypercorn 0.18 ``hypercorn.trio.serve`` with a default ``Config``
(access log off), stateful sessions, SSE answers by default and JSON with ``--json-response``, the SDK's
default session limits (10 000 sessions, 30 min idle), DNS-rebinding protection on (the SDK's own default
for a loopback host, like mcp-trio's; the benchmark sends a loopback ``Host``), and the same hypercorn
CLOSE_WAIT fix that ``mcp-trio`` applies to hypercorn and its request-path patches
(``--no-hypercorn-fast-path`` leaves out the patches, ``--no-hypercorn-fix`` both).
The SDK's session manager runs in the Starlette app's lifespan, which hypercorn drives.

``--server uvicorn`` serves the same app with uvicorn (asyncio, its h11 protocol; what the SDK's own
``MCPServer.run("streamable-http")`` runs), access log off, keep-alive 5 s as hypercorn's.

``build_server`` is the server alone: ``bench_hosted.py`` serves the very same one hosted by mcp_trio
(``mcp-trio serve baseline_python_sdk:build_server``).

The same app serves 2026-07-28 stateless POSTs (the SDK routes every request whose MCP-Protocol-Version is
not a 2025 handshake version to its single-exchange path), ``subscriptions/listen`` included.  For the
input-required round trip it also has ``test_input_required_result_elicitation`` (as ``mcp_trio.demo``):
a resolver that elicits the user's name, the SDK's own way to ask for input.
"""

from __future__ import annotations

import argparse
import logging
from typing import Annotated, Any

import trio
from hypercorn_baseline import add_hypercorn_options, serve_baseline
from mcp.server.mcpserver import Elicit, MCPServer, Resolve
from pydantic import BaseModel


class UserName(BaseModel):
    name: str


def ask_user_name() -> Elicit[UserName]:
    """The resolver of ``test_input_required_result_elicitation``: ask the user's name."""
    return Elicit("What is your name?", UserName)


def build_server() -> MCPServer:
    """The python-sdk server of the benchmarks: ``echo`` and the input-required tool."""
    server = MCPServer("python-sdk-baseline", version="0.1.0", log_level="WARNING")

    @server.tool(description="Echo the given text back.")
    async def echo(text: str) -> str:
        return text

    # mcp_trio.demo's tool of the same name, the SDK's way: a resolver that elicits the name.  At
    # 2026-07-28 the SDK answers the first POST with an input_required result (the question under the
    # resolver's key, a sealed requestState) and runs the tool when the retry brings the answer.
    @server.tool(description="Asks the user's name (elicitation), then greets them.")
    async def test_input_required_result_elicitation(
        user: Annotated[UserName, Resolve(ask_user_name)],
    ) -> str:
        return f"Hello, {user.name}!"

    return server


def build_app(json_response: bool) -> Any:  # starlette.applications.Starlette
    """The server on its own transport: the SDK's Streamable HTTP ASGI app."""
    # host=127.0.0.1: the SDK switches its DNS-rebinding protection on for loopback hosts, as mcp-trio does.
    return build_server().streamable_http_app(
        streamable_http_path="/mcp", json_response=json_response, host="127.0.0.1"
    )


async def _main(args: argparse.Namespace) -> None:
    await serve_baseline("python-sdk", build_app(args.json_response), args)


def serve_uvicorn(args: argparse.Namespace) -> None:
    """The same app on uvicorn (asyncio), until SIGINT or SIGTERM (uvicorn's own handlers)."""
    import asyncio
    import socket

    import uvicorn

    host, _, port = args.bind.rpartition(":")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), int(port)))
    config = uvicorn.Config(
        build_app(args.json_response),
        log_level=args.log_level.lower(),
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # listening: the line the harness waits for
                bound_host, bound_port = sock.getsockname()[:2]
                print(f"python-sdk: serving on http://{bound_host}:{bound_port}/mcp", flush=True)

    async def run() -> None:
        await Server(config).serve(sockets=[sock])
        print("python-sdk: stopped", flush=True)

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_hypercorn_options(parser)
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--server", choices=["hypercorn", "uvicorn"], default="hypercorn", help="HTTP server")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.server == "uvicorn":
        serve_uvicorn(args)
    else:
        trio.run(_main, args)


if __name__ == "__main__":
    main()
