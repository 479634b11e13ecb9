"""What a handler sees of the request it serves: :class:`Context`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as mt

from .._protocol import jsonrpc

__all__ = ["LOG_LEVELS", "Context", "Peer"]

LOG_LEVELS: tuple[mt.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

SendMessage = Callable[[dict[str, Any], "mt.RequestId | None"], Awaitable[None]]


@dataclass(slots=True)
class Peer:
    """The session side of a connection, as the server API sees it: where messages go, and
    per-session settings the client chose (log level)."""

    session_id: str | None
    protocol_version: str
    send: SendMessage
    log_level: mt.LoggingLevel | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    client_capabilities: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Context:
    """Handed to tool handlers that ask for it (a parameter annotated ``Context``).

    Messages sent through it are related to the request: on an SSE response they travel on the
    request's own stream.
    """

    request_id: mt.RequestId
    method: str
    peer: Peer
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def session_id(self) -> str | None:
        return self.peer.session_id

    @property
    def protocol_version(self) -> str:
        return self.peer.protocol_version

    @property
    def progress_token(self) -> mt.ProgressToken | None:
        token = self.meta.get("progressToken")
        return token if isinstance(token, (str, int)) else None

    async def send_notification(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self.peer.send(jsonrpc.notification(method, params), self.request_id)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Send ``notifications/progress`` if the request carried a progress token (else nothing)."""
        token = self.progress_token
        if token is None:
            return
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.send_notification("notifications/progress", params)

    async def log(self, level: mt.LoggingLevel, data: Any, *, logger: str | None = None) -> None:
        """Send ``notifications/message`` unless the client set a higher level with ``logging/setLevel``."""
        threshold = self.peer.log_level
        if threshold is not None and LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self.send_notification("notifications/message", params)

    async def debug(self, data: Any, *, logger: str | None = None) -> None:
        await self.log("debug", data, logger=logger)

    async def info(self, data: Any, *, logger: str | None = None) -> None:
        await self.log("info", data, logger=logger)

    async def warning(self, data: Any, *, logger: str | None = None) -> None:
        await self.log("warning", data, logger=logger)

    async def error(self, data: Any, *, logger: str | None = None) -> None:
        await self.log("error", data, logger=logger)
