"""A hosted handler that calls asyncio gets :class:`mcp_trio.sdk.AsyncioOnTrio`, whose text says to use
anyio (both eras, on real hypercorn): the server's log shows it, the client gets what the failure policy
gives (the SDK's "Error executing tool", mcp_trio's -32603 with a reference, its text with
``error_details``); a handler can catch it and go on.  Nothing else in the process sees the guard:
asyncio's running loop is restored after each step of a hosted handler, a plain Trio task that runs
between the steps sees none, the session goes on, and asyncio still runs in a thread afterwards.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import logging
from typing import Any

import anyio
import httpx
import mcp_types as mt
import pytest
import trio
import trio.lowlevel
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer

from mcp_trio.sdk import AsyncioOnTrio, hosted_app

from .peers import Legacy, Modern, Peer, hosting

DEADLINE = 15.0
ADVICE = "use anyio instead of asyncio"


def build(caught: list[BaseException]) -> MCPServer:
    server = MCPServer("asyncio-user")

    @server.tool()
    async def sleepy() -> str:
        await asyncio.sleep(0.01)
        return "slept"

    @server.tool()
    async def zero() -> str:
        await asyncio.sleep(0)
        return "slept"

    @server.tool()
    async def loop_time() -> str:
        return str(asyncio.get_running_loop().time())

    @server.tool()
    async def spawn() -> str:
        async def job() -> None:
            pass

        coro = job()
        try:
            asyncio.create_task(coro)  # noqa: RUF006 - it raises (the guard)
        finally:
            coro.close()
        return "spawned"

    @server.tool()
    async def careful(steps: int) -> str:
        """Catches the error and goes on with anyio, step by step."""
        try:
            asyncio.get_running_loop().call_soon(print)
        except AsyncioOnTrio as exc:
            caught.append(exc)
        for _ in range(steps):
            await anyio.sleep(0.005)
        return "done with anyio"

    return server


def lowlevel() -> Server[Any]:
    async def call_tool(
        ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams
    ) -> mt.CallToolResult:
        await asyncio.sleep(0.01)
        raise AssertionError("not reached")  # pragma: no cover

    return Server("asyncio-lowlevel", on_call_tool=call_tool)


def guard_errors(caplog: pytest.LogCaptureFixture) -> list[AsyncioOnTrio]:
    """The AsyncioOnTrio errors the server logged (as the failure, or as its cause)."""
    found = []
    for record in caplog.records:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, AsyncioOnTrio):
                found.append(exc)
            exc = exc.__cause__
    return found


@pytest.mark.parametrize("era", ["2025", "2026"])
async def test_asyncio_in_a_hosted_handler_says_to_use_anyio(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    caught: list[BaseException] = []
    caplog.set_level(logging.ERROR)
    with trio.fail_after(DEADLINE):
        async with hosting(build(caught)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer: Peer = Legacy(http, hosted.url) if era == "2025" else Modern(http, hosted.url)
            if isinstance(peer, Legacy):
                await peer.open()
            for tool in ("sleepy", "zero", "loop_time", "spawn"):
                caplog.clear()
                answer = await peer.call_tool(tool)
                # the SDK's policy for an unexpected exception: no detail to the client ...
                assert answer["result"]["isError"] is True
                assert answer["result"]["content"][0]["text"] == f"Error executing tool {tool}"
                # ... and the advice in the server's log
                (logged,) = guard_errors(caplog)
                assert ADVICE in str(logged) and "anyio.sleep" in str(logged), (tool, logged)
            answer = await peer.call_tool("careful", {"steps": 2})
            assert answer["result"]["content"][0]["text"] == "done with anyio"
            assert len(caught) == 1 and isinstance(caught[0], AsyncioOnTrio)
            assert "loop.call_soon() called" in str(caught[0]) and ADVICE in str(caught[0])
    assert asyncio.events._get_running_loop() is None


@pytest.mark.parametrize("details", [False, True])
async def test_a_lowlevel_handler_fails_by_mcp_trios_policy(
    details: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    app = hosted_app(lowlevel(), error_details=details)
    with trio.fail_after(DEADLINE):
        async with hosting(lowlevel(), app=app) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            error = (await Modern(http, hosted.url).call_tool("anything"))["error"]
    assert error["code"] == -32603 and error["message"].startswith("Internal error (reference ")
    assert (ADVICE in error["message"]) is details
    (logged,) = guard_errors(caplog)
    assert "loop.create_future() called" in str(logged)


async def test_nothing_else_in_the_process_sees_the_guard() -> None:
    """A plain Trio task, running while hosted handlers are between their steps, never sees a running
    asyncio loop; afterwards none is left set, and asyncio runs (in a thread) as ever."""
    caught: list[BaseException] = []
    seen: list[object] = []
    with trio.fail_after(DEADLINE):
        async with hosting(build(caught)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Legacy(http, hosted.url)
            await peer.open()
            done = trio.Event()

            async def watch() -> None:
                while not done.is_set():
                    seen.append(asyncio.events._get_running_loop())
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)

                async def calls() -> None:
                    async with trio.open_nursery() as inner:
                        for _ in range(4):
                            inner.start_soon(peer.call_tool, "careful", {"steps": 20})
                    done.set()

                nursery.start_soon(calls)
            assert len(caught) == 4  # each handler met the guard...
            assert len(seen) > 40 and set(seen) == {None}  # ... and nothing between their steps did
            assert (await peer.call_tool("careful", {"steps": 0}))["result"]["isError"] is False
    assert asyncio.events._get_running_loop() is None

    async def plain() -> str:
        await asyncio.sleep(0)
        return "asyncio works"

    assert await trio.to_thread.run_sync(asyncio.run, plain()) == "asyncio works"
