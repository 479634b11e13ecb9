"""The client side of the WebSocket transport (on trio-websocket, the ``websocket`` extra): subprotocol
``mcp``, one JSON-RPC message per text frame, on the message transport that stdio shares."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .http import OnMessage, TransportError
from .messages import MessageTransport

if TYPE_CHECKING:
    from trio_websocket import WebSocketConnection

__all__ = ["SUBPROTOCOL", "WebSocketTransport"]

logger = logging.getLogger(__name__)

SUBPROTOCOL = "mcp"


class WebSocketTransport(MessageTransport):
    """One WebSocket connection (opened by :func:`~mcp_trio.open_websocket_client`)."""

    gone_message = "the WebSocket connection has closed"

    def __init__(self, ws: WebSocketConnection) -> None:
        super().__init__()
        self.ws = ws

    async def _send_raw(self, data: bytes) -> None:
        from trio_websocket import ConnectionClosed

        try:
            await self.ws.send_message(data.decode())
        except ConnectionClosed as exc:
            raise TransportError(f"the WebSocket connection has closed ({exc.reason})") from exc

    async def read_loop(self, on_message: OnMessage, *, task_status: trio.TaskStatus[None]) -> None:
        """Read messages until the connection closes; then every waiting request fails promptly."""
        from trio_websocket import ConnectionClosed

        task_status.started()
        try:
            while True:
                message = await self.ws.get_message()
                if isinstance(message, bytes):
                    logger.info("the server sent a binary frame (%d bytes); ignored", len(message))
                    continue
                await self.route(message, on_message)
        except ConnectionClosed as exc:
            logger.info("the WebSocket connection closed: %s", exc.reason)
        finally:
            self._end()
