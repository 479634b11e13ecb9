"""``subscriptions/listen`` (2026-07-28): the one long-lived kind of request.

A :class:`Listener` is an open listen stream, attached to the server as a peer so that the
notifications it asked for reach it; :class:`Subscriptions` validates a listen request, runs its stream
over any transport (an SSE response, a WebSocket or stdio connection), and ends every open stream
gracefully (with its completion result) when the app shuts down.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as mt
import trio

from .._app.principal import PrincipalKeys
from .._app.tasks import TaskManager, declares_tasks, missing_extension
from .._protocol import jsonrpc, sse, versions
from .._runtime.peerlog import RateLimitedLog
from ..errors import RemoteProtocolError, RPCError
from .config import ServerConfig
from .core import ServerCore
from .wire import SSE_HEADERS, Send

__all__ = ["SUBSCRIPTION_ID_KEY", "Listener", "Subscriptions"]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)
"""What peers do wrong (or too slowly): one line each, at most ten a minute."""

SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
_FILTERS = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


class Listener:
    """An open ``subscriptions/listen`` stream, registered with the server as a peer."""

    session_id: str | None = None
    log_level: mt.LoggingLevel | None = None
    principal: object = None

    def __init__(
        self,
        request_id: mt.RequestId,
        wanted: mt.SubscriptionFilter,
        buffer: int,
        task_ids: frozenset[str] = frozenset(),
    ) -> None:
        self.request_id = request_id
        self.task_ids = task_ids
        """Tasks whose ``notifications/tasks`` this stream gets (its owner's, tasks extension)."""
        self.protocol_version = versions.LATEST_MODERN.name
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.wanted = wanted
        self.subscriptions: set[str] | frozenset[str] = set(wanted.resource_subscriptions or ())
        self._send, self.receive = trio.open_memory_channel[dict[str, Any] | None](buffer)

    def _wants(self, message: Mapping[str, Any]) -> bool:
        method = message.get("method", "")
        if method == "notifications/resources/updated":
            return (message.get("params") or {}).get("uri") in self.subscriptions
        if method == "notifications/tasks":
            return (message.get("params") or {}).get("taskId") in self.task_ids
        flag = _FILTERS.get(method)
        return flag is not None and bool(getattr(self.wanted, _snake(flag)))

    def tag(self, message: dict[str, Any]) -> dict[str, Any]:
        params = dict(message.get("params") or {})
        params["_meta"] = {**params.get("_meta", {}), SUBSCRIPTION_ID_KEY: self.request_id}
        return {**message, "params": params}

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None:
        self.notify_nowait(message)

    def notify_nowait(self, message: dict[str, Any]) -> None:
        if self._wants(message):
            self.push(self.tag(message))

    def push(self, item: dict[str, Any] | None) -> None:
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:  # a reader this far behind is cut; it re-subscribes
            peer_log.log(logging.WARNING, "subscription %r fell behind; closing it", self.request_id)
            self._send.close()
        except trio.ClosedResourceError:
            pass

    def close(self) -> None:
        """End gracefully: the stream gets its completion result, then ends."""
        self.push(None)

    async def request(
        self, method: str, params: dict[str, Any] | None, related: mt.RequestId | None = None
    ) -> dict[str, Any]:  # pragma: no cover - never a handler's peer
        raise RPCError(mt.INTERNAL_ERROR, "a subscription cannot send requests")

    async def ask(
        self, requests: Mapping[str, dict[str, Any]], related: mt.RequestId | None
    ) -> dict[str, Any]:  # pragma: no cover - never a handler's peer
        raise RPCError(mt.INTERNAL_ERROR, "a subscription cannot ask for input")

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:  # pragma: no cover
        pass


class Subscriptions:
    """The open ``subscriptions/listen`` streams of one app (or of one stdio connection)."""

    def __init__(
        self, server: ServerCore, config: ServerConfig, tasks: TaskManager, principals: PrincipalKeys
    ) -> None:
        self.server = server
        self.config = config
        self.tasks = tasks
        self.principals = principals
        self.open: set[Listener] = set()
        self._all_ended = trio.Event()
        self._closing = False

    def listener(self, request: mt.JSONRPCRequest, principal: object = None) -> Listener:
        """Validate a ``subscriptions/listen`` request (before anything is started for it)."""
        task_ids = self._listened_tasks(request)
        try:
            params = mt.SubscriptionsListenRequestParams.model_validate(request.params or {})
        except ValueError as exc:
            raise RemoteProtocolError(
                "Invalid params: subscriptions/listen needs a notifications filter",
                code=mt.INVALID_PARAMS,
                request_id=request.id,
            ) from exc
        if self._closing:
            raise RemoteProtocolError(
                "Service Unavailable: shutting down",
                http_status=503,
                code=mt.INTERNAL_ERROR,
                request_id=request.id,
            )
        try:
            accepted = self.server.subscription_filter(params.notifications)
        except RPCError as exc:
            raise RemoteProtocolError(
                exc.message, code=exc.code, request_id=request.id, data=exc.data
            ) from exc
        listener = Listener(request.id, accepted, self.config.stream_buffer, task_ids)
        listener.principal = principal
        return listener

    def _listened_tasks(self, request: mt.JSONRPCRequest) -> frozenset[str]:
        """The ``taskIds`` of a listen filter (-32021 without the tasks extension declared); which of
        them it gets is decided when it starts (:meth:`_owned_tasks`)."""
        params = request.params or {}
        wanted = (params.get("notifications") or {}) if isinstance(params, dict) else {}
        task_ids = wanted.get("taskIds") if isinstance(wanted, dict) else None
        if task_ids is None:
            return frozenset()
        meta = params.get("_meta")
        caps = meta.get(mt.CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
        if not declares_tasks(caps if isinstance(caps, dict) else {}):
            error = missing_extension()
            raise RemoteProtocolError(error.message, code=error.code, request_id=request.id, data=error.data)
        if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
            message = "Invalid params: taskIds must be a list of strings"
            raise RemoteProtocolError(message, code=mt.INVALID_PARAMS, request_id=request.id)
        if len(task_ids) > self.server.max_subscriptions:
            error = self.server._too_many_subscriptions()
            raise RemoteProtocolError(error.message, code=error.code, request_id=request.id)
        return frozenset(task_ids)

    async def _owned_tasks(self, listener: Listener) -> frozenset[str]:
        """The listener's task ids that name tasks of its requester: the others (unknown, expired or
        someone else's alike) are left out of the acknowledgement and get no notifications."""
        principal = listener.principal
        mine = set()
        for task_id in listener.task_ids:
            try:
                record = await self.tasks.lookup(task_id)
            except RPCError:
                record = None
            if record is not None and self.principals.owns(record.owner, principal):
                mine.add(task_id)
        return frozenset(mine)

    async def listen(
        self,
        listener: Listener,
        emit: Callable[[dict[str, Any]], Awaitable[None]],
        keepalive: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run a ``subscriptions/listen`` stream over any transport: ``emit`` its acknowledgement, then
        each notification it asked for, until the client goes (cancel it), the server shuts down (then
        the completion result) or it falls behind (it just ends).  ``keepalive`` is awaited whenever it
        was idle for ``keepalive_interval``."""
        self.open.add(listener)
        self.server.attach(listener)
        try:
            if listener.task_ids:
                listener.task_ids = await self._owned_tasks(listener)
            accepted = listener.wanted.model_dump(by_alias=True, exclude_none=True, mode="json")
            if listener.task_ids:
                accepted["taskIds"] = sorted(listener.task_ids)
            ack = {"notifications": accepted}
            await emit(listener.tag(jsonrpc.notification("notifications/subscriptions/acknowledged", ack)))
            idle_after = self.config.keepalive_interval if keepalive is not None else math.inf
            while True:
                with trio.move_on_after(idle_after) as idle:
                    try:
                        item = await listener.receive.receive()
                    except (trio.EndOfChannel, trio.ClosedResourceError):
                        return  # cut for falling behind: end without the completion result
                    if item is None:
                        done = {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: listener.request_id}}
                        await emit(jsonrpc.response(listener.request_id, done))
                        return
                    await emit(item)
                if idle.cancelled_caught and keepalive is not None:
                    await keepalive()
        finally:
            self.server.detach(listener)
            self.open.discard(listener)
            if not self.open:
                self._all_ended.set()

    async def listen_sse(self, listener: Listener, send: Send) -> None:
        """A listen stream as an SSE response."""

        async def emit(message: dict[str, Any]) -> None:
            data = sse.encode_event(jsonrpc.encode(message).decode())
            await send({"type": "http.response.body", "body": data, "more_body": True})

        async def keepalive() -> None:
            data = sse.encode_comment("keep-alive")
            await send({"type": "http.response.body", "body": data, "more_body": True})

        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await self.listen(listener, emit, keepalive)
        # A stream ended by a shutdown (a worker that drains) says when to listen again (elsewhere).
        last = sse.encode_retry(self.config.sse_retry_ms) if self._closing else b""
        await send({"type": "http.response.body", "body": last, "more_body": False})

    async def aclose(self) -> None:
        """Shutdown: every open listen stream gets its completion result and ends (within the grace)."""
        self._closing = True
        if not self.open:
            return
        self._all_ended = trio.Event()
        for listener in list(self.open):
            listener.close()
        with trio.move_on_after(self.config.shutdown_grace):
            await self._all_ended.wait()
