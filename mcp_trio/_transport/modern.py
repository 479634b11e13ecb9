"""The modern (2026-07-28) era: every POST is a self-contained request owned by its ASGI request task.

The handler runs in the request task, under the request's cancel scope: on mcp_trio's own servers the
server cancels that scope when the client disconnects (the ``mcp_trio.disconnect_callback`` scope
extension); elsewhere a sibling task watches ``receive()`` for ``http.disconnect``.  Either way a
disconnect cancels the handler (JSON and SSE answers alike) and nothing is sent afterwards.  Nothing
of a request outlives it.  ``subscriptions/listen`` streams are the one long-lived kind; each is
registered with the server while open and ends gracefully at shutdown.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as mt
import mcp_types.methods as mtm
import trio

from .._app.context import LOG_LEVELS, Context
from .._app.inputs import InputRequired
from .._app.principal import PrincipalKeys
from .._app.server import MCPServer
from .._app.tasks import MemoryTaskStore, TaskManager, declares_tasks, missing_extension
from .._protocol import jsonrpc, sse, versions
from .._protocol.cluster import REQUEST_STATE_SECRET_ENV, parse_secret_ring
from .._protocol.modern import RequestState
from .._runtime.containment import split_fatal
from .._runtime.contract import DisconnectHook
from .._runtime.peerlog import RateLimitedLog
from ..errors import RemoteProtocolError, RPCError
from .config import ServerConfig
from .streams import GuardedSend, content_length
from .wire import JSON_HEADERS, SSE_HEADERS, Receive, Send

__all__ = ["ModernEndpoint"]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)
"""What peers do wrong (or too slowly): one line each, at most ten a minute."""

HTTP_STATUS = {mt.METHOD_NOT_FOUND: 404, -32021: 400}
"""JSON-RPC errors of a modern request that the HTTP status reflects (others are answered with 200)."""
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
_FILTERS = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}


class Responder:
    """One HTTP answer whose kind is decided late: the first notification makes it an SSE stream; a
    final message with no notification before it is sent as one JSON body (with a fitting status)."""

    __slots__ = ("_json_only", "gone", "send", "streaming")

    def __init__(self, send: Send, *, json_only: bool) -> None:
        self.send = send
        self._json_only = json_only
        self.streaming = False
        self.gone = False

    async def notify(self, message: dict[str, Any]) -> None:
        if self.gone or self._json_only:
            return  # nobody listens, or a JSON answer cannot carry notifications
        if not self.streaming:
            self.streaming = True
            await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await self._event(message)

    async def _event(self, message: dict[str, Any]) -> None:
        data = sse.encode_event(jsonrpc.encode(message).decode())
        await self.send({"type": "http.response.body", "body": data, "more_body": True})

    async def finish(self, message: dict[str, Any], status: int = 200, *, shield: bool = True) -> None:
        """Send the final message (``shield``: see :meth:`GuardedSend.whole`)."""
        if self.gone:
            return
        if self.streaming:
            await self._event(message)
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = jsonrpc.encode(message)
        start = {
            "type": "http.response.start",
            "status": status,
            "headers": [*JSON_HEADERS, content_length(body)],
        }
        end = {"type": "http.response.body", "body": body, "more_body": False}
        if isinstance(self.send, GuardedSend):  # one shielded scope for the two sends (or none)
            await self.send.whole(start, end, shield=shield)
        else:
            await self.send(start)
            await self.send(end)


class RequestPeer:
    """The peer of one modern request: what the client declared in ``_meta``, where the request's
    notifications go, and the input responses it brought (for ``Context.ask``)."""

    session_id: str | None = None
    principal: object = None
    tasks: TaskManager | None = None

    def __init__(self, revision: versions.Revision, meta: Mapping[str, Any], responder: Responder) -> None:
        self.protocol_version = revision.name
        level = meta.get(mt.LOG_LEVEL_META_KEY)
        self.log_level: mt.LoggingLevel | None = level if level in LOG_LEVELS else None
        info = meta.get(mt.CLIENT_INFO_META_KEY)
        caps = meta.get(mt.CLIENT_CAPABILITIES_META_KEY)
        self.client_info: dict[str, Any] = info if isinstance(info, dict) else {}
        self.client_capabilities: dict[str, Any] = caps if isinstance(caps, dict) else {}
        self.subscriptions: set[str] = set()
        self.known: dict[str, Any] = {}
        self.used: dict[str, Any] = {}
        self.missing: dict[str, dict[str, Any]] = {}
        """Input requests the handler made that the client has not answered yet (from any of its
        tasks): they all go into the one input-required result."""
        self._responder = responder

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None:
        await self._responder.notify(message)

    async def request(
        self, method: str, params: dict[str, Any] | None, related: mt.RequestId | None = None
    ) -> dict[str, Any]:
        raise RPCError(
            mt.INTERNAL_ERROR,
            f"{method}: a 2026-07-28 server cannot send requests to the client; use Context.ask",
        )

    async def ask(
        self, requests: Mapping[str, dict[str, Any]], related: mt.RequestId | None
    ) -> dict[str, Any]:
        missing = {key: wire for key, wire in requests.items() if key not in self.known}
        if missing:
            self.missing.update(missing)
            # Let the handler's other tasks that are ready run to their own requests first, so that
            # one result gathers them all; then stop the handler.
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise InputRequired(self.missing)
        answers = {key: self.known[key] for key in requests}
        self.used.update(answers)
        return answers

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:
        """No resumable streams in the modern era: nothing to do."""


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
        self.subscriptions = set(wanted.resource_subscriptions or ())
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


def secret_ring(config: ServerConfig) -> list[bytes] | None:
    """The cluster's key ring: the config's key or ring, else the ring in the environment, else None
    (then each use makes a random key of this process alone).  A malformed ring in the environment is
    a ValueError."""
    secret = config.request_state_secret
    if secret is not None:
        return [secret] if isinstance(secret, bytes) else list(secret)
    ring = os.environ.get(REQUEST_STATE_SECRET_ENV)
    return list(parse_secret_ring(ring)) if ring is not None else None


def request_state(ring: list[bytes] | None) -> RequestState:
    """The ``requestState`` keys: ``ring`` (see :func:`secret_ring`), else a random key of this process
    alone."""
    return RequestState.ring(ring) if ring else RequestState(secrets.token_bytes(32))


def _only(exc: BaseException | None, kind: type[BaseException]) -> bool:
    """Whether ``exc`` is a ``kind``, or a group of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(kind)[1] is None
    return isinstance(exc, kind)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


