"""Names a client sends cannot forge log records: ``mcp-trio demo --request-log`` with every C0 and C1
control character (and DEL, and the line and paragraph separators) in a tool, prompt and method name
and a resource URI, and a very long tool name, through real requests: the text format writes one line
per record with the names escaped; the JSON format writes one JSON object per line whose fields
decode to the names as sent (a long one cut at 256 characters, as span attributes are)."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import trio
from mcp_http import MCPClient, http_client, serve_demo
from test_cli_otel import json_lines, request_records, stderr_of

CONTROLS = "".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0))) + "\u2028\u2029"
ESCAPED = (
    "\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\t\\n\\x0b\\x0c\\r\\x0e\\x0f"
    "\\x10\\x11\\x12\\x13\\x14\\x15\\x16\\x17\\x18\\x19\\x1a\\x1b\\x1c\\x1d\\x1e\\x1f\\x7f"
    + "".join(f"\\u{code:04x}" for code in range(0x80, 0xA0))
    + "\\u2028\\u2029"
)
FORGED = "\nINFO mcp_trio.requests: tools/call echo ok 0.1 ms\n"
"""What a forger would put in a name: a record of its own."""
TOOL = "tool" + CONTROLS + FORGED
PROMPT = "prompt" + CONTROLS
METHOD = "method" + CONTROLS
URI = "file:///" + CONTROLS
LONG = "n" * 5000
CUT = "n" * 255 + "\u2026"
LEVELS = ("DEBUG ", "INFO ", "WARNING ", "ERROR ", "CRITICAL ")


def escaped(name: str) -> str:
    return name.replace(CONTROLS, ESCAPED).replace("\n", "\\n")


async def send_the_names(url: str) -> None:
    async with http_client() as http:
        client = MCPClient(http, url)
        with trio.fail_after(20):
            await client.initialize()
            await client.initialized()
            for method, params in (
                ("tools/call", {"name": TOOL, "arguments": {}}),
                ("tools/call", {"name": LONG, "arguments": {}}),
                ("prompts/get", {"name": PROMPT}),
                ("resources/read", {"uri": URI}),
                (METHOD, {}),
            ):
                answer = await client.request(method, params)
                assert "error" in answer or answer["result"].get("isError"), answer  # none of them exists
            await client.delete()


def names_of(records: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(r["method"], r.get("target")) for r in records if r["method"] != "initialize"]


@pytest.mark.deadline(60)
async def test_client_names_are_escaped_in_the_text_request_log() -> None:
    async with serve_demo("--request-log") as server:
        await send_the_names(server.url)
        await server.stop(signal.SIGTERM)
        log = stderr_of(server)
    lines = log.splitlines()  # splits at \r, \x0b, \x0c, \x1c-\x1e, \x85, \u2028 and \u2029 too
    assert lines and all(line.startswith(LEVELS) for line in lines), log  # each line is a record's
    requests = [line for line in lines if line.startswith("INFO mcp_trio.requests: ")]
    expected = [
        f"tools/call {escaped(TOOL)} ",
        f"tools/call {CUT} ",
        f"prompts/get {escaped(PROMPT)} ",
        f"resources/read {escaped(URI)} ",
        f"{escaped(METHOD)} - ",
    ]
    found = [line.removeprefix("INFO mcp_trio.requests: ") for line in requests]
    assert found[0].startswith("initialize - ok "), found
    assert len(found) == 1 + len(expected), found
    for line, prefix in zip(found[1:], expected, strict=True):
        assert line.startswith(prefix), (line, prefix)
    assert not [line for line in lines if line.startswith("INFO mcp_trio.requests: tools/call echo")]


@pytest.mark.deadline(60)
async def test_client_names_keep_json_lines_whole_and_decode_to_what_was_sent() -> None:
    async with serve_demo("--log-format", "json") as server:
        await send_the_names(server.url)
        await server.stop(signal.SIGTERM)
        log = stderr_of(server)
    records = request_records(json_lines(log))  # every line (split as str.splitlines does) is JSON
    assert names_of(records) == [
        ("tools/call", TOOL),
        ("tools/call", CUT),
        ("prompts/get", PROMPT),
        ("resources/read", URI),
        (METHOD, None),
    ]
    messages = [record["message"] for record in records if record["method"] != "initialize"]
    assert messages[0].startswith(f"tools/call {escaped(TOOL)} ") and messages[-1].startswith(
        f"{escaped(METHOD)} - "
    ), messages
    assert not any(char in log for char in "\x7f\x85\u2028\u2029")  # written as \u escapes
