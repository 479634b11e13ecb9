"""``mcp-trio tools URL`` and ``mcp-trio call URL TOOL`` run as processes, as users run them, against the
demo server served in-process on 127.0.0.1 (with a few more tools that report what they received).

The independent commands of a test run concurrently: each process spends most of its time importing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as mt
import pytest
import trio
from tests.required import not_applicable

from mcp_trio import MCPApp, ServerConfig, serve
from mcp_trio._cli.client.arguments import parse_arguments
from mcp_trio.demo import build_demo_server

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

TYPED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "items": {"type": "array", "items": {"type": "integer"}},
        "point": {"type": "object"},
        "text": {"type": "string"},
        "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "nothing": {"type": "null"},
        "multi": {"type": ["number", "null"]},
        "choice": {"$ref": "#/$defs/choice"},
        "untyped": {},
    },
    "$defs": {"choice": {"enum": [1, 2, "three"]}},
}


async def run_cli(*args: str, stdout: int | None = None) -> subprocess.CompletedProcess[bytes]:
    capture = {"capture_stdout": True} if stdout is None else {"stdout": stdout}
    return await trio.run_process([*CLI, *args], capture_stderr=True, check=False, **capture)


async def run_all_into(
    results: list[subprocess.CompletedProcess[bytes]], commands: list[list[str]], stdout: int | None = None
) -> None:
    """Run the CLI once per command, concurrently; ``results`` gets their results in order."""
    done: dict[int, subprocess.CompletedProcess[bytes]] = {}

    async def one(index: int, command: list[str]) -> None:
        done[index] = await run_cli(*command, stdout=stdout)

    async with trio.open_nursery() as nursery:
        for index, command in enumerate(commands):
            nursery.start_soon(one, index, command)
    results.extend(done[index] for index in range(len(commands)))


async def run_all(*commands: list[str]) -> list[subprocess.CompletedProcess[bytes]]:
    results: list[subprocess.CompletedProcess[bytes]] = []
    await run_all_into(results, list(commands))
    return results


class Demo:
    """The demo server, plus tools that report exactly what they received."""

    def __init__(self) -> None:
        self.url = ""
        self.calls: list[dict[str, Any]] = []
        self.blocking = trio.Event()
        self.cancelled = trio.Event()
        self.server = build_demo_server()
        server = self.server

        @server.tool(description="Answers the JSON it was given.", input_schema=TYPED_SCHEMA)
        async def echo_json(**arguments: Any) -> str:
            self.calls.append(arguments)
            return json.dumps(arguments, sort_keys=True)

        @server.tool(description="Content of every kind.")
        async def media() -> list[Any]:
            blob = mt.BlobResourceContents(uri="test://blob", mime_type="image/png", blob=PNG)
            text = mt.TextResourceContents(uri="test://text", mime_type="text/plain", text="héllo")
            return [
                "some text",
                mt.ImageContent(type="image", data=PNG, mime_type="image/png"),
                mt.AudioContent(type="audio", data=WAV, mime_type="audio/wav"),
                mt.EmbeddedResource(type="resource", resource=text),
                mt.EmbeddedResource(type="resource", resource=blob),
                mt.ResourceLink(
                    type="resource_link", name="doc", uri="test://doc", mime_type="text/markdown", size=1234
                ),
            ]

        @server.tool(description="Structured content only.")
        async def structured() -> mt.CallToolResult:
            return mt.CallToolResult(content=[], structured_content={"answer": 42})

        @server.tool(description="Blocks until cancelled.")
        async def block() -> str:
            self.blocking.set()
            try:
                await trio.sleep_forever()
            finally:
                self.cancelled.set()
            return "unreachable"


@pytest.fixture
async def demo() -> AsyncIterator[Demo]:
    state = Demo()
    app = MCPApp(state.server, ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        state.url = urls[0]
        yield state
        stop.set()


@pytest.mark.deadline(60)
async def test_tools_and_call_in_each_era(demo: Demo) -> None:
    eras = ("auto", "legacy")  # auto is the 2026 era with the demo
    add = ["add", "--arg", "a=1", "--arg", "b=2.5"]
    listed, *called = await run_all(
        ["tools", demo.url], *[["call", demo.url, *add, "--mode", mode] for mode in eras]
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.decode().splitlines()
    assert "echo: Echo the given text back." in lines
    assert "    text: string" in lines
    assert "    steps: integer (optional, default 3)" in lines
    assert "    items: array of integer (optional)" in lines
    assert "    maybe: string | null (optional)" in lines
    assert "    choice: integer | string (optional)" in lines  # through its $ref
    for mode, result in zip(eras, called, strict=True):
        assert result.returncode == 0, (mode, result.stderr)
        assert result.stdout.decode().splitlines() == ['{"sum": 3.5}'], mode  # structuredContent not repeated


@pytest.mark.deadline(60)
async def test_websocket_urls(demo: Demo) -> None:
    """ws:// URLs go over WebSocket in both eras; a refused upgrade and no server are exit status 3."""
    ws_url = "ws" + demo.url.removeprefix("http")
    listed, *called, refused, nobody, oauth = await run_all(
        ["tools", ws_url],
        *[["call", ws_url, "add", "--arg", "a=1", "--arg", "b=2.5", "--mode", m] for m in ("auto", "legacy")],
        ["call", ws_url.removesuffix("/mcp") + "/elsewhere", "echo"],
        ["tools", "ws://127.0.0.1:9/mcp"],
        ["tools", ws_url, "--oauth"],
    )
    assert listed.returncode == 0, listed.stderr
    assert "echo: Echo the given text back." in listed.stdout.decode().splitlines()
    for result in called:
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode().splitlines() == ['{"sum": 3.5}']
    assert refused.returncode == 3
    assert refused.stderr.decode().startswith("mcp-trio: the server refused the WebSocket upgrade: HTTP 404")
    assert nobody.returncode == 3
    assert nobody.stderr.decode().startswith("mcp-trio: could not open a WebSocket connection to ws://127.0.0.1:9")
    assert "Traceback" not in nobody.stderr.decode() + refused.stderr.decode()
    assert oauth.returncode == 2 and "--oauth is for http(s)://" in oauth.stderr.decode()


