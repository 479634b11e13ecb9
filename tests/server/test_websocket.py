"""The WebSocket transport, end to end on real loopback sockets: ``MCPApp`` served by hypercorn
(``mcp_trio.serve``) and by the embedded HTTP/1.1 server (``serve(..., http="h11")``, wsproto), every
test on both.

Clients: mcp_trio's own ``open_websocket_client``, and a raw client on wsproto over a Trio socket where
the test needs to see or do what a client library hides: refused upgrades (status, headers, body; any
``Host``), pings, binary frames, oversized and fragmented messages, a close frame while requests run, a
TCP connection dropped without a close frame, a client that never reads.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import warnings
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as mt
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig, open_websocket_client, serve
from mcp_trio._transport.websocket import WebSocketConnection
from mcp_trio.errors import RemoteProtocolError, TransportError
from mcp_trio.server import HTTPRequestInfo, hypercorn_config

from .test_stdio_server import modern_meta

DEADLINE = 10
MODERN = "2026-07-28"
SERVERS = ["hypercorn", "h11"]
INIT_PARAMS = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"sampling": {}},
    "clientInfo": {"name": "ws-test", "version": "1"},
}
BIG = 200_000


@pytest.fixture(params=SERVERS)
def kind(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# -- the server under test ---------------------------------------------------------------------------


class Probe:
    """What the test server's handlers report: starts and cancellations of the blocking tools."""

    def __init__(self) -> None:
        self.started: dict[str, trio.Event] = {}
        self.cancelled: dict[str, trio.Event] = {}
        self.released: dict[str, trio.Event] = {}

    def start(self, key: str) -> None:
        self.started.setdefault(key, trio.Event()).set()

    def cancel(self, key: str) -> None:
        self.cancelled.setdefault(key, trio.Event()).set()

    async def wait_started(self, key: str) -> None:
        await self.started.setdefault(key, trio.Event()).wait()

    async def wait_cancelled(self, key: str) -> None:
        await self.cancelled.setdefault(key, trio.Event()).wait()

    def release(self, key: str) -> None:
        self.released.setdefault(key, trio.Event()).set()

    async def wait_released(self, key: str) -> None:
        await self.released.setdefault(key, trio.Event()).wait()

    def was_cancelled(self, key: str) -> bool:
        return key in self.cancelled and self.cancelled[key].is_set()


def build_server(probe: Probe) -> MCPServer:
    server = MCPServer("ws-test")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def count(ctx: Context, steps: int = 3) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await trio.sleep(0.01)
        return f"counted to {steps}"

    @server.tool()
    async def ask(ctx: Context, prompt: str) -> str:
        result = await ctx.sample(prompt, max_tokens=10)
        assert isinstance(result.content, mt.TextContent)
        return f"sampled: {result.content.text}"

    @server.tool()
    async def whoami(ctx: Context) -> str:
        return f"principal={ctx.principal!r}"

    @server.tool()
    async def stubborn(key: str) -> str:
        """Ignores cancellation until released, then answers anyway."""
        probe.start(key)
        with trio.CancelScope(shield=True):
            await probe.wait_released(key)
        probe.cancel(key)  # here: "finished"
        return "late"

    @server.tool()
    async def block(key: str) -> str:
        probe.start(key)
        try:
            await trio.sleep_forever()
        finally:
            probe.cancel(key)
        raise AssertionError("unreachable")

    @server.tool()
    async def ask_and_block(ctx: Context, key: str) -> str:
        probe.start(key)
        try:
            await ctx.sample("never answered", max_tokens=10)
        finally:
            probe.cancel(key)
        return "answered"

    @server.tool()
    async def big() -> str:
        return "x" * BIG

    return server


def build_app(probe: Probe | None = None, **config: Any) -> MCPApp:
    config.setdefault("shutdown_grace", 1.0)
    return MCPApp(build_server(probe or Probe()), ServerConfig(**config))


