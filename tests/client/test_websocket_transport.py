"""The WebSocket client (``open_websocket_client``) against servers that misbehave: raw Trio servers on
127.0.0.1 speaking wsproto, each doing one wrong thing.  Every failure is a :class:`TransportError` in
bounded time, and the client's socket is closed whatever happens."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from wsproto import ConnectionType, WSConnection
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

from mcp_trio import open_websocket_client
from mcp_trio.errors import TransportError

Behaviour = Callable[["RawServer", trio.SocketStream, WSConnection], Awaitable[None]]


class RawServer:
    """One WebSocket server connection at a time, driven by a test's ``behaviour``."""

    def __init__(self, behaviour: Behaviour, *, subprotocol: str | None = "mcp") -> None:
        self.behaviour = behaviour
        self.subprotocol = subprotocol
        self.url = ""
        self.client_closed = trio.Event()
        self.close_code: int | None = None
        self.pongs = 0
        self.connections = 0
        self.finished = trio.Event()

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        ws = WSConnection(ConnectionType.SERVER)
        try:
            async with stream:
                request = await self.next_event(stream, ws)
                assert isinstance(request, Request)
                await self.behaviour(self, stream, ws)
        finally:
            self.finished.set()

    async def accept(self, stream: trio.SocketStream, ws: WSConnection) -> None:
        await stream.send_all(ws.send(AcceptConnection(subprotocol=self.subprotocol)))

    async def next_event(self, stream: trio.SocketStream, ws: WSConnection) -> Any:
        while True:
            for event in ws.events():
                if isinstance(event, CloseConnection):
                    self.close_code = event.code
                    self.client_closed.set()
                elif isinstance(event, Pong):
                    self.pongs += 1
                return event
            data = await stream.receive_some(65536)
            if not data:
                return None
            ws.receive_data(data)

    async def next_message(self, stream: trio.SocketStream, ws: WSConnection) -> dict[str, Any]:
        while True:
            event = await self.next_event(stream, ws)
            assert event is not None, "the client closed the connection"
            if isinstance(event, TextMessage):
                message: dict[str, Any] = json.loads(event.data)
                return message

    async def send(self, stream: trio.SocketStream, ws: WSConnection, message: dict[str, Any]) -> None:
        await stream.send_all(ws.send(TextMessage(data=json.dumps(message))))


@asynccontextmanager
async def raw_server(behaviour: Behaviour, **options: Any) -> AsyncIterator[RawServer]:
    server = RawServer(behaviour, **options)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        server.url = f"ws://127.0.0.1:{port}/mcp"
        yield server
        nursery.cancel_scope.cancel()


