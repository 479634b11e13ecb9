"""When a POST's SSE response starts (``sse_start_delay``): with its first message, or after the delay."""

from __future__ import annotations

import pytest
import trio

from mcp_trio import MCPApp, ServerConfig

from .conftest import Client, call_body, settle


async def test_a_fast_answer_is_the_whole_stream_in_one_body_message(client: Client, app: MCPApp) -> None:
    await client.initialize()
    response = await client.post(call_body(2, "echo", {"text": "hi"}))
    assert response.status == 200 and response.headers["content-type"] == "text/event-stream"
    (chunk,) = await response.chunks()  # priming event, response and end: one write
    assert chunk.startswith(b"id: 2-0\nretry: 1000\ndata:\n\n")  # stream 2: initialize had 1
    assert b'"text":"hi"' in chunk
    await settle()
    assert app.statistics()["session_tasks"] == 1  # the expiry watcher only: no writer was started


async def test_a_slow_handler_gets_head_and_priming_after_the_delay(
    client: Client, app: MCPApp, autojump_clock: trio.testing.MockClock
) -> None:
    await client.initialize()
    start = trio.current_time()
    response = await client.post(call_body(2, "sleep", {"seconds": 3600}))
    event = await response.next_event()
    assert event is not None and event.id == "2-0" and event.data == ""  # the priming event
    assert 0.05 <= trio.current_time() - start < 0.2  # sse_start_delay (virtual time)
    assert app.statistics()["inflight"] == 1  # while the handler still runs
    await response.aclose()


async def test_a_notification_starts_the_stream_at_once(
    client: Client, autojump_clock: trio.testing.MockClock
) -> None:
    await client.initialize()
    start = trio.current_time()
    response = await client.post(call_body(2, "count", {"n": 2}, progressToken="p"))
    message = await response.next_message()
    assert message is not None and message["method"] == "notifications/progress"
    assert trio.current_time() - start < 0.05


@pytest.mark.parametrize("config", [ServerConfig(sse_start_delay=0)])
async def test_delay_zero_starts_every_stream_at_once(client: Client, app: MCPApp) -> None:
    await client.initialize()
    response = await client.post(call_body(2, "sleep", {"seconds": 3600}))
    event = await response.next_event()
    assert event is not None and event.id == "2-0" and event.data == ""  # the priming event, at once
    assert app.statistics()["inflight"] == 1
    await response.aclose()


@pytest.mark.parametrize("config", [ServerConfig(sse_start_delay=3600)])
async def test_a_session_ended_before_the_stream_started_answers_404(client: Client, app: MCPApp) -> None:
    await client.initialize()
    async with trio.open_nursery() as nursery:
        answers = []

        async def post() -> None:
            answers.append(await client.post(call_body(2, "sleep", {"seconds": 3600})))

        nursery.start_soon(post)
        await settle()
        assert app.statistics()["inflight"] == 1 and not answers
        assert (await client.delete()).status == 200
    (response,) = answers
    assert response.status == 404
    await settle()
    assert app.statistics()["sessions"] == 0 and app.statistics()["session_tasks"] == 0
