"""The official MCP conformance suite against a python-sdk server hosted by mcp_trio.

``sdk_everything.py`` is written with the python-sdk's own API (its ``MCPServer``); ``mcp-trio serve``
hosts it.  The same three runs as for our own server (tests/integration/test_conformance.py) except the
tasks extension, which is mcp_trio's and not the SDK's: 0.1.16 (32 scenarios), 0.2.0-alpha.12 at
2025-11-25 (33) and at 2026-07-28 (40), every check passing with no warning.  The test command runs it
on both HTTP servers (hypercorn, then the embedded h11 server).
"""

from __future__ import annotations

import subprocess

import pytest
import trio
from mcp_http import fetch_stats, serve_demo
from test_conformance import SCRIPT, SUMMARY, suite_installed
from tests.required import missing

HOSTED = "tests.integration.sdk_everything:server"
RUNS = [
    ([], {"0.1.16": 32, "0.2.0-alpha.12": 33}),
    (["--version", "0.2.0-alpha.12", "--spec-version", "2026-07-28"], {"0.2.0-alpha.12": 40}),
]


@pytest.mark.deadline(300)
async def test_conformance_suite_against_a_hosted_python_sdk_server(linux: None) -> None:
    if not suite_installed():
        missing("the conformance suite is not installed: run scripts/conformance.sh install")
    async with serve_demo(target=HOSTED) as server:
        for extra, expected in RUNS:
            result = await trio.run_process(
                ["bash", str(SCRIPT), "server", server.url, *extra],
                capture_stdout=True,
                stderr=subprocess.STDOUT,
                check=False,
            )
            output = result.stdout.decode(errors="replace")
            summaries = {m["version"]: m for m in SUMMARY.finditer(output)}
            tail = output[-4000:]
            assert set(summaries) == set(expected), tail
            for version, found in summaries.items():
                assert int(found["total"]) == expected[version], (version, tail)
                assert found["clean"] == found["total"], (version, tail)
                assert found["failed"] == "0" and found["warnings"] == "0", (version, tail)
                assert int(found["ok"]) > 0
            assert result.returncode == 0, tail
        # healthy afterwards: no stream left open, no handler left running
        with trio.fail_after(5):
            while True:
                stats = await fetch_stats(server)
                if stats["connections"] == 0 and stats["inflight"] == 0:
                    break
                await trio.sleep(0.05)
