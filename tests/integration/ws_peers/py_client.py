"""The official Python SDK 1.x client (``mcp`` 1.30.0, ``mcp.client.websocket``) over a WebSocket.

Run by the interpreter of ``.interop/mcp1/`` (``bash scripts/install-mcp1.sh``), not the tests' own (that
one has ``mcp`` 2.x, which has no WebSocket transport), by ``tests/integration/test_interop_websocket.py``:

    .interop/mcp1/bin/python tests/integration/ws_peers/py_client.py ws://127.0.0.1:PORT/mcp

It connects with the subprotocol ``mcp``, initializes, lists the tools, calls ``test_tool_with_progress``
with a progress callback and ``test_sampling`` while answering the server's ``sampling/createMessage``,
then prints one JSON line summing up what it saw and exits 0.  Every step is bounded in time, so a
broken server makes it exit non-zero (with the error on stderr) instead of hanging.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from importlib.metadata import version
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.websocket import websocket_client
from mcp.shared.context import RequestContext

SAMPLED_TEXT = "sampled by python-sdk"
STEP = 10.0  # seconds for any one step
TOTAL = 30.0  # seconds for the whole session


async def answer_sampling(
    context: RequestContext[ClientSession, Any], params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    summary["sampling_requests"].append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED_TEXT),
        model="python-sdk-fake-model",
        stopReason="endTurn",
    )


def dump(result: types.CallToolResult) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


summary: dict[str, Any] = {
    "peer": "python-sdk",
    "sdk_version": version("mcp"),
    "websockets_version": version("websockets"),
    "sampling_requests": [],
}


async def session(url: str) -> None:
    progress: list[dict[str, Any]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    with warnings.catch_warnings():
        # websocket_client is deprecated in 1.x (it is gone in 2.x): that is the point of this peer
        warnings.simplefilter("ignore", DeprecationWarning)
        transport = websocket_client(url)
    async with (
        transport as (read, write),
        ClientSession(read, write, sampling_callback=answer_sampling) as client,
    ):
        with anyio.fail_after(STEP):
            init = await client.initialize()
        summary["protocol_version"] = init.protocolVersion
        summary["server_info"] = {"name": init.serverInfo.name, "version": init.serverInfo.version}
        summary["capabilities"] = sorted(init.capabilities.model_dump(exclude_none=True))
        summary["instructions"] = init.instructions

        with anyio.fail_after(STEP):
            tools = await client.list_tools()
        summary["tools"] = [tool.name for tool in tools.tools]

        with anyio.fail_after(STEP):
            result = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        summary["progress_result"] = dump(result)
        summary["progress"] = progress
        summary["progress_values"] = [entry["progress"] for entry in progress]

        with anyio.fail_after(STEP):
            result = await client.call_tool("test_sampling", {"prompt": "hi"})
        summary["sampling_result"] = dump(result)
        summary["sampling_text"] = "".join(
            block.text for block in result.content if isinstance(block, types.TextContent)
        )

        with anyio.fail_after(STEP):
            result = await client.call_tool("echo", {"text": "over a websocket"})
        summary["echo_text"] = "".join(
            block.text for block in result.content if isinstance(block, types.TextContent)
        )


async def main(url: str) -> None:
    with anyio.fail_after(TOTAL):
        await session(url)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} ws://HOST:PORT/mcp")
    try:
        anyio.run(main, sys.argv[1])
    except Exception:
        traceback.print_exc()
        print(json.dumps({**summary, "error": traceback.format_exc(limit=3)}), file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary), flush=True)
