""":class:`KeepAlive` and the :class:`Responder` of a 2026 answer, with a recording ``send`` (in virtual
time): a silent answer becomes an SSE stream with a comment per interval; a comment being sent when the
handler notifies or finishes goes out whole first; a request cancelled meanwhile waits for it (bounded);
a send that fails ends that answer's comments and nothing else.  Through the app (the in-memory ASGI
client, which offers no disconnect callback: a watcher task per request): a silent call, and a client
that goes during the comments."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio
import trio.testing

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio._transport.responder import BEAT_GRACE, KEEPALIVE_COMMENT, KeepAlive, Responder
from mcp_trio.testing import open_asgi_client

INTERVAL = 1.0


class Recorder:
    """A ``send`` that records what it sends (and when), and can be held or made to fail."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str, bytes]] = []
        self.hold: trio.Event | None = None
        self.fail: BaseException | None = None

    async def __call__(self, message: dict[str, Any]) -> None:
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            raise self.fail
        await trio.lowlevel.checkpoint()
        kind = "head" if message["type"] == "http.response.start" else "body"
        body = message.get("body", b"") if kind == "body" else str(message["status"]).encode()
        self.sent.append((trio.current_time(), kind, body))

    @property
    def bodies(self) -> list[bytes]:
        return [body for _, kind, body in self.sent if kind == "body"]


