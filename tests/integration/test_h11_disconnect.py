"""The embedded h11 server's disconnect callback (the ``mcp_trio.disconnect_callback`` scope extension)
and its one socket reader per connection, on real loopback sockets with a raw ASGI app.

The hook must behave as on mcp_trio's hypercorn server: called when the client goes after its request
was read and before the response is whole, never for a response sent whole, nothing sent after it;
bytes a client pipelines meanwhile are kept for the next request, up to ``max_pipelined``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from mcp_trio._http.h11_server import H11Config, serve_h11
from mcp_trio._runtime.contract import CANCELLABLE_SEND, DISCONNECT_CALLBACK, DisconnectHook

TEXT = [(b"content-type", b"text/plain")]


class HookApp:
    """``/whole``: a whole answer, the callback set throughout; ``/hold``: a head and part of the body,
    then wait (for the callback, or for ``release``); anything else: its body's length, at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cancelled: list[str] = []
        self.sent_after_call = 0
        self.release = trio.Event()
        self.holding = trio.Event()
        self.extensions: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        self.extensions.append(scope["extensions"])
        hook = scope["extensions"][DISCONNECT_CALLBACK]
        body = b""
        while True:
            message = await receive()
            assert message["type"] == "http.request"
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        with trio.CancelScope() as handler:

            def gone(path: str = path) -> None:
                self.calls.append(path)
                handler.cancel()

            hook.set(gone)
            try:
                if path == "/hold":
                    await send({"type": "http.response.start", "status": 200, "headers": TEXT})
                    await send({"type": "http.response.body", "body": b"part;", "more_body": True})
                    self.holding.set()
                    await self.release.wait()
                    await send({"type": "http.response.body", "body": b"end", "more_body": False})
                else:
                    answer = path.encode() + b":" + str(len(body)).encode()
                    await send({"type": "http.response.start", "status": 200, "headers": TEXT})
                    await send({"type": "http.response.body", "body": answer, "more_body": False})
                    await trio.sleep(0.05)  # the callback still set after a whole answer: not called
            finally:
                hook.set(None)
        if handler.cancelled_caught:
            self.cancelled.append(path)
            try:
                await send({"type": "http.response.body", "body": b"too late", "more_body": False})
                self.sent_after_call += 1
            except Exception:  # refused rather than dropped: the assertion below fails
                pass


