"""Timers in virtual time (MockClock with autojump): idle expiry, init timeout, keep-alive."""

from __future__ import annotations

import pytest
import trio

from mcp_trio import MCPApp, ServerConfig

from .conftest import Client, settle

pytestmark = pytest.mark.deadline(4 * 3600)  # virtual seconds


async def test_idle_session_expires_after_30_minutes(client: Client, app: MCPApp, autojump_clock) -> None:
    await client.initialize()
    start = trio.current_time()
    await trio.sleep(29 * 60)
    assert app.statistics()["sessions"] == 1
    await trio.sleep(61)
    assert app.statistics()["sessions"] == 0
    assert trio.current_time() - start < 31 * 60


async def test_expired_session_answers_404(client: Client, app: MCPApp, autojump_clock) -> None:
    await client.initialize()
    await trio.sleep(31 * 60)
    response = await client.post(b'{"jsonrpc":"2.0","id":2,"method":"ping"}')
    assert response.status == 404


async def test_open_stream_pauses_idle_expiry(client: Client, app: MCPApp, autojump_clock) -> None:
    await client.initialize()
    get = await client.get_stream()
    await get.next_event()
    await trio.sleep(3 * 3600)
    assert app.statistics()["sessions"] == 1  # the GET stream is open: not idle
    await get.aclose()
    await trio.sleep(29 * 60)
    assert app.statistics()["sessions"] == 1  # idle time counts from when the stream closed
    await trio.sleep(2 * 60)
    assert app.statistics()["sessions"] == 0


async def test_running_request_pauses_idle_expiry(client: Client, app: MCPApp, autojump_clock) -> None:
    await client.initialize()
    message = await client.request(2, "tools/call", {"name": "sleep", "arguments": {"seconds": 2 * 3600}})
    assert message["result"]["content"][0]["text"] == "slept 7200.0s"
    assert app.statistics()["sessions"] == 1


async def test_activity_resets_idle_timer(client: Client, app: MCPApp, autojump_clock) -> None:
    await client.initialize()
    for _ in range(4):
        await trio.sleep(20 * 60)
        assert (await client.request(2, "ping"))["result"] == {}
    assert app.statistics()["sessions"] == 1


async def test_uninitialized_session_times_out(client: Client, app: MCPApp, autojump_clock) -> None:
    await client.initialize(initialized=False)
    await trio.sleep(59)
    assert app.statistics()["sessions"] == 1
    await trio.sleep(2)
    assert app.statistics()["sessions"] == 0


async def test_initialized_session_does_not_hit_init_timeout(
    client: Client, app: MCPApp, autojump_clock
) -> None:
    await client.initialize()
    await trio.sleep(10 * 60)
    assert app.statistics()["sessions"] == 1


async def test_keepalive_comments_on_idle_streams(client: Client, autojump_clock) -> None:
    await client.initialize()
    get = await client.get_stream()
    await get.next_event()
    start = trio.current_time()
    # comments are not events: read raw bytes
    chunk = await get._chunks.receive()
    assert chunk == b": keep-alive\n\n"
    assert 14.9 <= trio.current_time() - start <= 15.1
    chunk = await get._chunks.receive()
    assert chunk == b": keep-alive\n\n"


@pytest.mark.parametrize("config", [ServerConfig(idle_timeout=5, init_timeout=1)])
async def test_configured_timeouts(client: Client, app: MCPApp, autojump_clock) -> None:
    await client.initialize(initialized=False)
    await trio.sleep(1.5)
    assert app.statistics()["sessions"] == 0
    await client.initialize()
    await trio.sleep(4)
    assert app.statistics()["sessions"] == 1
    await trio.sleep(2)
    await settle()
    assert app.statistics()["sessions"] == 0
