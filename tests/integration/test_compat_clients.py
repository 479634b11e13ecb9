"""The compatibility suite as users run the server: every recorded client (``tests/compat/clients``,
see :mod:`tests.compat.replay`: the python-sdk and TypeScript SDK clients recorded here, Claude Code,
Codex and the MCP Inspector reconstructed from their published source and issues) replayed against
``mcp-trio demo`` in a child process: on hypercorn in the test command's first pass, on the embedded h11
server in its second (``MCP_TRIO_TEST_HTTP=h11``); and against a python-sdk server hosted by ``mcp-trio
serve`` (``also_hosted``).  Each replay leaves the server as it found it."""

from __future__ import annotations

import httpx
import pytest
import trio
from mcp_http import Baseline, DemoServer, assert_back_to_baseline
from tests.client.conftest import IGNORE_HTTPX_ASYNCGEN_WARNINGS
from tests.compat.replay import Recording, recordings, replay

pytestmark = [pytest.mark.shared_demo_server, pytest.mark.also_hosted, IGNORE_HTTPX_ASYNCGEN_WARNINGS]
RECORDINGS = recordings()


@pytest.mark.parametrize("recording", RECORDINGS, ids=[r.name for r in RECORDINGS])
async def test_replay(recording: Recording, demo_server: DemoServer, baseline: Baseline) -> None:
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=5.0)) as http:
            seen = await replay(http, demo_server.url, recording)
            if seen.session is not None:  # a client that leaves its session to expire: the test ends it
                ended = await http.delete(demo_server.url, headers={"mcp-session-id": seen.session})
                assert ended.status_code == 200, ended.text
    assert len(seen.steps) == len(recording.steps)
    await assert_back_to_baseline(demo_server, baseline)
