"""The compatibility suite in this Trio run: every recorded client (``tests/compat/clients``, see
:mod:`tests.compat.replay`) replayed against the demo served by each HTTP server (hypercorn, the embedded
h11 server) on 127.0.0.1 (``tests/hosting/test_hosted_compat.py``: against a hosted python-sdk
server).  ``tests/integration/test_compat_clients.py`` replays them against the demo
in a child process, as users run it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import httpx
import pytest
import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._serve import serve
from mcp_trio.demo import build_demo_server
from tests.client.conftest import IGNORE_HTTPX_ASYNCGEN_WARNINGS
from tests.compat.replay import Recording, recordings, replay

pytestmark = IGNORE_HTTPX_ASYNCGEN_WARNINGS  # a replay stops reading an SSE stream at its answer
RECORDINGS = recordings()
TIMEOUT = httpx.Timeout(10.0, read=5.0)


@asynccontextmanager
async def served(app: MCPApp, kind: Literal["hypercorn", "h11"]) -> AsyncIterator[str]:
    """``app`` served by ``kind`` on 127.0.0.1: its URL."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, http=kind, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield urls[0]
        stop.set()


def test_every_client_is_recorded() -> None:
    clients = {(r.client, r.mode) for r in RECORDINGS}
    for client in ("claude-code", "codex", "mcp-inspector", "python-sdk", "typescript-sdk"):
        assert any(name == client for name, _ in clients), client
    for client in ("python-sdk", "typescript-sdk", "mcp-inspector", "claude-code"):
        assert {(client, "legacy"), (client, "modern")} <= clients, client
    assert all(r.source for r in RECORDINGS)


@pytest.mark.parametrize("kind", ["hypercorn", "h11"])
@pytest.mark.parametrize("recording", RECORDINGS, ids=[r.name for r in RECORDINGS])
async def test_replay(kind: Literal["hypercorn", "h11"], recording: Recording) -> None:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    with trio.fail_after(20):
        async with served(app, kind) as url, httpx.AsyncClient(timeout=TIMEOUT) as http:
            seen = await replay(http, url, recording)
    assert len(seen.steps) == len(recording.steps)
