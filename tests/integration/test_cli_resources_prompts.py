"""``mcp-trio resources``, ``read``, ``prompts`` and ``prompt`` run as processes, as users run them,
against the demo server served in-process on 127.0.0.1 (with a resource and a prompt that report
progress and log), in both eras and over WebSocket; and what each says when something is wrong (its
exit status and one line on stderr, as ``mcp-trio --help`` documents them)."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator

import pytest
import trio
from tests.integration.test_cli_client import run_all

from mcp_trio import Context, MCPApp, ServerConfig, serve
from mcp_trio.demo import build_demo_server

PNG_BYTES = 70
"""The size of the demo's test image (``test://static-binary``)."""


@pytest.fixture
async def url() -> AsyncIterator[str]:
    server = build_demo_server()

    @server.resource("test://counted", name="counted", description="Counts to 2 while it is read.")
    async def counted(ctx: Context) -> str:
        for step in (1, 2):
            await ctx.report_progress(step, 2, f"step {step}")
            await ctx.info(f"read step {step}")
        return "counted"

    @server.prompt(description="Counts to 2 before it answers.\nMore text.")
    async def counted_prompt(ctx: Context, topic: str, tone: str = "plain") -> str:
        await ctx.report_progress(1, 1, "thinking")
        await ctx.info(f"prompt on {topic}")
        return f"Write about {topic}, {tone}."

    app = MCPApp(server, ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        run = functools.partial(serve, app, "127.0.0.1", 0, shutdown_trigger=stop.wait)
        (endpoint,) = await nursery.start(run)
        yield endpoint
        stop.set()


@pytest.mark.deadline(90)
async def test_resources_and_read_in_each_era(url: str) -> None:
    ws_url = "ws" + url.removeprefix("http")
    listed, raw, *read, binary, template, ws_listed, ws_read = await run_all(
        ["resources", url],
        ["resources", url, "--raw", "--mode", "legacy"],
        *[["read", url, "test://static-text", "--mode", mode] for mode in ("auto", "legacy")],
        ["read", url, "test://static-binary"],
        ["read", url, "test://template/42/data", "--raw"],
        ["resources", ws_url],
        ["read", ws_url, "test://static-text", "--mode", "legacy"],
    )
    for result in (listed, ws_listed):
        assert result.returncode == 0, result.stderr
        lines = result.stdout.decode().splitlines()
        static = "test://static-text (text/plain): Static Text Resource - A static text resource for testing"
        assert static in lines
        assert "test://counted: counted - Counts to 2 while it is read." in lines
        assert lines[-1] == "test://template/{id}/data (application/json): template - Data for any id"
    assert raw.returncode == 0, raw.stderr
    listing = json.loads(raw.stdout)
    assert {"name": "static-binary", "uri": "test://static-binary"}.items() <= listing["resources"][1].items()
    assert [item["uriTemplate"] for item in listing["resourceTemplates"]] == ["test://template/{id}/data"]
    for result in (*read, ws_read):
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode() == "This is the content of the static text resource.\n"
        assert result.stderr == b""
    assert binary.returncode == 0, binary.stderr
    assert binary.stdout.decode() == f"[resource test://static-binary image/png, {PNG_BYTES} bytes]\n"
    assert template.returncode == 0, template.stderr
    (contents,) = json.loads(template.stdout)["contents"]
    assert contents["uri"] == "test://template/42/data"
    assert json.loads(contents["text"]) == {"id": "42", "templateTest": True, "data": "Data for ID: 42"}


@pytest.mark.deadline(90)
async def test_prompts_and_prompt_in_each_era(url: str) -> None:
    arguments = ["--arg", "arg1=42", "--arg", "arg2=two words"]
    merge = ["--json", '{"arg1": "a", "arg2": "b"}', "--arg", "arg2=c"]
    listed, *got, merged, image, embedded, raw = await run_all(
        ["prompts", url],
        *[["prompt", url, "test_prompt_with_arguments", *arguments, "--mode", m] for m in ("auto", "legacy")],
        ["prompt", url, "test_prompt_with_arguments", *merge],
        ["prompt", url, "test_prompt_with_image"],
        ["prompt", "ws" + url.removeprefix("http"), "test_prompt_with_embedded_resource", "--arg",
         "resourceUri=test://doc"],
        ["prompt", url, "test_simple_prompt", "--raw"],
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    text = listed.stdout.decode()
    assert "test_simple_prompt: A simple prompt without arguments\n" in text
    assert (
        "test_prompt_with_arguments: A prompt with required arguments\n"
        "    arg1: string - First test argument\n"
        "    arg2: string - Second test argument\n"
    ) in text
    assert (
        "counted_prompt: Counts to 2 before it answers.\n"
        "    topic: string\n"
        "    tone: string (optional)\n"
    ) in text
    for result in got:
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode() == "user: Prompt with arguments: arg1='42', arg2='two words'\n"
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.decode() == "user: Prompt with arguments: arg1='a', arg2='c'\n"  # --arg wins
    assert image.returncode == 0, image.stderr
    assert image.stdout.decode().splitlines() == [
        f"user: [image image/png, {PNG_BYTES} bytes]",
        "user: Please analyze the image above.",
    ]
    assert embedded.returncode == 0, embedded.stderr
    assert embedded.stdout.decode().splitlines() == [
        "user: [resource test://doc text/plain, 38 bytes]",
        "Embedded resource content for testing.",
        "user: Please process the embedded resource above.",
    ]
    assert raw.returncode == 0, raw.stderr
    assert json.loads(raw.stdout)["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}
    ]


@pytest.mark.deadline(60)
async def test_progress_and_log_lines_on_stderr(url: str) -> None:
    read, read_legacy, got = await run_all(
        ["read", url, "test://counted", "--mcp-log-level", "info"],
        ["read", url, "test://counted", "--mode", "legacy"],  # no level asked: the server's default
        ["prompt", url, "counted_prompt", "--arg", "topic=trio", "--mcp-log-level", "info", "--mode=legacy"],
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.decode() == "counted\n"
    assert read.stderr.decode().splitlines() == [
        "progress 1/2 step 1",
        "log info: read step 1",
        "progress 2/2 step 2",
        "log info: read step 2",
    ]
    assert read_legacy.returncode == 0, read_legacy.stderr
    assert "progress 2/2 step 2" in read_legacy.stderr.decode().splitlines()
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode() == "user: Write about trio, plain.\n"
    assert got.stderr.decode().splitlines() == ["progress 1/1 thinking", "log info: prompt on trio"]


@pytest.mark.deadline(60)
async def test_exit_status(url: str) -> None:
    nowhere = "http://127.0.0.1:9/mcp"
    results = await run_all(
        ["read", url, "test://no-such-resource"],
        ["prompt", url, "no_such_prompt"],
        ["prompt", url, "test_prompt_with_arguments", "--arg", "arg1=only"],
        ["prompt", url, "test_prompt_with_arguments", "--json", '{"arg1": 1}'],
        ["resources", nowhere],
        ["read", nowhere, "test://static-text"],
        ["prompts", nowhere],
        ["prompt", nowhere, "test_simple_prompt"],
        ["resources", url.removesuffix("/mcp") + "/elsewhere"],
    )
    status = [result.returncode for result in results]
    stderr = [result.stderr.decode() for result in results]
    assert status == [4, 4, 4, 2, 3, 3, 3, 3, 3], stderr
    assert stderr[0] == (
        "mcp-trio: error -32602: Resource not found\n"
        'mcp-trio: error data: {"uri": "test://no-such-resource"}\n'
    )
    assert stderr[1] == "mcp-trio: error -32602: Unknown prompt: no_such_prompt\n"
    assert stderr[2].startswith("mcp-trio: error -32602: Missing required arguments") and "arg2" in stderr[2]
    assert stderr[3] == (
        'mcp-trio: --json: prompt arguments are text, but arg1 is 1 (write it as a string: "1")\n'
    )
    for line in stderr[4:8]:
        assert line.startswith(f"mcp-trio: POST {nowhere} failed: ") and line.count("\n") == 1, line
    assert stderr[8].splitlines()[-1] == "mcp-trio: is the path right? MCP endpoints often end in /mcp"
    assert all(result.stdout == b"" for result in results)
    assert not any("Traceback" in text for text in stderr)
