"""Test helpers: a streaming, in-memory ASGI client (no sockets), for tests of mcp_trio apps.

Unlike httpx's ``ASGITransport`` it streams response bodies as they are sent and can disconnect
mid-response, which is what SSE and cancellation tests need.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from ._protocol.sse import ServerSentEvent, SSEDecoder
from ._transport.asgi import MCPApp

__all__ = ["ASGIClient", "NoResponse", "Response", "open_asgi_client"]


@dataclass(eq=False)
class Response:
    """One response being received.  ``aclose()`` disconnects the client side of the exchange."""

    status: int
    headers: dict[str, str]
    _chunks: trio.MemoryReceiveChannel[bytes]
    _disconnect: trio.Event
    _decoder: SSEDecoder = field(default_factory=SSEDecoder)
    _events: list[ServerSentEvent] = field(default_factory=list)
    complete: bool = False

    async def read(self) -> bytes:
        """The rest of the body, until the server ends it."""
        parts = [chunk async for chunk in self._chunks]
        self.complete = True
        return b"".join(parts)

    async def chunks(self) -> list[bytes]:
        """The rest of the body, as the separate body messages the app sent (empty ones left out)."""
        parts = [chunk async for chunk in self._chunks if chunk]
        self.complete = True
        return parts

    async def json(self) -> Any:
        return json.loads(await self.read())

    async def next_event(self) -> ServerSentEvent | None:
        """The next SSE event, or None when the server ended the response."""
        while not self._events:
            try:
                chunk = await self._chunks.receive()
            except trio.EndOfChannel:
                self.complete = True
                self._events.extend(self._decoder.close())
                return self._events.pop(0) if self._events else None
            self._events.extend(self._decoder.feed(chunk))
        return self._events.pop(0)

    async def next_message(self) -> dict[str, Any] | None:
        """The next SSE event that carries data, decoded as JSON (None at the end)."""
        while (event := await self.next_event()) is not None:
            if event.data:
                message: dict[str, Any] = json.loads(event.data)
                return message
        return None

    @property
    def last_event_id(self) -> str:
        return self._decoder.last_event_id

    async def aclose(self) -> None:
        self._disconnect.set()
        await trio.lowlevel.checkpoint()


class NoResponse(Exception):
    """The app ended the exchange without starting a response (as after a client disconnect)."""


class ASGIClient:
    def __init__(self, app: MCPApp, nursery: trio.Nursery, *, server: tuple[str, int]) -> None:
        self._app = app
        self._nursery = nursery
        self._server = server
        self.send_delay = 0.0
        """Seconds each ``send`` of the app takes (a checkpoint where a cancellation could land)."""
        self.cancelled_sends = 0
        """How many of the app's sends were cancelled midway (a bug: see ``MCPApp`` sends)."""

    async def request(
        self,
        method: str,
        path: str = "/mcp",
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        disconnect: trio.Event | None = None,
        client: tuple[str, int] = ("127.0.0.1", 50000),
    ) -> Response:
        """Send a request; returns once the response head arrived (the body streams afterwards).
        ``client``: the peer's address (the ASGI scope's ``client``).

        Setting ``disconnect`` (or ``Response.aclose()``) disconnects the client; if that happens before
        the head arrived, :class:`NoResponse` is raised once the app has returned."""
        head: trio.MemorySendChannel[tuple[int, dict[str, str]]]
        head, head_rx = trio.open_memory_channel[tuple[int, dict[str, str]]](1)
        chunks_tx, chunks_rx = trio.open_memory_channel[bytes](1000)
        if disconnect is None:
            disconnect = trio.Event()
        all_headers = {"host": f"{self._server[0]}:{self._server[1]}", **(headers or {})}
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in all_headers.items()],
            "server": self._server,
            "client": client,
        }
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if self.send_delay:  # a send that takes time, as over a socket; it must never be cancelled
                try:
                    await trio.sleep(self.send_delay)
                except trio.Cancelled:
                    self.cancelled_sends += 1
                    raise
            if disconnect.is_set():
                return  # like hypercorn: sends after a disconnect are dropped
            if message["type"] == "http.response.start":
                hdrs = {k.decode().lower(): v.decode() for k, v in message["headers"]}
                head.send_nowait((message["status"], hdrs))
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    await chunks_tx.send(message["body"])
                if not message.get("more_body", False):
                    await chunks_tx.aclose()

        async def run_app() -> None:
            try:
                await self._app(scope, receive, send)
            finally:
                await chunks_tx.aclose()
                head.close()
                disconnect.set()

        self._nursery.start_soon(run_app)
        try:
            status, hdrs = await head_rx.receive()
        except trio.EndOfChannel:
            raise NoResponse(f"{method} {path}: the app returned without a response") from None
        return Response(status, hdrs, chunks_rx, disconnect)


@asynccontextmanager
async def open_asgi_client(
    app: MCPApp, *, server: tuple[str, int] = ("127.0.0.1", 8000)
) -> AsyncIterator[ASGIClient]:
    """Run ``app`` (its session nursery included) and yield a client for it; everything is cancelled
    on exit."""
    async with trio.open_nursery() as nursery:
        await nursery.start(app.run)
        try:
            yield ASGIClient(app, nursery, server=server)
        finally:
            nursery.cancel_scope.cancel()
