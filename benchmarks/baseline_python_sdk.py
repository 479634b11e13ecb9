"""Baseline for ``bench_server.py``: the official MCP python-sdk (``mcp==2.3.0``) serving the same ``echo``
tool through its own Streamable HTTP ASGI app, on the same hypercorn trio worker as ``mcp-trio``.

    python3 benchmarks/baseline_python_sdk.py --bind 127.0.0.1:0 [--json-response]

Prints ``python-sdk: serving on http://HOST:PORT/mcp`` once listening; stops on SIGINT or SIGTERM.

What is the same as ``mcp-trio demo``: hypercorn 0.18 ``hypercorn.trio.serve`` with a default ``Config``
(access log off), stateful sessions, SSE answers by default and JSON with ``--json-response``, the SDK's
default session limits (10 000 sessions, 30 min idle), DNS-rebinding protection on (the SDK's own default
for a loopback host, like mcp-trio's; the benchmark sends a loopback ``Host``), and the same hypercorn
CLOSE_WAIT fix that ``mcp-trio`` applies to hypercorn and its request-path patches
(``--no-hypercorn-fast-path`` leaves out the patches, ``--no-hypercorn-fix`` both).
The SDK's session manager runs in the Starlette app's lifespan, which hypercorn drives.

The same app serves 2026-07-28 stateless POSTs (the SDK routes every request whose MCP-Protocol-Version is
not a 2025 handshake version to its single-exchange path), ``subscriptions/listen`` included.  For the
input-required round trip it also has ``test_input_required_result_elicitation`` (as ``mcp_trio.demo``):
a resolver that elicits the user's name, the SDK's own way to ask for input.
"""

from __future__ import annotations

import argparse
import logging
from typing import Annotated

import trio
from hypercorn_baseline import add_hypercorn_options, serve_baseline
from mcp.server.mcpserver import Elicit, MCPServer, Resolve
from pydantic import BaseModel


class UserName(BaseModel):
    name: str


def ask_user_name() -> Elicit[UserName]:
    """The resolver of ``test_input_required_result_elicitation``: ask the user's name."""
    return Elicit("What is your name?", UserName)


def build_app(json_response: bool):  # -> starlette.applications.Starlette
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

    # host=127.0.0.1: the SDK switches its DNS-rebinding protection on for loopback hosts, as mcp-trio does.
    return server.streamable_http_app(
        streamable_http_path="/mcp", json_response=json_response, host="127.0.0.1"
    )


async def _main(args: argparse.Namespace) -> None:
    await serve_baseline("python-sdk", build_app(args.json_response), args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_hypercorn_options(parser)
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    trio.run(_main, args)


if __name__ == "__main__":
    main()
