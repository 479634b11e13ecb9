"""A stopping app drains: its readiness (a GET without a session, what the shipped balancer
configurations check) turns at once, it serves on for ``drain_delay``, then refuses new sessions."""

from __future__ import annotations

import pytest
import trio

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.testing import open_asgi_client

from .conftest import POST_HEADERS, init_body

DELAY = 0.5


async def test_readiness_turns_at_once_and_the_app_serves_on_for_the_drain_delay() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(drain_delay=DELAY))
    async with open_asgi_client(app) as asgi:
        ready = await asgi.request("GET", headers={"accept": "text/event-stream"})
        assert ready.status == 400  # serving: a GET without a session is the client's mistake
        await ready.read()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app.aclose)
            await trio.sleep(DELAY / 5)
            draining = await asgi.request("GET", headers={"accept": "text/event-stream"})
            assert draining.status == 503 and draining.headers["retry-after"] == "1"
            await draining.read()
            during = await asgi.request("POST", headers=POST_HEADERS, body=init_body())
            assert during.status == 200  # still served while the balancer notices
            await during.read()
            assert app.statistics()["sessions_created"] == 1
        after = await asgi.request("POST", headers=POST_HEADERS, body=init_body())
        assert after.status == 503  # drained: no new session
        await after.read()


@pytest.mark.parametrize("delay", [-1.0, 601.0])
def test_drain_delay_is_bounded(delay: float) -> None:
    with pytest.raises(ValueError, match="drain_delay"):
        ServerConfig(drain_delay=delay)