async def test_a_silent_answer_becomes_a_stream_with_a_comment_each_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    keepalive = KeepAlive(INTERVAL)
    send = Recorder()
    responder = Responder(send, json_only=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(keepalive.run)
        start = trio.current_time()
        keepalive.watch(responder)
        await trio.sleep(3.5 * INTERVAL)
        keepalive.unwatch(responder)
        await responder.finish({"jsonrpc": "2.0", "id": 1, "result": {}})
        await trio.sleep(3 * INTERVAL)  # unwatched: no more comments
        nursery.cancel_scope.cancel()
    assert [kind for _, kind, _ in send.sent] == ["head", "body", "body", "body", "body", "body"]
    assert send.sent[0][2] == b"200"
    assert send.bodies[:3] == [KEEPALIVE_COMMENT] * 3
    assert [round(at - start, 3) for at, _, body in send.sent if body == KEEPALIVE_COMMENT] == [1.0, 2.0, 3.0]
    assert json.loads(send.bodies[3].partition(b"data: ")[2]) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert send.bodies[4] == b""
    assert keepalive.comments == 3 and len(keepalive) == 0


async def test_sends_of_the_request_wait_for_a_comment_under_way(
    autojump_clock: trio.testing.MockClock,
) -> None:
    keepalive = KeepAlive(INTERVAL)
    send = Recorder()
    responder = Responder(send, json_only=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(keepalive.run)
        keepalive.watch(responder)
        send.hold = trio.Event()
        await trio.sleep(INTERVAL + 0.1)  # the comment's head is being sent (held)
        assert responder.beat is not None
        notified = trio.Event()

        async def notify() -> None:
            await responder.notify({"jsonrpc": "2.0", "method": "notifications/progress"})
            notified.set()

        nursery.start_soon(notify)
        await trio.sleep(0.5)
        assert not notified.is_set() and send.sent == []  # waits for the comment
        send.hold.set()
        send.hold = None
        await notified.wait()
        keepalive.unwatch(responder)
        await responder.finish({"jsonrpc": "2.0", "id": 1, "result": {}})
        nursery.cancel_scope.cancel()
    kinds = [kind for _, kind, _ in send.sent]
    assert kinds == ["head", "body", "body", "body", "body"], send.sent  # one head: the comment's
    assert send.bodies[0] == KEEPALIVE_COMMENT
    assert b"notifications/progress" in send.bodies[1] and b'"result"' in send.bodies[2]


async def test_a_cancelled_request_waits_for_its_comment_within_the_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    keepalive = KeepAlive(INTERVAL)
    send = Recorder()
    responder = Responder(send, json_only=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(keepalive.run)
        keepalive.watch(responder)
        send.hold = trio.Event()  # never set: a client that does not read
        await trio.sleep(INTERVAL + 0.1)
        with trio.CancelScope() as request:
            request.cancel()
            try:
                await trio.sleep_forever()
            finally:
                keepalive.unwatch(responder)
                began = trio.current_time()
                await responder.settle()
                waited = trio.current_time() - began
        assert waited == pytest.approx(BEAT_GRACE)
        assert responder.beat is not None  # still held; the app's cancellation ends it
        nursery.cancel_scope.cancel()
    assert responder.beat is None and len(keepalive) == 0


@pytest.mark.parametrize("error", [trio.BrokenResourceError("gone"), RuntimeError("a bug")])
async def test_a_failed_comment_ends_that_answer_only(
    autojump_clock: trio.testing.MockClock, error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    keepalive = KeepAlive(INTERVAL)
    broken, healthy = Recorder(), Recorder()
    broken.fail = error
    first, second = Responder(broken, json_only=False), Responder(healthy, json_only=False)
    with caplog.at_level(logging.ERROR, logger="mcp_trio._transport.responder"):
        async with trio.open_nursery() as nursery:
            await nursery.start(keepalive.run)
            keepalive.watch(first)
            keepalive.watch(second)
            await trio.sleep(2.5 * INTERVAL)
            assert first.gone and not second.gone
            await first.finish({"jsonrpc": "2.0", "id": 1, "result": {}})  # nothing: its client is gone
            keepalive.unwatch(first)
            keepalive.unwatch(second)
            nursery.cancel_scope.cancel()
    assert healthy.bodies == [KEEPALIVE_COMMENT, KEEPALIVE_COMMENT] and keepalive.comments == 2
    assert any("keep-alive comment" in r.message for r in caplog.records) == isinstance(error, RuntimeError)


async def test_a_notification_waiting_for_a_comment_that_fails_is_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    keepalive = KeepAlive(INTERVAL)
    send = Recorder()
    responder = Responder(send, json_only=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(keepalive.run)
        keepalive.watch(responder)
        send.hold = trio.Event()
        await trio.sleep(INTERVAL + 0.1)  # the comment's head is being sent (held)
        assert responder.beat is not None
        notified = trio.Event()

        async def notify() -> None:  # raises into the test's nursery if the failure reaches it
            await responder.notify({"jsonrpc": "2.0", "method": "notifications/progress"})
            notified.set()

        nursery.start_soon(notify)
        await trio.sleep(0.1)
        send.fail = trio.BrokenResourceError("the client went")
        send.hold.set()
        with trio.fail_after(1):
            await notified.wait()
        assert responder.gone and send.sent == []
        keepalive.unwatch(responder)
        nursery.cancel_scope.cancel()


def test_keepalive_interval_must_be_positive() -> None:
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="keepalive_interval"):
            ServerConfig(keepalive_interval=bad)
    assert ServerConfig(keepalive_interval=float("inf")).keepalive_interval == float("inf")


# -- through the app ---------------------------------------------------------------------------


def sleeper(cancelled: trio.Event) -> MCPServer:
    server = MCPServer("keepalive-unit", "1.0.0")

    @server.tool(description="Sleeps, saying nothing.")
    async def silent(seconds: float) -> str:
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            cancelled.set()
            raise
        return "slept"

    return server


def call(seconds: float) -> tuple[dict[str, str], bytes]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": "silent", "arguments": {"seconds": seconds}, "_meta": meta}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "silent",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return headers, json.dumps(body).encode()


async def test_through_the_app_a_silent_call_and_a_client_that_goes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cancelled = trio.Event()
    app = MCPApp(sleeper(cancelled), ServerConfig(keepalive_interval=INTERVAL))
    async with open_asgi_client(app) as asgi:
        headers, body = call(3.5 * INTERVAL)
        response = await asgi.request("POST", headers=headers, body=body)
        assert response.status == 200 and response.headers["content-type"] == "text/event-stream"
        raw = await response.read()
        assert raw.count(KEEPALIVE_COMMENT) == 3 and raw.startswith(KEEPALIVE_COMMENT), raw
        assert b'"slept"' in raw
        assert app.statistics()["keepalive_watched"] == 0

        headers, body = call(100 * INTERVAL)
        response = await asgi.request("POST", headers=headers, body=body)
        assert response.status == 200  # its head came with the first comment
        await response.aclose()
        with trio.fail_after(1):
            await cancelled.wait()
            while app.statistics()["modern_inflight"]:  # noqa: ASYNC110 - the request task unwinds
                await trio.sleep(0.01)
        assert app.statistics()["keepalive_watched"] == 0