@asynccontextmanager
async def serving(app: HookApp, config: H11Config | None = None) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve_h11(app, config=config, port=0, task_status=task_status)
        )
        yield int(urls[0].rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


def request(path: bytes, body: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: %d\r\n\r\n%s" % (path, len(body), body)


async def read_answers(stream: trio.SocketStream, count: int) -> list[bytes]:
    """The bodies of ``count`` content-length answers (after any chunked one), in order."""
    data = b""
    with trio.fail_after(3):
        while True:
            bodies, rest = [], data
            while b"\r\n\r\n" in rest:
                head, _, rest = rest.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if len(rest) < length:
                    break
                bodies.append(rest[:length])
                rest = rest[length:]
            if len(bodies) >= count:
                return bodies
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk


async def until(predicate: Any, within: float = 2.0) -> None:
    with trio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - the app's records have no event
            await trio.sleep(0.01)


async def test_the_server_offers_the_hook_and_a_whole_answer_never_calls_it() -> None:
    app = HookApp()
    async with serving(app) as port, await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(request(b"/a", b"xyz"))
        assert await read_answers(stream, 1) == [b"/a:3"]
        await stream.send_all(request(b"/b"))  # the same connection serves the next request
        assert await read_answers(stream, 1) == [b"/b:0"]
        extensions = app.extensions[0]
        assert isinstance(extensions[DISCONNECT_CALLBACK], DisconnectHook)
        assert CANCELLABLE_SEND in extensions
        assert (
            extensions[DISCONNECT_CALLBACK] is not app.extensions[1][DISCONNECT_CALLBACK]
        )  # one per request
    await trio.sleep(0.1)
    assert app.calls == [] and app.cancelled == []


async def test_a_client_that_goes_mid_response_gets_its_handler_cancelled_and_nothing_more_sent() -> None:
    app = HookApp()
    async with serving(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request(b"/hold"))
        with trio.fail_after(2):
            await app.holding.wait()
        await stream.aclose()
        await until(lambda: app.cancelled == ["/hold"])
        assert app.calls == ["/hold"]
        assert app.sent_after_call == 1  # the send after the callback was dropped, not refused


async def test_a_reset_client_is_a_client_gone() -> None:
    app = HookApp()
    async with serving(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request(b"/hold"))
        with trio.fail_after(2):
            await app.holding.wait()
        stream.socket.setsockopt(
            trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        await stream.aclose()  # SO_LINGER 0: the close resets the connection
        await until(lambda: app.cancelled == ["/hold"])
        assert app.calls == ["/hold"]


async def test_requests_pipelined_behind_a_held_response_are_answered_after_it_in_order() -> None:
    # A small pipelining bound: the reader stops reading past it and reads on once the serving task
    # needs more, so every request still gets its answer (and nothing is buffered without bound).
    app = HookApp()
    async with (
        serving(app, H11Config(max_pipelined=1000)) as port,
        await trio.open_tcp_stream("127.0.0.1", port) as stream,
    ):
        await stream.send_all(request(b"/hold"))
        with trio.fail_after(2):
            await app.holding.wait()
        pipelined = b"".join(request(b"/p%d" % i, b"x" * 700) for i in range(5))
        await stream.send_all(pipelined)
        await trio.sleep(0.1)
        app.release.set()
        data = b""
        with trio.fail_after(3):
            while b"0\r\n\r\n" not in data:  # the chunked answer's end
                data += await stream.receive_some(65536)
        head, _, rest = data.partition(b"0\r\n\r\n")
        assert b"part;" in head and b"end" in head
        await stream.send_all(request(b"/last"))
        rest_stream = _Prefixed(rest, stream)
        bodies = await read_answers(rest_stream, 6)  # type: ignore[arg-type]
        assert bodies == [b"/p0:700", b"/p1:700", b"/p2:700", b"/p3:700", b"/p4:700", b"/last:0"]
    assert app.calls == [] and app.cancelled == []


class _Prefixed:
    """A stream whose first ``receive_some`` returns bytes already read."""

    def __init__(self, prefix: bytes, stream: trio.SocketStream) -> None:
        self.prefix, self.stream = prefix, stream

    async def receive_some(self, size: int) -> bytes:
        if self.prefix:
            data, self.prefix = self.prefix, b""
            return data
        return await self.stream.receive_some(size)


async def test_a_client_that_sends_its_request_and_goes_at_once_gets_its_handler_cancelled() -> None:
    # The end of file arrives with (or right after) the request: seen once the body has been read.
    app = HookApp()
    async with serving(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request(b"/hold", b"abc"))
        await stream.aclose()
        await until(lambda: app.cancelled == ["/hold"])
        assert app.calls == ["/hold"]


async def read_until_closed(stream: trio.SocketStream, within: float = 3.0) -> bytes:
    data = b""
    with trio.fail_after(within):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def test_a_connection_in_steady_use_outlives_its_keep_alive_timeout_then_idles_out() -> None:
    # The reader's alarm is moved only earlier and re-armed when it goes off: a connection used every
    # 0.1 s for three keep-alive timeouts stays open, and closes once it has been idle for one.
    app = HookApp()
    config = H11Config(keep_alive_timeout=0.3)
    async with serving(app, config) as port, await trio.open_tcp_stream("127.0.0.1", port) as stream:
        for i in range(9):
            await stream.send_all(request(b"/r%d" % i))
            assert await read_answers(stream, 1) == [b"/r%d:0" % i]
            await trio.sleep(0.1)
        start = trio.current_time()
        assert await read_until_closed(stream) == b""
        assert 0.15 < trio.current_time() - start < 2


async def test_a_slow_body_times_out_with_the_read_timeout_after_a_keep_alive_wait() -> None:
    # The body's wait (read_timeout) ends before the alarm set for the keep-alive wait: it is moved.
    app = HookApp()
    config = H11Config(keep_alive_timeout=5.0, read_timeout=0.3)
    async with serving(app, config) as port, await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(request(b"/first"))
        assert await read_answers(stream, 1) == [b"/first:0"]
        await stream.send_all(request(b"/slow", b"0123456789")[:-7])  # 3 of its 10 body bytes
        start = trio.current_time()
        await read_until_closed(stream)
        assert 0.2 < trio.current_time() - start < 2.5


async def test_shutdown_closes_an_idle_keep_alive_connection_at_once() -> None:
    app = HookApp()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve_h11(
                app, port=0, config=H11Config(keep_alive_timeout=30.0), shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )  # fmt: skip
        async with await trio.open_tcp_stream("127.0.0.1", int(urls[0].rsplit(":", 1)[1])) as stream:
            await stream.send_all(request(b"/a"))
            assert await read_answers(stream, 1) == [b"/a:0"]
            stop.set()
            assert await read_until_closed(stream, within=1.0) == b""


class RaisingCallbackApp(HookApp):
    """Its disconnect callback raises (a bug of the app's): it runs in the server's reader task."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] != "/bad":
            await super().__call__(scope, receive, send)
            return
        await receive()

        def bad() -> None:
            self.calls.append("/bad")
            raise RuntimeError("a broken disconnect callback")

        scope["extensions"][DISCONNECT_CALLBACK].set(bad)
        await send({"type": "http.response.start", "status": 200, "headers": TEXT})
        await send({"type": "http.response.body", "body": b"part;", "more_body": True})
        self.holding.set()
        with trio.move_on_after(3):
            await self.release.wait()


async def test_a_disconnect_callback_that_raises_ends_its_connection_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = RaisingCallbackApp()
    async with serving(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request(b"/bad"))
        with trio.fail_after(2):
            await app.holding.wait()
        await stream.aclose()
        await until(lambda: app.calls == ["/bad"])
        await until(lambda: "HTTP/1.1 socket reader failed" in caplog.text)
        async with await trio.open_tcp_stream("127.0.0.1", port) as other:  # the server serves on
            await other.send_all(request(b"/next", b"ab"))
            assert await read_answers(other, 1) == [b"/next:2"]
        app.release.set()
