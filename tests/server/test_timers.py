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


async def test_a_later_session_with_an_earlier_deadline_expires_on_time(
    client: Client, app: MCPApp, autojump_clock
) -> None:
    """One clock serves every session: a session made while it sleeps until a later deadline (an
    initialized session's idle timeout) still ends at its own (an uninitialized one's init timeout)."""
    await client.initialize()  # idle expiry in 30 minutes
    await trio.sleep(60)
    second = Client(client.asgi, app)
    await second.initialize(initialized=False)  # init timeout in 60 seconds
    assert app.statistics()["sessions"] == 2
    await trio.sleep(61)
    assert app.statistics()["sessions"] == 1
    response = await client.post(b'{"jsonrpc":"2.0","id":2,"method":"ping"}')
    assert response.status == 200
    await trio.sleep(31 * 60)
    assert app.statistics()["sessions"] == 0


async def test_the_clock_keeps_no_ended_session(client: Client, app: MCPApp, autojump_clock) -> None:
    """An ended session leaves the expiry clock at once (the clock holds no reference to it) and the
    clock's own entries stay bounded by the live sessions, however many sessions come and go."""
    manager = app._manager
    for _ in range(300):
        await client.initialize()
        response = await client.asgi.request("DELETE", headers=client.headers())
        assert response.status == 200
    await settle()
    assert app.statistics()["sessions"] == 0
    assert all(entry[2] is None for entry in manager._expiries)
    assert len(manager._expiries) <= 64
    await client.initialize()
    await trio.sleep(31 * 60)  # the clock still works after its entries were rebuilt
    assert app.statistics()["sessions"] == 0