class Served:
    def __init__(self, app: MCPApp, port: int, stop: trio.Event) -> None:
        self.app = app
        self.port = port
        self.stop = stop
        self.url = f"ws://127.0.0.1:{port}/mcp"

    def connections(self) -> int:
        count: int = self.app.statistics()["websocket_connections"]
        return count

    async def until_no_connection(self, within: float = 5.0) -> None:
        await until(lambda: self.connections() == 0, within)


@asynccontextmanager
async def serving(kind: str, app: MCPApp) -> AsyncIterator[Served]:
    """The app on 127.0.0.1:0 with the server ``kind``; leaving stops it gracefully (bounded) and checks
    that no WebSocket connection is left."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        if kind == "hypercorn":
            config = hypercorn_config(["127.0.0.1:0"], graceful_timeout=1.0)
            start: Callable[..., Any] = functools.partial(
                serve, app, config=config, shutdown_trigger=stop.wait
            )
        else:
            start = functools.partial(serve, app, "127.0.0.1", 0, http="h11", shutdown_trigger=stop.wait)
        urls = await nursery.start(start)
        port = int(urls[0].removesuffix("/mcp").rsplit(":", 1)[1])
        served = Served(app, port, stop)
        yield served
        stop.set()
        with trio.fail_after(DEADLINE):
            while nursery.child_tasks:  # noqa: ASYNC110 - the server task has no event of its end
                await trio.sleep(0.01)
    assert served.connections() == 0


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    with trio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - polls statistics, which have no event
            await trio.sleep(0.01)


# -- a raw client: wsproto over a Trio socket ----------------------------------------------------------


class Closed(Exception):
    def __init__(self, code: int, reason: str | None) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason


class Refused(Exception):
    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        super().__init__(status, body)
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: bytes) -> bytes | None:
        return next((bytes(v) for k, v in self.headers if bytes(k).lower() == name), None)


class RawClient:
    """One WebSocket connection on wsproto: frames as the test wants them, pings seen (and answered)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pings = 0
        self.pongs: list[bytes] = []
        self.subprotocol: str | None = None
        self._parts: list[str] = []
        self._events: list[Any] = []

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        port: int,
        *,
        path: str = "/mcp",
        host: str = "127.0.0.1",
        subprotocols: Iterable[str] = ("mcp",),
        headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> AsyncIterator[RawClient]:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            client = cls(stream)
            await client._send(
                Request(host=host, target=path, subprotocols=list(subprotocols), extra_headers=list(headers))
            )
            event = await client._next_event()
            if isinstance(event, RejectConnection):
                body = b""
                while event.has_body:
                    data = await client._next_event()
                    assert isinstance(data, RejectData)
                    body += data.data
                    if data.body_finished:
                        break
                raise Refused(event.status_code, list(event.headers), body)
            assert isinstance(event, AcceptConnection), event
            client.subprotocol = event.subprotocol
            yield client

    async def _send(self, event: Any) -> None:
        await self.stream.send_all(self.ws.send(event))

    async def _next_event(self) -> Any:
        while not self._events:
            self._events.extend(self.ws.events())
            if self._events:
                break
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            self.ws.receive_data(data or None)
        return self._events.pop(0)

    async def send_text(self, text: str) -> None:
        await self._send(TextMessage(data=text))

    async def send_bytes(self, data: bytes) -> None:
        await self._send(BytesMessage(data=data))

    async def send(self, message: Any) -> None:
        await self.send_text(json.dumps(message))

    async def request(self, request_id: int | str, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def receive_event(self) -> dict[str, Any] | None:
        """One event: a whole JSON message, or None (a ping, answered; a pong, kept; part of a message);
        :class:`Closed` if the server closes."""
        event = await self._next_event()
        if isinstance(event, Ping):
            self.pings += 1
            await self._send(event.response())
        elif isinstance(event, Pong):
            self.pongs.append(bytes(event.payload))
        elif isinstance(event, CloseConnection):
            if self.ws.state is ConnectionState.REMOTE_CLOSING:
                await self._send(event.response())
            raise Closed(event.code, event.reason)
        elif isinstance(event, TextMessage):
            self._parts.append(event.data)
            if event.message_finished:
                text, self._parts = "".join(self._parts), []
                message: dict[str, Any] = json.loads(text)
                return message
        else:
            raise AssertionError(f"unexpected event {event!r}")
        return None

    async def receive(self) -> dict[str, Any]:
        """The next JSON message (pings answered on the way); :class:`Closed` if the server closes."""
        while True:
            message = await self.receive_event()
            if message is not None:
                return message

    async def call(self, request_id: int | str, method: str, params: dict[str, Any] | None = None) -> Any:
        await self.request(request_id, method, params)
        answer = await self.receive()
        assert answer.get("id") == request_id, answer
        return answer

    async def initialize(self) -> None:
        answer = await self.call(0, "initialize", INIT_PARAMS)
        assert answer["result"]["protocolVersion"] == "2025-11-25"
        await self.notify("notifications/initialized")

    async def close_code(self) -> int:
        """Read until the server's close frame (messages before it are dropped); its code."""
        while True:
            try:
                await self.receive()
            except Closed as closed:
                return closed.code

    async def close(self, code: int = 1000) -> int:
        """The close handshake from our side: our close frame, then the server's answer (its code)."""
        await self._send(CloseConnection(code=code))
        while True:
            event = await self._next_event()
            if isinstance(event, CloseConnection):
                return event.code

    async def drop(self) -> None:
        """End the TCP connection without a close frame."""
        await self.stream.aclose()


def call_params(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def sampled(text: str) -> Callable[[mt.CreateMessageRequestParams], mt.CreateMessageResult]:
    def answer(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        return mt.CreateMessageResult(
            role="assistant", content=mt.TextContent(type="text", text=text), model="m"
        )

    return answer


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent), result
    return content.text


# -- 1. our client, every mode -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "modern", "auto"])
async def test_client_lists_calls_with_progress_and_sampling(kind: str, mode: Any) -> None:
    async with serving(kind, build_app()) as served:
        with trio.fail_after(DEADLINE):
            async with open_websocket_client(
                served.url, mode=mode, sampling=sampled("from the client")
            ) as session:
                assert session.modern is (mode != "legacy")
                tools = {tool.name for tool in (await session.list_tools()).tools}
                assert {"echo", "count", "ask", "whoami", "block", "big"} <= tools
                assert text_of(await session.call_tool("echo", {"text": "héllo\n"})) == "héllo\n"
                seen: list[tuple[float, float | None, str | None]] = []
                result = await session.call_tool(
                    "count", {"steps": 3}, progress=lambda p, t, m: seen.append((p, t, m))
                )
                assert text_of(result) == "counted to 3"
                assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
                result = await session.call_tool("ask", {"prompt": "hi"})
                assert text_of(result) == "sampled: from the client"
                assert served.connections() == 1
        await served.until_no_connection()


@pytest.mark.parametrize("mode", ["legacy", "modern", "auto"])
async def test_authenticate_hook_gives_the_principal(kind: str, mode: Any) -> None:
    async def authenticate(info: HTTPRequestInfo) -> object:
        if info.header("authorization") == "Bearer good":
            return "alice"
        raise RemoteProtocolError(
            "Unauthorized", http_status=401, headers=(("www-authenticate", 'Bearer realm="ws"'),)
        )

    async with serving(kind, build_app(authenticate=authenticate)) as served:
        with trio.fail_after(DEADLINE):
            headers = {"Authorization": "Bearer good"}
            async with open_websocket_client(served.url, mode=mode, headers=headers) as session:
                assert text_of(await session.call_tool("whoami")) == "principal='alice'"
            with pytest.raises(TransportError, match="HTTP 401"):
                async with open_websocket_client(
                    served.url, mode=mode, headers={"Authorization": "Bearer x"}
                ):
                    raise AssertionError("a refused upgrade opened a session")


# -- 2. refusals: HTTP answers to the upgrade ---------------------------------------------------------


async def refused(port: int, **options: Any) -> Refused:
    """Ask for an upgrade that must be refused; the refusal (status, headers, body)."""
    with trio.fail_after(DEADLINE), pytest.raises(Refused) as info:
        async with RawClient.connect(port, **options):
            raise AssertionError("the upgrade was accepted")
    return info.value


def error_body(rejection: Refused) -> dict[str, Any]:
    """The refusal's body: a JSON-RPC error without an id."""
    assert rejection.header(b"content-type") == b"application/json", rejection.headers
    assert rejection.header(b"connection") == b"close", rejection.headers  # no keep-alive after a refusal
    body: dict[str, Any] = json.loads(rejection.body)
    assert body["jsonrpc"] == "2.0" and "id" not in body, body
    assert isinstance(body["error"]["code"], int) and body["error"]["message"], body
    return body


async def test_refused_without_the_subprotocol(kind: str) -> None:
    async with serving(kind, build_app()) as served:
        rejection = await refused(served.port, subprotocols=[])
        assert rejection.status == 400
        assert "'mcp' subprotocol" in error_body(rejection)["error"]["message"]
        rejection = await refused(served.port, subprotocols=["graphql-ws"])
        assert rejection.status == 400
        error_body(rejection)
        # with it among others, mcp is chosen
        async with RawClient.connect(served.port, subprotocols=["graphql-ws", "mcp"]) as client:
            assert client.subprotocol == "mcp"
            assert await client.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_refused_off_the_endpoint(kind: str) -> None:
    async with serving(kind, build_app()) as served:
        for path in ("/elsewhere", "/mcp/deeper", "/"):
            rejection = await refused(served.port, path=path)
            assert rejection.status == 404, path
            error_body(rejection)
        with trio.fail_after(DEADLINE), pytest.raises(TransportError, match="HTTP 404"):
            async with open_websocket_client(served.url + "/deeper"):
                raise AssertionError("a refused upgrade opened a session")
        assert served.connections() == 0


async def test_refused_foreign_origin_and_host(kind: str) -> None:
    async with serving(kind, build_app(dns_rebinding_protection=True)) as served:
        rejection = await refused(served.port, headers=[(b"origin", b"http://evil.example")])
        assert rejection.status == 403
        error_body(rejection)
        rejection = await refused(served.port, host="evil.example")
        assert rejection.status == 421
        error_body(rejection)
        # a loopback origin and host pass
        headers = [(b"origin", b"http://localhost:3000")]
        async with RawClient.connect(served.port, host=f"localhost:{served.port}", headers=headers) as client:
            assert await client.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_refused_by_the_authenticate_hook(kind: str) -> None:
    async def authenticate(info: HTTPRequestInfo) -> object:
        if info.header("authorization") == "Bearer good":
            return "alice"
        if info.header("authorization") == "Bearer bad":
            raise RemoteProtocolError("Forbidden", http_status=403)
        raise RemoteProtocolError(
            "Unauthorized", http_status=401, headers=(("www-authenticate", 'Bearer realm="ws"'),)
        )

    async with serving(kind, build_app(authenticate=authenticate)) as served:
        rejection = await refused(served.port)
        assert rejection.status == 401
        assert rejection.header(b"www-authenticate") == b'Bearer realm="ws"'
        error_body(rejection)
        rejection = await refused(served.port, headers=[(b"authorization", b"Bearer bad")])
        assert rejection.status == 403
        error_body(rejection)
        with trio.fail_after(DEADLINE), pytest.raises(TransportError, match="HTTP 401"):
            async with open_websocket_client(served.url):
                raise AssertionError("a refused upgrade opened a session")
        assert served.connections() == 0


async def test_refused_past_max_sessions(kind: str) -> None:
    async with serving(kind, build_app(max_sessions=1)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as first:
                await until(lambda: served.connections() == 1)
                rejection = await refused(served.port)
                assert rejection.status == 503
                assert rejection.header(b"retry-after") == b"1"
                error_body(rejection)
                with pytest.raises(TransportError, match="HTTP 503"):
                    async with open_websocket_client(served.url):
                        raise AssertionError("a refused upgrade opened a session")
                # the first connection still works
                assert await first.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
                assert await first.close() == 1000
            await served.until_no_connection()
            # its place is free again
            async with open_websocket_client(served.url, mode="legacy") as session:
                await session.ping()


HANDSHAKE = (
    b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
    b"sec-websocket-protocol: mcp\r\n"
)


@pytest.mark.parametrize(
    "headers",
    [
        b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 8\r\n",
        b"sec-websocket-version: 13\r\n",
    ],
    ids=["version-8", "no-key"],
)
async def test_malformed_handshake_is_400(kind: str, headers: bytes) -> None:
    async with serving(kind, build_app()) as served:
        with trio.fail_after(DEADLINE):
            async with await trio.open_tcp_stream("127.0.0.1", served.port) as stream:
                await stream.send_all(HANDSHAKE + headers + b"\r\n")
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = await stream.receive_some(65536)
                    assert chunk, data
                    data += chunk
                assert data.startswith(b"HTTP/1.1 400 "), data
                assert b"connection: close" in data.lower(), data
                with trio.fail_after(2):  # and the connection is closed, as announced
                    while await stream.receive_some(65536):
                        pass
        assert served.connections() == 0


async def test_client_refusal_closes_its_socket(kind: str) -> None:
    """open_websocket_client closes the socket of a refused upgrade (trio-websocket 0.12.2 did not)."""

    async def refused_once(url: str) -> None:
        try:
            async with open_websocket_client(url):
                raise AssertionError("a refused upgrade opened a session")
        except TransportError:
            pass

    async with serving(kind, build_app()) as served:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with trio.fail_after(DEADLINE):
                await refused_once(served.url + "/nope")
                await refused_once(served.url + "/nope")
            gc.collect()
        leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert leaks == []


# -- 3. hostile input ---------------------------------------------------------------------------------


async def test_binary_frame_closes_1003(kind: str) -> None:
    async with serving(kind, build_app()) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                await client.send_bytes(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
                assert await client.close_code() == 1003
            await served.until_no_connection()


async def test_oversized_message_closes_1009(kind: str) -> None:
    async with serving(kind, build_app(max_body_size=2000)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                # just under the limit is served
                echo = json.dumps(call_params("echo", text=""))
                text = "y" * (1900 - len(echo))
                answer = await client.call(1, "tools/call", call_params("echo", text=text))
                assert answer["result"]["content"][0]["text"] == text
                await client.request(2, "tools/call", call_params("echo", text="z" * 2100))
                assert await client.close_code() == 1009
            # the limit is in bytes: 1 100 characters of two bytes each are over it
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                await client.request(1, "tools/call", call_params("echo", text="é" * 1100))
                assert await client.close_code() == 1009
            await served.until_no_connection()


async def test_oversized_fragment_closes_1009_before_the_end(kind: str) -> None:
    """A message is bounded as it arrives: its first fragment past the limit closes the connection,
    without waiting for (or buffering) the rest."""
    async with serving(kind, build_app(max_body_size=2000)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                await client._send(TextMessage(data='{"jsonrpc":"2.0","id":1,"x":"', message_finished=False))
                await client._send(TextMessage(data="a" * 2500, message_finished=False))
                assert await client.close_code() == 1009  # the message never ends
            await served.until_no_connection()


async def test_not_json_array_and_out_of_order_requests(kind: str) -> None:
    async with serving(kind, build_app()) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.send_text("this is not JSON")
                answer = await client.receive()
                assert answer["error"]["code"] == -32700 and "id" not in answer
                assert await client.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
                await client.send_text(json.dumps([{"jsonrpc": "2.0", "id": 2, "method": "ping"}]))
                answer = await client.receive()
                assert answer["error"]["code"] == -32600
                # a request before initialize, without a 2026 _meta
                answer = await client.call(3, "tools/list")
                assert answer["error"]["code"] == -32600
                # still served: initialize, then a request
                await client.initialize()
                answer = await client.call(4, "tools/list")
                assert "tools" in answer["result"]


async def test_invalid_utf8_ends_the_connection(kind: str) -> None:
    """A text frame that is not UTF-8 ends its connection (serve_h11 says why with 1007; hypercorn
    closes the socket without a close frame) and nothing else: the next connection is served."""
    async with serving(kind, build_app()) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                mask = b"\x01\x02\x03\x04"
                payload = bytes(byte ^ mask[n % 4] for n, byte in enumerate(b"\xff\xfe\xfd"))
                await client.stream.send_all(bytes([0x81, 0x80 | len(payload)]) + mask + payload)
                assert await client.close_code() == (1006 if kind == "hypercorn" else 1007)
            await served.until_no_connection()
            async with RawClient.connect(served.port) as again:
                await again.initialize()
                assert await again.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_duplicate_inflight_id(kind: str) -> None:
    probe = Probe()
    async with serving(kind, build_app(probe)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                await client.request(7, "tools/call", call_params("block", key="a"))
                await probe.wait_started("a")
                answer = await client.call(7, "tools/call", call_params("echo", text="dup"))
                assert answer["error"]["code"] == -32600 and "in use" in answer["error"]["message"]
                assert not probe.was_cancelled("a")
                # once the first is cancelled, its id is free again
                await client.notify("notifications/cancelled", {"requestId": 7})
                await probe.wait_cancelled("a")
                answer = await client.call(7, "tools/call", call_params("echo", text="again"))
                assert answer["result"]["content"][0]["text"] == "again"


async def test_too_many_requests_in_flight(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(WebSocketConnection, "max_inflight", 3)
    probe = Probe()
    async with serving(kind, build_app(probe)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                for n in range(3):
                    await client.request(n + 1, "tools/call", call_params("block", key=f"b{n}"))
                for n in range(3):
                    await probe.wait_started(f"b{n}")
                for request_id in (10, 11):
                    answer = await client.call(request_id, "tools/call", call_params("echo", text="x"))
                    assert answer["error"]["code"] == -32603, answer
                    assert "limit 3" in answer["error"]["message"]
                # a 2026 request counts too
                params = {**call_params("echo", text="x"), "_meta": modern_meta()}
                answer = await client.call(12, "tools/call", params)
                assert answer["error"]["code"] == -32603, answer
                # one cancelled: room for one more
                await client.notify("notifications/cancelled", {"requestId": 1})
                await probe.wait_cancelled("b0")
                answer = await client.call(13, "tools/call", call_params("echo", text="room"))
                assert answer["result"]["content"][0]["text"] == "room"
                assert not probe.was_cancelled("b1") and not probe.was_cancelled("b2")
            await probe.wait_cancelled("b1")
            await probe.wait_cancelled("b2")


# -- 4. the connection owns its requests --------------------------------------------------------------


@pytest.mark.parametrize("ending", ["close frame", "dropped connection"])
async def test_the_end_of_the_connection_cancels_its_handlers(kind: str, ending: str) -> None:
    """A 2025 handler, a 2026 one and one waiting on ``ctx.sample`` are all cancelled when the client
    sends a close frame (which the server answers) or drops the TCP connection without one."""
    probe = Probe()
    async with serving(kind, build_app(probe)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                await client.request(1, "tools/call", call_params("block", key="legacy"))
                params = {**call_params("block", key="modern"), "_meta": modern_meta()}
                await client.request(2, "tools/call", params)
                await client.request(3, "tools/call", call_params("ask_and_block", key="sampling"))
                sample = await client.receive()
                assert sample["method"] == "sampling/createMessage"
                for key in ("legacy", "modern", "sampling"):
                    await probe.wait_started(key)
                assert served.connections() == 1
                if ending == "close frame":
                    assert await client.close() == 1000  # the server answers our close frame
                else:
                    await client.drop()  # no close frame
            for key in ("legacy", "modern", "sampling"):
                await probe.wait_cancelled(key)
            await served.until_no_connection()


async def test_cancelled_notification_cancels_one_request(kind: str) -> None:
    probe = Probe()
    async with serving(kind, build_app(probe)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                await client.request(1, "tools/call", call_params("block", key="one"))
                await client.request(2, "tools/call", call_params("block", key="two"))
                await probe.wait_started("one")
                await probe.wait_started("two")
                await client.notify("notifications/cancelled", {"requestId": 1, "reason": "enough"})
                await probe.wait_cancelled("one")
                assert not probe.was_cancelled("two")
                # nothing was sent for request 1: the next message is the ping's answer
                assert await client.call(3, "ping") == {"jsonrpc": "2.0", "id": 3, "result": {}}
                await client.notify("notifications/cancelled", {"requestId": 2})
                await probe.wait_cancelled("two")
                assert await client.call(4, "ping") == {"jsonrpc": "2.0", "id": 4, "result": {}}
                # a handler that finishes after its cancellation: its answer is not sent either
                await client.request(5, "tools/call", call_params("stubborn", key="late"))
                await probe.wait_started("late")
                await client.notify("notifications/cancelled", {"requestId": 5})
                # one reader takes the messages in order: once this ping is answered, the cancellation
                # before it was handled (and request 5 is still held, so nothing else is sent)
                assert await client.call(55, "ping") == {"jsonrpc": "2.0", "id": 55, "result": {}}
                probe.release("late")
                await probe.wait_cancelled("late")  # it returned
                assert await client.call(6, "ping") == {"jsonrpc": "2.0", "id": 6, "result": {}}
            await served.until_no_connection()


# -- 5. shutdown ---------------------------------------------------------------------------------------


async def test_shutdown_closes_1001(kind: str) -> None:
    probe = Probe()
    app = build_app(probe)
    async with serving(kind, app) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as raw:
                await raw.initialize()
                await raw.request(1, "tools/call", call_params("block", key="raw"))
                await probe.wait_started("raw")
                async with open_websocket_client(served.url, mode="legacy") as session:
                    await session.ping()
                    served.stop.set()
                    assert await raw.close_code() == 1001
                    await probe.wait_cancelled("raw")
                    with pytest.raises(TransportError):
                        await session.ping()
                    assert session._transport.close_code == 1001  # type: ignore[union-attr]


async def test_shutdown_refuses_new_requests_and_answers_the_calls_it_cuts(kind: str) -> None:
    """The shutdown rule on a WebSocket: once the server stops, a new request is answered -32000 at
    once (a new connection gets 503 and -32000); a call shorter than the grace is answered as usual;
    one still running when the grace (1 s) runs out is cancelled and answered -32000; then the
    connection closes with 1001."""
    probe = Probe()
    shutting_down = {"code": -32000, "message": "Server shutting down"}
    async with serving(kind, build_app(probe)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as raw:
                await raw.initialize()
                await raw.request(1, "tools/call", call_params("block", key="cut"))
                await raw.request(2, "tools/call", call_params("count", steps=30))  # 0.3 s
                await probe.wait_started("cut")
                served.stop.set()
                got: dict[int, dict[str, Any]] = {}
                for request_id in range(100, 1000):  # until the connection stops admitting
                    await raw.request(request_id, "ping")
                    while request_id not in got:
                        answer = await raw.receive()
                        got[answer["id"]] = answer
                    if "error" in got[request_id]:
                        break
                assert got[request_id] == {"jsonrpc": "2.0", "id": request_id, "error": shutting_down}
                rejection = await refused(served.port)  # and a new connection is refused
                assert rejection.status == 503 and rejection.header(b"retry-after") == b"1"
                assert error_body(rejection)["error"] == shutting_down
                assert not probe.was_cancelled("cut")  # the call runs on meanwhile
                while 1 not in got or 2 not in got:
                    answer = await raw.receive()
                    got[answer["id"]] = answer
                assert got[2]["result"]["content"][0]["text"] == "counted to 30"
                assert got[1] == {"jsonrpc": "2.0", "id": 1, "error": shutting_down}
                assert probe.was_cancelled("cut")
                assert await raw.close_code() == 1001


# -- 6. a client that does not read --------------------------------------------------------------------


async def test_slow_reader_is_dropped_others_served(kind: str) -> None:
    async with serving(kind, build_app(write_timeout=0.5)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as slow:
                await slow.initialize()
                sent = 0
                with contextlib.suppress(trio.BrokenResourceError):  # the server may close it first
                    for n in range(100):
                        await slow.request(n + 1, "tools/call", call_params("big"))
                        sent += 1
                assert sent >= 20, sent  # well past what the socket buffers hold (200 KB each)
                async with open_websocket_client(served.url, mode="legacy") as session:
                    assert text_of(await session.call_tool("echo", {"text": "served"})) == "served"
                    # the slow one is closed (its write timed out), not the other
                    await until(lambda: served.connections() == 1, within=5)
                    result = await session.call_tool("big")
                    assert len(text_of(result)) == BIG
                with trio.fail_after(5):  # what the slow one gets: answers, then the end
                    with contextlib.suppress(Closed):
                        while True:
                            await slow.receive()
            await served.until_no_connection()


# -- 7. pings ------------------------------------------------------------------------------------------


async def test_quiet_connections_are_closed(kind: str) -> None:
    """A connection that says nothing within ``init_timeout``, or that carries neither a 2025 session nor a
    request for ``idle_timeout``, is closed (1000, "idle"); an initialized session is never idle, nor a
    connection with a request in flight."""
    probe = Probe()
    app = build_app(probe, init_timeout=0.3, idle_timeout=0.6)
    async with serving(kind, app) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as silent:
                assert await silent.close_code() == 1000
            async with RawClient.connect(served.port) as modern:
                params = {**call_params("echo", text="x"), "_meta": modern_meta()}
                assert (await modern.call(1, "tools/call", params))["result"]["content"][0]["text"] == "x"
                started = trio.current_time()
                assert await modern.close_code() == 1000
                assert trio.current_time() - started >= 0.5  # idle_timeout, not init_timeout
            async with RawClient.connect(served.port) as busy, RawClient.connect(served.port) as session:
                await session.initialize()
                params = {**call_params("block", key="long"), "_meta": modern_meta()}
                await busy.request(1, "tools/call", params)
                await probe.wait_started("long")
                with trio.move_on_after(1.5):  # more than twice idle_timeout
                    await busy.close_code()
                    raise AssertionError("a connection with a request in flight was closed")
                with trio.move_on_after(0.1):
                    await session.close_code()
                    raise AssertionError("an initialized session was closed as idle")
                assert await session.call(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
                assert not probe.was_cancelled("long")


async def test_server_pings(kind: str) -> None:
    async with serving(kind, build_app(keepalive_interval=0.2)) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                await client.initialize()
                with trio.move_on_after(1.1):
                    await client.receive()  # nothing comes but pings
                    raise AssertionError("a message out of nowhere")
                assert client.pings >= 3, client.pings
                # and the server answers our pings
                await client._send(Ping(payload=b"are you there"))
                while not client.pongs:
                    await client.receive_event()
                assert client.pongs == [b"are you there"]
                assert await client.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}


# -- 8. 2026-era requests on the connection -------------------------------------------------------------


async def test_modern_requests(kind: str) -> None:
    async with serving(kind, build_app()) as served:
        with trio.fail_after(DEADLINE):
            async with RawClient.connect(served.port) as client:
                params = {**call_params("echo", text="2026"), "_meta": modern_meta()}
                answer = await client.call(1, "tools/call", params)
                assert answer["result"]["resultType"] == "complete"
                assert answer["result"]["content"][0]["text"] == "2026"
                meta = {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}
                meta["io.modelcontextprotocol/clientCapabilities"] = {}  # type: ignore[assignment]
                answer = await client.call(2, "tools/call", {**call_params("echo", text="x"), "_meta": meta})
                assert answer["error"]["code"] == mt.UNSUPPORTED_PROTOCOL_VERSION
                assert MODERN in answer["error"]["data"]["supported"]
                meta = {"io.modelcontextprotocol/protocolVersion": MODERN}  # no clientCapabilities
                answer = await client.call(3, "tools/call", {**call_params("echo", text="x"), "_meta": meta})
                assert answer["error"]["code"] == mt.INVALID_PARAMS
                # no version at all: a 2025 request, before initialize
                answer = await client.call(4, "tools/call", {**call_params("echo", text="x"), "_meta": {}})
                assert answer["error"]["code"] == -32600
