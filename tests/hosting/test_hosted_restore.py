"""An adopted 2025 session's SDK kernel is rebuilt once, from what its record holds, even when several
of its requests arrive at once.  A replayed ``initialize`` that fails fails those requests and the next
one tries again; a replayed log level or subscription that fails is logged, and the session served.
(Adoption across real workers: tests/integration/test_sdk_workers.py.)"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as mt
import pytest
import trio
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, EmptyResult, SetLevelRequestParams, TextContent

from mcp_trio import Context
from mcp_trio.errors import RPCError
from mcp_trio.sdk import HostedServer


class AdoptedPeer:
    """What a session restored from its record looks like to the server: no kernel yet."""

    carrier = None
    principal = None

    def __init__(self) -> None:
        self.session_id = "s" * 32
        self.protocol_version = "2025-11-25"
        self.client_info = {"name": "adopted", "version": "1"}
        self.client_capabilities: dict[str, Any] = {}
        self.log_level: mt.LoggingLevel | None = "error"
        self.subscriptions: set[str] | frozenset[str] = frozenset()
        self.hosted: object = None

    async def send_message(self, message: dict[str, Any], related: Any = None) -> None:
        pass  # pragma: no cover


def build(levels: list[str], fail: list[str]) -> HostedServer:
    """``fail``: the methods whose (next) replay fails, once each."""

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        await anyio.sleep(0.05)  # the replay yields: a second request arrives meanwhile
        if "logging/setLevel" in fail:
            fail.remove("logging/setLevel")
            raise RuntimeError("the replay fails once")
        levels.append(params.level)
        return EmptyResult()

    async def refuse_once(ctx: Any, call_next: Any) -> Any:
        if ctx.method in fail:
            await anyio.sleep(0.05)
            fail.remove(ctx.method)
            raise MCPError(mt.INTERNAL_ERROR, "refused once")
        return await call_next(ctx)

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="ok")])

    async def list_tools(ctx: Any, params: Any) -> Any:
        return mt.ListToolsResult(tools=[])

    server: Server[Any] = Server(
        "adopted", on_set_logging_level=set_level, on_call_tool=call_tool, on_list_tools=list_tools
    )
    server.middleware.append(refuse_once)
    return HostedServer(server)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # logging, in the SDK
async def test_concurrent_first_requests_rebuild_the_kernel_once() -> None:
    levels: list[str] = []
    hosted = build(levels, [])
    peer = AdoptedPeer()
    answers: list[dict[str, Any]] = []

    async def call(request_id: int) -> None:
        ctx = Context(request_id, "tools/call", peer)
        answers.append(await hosted.handle_request(ctx, "tools/call", {"name": "x", "arguments": {}}))

    async with hosted.open_lifespan(grace=1):
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for request_id in range(3):
                    nursery.start_soon(call, request_id)
    assert levels == ["error"]  # one replay of the recorded level
    assert [answer["content"][0]["text"] for answer in answers] == ["ok"] * 3
    assert type(peer.hosted).__name__ == "_Kernel"


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_failed_initialize_replay_fails_its_requests_and_the_next_one_tries_again() -> None:
    levels: list[str] = []
    hosted = build(levels, ["initialize"])
    peer = AdoptedPeer()
    outcomes: list[object] = []

    async def call(request_id: int) -> None:
        ctx = Context(request_id, "tools/call", peer)
        try:
            outcomes.append(await hosted.handle_request(ctx, "tools/call", {"name": "x", "arguments": {}}))
        except RPCError as exc:
            outcomes.append(exc.code)

    async with hosted.open_lifespan(grace=1):
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, 1)
                nursery.start_soon(call, 2)
            assert outcomes == [mt.INTERNAL_ERROR, mt.INTERNAL_ERROR] and peer.hosted is None
            await call(3)
    assert levels == ["error"]
    assert isinstance(outcomes[-1], dict) and outcomes[-1]["content"][0]["text"] == "ok"


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_failed_level_replay_is_logged_and_the_session_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    levels: list[str] = []
    hosted = build(levels, ["logging/setLevel"])
    peer = AdoptedPeer()
    async with hosted.open_lifespan(grace=1):
        with trio.fail_after(5):
            ctx = Context(1, "tools/call", peer)
            answer = await hosted.handle_request(ctx, "tools/call", {"name": "x", "arguments": {}})
    assert answer["content"][0]["text"] == "ok" and levels == []
    assert any("replaying logging/setLevel failed" in record.getMessage() for record in caplog.records)