def initialize_result(request: dict[str, Any]) -> dict[str, Any]:
    result = {
        "protocolVersion": request["params"]["protocolVersion"],
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "raw", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


async def serve_initialize(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
    """Accept, answer initialize, take notifications/initialized."""
    await server.accept(stream, ws)
    request = await server.next_message(stream, ws)
    assert request["method"] == "initialize"
    await server.send(stream, ws, initialize_result(request))
    assert (await server.next_message(stream, ws))["method"] == "notifications/initialized"


async def test_a_refusal_names_its_status_and_body() -> None:
    async def refuse(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
        body = b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"go away"}}'
        await stream.send_all(ws.send(RejectConnection(status_code=403, headers=[], has_body=True)))
        await stream.send_all(ws.send(RejectData(data=body)))

    async with raw_server(refuse) as server:
        refused = r"refused the WebSocket upgrade: HTTP 403 .*go away"
        with trio.fail_after(10), pytest.raises(TransportError, match=refused):
            async with open_websocket_client(server.url, mode="legacy"):
                pass


async def test_a_server_without_the_subprotocol_is_refused() -> None:
    async with raw_server(lambda server, stream, ws: server.accept(stream, ws), subprotocol=None) as server:
        with trio.fail_after(10), pytest.raises(TransportError, match="did not accept the 'mcp' subprotocol"):
            async with open_websocket_client(server.url, mode="legacy"):
                pass


async def test_a_silent_server_times_out_the_connection() -> None:
    async def silent(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
        assert await server.next_event(stream, ws) is None  # never answers; reads until the client closes

    async with raw_server(silent) as server:
        late = r"no WebSocket connection .* within 0\.5 s"
        with trio.fail_after(10), pytest.raises(TransportError, match=late):
            async with open_websocket_client(server.url, mode="legacy", connect_timeout=0.5):
                pass
        with trio.fail_after(5):
            await server.finished.wait()  # the client closed its socket: the server's read ended


async def test_pings_are_answered_and_the_close_handshake_is_done() -> None:
    async def pinging(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
        await serve_initialize(server, stream, ws)
        await stream.send_all(ws.send(Ping(payload=b"x")))
        request = await server.next_message(stream, ws)  # the tools/call
        await server.send(stream, ws, {"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}})
        while not server.client_closed.is_set():
            assert await server.next_event(stream, ws) is not None
        await stream.send_all(ws.send(CloseConnection(code=1000)))

    async with raw_server(pinging) as server:
        with trio.fail_after(10):
            async with open_websocket_client(server.url, mode="legacy") as session:
                result = await session.call_tool("anything", {})
                assert result.content == []
            assert server.close_code == 1000
            await server.finished.wait()
            assert server.pongs == 1


async def test_a_server_closing_fails_the_waiting_request() -> None:
    async def closing(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
        await serve_initialize(server, stream, ws)
        await server.next_message(stream, ws)  # a request it will never answer
        await stream.send_all(ws.send(CloseConnection(code=1001, reason="going away")))
        await server.next_event(stream, ws)  # the client's answering close

    async with raw_server(closing) as server:
        with trio.fail_after(10):
            async with open_websocket_client(server.url, mode="legacy") as session:
                with pytest.raises(TransportError, match="closed before answering"):
                    await session.call_tool("anything", {})
                with pytest.raises(TransportError):
                    await session.call_tool("again", {})  # the connection is gone: at once


async def test_a_message_too_big_ends_the_connection() -> None:
    async def flooding(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
        await serve_initialize(server, stream, ws)
        await server.next_message(stream, ws)
        await stream.send_all(ws.send(TextMessage(data="x" * 5000)))
        while await server.next_event(stream, ws) is not None and not server.client_closed.is_set():
            pass

    async with raw_server(flooding) as server:
        with trio.fail_after(10):
            async with open_websocket_client(server.url, mode="legacy", max_message_size=4096) as session:
                with pytest.raises(TransportError):
                    await session.call_tool("anything", {})
            assert server.close_code == 1009


async def test_binary_frames_and_garbage_are_ignored() -> None:
    async def noisy(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
        await serve_initialize(server, stream, ws)
        request = await server.next_message(stream, ws)
        await stream.send_all(ws.send(BytesMessage(data=b"\x00\x01")))
        await stream.send_all(ws.send(TextMessage(data="not json")))
        await stream.send_all(ws.send(TextMessage(data="[1, 2]")))
        await server.send(stream, ws, {"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}})
        await server.next_event(stream, ws)

    async with raw_server(noisy) as server:
        with trio.fail_after(10):
            async with open_websocket_client(server.url, mode="legacy") as session:
                assert (await session.call_tool("anything", {})).content == []


async def test_a_server_that_never_answers_the_close_is_cut_in_time() -> None:
    async def deaf(server: RawServer, stream: trio.SocketStream, ws: WSConnection) -> None:
        await serve_initialize(server, stream, ws)
        while not server.client_closed.is_set():
            await server.next_event(stream, ws)
        await trio.sleep_forever()  # never answers the close frame, never closes the socket

    async with raw_server(deaf) as server:
        with trio.fail_after(10):
            async with open_websocket_client(server.url, mode="legacy", close_timeout=0.3):
                pass
            assert server.close_code == 1000
