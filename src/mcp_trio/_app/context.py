"""What a handler sees of the request it serves: :class:`Context`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import mcp_types as mt

from .._exceptions import RPCError
from .._protocol import jsonrpc, versions

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


class Peer(Protocol):
    """The other end of a request, as handlers see it: a 2025-era session (or, later, a 2026 request).

    It routes messages (a message related to a request travels on that request's own stream) and keeps
    what the client chose for itself (capabilities, log level, resource subscriptions).
    """

    session_id: str | None
    protocol_version: str
    log_level: mt.LoggingLevel | None
    client_info: dict[str, Any]
    client_capabilities: dict[str, Any]
    subscriptions: set[str]

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None: ...

    async def request(
        self, method: str, params: dict[str, Any] | None, related: mt.RequestId | None = None
    ) -> dict[str, Any]:
        """Send a server-to-client request and wait for its result (:class:`RPCError` for an error)."""
        ...

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:
        """End the current HTTP connection of a stream without ending the stream (SSE polling)."""
        ...


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
        await self.peer.send_message(jsonrpc.notification(method, params), self.request_id)

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

    # -- server-to-client requests ------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request to the client, related to this request (it travels on this request's
        stream), and wait for its result.  Raises :class:`RPCError` if the client answers an error."""
        return await self.peer.request(method, params, self.request_id)

    def _require(self, capability: str, what: str) -> None:
        if capability not in self.peer.client_capabilities:
            raise RPCError(mt.INVALID_REQUEST, f"the client does not support {what}")

    async def sample(
        self,
        messages: list[mt.SamplingMessage | dict[str, Any]] | str,
        *,
        max_tokens: int = 1000,
        **options: Any,
    ) -> mt.CreateMessageResult:
        """``sampling/createMessage``: ask the client's LLM.  A string is one user text message;
        ``options`` are further params by their wire names (``systemPrompt``, ``modelPreferences`` ...)."""
        self._require("sampling", "sampling")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": {"type": "text", "text": messages}}]
        wire = [_dump(m) for m in messages]
        result = await self.request(
            "sampling/createMessage", {"messages": wire, "maxTokens": max_tokens, **options}
        )
        return mt.CreateMessageResult.model_validate(result)

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> mt.ElicitResult:
        """``elicitation/create`` in form mode: ask the user for values matching ``requested_schema``."""
        self._require("elicitation", "elicitation")
        params = {"mode": "form", "message": message, "requestedSchema": requested_schema}
        revision = versions.revision(self.protocol_version)
        if revision is not None and not revision.elicitation_modes:
            del params["mode"]
        return mt.ElicitResult.model_validate(await self.request("elicitation/create", params))

    async def elicit_url(self, message: str, url: str, elicitation_id: str) -> mt.ElicitResult:
        """``elicitation/create`` in URL mode (2025-11-25): send the user to ``url``."""
        self._require("elicitation", "elicitation")
        params = {"mode": "url", "message": message, "url": url, "elicitationId": elicitation_id}
        return mt.ElicitResult.model_validate(await self.request("elicitation/create", params))

    async def list_roots(self) -> mt.ListRootsResult:
        """``roots/list``: the client's roots."""
        self._require("roots", "roots")
        return mt.ListRootsResult.model_validate(await self.request("roots/list"))

    def close_sse_stream(self) -> None:
        """Close this request's SSE connection now, without ending its stream: the client reconnects
        with ``Last-Event-ID`` (after the ``retry`` delay) and gets the rest (SSE polling, 2025-11-25)."""
        self.peer.close_sse_stream(self.request_id)


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    return value