@pytest.mark.deadline(60)
async def test_arguments_typed_by_the_input_schema(demo: Demo) -> None:
    pairs = [
        "count=42",
        "ratio=2.5",
        "flag=true",
        "items=[1, 2]",
        'point={"x": 1}',
        "text=42",
        "maybe=null",
        "either=7",
        "nothing=null",
        "multi=null",
        "choice=2",
        "untyped=[1",
        "unlisted=5",
    ]
    merge = ["--json", '{"text": "from json", "count": 1, "maybe": "null"}', "--arg", "count=5"]
    called, merged, wrong = await run_all(
        ["call", demo.url, "echo_json", *[f"--arg={pair}" for pair in pairs]],
        ["call", demo.url, "echo_json", *merge, "--mode", "legacy"],
        ["call", demo.url, "echo_json", "--arg", "count=4.5"],
    )
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout) == {
        "count": 42,
        "ratio": 2.5,
        "flag": True,
        "items": [1, 2],
        "point": {"x": 1},
        "text": "42",
        "maybe": None,
        "either": 7,
        "nothing": None,
        "multi": None,
        "choice": 2,
        "untyped": "[1",
        "unlisted": 5,
    }
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout) == {"text": "from json", "count": 5, "maybe": "null"}
    assert wrong.returncode == 2
    assert wrong.stderr.decode() == "mcp-trio: --arg count=4.5: count expects an integer, got '4.5'\n"
    assert wrong.stdout == b""
    assert len(demo.calls) == 2  # the wrong one never reached the tool


@pytest.mark.deadline(60)
async def test_content_is_summarized_unless_raw(demo: Demo) -> None:
    media, structured, raw = await run_all(
        ["call", demo.url, "media"],
        ["call", demo.url, "structured"],
        ["call", demo.url, "test_audio_content", "--raw"],
    )
    assert media.returncode == 0, media.stderr
    assert media.stdout.decode().splitlines() == [
        "some text",
        "[image image/png, 70 bytes]",
        "[audio audio/wav, 44 bytes]",
        "[resource test://text text/plain, 6 bytes]",
        "héllo",
        "[resource test://blob image/png, 70 bytes]",
        "[resource_link test://doc text/markdown, 1234 bytes]",
    ]
    assert structured.returncode == 0, structured.stderr
    assert json.loads(structured.stdout) == {"answer": 42}  # no text content: structuredContent shown
    assert raw.returncode == 0, raw.stderr
    result = json.loads(raw.stdout)
    assert result["content"] == [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]
    assert result["isError"] is False


