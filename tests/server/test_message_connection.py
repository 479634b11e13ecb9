"""The transport-neutral message connection under a framing of its own: one message per channel item
(as a WebSocket carries one per frame), both eras, with no byte framing at all."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing

from mcp_trio import MCPServer, ServerConfig
from mcp_trio._transport.connection import MessageConnection

from .test_stdio_server import modern_meta


class ChannelConnection(MessageConnection):
    def __init__(self, server: MCPServer, incoming: trio.MemoryReceiveChannel[bytes]) -> None:
        super().__init__(server, ServerConfig(shutdown_grace=1))
        self.incoming = incoming
        self.out_send, self.out_receive = trio.open_memory_channel[bytes](100)

    async def _read_loop(self) -> None:
        async for message in self.incoming:
            if len(message) > self.max_message:
                await self.refuse_oversized()
            else:
                await self.receive_message(message)

    async def _transmit(self, messages: list[bytes]) -> None:
        for message in messages:
            await self.out_send.send(message)


async def test_both_eras_over_whole_messages() -> None:
    server = MCPServer("channels")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    send, receive = trio.open_memory_channel[bytes](100)
    connection = ChannelConnection(server, receive)

    async def call(request: dict[str, Any]) -> dict[str, Any]:
        await send.send(json.dumps(request).encode())
        answer: dict[str, Any] = json.loads(await connection.out_receive.receive())
        return answer

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(connection.run)
            init = {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            }
            answer = await call({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
            assert answer["result"]["protocolVersion"] == "2025-11-25"
            await send.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
            params = {"name": "echo", "arguments": {"text": "2025"}}
            answer = await call({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
            assert answer["result"]["content"][0]["text"] == "2025"
            params = {"name": "echo", "arguments": {"text": "2026"}, "_meta": modern_meta()}
            answer = await call({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params})
            assert (
                answer["result"]["content"][0]["text"] == "2026"
                and answer["result"]["resultType"] == "complete"
            )
            await send.send(b"x" * (connection.max_message + 1))
            refused = json.loads(await connection.out_receive.receive())
            assert refused["error"]["code"] == -32600
            await send.aclose()  # end of input: the connection ends by itself


async def test_requests_in_flight_are_bounded_per_connection() -> None:
    """Past ``max_inflight`` requests at once, the next is answered -32603 at once (it never runs); once
    one ends, requests run again."""
    server = MCPServer("bounded")
    release = trio.Event()
    started = 0

    @server.tool()
    async def hold() -> str:
        nonlocal started
        started += 1
        await release.wait()
        return "done"

    send, receive = trio.open_memory_channel[bytes](100)
    connection = ChannelConnection(server, receive)
    connection.max_inflight = 3

    def call(request_id: int) -> bytes:
        params = {"name": "hold", "arguments": {}, "_meta": modern_meta()}
        message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        return json.dumps(message).encode()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(connection.run)
            for request_id in (1, 2, 3, 4):
                await send.send(call(request_id))
            refused = json.loads(await connection.out_receive.receive())
            assert refused["id"] == 4 and refused["error"]["code"] == -32603
            assert "limit 3" in refused["error"]["message"]
            await trio.testing.wait_all_tasks_blocked()
            assert started == 3
            release.set()
            answers = [json.loads(await connection.out_receive.receive()) for _ in range(3)]
            assert sorted(answer["id"] for answer in answers) == [1, 2, 3]
            await send.send(call(5))
            answer = json.loads(await connection.out_receive.receive())
            assert answer["id"] == 5 and answer["result"]["content"][0]["text"] == "done"
            await send.aclose()
