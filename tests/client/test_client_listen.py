"""ClientSession.listen: subscriptions/listen from the client side, against our own server."""

from __future__ import annotations

import pytest
import trio

from mcp_trio import MCPApp, MCPServer, ServerConfig, open_client_session, serve
from mcp_trio.errors import TransportError

from .conftest import eventually


def build() -> MCPServer:
    server = MCPServer("listen-test")

    @server.tool()
    async def touch() -> str:
        await server.notify_tools_changed()
        await server.notify_prompts_changed()  # not asked for: never delivered
        await server.notify_resource_updated("test://a")
        return "ok"

    @server.resource("test://a")
    async def a() -> str:
        return "a"

    @server.prompt(description="p")
    async def p() -> str:
        return "p"

    return server


async def test_listen_receives_what_it_asked_for_and_ends_gracefully() -> None:
    app = MCPApp(build(), ServerConfig(shutdown_grace=2))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        async with open_client_session(urls[0], mode="modern") as session:
            async with session.listen(tools=True, resource_uris=["test://a"]) as subscription:
                assert subscription.acknowledged == {
                    "toolsListChanged": True,
                    "resourceSubscriptions": ["test://a"],
                }
                assert app.statistics()["listeners"] == 1
                await session.call_tool("touch")
                received = [await subscription.__anext__(), await subscription.__anext__()]
                assert [m["method"] for m in received] == [
                    "notifications/tools/list_changed",
                    "notifications/resources/updated",
                ]
                tag = received[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
                assert tag == subscription.id
                with trio.fail_after(3):
                    await app.aclose()  # server shutdown: the subscription ends with its completion result
                    rest = [message async for message in subscription]
                assert rest == [] and subscription.closed_gracefully
            await eventually(lambda: app.statistics()["listeners"] == 0)
        stop.set()


async def test_leaving_the_block_ends_the_subscription() -> None:
    app = MCPApp(build())
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        async with open_client_session(urls[0], mode="modern") as session:
            async with session.listen(prompts=True):
                assert app.statistics()["listeners"] == 1
            await eventually(lambda: app.statistics()["listeners"] == 0)
        async with open_client_session(urls[0], mode="legacy") as legacy:
            with pytest.raises(TransportError):
                async with legacy.listen(tools=True):
                    pass  # pragma: no cover
        stop.set()