@pytest.mark.deadline(60)
async def test_progress_and_log_lines_on_stderr(demo: Demo) -> None:
    count = ["call", demo.url, "count", "--arg", "steps=2"]
    counted, quiet = await run_all(
        [*count, "--mcp-log-level", "info"],
        # a 2025 session: the level is asked with logging/setLevel, and the server honours it
        [*count, "--mcp-log-level", "warning", "--mode", "legacy"],
    )
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.decode() == "counted to 2\n"
    assert counted.stderr.decode().splitlines() == [
        "progress 1/2 step 1",
        "log info: step 1 of 2",
        "progress 2/2 step 2",
        "log info: step 2 of 2",
    ]
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.decode().splitlines() == ["progress 1/2 step 1", "progress 2/2 step 2"]


def _read_all(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every writer of the pty is gone
            return data
        if not chunk:
            return data
        data += chunk


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=not_applicable("a pty for stderr"))
async def test_progress_bar_on_a_terminal(demo: Demo) -> None:
    controller, terminal = os.openpty()
    args = ["call", demo.url, "count", "--arg", "steps=2", "--mcp-log-level", "info"]
    try:
        process = await trio.lowlevel.open_process([*CLI, *args], stdout=subprocess.PIPE, stderr=terminal)
    finally:
        os.close(terminal)  # the child has its own copy: EOF (EIO) on the controller once it exits
    assert process.stdout is not None
    try:
        screen = await trio.to_thread.run_sync(_read_all, controller, abandon_on_cancel=True)
        stdout = b""
        while chunk := await process.stdout.receive_some(4096):
            stdout += chunk
        assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        await process.stdout.aclose()
        os.close(controller)
    assert stdout == b"counted to 2\n"
    text = screen.decode()
    assert "\r[############------------] 1/2 step 1" in text
    assert "\r[########################] 2/2 step 2" in text
    assert "log info: step 1 of 2\r\n" in text  # a log line goes above the bar
    assert text.endswith("\r")  # the bar is erased before the result is printed
    assert "progress 1/2" not in text


@pytest.mark.deadline(60)
async def test_exit_status(demo: Demo) -> None:
    closed_pipe: list[subprocess.CompletedProcess[bytes]] = []
    reader, writer = os.pipe()
    os.close(reader)  # like `mcp-trio tools URL | head -1`, once head has exited
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_all_into, closed_pipe, [["tools", demo.url]], writer)
            unknown, failing, nobody = await run_all(
                ["call", demo.url, "no_such_tool"],
                ["call", demo.url, "test_error_handling"],
                ["tools", "http://127.0.0.1:9/mcp"],
            )
    finally:
        os.close(writer)
    assert closed_pipe[0].returncode == 141
    assert closed_pipe[0].stderr == b""  # no traceback
    assert unknown.returncode == 4
    assert unknown.stderr.decode() == "mcp-trio: error -32602: Unknown tool: no_such_tool\n"
    assert failing.returncode == 1
    assert failing.stdout.decode() == "This tool intentionally returns an error for testing\n"
    assert nobody.returncode == 3
    assert nobody.stderr.decode().startswith("mcp-trio: POST http://127.0.0.1:9/mcp failed: ")
    assert "Traceback" not in nobody.stderr.decode()


async def test_ctrl_c_interrupts_the_call(demo: Demo) -> None:
    process = await trio.lowlevel.open_process(
        [*CLI, "call", demo.url, "block"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        with trio.fail_after(15):
            await demo.blocking.wait()
        process.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await process.wait() == 130
            await demo.cancelled.wait()  # abandoning the request cancelled the tool
        assert process.stderr is not None
        stderr = await process.stderr.receive_some(65536)
        assert stderr == b"mcp-trio: interrupted\n"
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


def test_argument_parsing_without_a_schema() -> None:
    assert parse_arguments(["n=42", "flag=true", "xs=[1,2]", "text=hi there", "empty="]) == {
        "n": 42,
        "flag": True,
        "xs": [1, 2],
        "text": "hi there",
        "empty": "",
    }
