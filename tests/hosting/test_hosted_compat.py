"""The compatibility suite (``tests/compat``) replayed against a python-sdk server hosted by mcp_trio
(the SDK's own results, mcp_trio's transport) on the embedded h11 server."""

from __future__ import annotations

import httpx
import pytest
import trio

from mcp_trio import ServerConfig
from mcp_trio.sdk import hosted_app
from tests.client.conftest import IGNORE_HTTPX_ASYNCGEN_WARNINGS
from tests.compat.replay import Recording, recordings, replay
from tests.integration.sdk_servers import build_server
from tests.server.test_compat_clients import TIMEOUT, served

pytestmark = IGNORE_HTTPX_ASYNCGEN_WARNINGS  # a replay stops reading an SSE stream at its answer
RECORDINGS = recordings()


@pytest.mark.parametrize("recording", RECORDINGS, ids=[r.name for r in RECORDINGS])
async def test_replay_on_a_hosted_python_sdk_server(recording: Recording) -> None:
    app = hosted_app(build_server(), ServerConfig(shutdown_grace=1))
    with trio.fail_after(20):
        async with served(app, "h11") as url, httpx.AsyncClient(timeout=TIMEOUT) as http:
            seen = await replay(http, url, recording)
    assert len(seen.steps) == len(recording.steps)
