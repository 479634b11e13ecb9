"""The official MCP conformance suite against a python-sdk server hosted by mcp_trio.

``sdk_everything.py`` is written with the python-sdk's own API (its ``MCPServer``); ``mcp-trio serve``
hosts it.  The same three runs as for our own server (tests/integration/test_conformance.py) except the
tasks extension, which is mcp_trio's and not the SDK's: 0.1.16 (32 scenarios), 0.2.0-alpha.12 at
2025-11-25 (33) and at 2026-07-28 (40), every check passing with no warning.  The test command runs it
on both HTTP servers (hypercorn, then the embedded h11 server).
"""

from __future__ import annotations

import pytest
from mcp_http import serve_demo
from test_conformance import assert_idle, run_clean, suite_installed
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
            await run_clean(server.url, extra, expected)
        await assert_idle(server)
