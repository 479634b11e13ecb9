"""open_stdio_client against `mcp-trio demo --stdio` in a child process: both eras, server requests,
progress, cancellation, and a child that will not die is terminated, then killed, and always reaped."""

from __future__ import annotations

import sys
import textwrap
from typing import Any

import mcp_types as mt
import pytest
import trio

from mcp_trio import RPCError, open_stdio_client

DEMO = [sys.executable, "-c", "from mcp_trio._cli import main; main()", "demo", "--stdio"]


async def sample(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
    return mt.CreateMessageResult(
        role="assistant", content=mt.TextContent(type="text", text="four"), model="m"
    )


async def elicit(params: Any) -> mt.ElicitResult:
    return mt.ElicitResult(action="accept", content={"name": "Ann", "color": "green"})


@pytest.mark.parametrize("mode", ["legacy", "modern", "auto"])
async def test_demo_over_stdio(mode: str) -> None:
    async with open_stdio_client(DEMO, mode=mode, sampling=sample, elicitation=elicit) as session:
        assert session.modern is (mode != "legacy")
        assert session.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert {"echo", "test_sampling", "count"} <= names
        assert (await session.call_tool("echo", {"text": "hi"})).content[0].text == "hi"
        assert (await session.call_tool("test_sampling", {"prompt": "2+2"})).content[
            0
        ].text == "LLM response: four"
        rounds = await session.call_tool("test_input_required_result_multi_round")
        assert rounds.content[0].text == "Ann likes green"
        seen: list[float] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append(value)

        counted = await session.call_tool("count", {"steps": 3, "delay": 0}, progress=progress)
        assert counted.content[0].text == "counted to 3" and seen == [1, 2, 3]
        with pytest.raises(RPCError) as excinfo:
            await session.call_tool("no_such_tool")
        assert excinfo.value.code == -32602
        with trio.move_on_after(0.3) as scope:
            await session.call_tool("sleep", {"seconds": 3600})
        assert scope.cancelled_caught
        assert (await session.call_tool("echo", {"text": "still fine"})).content[0].text == "still fine"
        process = session._transport.process  # type: ignore[union-attr]
    assert process.returncode == 0  # closing stdin ended the server cleanly


@pytest.mark.deadline(20)
async def test_a_child_that_will_not_exit_is_terminated_then_killed(tmp_path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(
        textwrap.dedent(
            """
            import signal, time, trio
            from mcp_trio import serve_stdio
            from mcp_trio.demo import build_demo_server
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            trio.run(serve_stdio, build_demo_server())
            time.sleep(3600)  # stdin closed, but it does not exit
            """
        )
    )
    async with open_stdio_client(
        [sys.executable, str(script)], mode="legacy", terminate_grace=0.5
    ) as session:
        await session.call_tool("echo", {"text": "x"})
        process = session._transport.process  # type: ignore[union-attr]
        start = trio.current_time()  # the child's start-up (an import under load) is not the point
    elapsed = trio.current_time() - start
    assert process.returncode == -9  # SIGTERM was ignored: killed
    assert elapsed < 5  # two graces of 0.5 s, not the child's 3600 s


async def test_a_child_that_dies_fails_requests_promptly() -> None:
    crash = "import sys; sys.stdin.readline(); sys.exit(3)"  # reads initialize, exits without answering
    with trio.fail_after(5), pytest.raises(Exception, match="exited"):
        async with open_stdio_client([sys.executable, "-c", crash], mode="legacy"):
            pass  # pragma: no cover