class ModernEndpoint:
    """Serves modern requests for one app."""

    def __init__(self, server: MCPServer, config: ServerConfig) -> None:
        self.server = server
        self.config = config
        ring = secret_ring(config)
        self.state = request_state(ring)
        self.principals = PrincipalKeys(ring)
        """Owner keys of principals, for tasks and sessions alike: under the cluster's ring when there
        is one (workers sharing a task store then agree on them), else a random key of this app."""
        self.listeners: set[Listener] = set()
        self.inflight = 0
        factory = config.task_store_factory
        self.tasks = TaskManager(
            factory() if factory is not None else MemoryTaskStore(),
            ttl=config.task_ttl,
            poll_interval=config.task_poll_interval,
            worker_id=config.worker_id,
            shutdown_grace=config.shutdown_grace,
            principals=self.principals,
        )
        """The app's running tasks (tasks extension); its nursery runs in :meth:`MCPApp.run`."""
        shared = getattr(self.tasks.store, "run", None) is not None  # a store of several workers
        if shared and ring is None and (config.authenticate is not None or config.oauth is not None):
            logger.warning(
                "a shared task store with authentication but no key ring (request_state_secret or %s): "
                "task owners are recognised only by the worker that started each task",
                REQUEST_STATE_SECRET_ENV,
            )
        self._listeners_done = trio.Event()
        self._closing = False
        self.clock: Callable[[], float] = time.time
        """Wall-clock seconds for ``requestState`` expiry (replicas sharing a secret share this clock)."""

    async def handle(
        self,
        request: mt.JSONRPCRequest,
        revision: versions.Revision,
        receive: Receive,
        send: Send,
        principal: object = None,
        on_disconnect: DisconnectHook | None = None,
        request_scope: trio.CancelScope | None = None,
    ) -> None:
        """Answer one modern request; a client disconnect cancels it and nothing is sent after.

        ``on_disconnect``: the server's :class:`DisconnectHook` (mcp_trio's own servers offer one):
        the handler then runs in this task, under a cancel scope the hook cancels (``request_scope``,
        the request's own, already entered by the caller, or else one of its own); without one a
        sibling task watches ``receive()`` for the disconnect."""
        responder = Responder(send, json_only=self.config.json_response)
        listener = self.listener(request, principal) if request.method == "subscriptions/listen" else None
        self.inflight += 1
        try:
            if on_disconnect is None:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_watch_disconnect, receive, nursery.cancel_scope, responder)
                    await self._respond(request, revision, responder, principal, listener)
                    nursery.cancel_scope.cancel()
            else:
                # the request's own scope (already entered by the caller), or else one of ours
                with (
                    contextlib.nullcontext(request_scope)
                    if request_scope is not None
                    else trio.CancelScope() as scope
                ):
                    on_disconnect.set(functools.partial(_disconnected, scope, responder))
                    try:
                        await self._respond(request, revision, responder, principal, listener, on_disconnect)
                    finally:
                        on_disconnect.set(None)
        finally:
            self.inflight -= 1

    async def _respond(
        self,
        request: mt.JSONRPCRequest,
        revision: versions.Revision,
        responder: Responder,
        principal: object,
        listener: Listener | None,
        on_disconnect: DisconnectHook | None = None,
    ) -> None:
        """Listen, or answer.  With ``on_disconnect`` (set by the caller to cancel this request), the
        callback is released once the answer is computed: nothing of the request is left to cancel,
        and the answer is sent without a shielded scope (the server offering the callback is one of
        mcp_trio's, where a cut send only closes its connection; a client that stops reading meets the
        server's write timeout, as under a shield)."""
        if listener is not None:
            await self._listen(listener, responder.send)
            return
        message, status = await self.answer(request, revision, responder, principal)
        if on_disconnect is not None:
            on_disconnect.set(None)
        await responder.finish(message, status, shield=on_disconnect is None)

    async def answer(
        self,
        request: mt.JSONRPCRequest,
        revision: versions.Revision,
        responder: Responder,
        principal: object = None,
    ) -> tuple[dict[str, Any], int]:
        params = request.params or {}
        meta = params.get("_meta")
        peer = RequestPeer(revision, meta if isinstance(meta, dict) else {}, responder)
        peer.principal = principal
        peer.tasks = self.tasks
        ctx = Context(request.id, request.method, peer, meta if isinstance(meta, dict) else {})
        try:
            peer.known = self._answers_brought(request.method, params)
            result = await self.server.handle_request(ctx, request.method, params)
        except RPCError as exc:
            error = jsonrpc.error_envelope(request.id, exc.code, exc.message, exc.data)
            return error, HTTP_STATUS.get(exc.code, 200)
        except BaseException as exc:
            fatal, rest = split_fatal(exc)
            if fatal is not None:
                raise
            if _only(rest, InputRequired) and peer.missing:  # from any number of the handler's tasks
                return self._input_required(request, peer), 200
            logger.error("handler of %s failed", request.method, exc_info=rest)
            return jsonrpc.error_envelope(request.id, mt.INTERNAL_ERROR, "Internal error"), 500
        return jsonrpc.response(request.id, result), 200

    def _binding(self, method: str, params: Mapping[str, Any]) -> str:
        return f"{method}\n{params.get('name') or params.get('uri') or ''}"

    def _answers_brought(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Input responses of a retry: those sealed in ``requestState`` plus the new ``inputResponses``."""
        known: dict[str, Any] = {}
        state = params.get("requestState")
        if state is not None:
            if not isinstance(state, str):
                raise RPCError(mt.INVALID_PARAMS, "requestState must be a string")
            try:
                known = self.state.open(state, self._binding(method, params), self.clock())
            except ValueError as exc:
                raise RPCError(mt.INVALID_PARAMS, f"Invalid requestState: {exc}") from exc
        responses = params.get("inputResponses")
        if isinstance(responses, dict):
            known.update(responses)
        return known

    def _input_required(self, request: mt.JSONRPCRequest, peer: RequestPeer) -> dict[str, Any]:
        if request.method not in mtm.INPUT_REQUIRED_METHODS:
            return jsonrpc.error_envelope(
                request.id, mt.INTERNAL_ERROR, f"{request.method} cannot ask the client for input"
            )
        params = request.params or {}
        expires = self.clock() + self.config.request_state_ttl
        result = {
            "resultType": "input_required",
            "inputRequests": peer.missing,
            "requestState": self.state.seal(self._binding(request.method, params), peer.used, expires),
            "_meta": self.server.result_meta(),
        }
        return jsonrpc.response(request.id, result)

    # -- subscriptions/listen -----------------------------------------------------------------

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
        self.listeners.add(listener)
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
            self.listeners.discard(listener)
            if not self.listeners:
                self._listeners_done.set()

    async def _listen(self, listener: Listener, send: Send) -> None:
        """A listen stream as an SSE response."""

        async def emit(message: dict[str, Any]) -> None:
            await _body(send, sse.encode_event(jsonrpc.encode(message).decode()))

        async def keepalive() -> None:
            await _body(send, sse.encode_comment("keep-alive"))

        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await self.listen(listener, emit, keepalive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def aclose(self) -> None:
        """Shutdown: every open listen stream gets its completion result and ends (within the grace)."""
        self._closing = True
        if not self.listeners:
            return
        self._listeners_done = trio.Event()
        for listener in list(self.listeners):
            listener.close()
        with trio.move_on_after(self.config.shutdown_grace):
            await self._listeners_done.wait()

    def statistics(self) -> dict[str, int]:
        return {"modern_inflight": self.inflight, "listeners": len(self.listeners), **self.tasks.statistics()}


async def _body(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _watch_disconnect(receive: Receive, scope: trio.CancelScope, responder: Responder) -> None:
    """The sibling of a modern request on a server without a :class:`DisconnectHook`: a client
    disconnect cancels the request's scope (and cuts a send stuck on it)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            _disconnected(scope, responder)
            return


def _disconnected(scope: trio.CancelScope, responder: Responder) -> None:
    """The client of a modern request went: nothing more is sent, a send under way is cut (where the
    server allows), the request is cancelled."""
    responder.gone = True
    if isinstance(responder.send, GuardedSend):
        responder.send.abort()
    scope.cancel()
