"""The lifespan of a hosted python-sdk server (``MCPServer(lifespan=...)``, ``Server(lifespan=...)``)
runs under mcp_trio's, on real sockets: entered before ``serve`` reports itself listening, its value in
``ctx.request_context.lifespan_context`` of both eras' handlers, left after the shutdown's drain (its
cleanup not cancelled); a lifespan that fails to start, or whose task crashes while serving, stops
``serve`` with its own exception, as mcp_trio's own servers do.
"""

from __future__ import annotations

import functools
from typing import Literal

import anyio
import httpx
import pytest
import trio

from mcp_trio import MCPApp, ServerConfig, serve
from mcp_trio.sdk import hosted_app

from .peers import Legacy, Modern, hosting
from .servers import Ticker

HTTP = ["hypercorn", "h11"]
KINDS = ["mcpserver", "lowlevel"]
DEADLINE = 15.0


def sdk_server(ticker: Ticker, kind: str):  # type: ignore[no-untyped-def]
    return ticker.mcpserver() if kind == "mcpserver" else ticker.lowlevel()


def text(answer: dict) -> str:
    return str(answer["result"]["content"][0]["text"])


@pytest.mark.parametrize("kind", KINDS)
async def test_the_lifespan_is_entered_before_serving_and_handlers_see_its_value(kind: str) -> None:
    ticker = Ticker(release=anyio.Event())
    app = hosted_app(sdk_server(ticker, kind), ServerConfig(shutdown_grace=1.0))
    stop = trio.Event()
    reported = trio.Event()
    urls: list[str] = []

    async def run() -> None:
        urls.extend(
            await nursery.start(functools.partial(serve, app, "127.0.0.1", 0, shutdown_trigger=stop.wait))
        )
        reported.set()

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=DEADLINE) as http:
            nursery.start_soon(run)
            while ticker.events != ["enter"]:  # noqa: ASYNC110 - the lifespan has no event of its own
                await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert not reported.is_set()  # nothing served before the lifespan is entered
            assert ticker.release is not None
            ticker.release.set()
            await reported.wait()
            legacy, modern = Legacy(http, urls[0]), Modern(http, urls[0])
            await legacy.open()
            for peer in (legacy, modern):
                ticks, exited = text(await peer.call_tool("ticks")).split()
                assert ticks.isdigit() and exited == "exited=False"
            stop.set()
    assert ticker.events == ["enter", "after yield", "cleaned up"]


async def test_the_lifespan_is_left_after_the_drain() -> None:
    """A call in flight at shutdown finishes with the value still there, then the lifespan is left."""
    ticker = Ticker()
    with trio.fail_after(DEADLINE):
        async with (
            httpx.AsyncClient(timeout=DEADLINE) as http,
            hosting(ticker.mcpserver(), ServerConfig(shutdown_grace=5.0)) as hosted,
        ):
            answers: list[str] = []
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    answers.append(text(await Modern(http, hosted.url).call_tool("slow", {"seconds": 0.3})))

                nursery.start_soon(call)
                while "slow call started" not in ticker.events:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                hosted.stop.set()
    assert ticker.events == ["enter", "slow call started", "slow call finished", "after yield", "cleaned up"]
    assert answers == ["exited=False"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("http", HTTP)
async def test_a_lifespan_that_fails_to_start_stops_serve_with_its_exception(
    http: Literal["hypercorn", "h11"], kind: str
) -> None:
    app = hosted_app(sdk_server(Ticker(fail_on_enter=True), kind))
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            with pytest.raises(ValueError, match="no database"):
                await nursery.start(functools.partial(serve, app, "127.0.0.1", 0, http=http))


@pytest.mark.parametrize("http", HTTP)
async def test_a_lifespan_task_that_crashes_stops_serve_with_its_exception(
    http: Literal["hypercorn", "h11"],
) -> None:
    ticker = Ticker(crash_after=5)
    app: MCPApp = hosted_app(ticker.mcpserver())
    with trio.fail_after(DEADLINE), pytest.raises(KeyError, match="tick crashed"):
        await serve(app, "127.0.0.1", 0, http=http)
    assert ticker.state is not None and ticker.state.exited and ticker.state.ticks == 5


async def test_running_raises_the_hosted_lifespan_failure_itself() -> None:
    with pytest.raises(ValueError, match="no database"):
        async with hosted_app(Ticker(fail_on_enter=True).lowlevel()).running():
            pass  # pragma: no cover
