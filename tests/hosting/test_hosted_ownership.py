"""A hosted python-sdk server's handlers are owned as mcp_trio's own are (real hypercorn on 127.0.0.1):
a 2025 session's handlers are tasks in the session's nursery, so DELETE, idle expiry, the server's
shutdown (the grace, then -32000 ``Server shutting down``) and ``MCPApp.aclose`` cancel a running SDK
handler (its ``finally`` sees the cancellation); so do ``notifications/cancelled`` and, in 2026, the
client's disconnect.  A handler's messages travel on the stream of the request they belong to
(progress, elicitation, sampling); unrelated ones (``ctx.session.send_tool_list_changed()``, a ping,
the server's ``ctx.notify_tools_changed()``) on the session's GET stream.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
import httpx
import mcp_types as mt
import pytest
import trio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from mcp_trio import ServerConfig

from .peers import SHUTTING_DOWN, Legacy, Modern, Probe, Stream, hosting, request, tool_call

DEADLINE = 15.0


class Answer(BaseModel):
    city: str


def build(probe: Probe) -> MCPServer:
    server = MCPServer("ownership")

    @server.tool()
    async def block(key: str) -> str:
        await probe.block(key)
        return "never"

    @server.tool()
    async def pause(seconds: float, key: str = "") -> str:
        probe.start(key).set()
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    async def ask(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "asking")
        answer = await ctx.elicit("Which city?", Answer)
        return f"{answer.action}:{answer.data.city if answer.data else ''}"

    @server.tool()
    async def sample(ctx: Context) -> str:
        message = mt.SamplingMessage(role="user", content=mt.TextContent(type="text", text="hi"))
        result = await ctx.session.create_message([message], max_tokens=5, related_request_id=ctx.request_id)
        assert isinstance(result.content, mt.TextContent)
        return f"model {result.model} said {result.content.text}"

    @server.tool()
    async def announce(ctx: Context) -> str:
        await ctx.session.send_tool_list_changed()  # unrelated to this request: the GET stream
        await ctx.session.send_ping()  # a standalone request: on the GET stream, answered by POST
        return "announced"

    @server.tool()
    async def remember(ctx: Context) -> str:
        probe.sessions.append(ctx.session)  # kept beyond the request
        return "remembered"

    @server.tool()
    async def changed(ctx: Context) -> str:
        await ctx.notify_tools_changed()  # the server's event: every session's GET stream
        return "changed"

    return server


def text_of(answer: dict[str, Any]) -> str:
    return str(answer["result"]["content"][0]["text"])


class Call:
    """A request POSTed in a task that reads its answer to the end."""

    def __init__(self) -> None:
        self.ended = trio.Event()
        self.answer: Stream | None = None

    async def wait(self) -> None:
        await self.ended.wait()

    @property
    def messages(self) -> list[dict[str, Any]]:
        assert self.answer is not None
        return self.answer.messages

    @property
    def final(self) -> dict[str, Any]:
        return self.messages[-1]


async def open_call(peer: Legacy | Modern, nursery: trio.Nursery, message: dict[str, Any]) -> Call:
    call = Call()

    async def run() -> None:
        call.answer = await peer.post(message)
        call.ended.set()

    nursery.start_soon(run)
    return call


async def test_delete_cancels_a_running_sdk_handler() -> None:
    probe = Probe()
    with trio.fail_after(DEADLINE):
        async with hosting(build(probe)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Legacy(http, hosted.url)
            await peer.open()
            async with trio.open_nursery() as nursery:
                ended = await open_call(peer, nursery, tool_call(7, "block", {"key": "d"}))
                await probe.start("d").wait()
                assert await peer.delete() == 200
                await probe.cancel("d").wait()  # the handler's finally ran, cancelled
                await ended.wait()  # and its POST stream ended cleanly
            response = await http.post(
                hosted.url, headers=peer.headers(), json=tool_call(8, "pause", {"seconds": 0})
            )
            assert response.status_code == 404  # the session is gone
            assert hosted.app.statistics()["sessions"] == 0


async def test_idle_expiry_cancels_a_handler_whose_client_went_away() -> None:
    """The client drops its POST: the handler goes on in the session's nursery (its answer is kept for
    resumption) until the idle session expires, which cancels it."""
    probe = Probe()
    config = ServerConfig(idle_timeout=0.5, shutdown_grace=1.0)
    with trio.fail_after(DEADLINE):
        async with hosting(build(probe), config) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Legacy(http, hosted.url)
            await peer.open()
            async with peer.stream(tool_call(3, "block", {"key": "idle"})) as answer:
                assert answer.status == 200
                await probe.start("idle").wait()
            assert not probe.cancel("idle").is_set()  # the client's going does not cancel it (2025)
            await probe.cancel("idle").wait()  # the expiry does
            response = await http.post(
                hosted.url, headers=peer.headers(), json=tool_call(4, "pause", {"seconds": 0})
            )
            assert response.status_code == 404


@pytest.mark.parametrize("era", ["2025", "2026"])
@pytest.mark.parametrize("http_server", ["hypercorn", "h11"])
async def test_shutdown_gives_the_grace_then_answers_shutting_down(
    era: str, http_server: Literal["hypercorn", "h11"]
) -> None:
    probe = Probe()
    config = ServerConfig(shutdown_grace=0.5)
    with trio.fail_after(DEADLINE):
        async with httpx.AsyncClient(timeout=DEADLINE) as http:
            async with hosting(build(probe), config, http=http_server) as hosted:
                peer: Legacy | Modern = (
                    Legacy(http, hosted.url) if era == "2025" else Modern(http, hosted.url)
                )
                if isinstance(peer, Legacy):
                    await peer.open()
                async with trio.open_nursery() as nursery:
                    long = await open_call(peer, nursery, tool_call(11, "block", {"key": "long"}))
                    short = await open_call(
                        peer, nursery, tool_call(12, "pause", {"seconds": 0.2, "key": "short"})
                    )
                    await probe.start("long").wait()
                    await probe.start("short").wait()
                    hosted.stop.set()
                    await long.wait()
                    await short.wait()
            assert probe.cancel("long").is_set()
            assert long.final == {"jsonrpc": "2.0", "id": 11, "error": SHUTTING_DOWN}
            assert short.final["result"]["content"][0]["text"] == "slept 0.2"


async def test_app_aclose_cancels_a_running_sdk_handler() -> None:
    probe = Probe()
    with trio.fail_after(DEADLINE):
        async with hosting(build(probe), ServerConfig(shutdown_grace=0.2)) as hosted:
            async with httpx.AsyncClient(timeout=DEADLINE) as http:
                legacy, modern = Legacy(http, hosted.url), Modern(http, hosted.url)
                await legacy.open()
                async with trio.open_nursery() as nursery:
                    old = await open_call(legacy, nursery, tool_call(1, "block", {"key": "old"}))
                    new = await open_call(modern, nursery, tool_call(2, "block", {"key": "new"}))
                    await probe.start("old").wait()
                    await probe.start("new").wait()
                    await hosted.app.aclose()
                    await old.wait()
                    await new.wait()
            assert probe.cancel("old").is_set() and probe.cancel("new").is_set()
            assert old.final["error"] == SHUTTING_DOWN and new.final["error"] == SHUTTING_DOWN
            assert hosted.app.statistics()["sessions"] == 0


async def test_notifications_cancelled_cancels_the_sdk_handler_and_it_gets_no_answer() -> None:
    probe = Probe()
    with trio.fail_after(DEADLINE):
        async with hosting(build(probe)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Legacy(http, hosted.url)
            await peer.open()
            async with trio.open_nursery() as nursery:
                ended = await open_call(peer, nursery, tool_call(21, "block", {"key": "c"}))
                await probe.start("c").wait()
                status = await peer.notify("notifications/cancelled", {"requestId": 21, "reason": "enough"})
                assert status == 202
                await probe.cancel("c").wait()
                await ended.wait()
            assert [m for m in ended.messages if m.get("id") == 21] == []
            # the session goes on
            assert (await peer.call_tool("pause", {"seconds": 0}))["result"]["content"][0][
                "text"
            ] == "slept 0.0"


async def test_a_2026_client_disconnect_cancels_the_sdk_handler() -> None:
    probe = Probe()
    with trio.fail_after(DEADLINE):
        async with hosting(build(probe)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Modern(http, hosted.url)
            async with trio.open_nursery() as nursery:
                await open_call(peer, nursery, tool_call(31, "block", {"key": "gone"}))
                await probe.start("gone").wait()
                nursery.cancel_scope.cancel()  # the client goes (its connection closes) before any answer
            await probe.cancel("gone").wait()  # its request's scope is cancelled
            assert (await peer.call_tool("pause", {"seconds": 0}))["result"]["content"][0][
                "text"
            ] == "slept 0.0"


async def test_elicitation_and_progress_ride_the_request_stream() -> None:
    with trio.fail_after(DEADLINE):
        async with hosting(build(Probe())) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Legacy(http, hosted.url)
            await peer.open({"elicitation": {"form": {}}})
            call = request(
                41, "tools/call", {"name": "ask", "arguments": {}, "_meta": {"progressToken": "p"}}
            )
            async with peer.stream(call) as answer:
                progress = await answer.next()
                assert progress is not None and progress["method"] == "notifications/progress"
                elicit = await answer.next()
                assert elicit is not None and elicit["method"] == "elicitation/create", elicit
                assert elicit["params"]["message"] == "Which city?"
                status = await peer.respond(elicit["id"], {"action": "accept", "content": {"city": "Oslo"}})
                assert status == 202
                result = await answer.next()
                assert result is not None and result["id"] == 41
                assert result["result"]["content"][0]["text"] == "accept:Oslo"
                assert await answer.next() is None


@pytest.mark.filterwarnings(
    "ignore::mcp.shared.exceptions.MCPDeprecationWarning"
)  # sampling, deprecated in 2026
async def test_sampling_rides_the_request_stream() -> None:
    with trio.fail_after(DEADLINE):
        async with hosting(build(Probe())) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Legacy(http, hosted.url)
            await peer.open({"sampling": {}})
            async with peer.stream(tool_call(51, "sample")) as answer:
                ask = await answer.next()
                assert ask is not None and ask["method"] == "sampling/createMessage", ask
                assert ask["params"]["messages"][0]["content"]["text"] == "hi"
                reply = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m1"}
                assert await peer.respond(ask["id"], reply) == 202
                result = await answer.next()
                assert result is not None and result["result"]["content"][0]["text"] == "model m1 said hello"


async def test_unrelated_messages_go_to_the_get_stream() -> None:
    with trio.fail_after(DEADLINE):
        async with hosting(build(Probe())) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer, other = Legacy(http, hosted.url), Legacy(http, hosted.url)
            await peer.open()
            await other.open()
            async with peer.get_stream() as get, other.get_stream() as other_get:
                assert get.status == 200 and other_get.status == 200
                async with trio.open_nursery() as nursery:
                    ended = await open_call(peer, nursery, tool_call(61, "announce"))
                    listed = await get.next()
                    assert listed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
                    ping = await get.next()
                    assert ping is not None and ping["method"] == "ping", ping
                    assert await peer.respond(ping["id"], {}) == 202
                    await ended.wait()
                # the request's own stream carried only its answer
                assert [m.get("id") for m in ended.messages] == [61]
                # the server's own event reaches every session's GET stream
                assert (await peer.call_tool("changed"))["result"]["content"][0]["text"] == "changed"
                assert await get.next() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
                assert await other_get.next() == {
                    "jsonrpc": "2.0",
                    "method": "notifications/tools/list_changed",
                }


async def test_the_session_sends_on_the_get_stream_outside_any_request() -> None:
    """A handler keeps ``ctx.session``; used after its request ended (from another task), it sends on
    the session's GET stream; once the session is deleted, sending through it raises nothing and
    reaches no one."""
    probe = Probe()
    with trio.fail_after(DEADLINE):
        async with hosting(build(probe)) as hosted, httpx.AsyncClient(timeout=DEADLINE) as http:
            peer = Legacy(http, hosted.url)
            await peer.open()
            assert text_of(await peer.call_tool("remember")) == "remembered"
            (session,) = probe.sessions
            async with peer.get_stream() as get:
                await session.send_tool_list_changed()
                await session.send_resource_updated("file:///a")
                assert await get.next() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
                updated = await get.next()
                assert updated == {
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": "file:///a"},
                }
            assert await peer.delete() == 200
            await session.send_tool_list_changed()  # the session is gone: nothing to send to
