"""The modern (2026-07-28) era: every POST is a self-contained request owned by its ASGI request task.

:class:`ModernEndpoint` answers one request: it runs the handler with a :class:`RequestPeer` (what the
client declared in ``_meta``, where notifications go, the input responses it brought), turns
``InputRequired`` into an input-required result with a sealed ``requestState``, and hands the answer to
a :class:`~.responder.Responder` (one JSON body or an SSE stream).  A client disconnect cancels the
request (see :mod:`.responder`); nothing of a request outlives it.  ``subscriptions/listen`` streams
are the one long-lived kind (see :mod:`.subscriptions`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import mcp_types as mt
import mcp_types.methods as mtm
import trio

from .._app.context import LOG_LEVELS, NO_SUBSCRIPTIONS, Context
from .._app.inputs import InputRequired
from .._app.principal import PrincipalKeys
from .._app.tasks import MemoryTaskStore, TaskManager
from .._observe.telemetry import HTTP, Carrier
from .._protocol import jsonrpc, versions
from .._protocol.admission import shutdown_answer, shutting_down
from .._protocol.cluster import REQUEST_STATE_SECRET_ENV, parse_secret_ring
from .._protocol.modern import RequestState
from .._runtime.containment import contained
from .._runtime.contract import DisconnectHook
from ..errors import RPCError
from .config import ServerConfig
from .core import ServerCore
from .inflight import InFlight
from .ratelimit import RateLimits
from .responder import KeepAlive, Responder, disconnected, watch_disconnect
from .streams import GuardedSend
from .subscriptions import Listener, Subscriptions
from .wire import Receive, Send

__all__ = ["ModernEndpoint"]

logger = logging.getLogger(__name__)

HTTP_STATUS = {mt.METHOD_NOT_FOUND: 404, -32021: 400}
"""JSON-RPC errors of a modern request that the HTTP status reflects (others are answered with 200)."""


class RequestPeer:
    """The peer of one modern request: what the client declared in ``_meta``, where the request's
    notifications go, and the input responses it brought (for ``Context.ask``)."""

    __slots__ = (
        "_responder",
        "carrier",
        "client_capabilities",
        "client_info",
        "known",
        "log_level",
        "missing",
        "principal",
        "principals",
        "protocol_version",
        "subscriptions",
        "tasks",
        "used",
    )

    session_id: str | None = None

    def __init__(
        self,
        revision: versions.Revision,
        meta: Mapping[str, Any],
        responder: Responder,
        principal: object = None,
        tasks: TaskManager | None = None,
        carrier: Carrier = HTTP,
        principals: PrincipalKeys | None = None,
    ) -> None:
        self.principal = principal
        self.principals = principals
        self.tasks = tasks
        self.carrier = carrier
        self.protocol_version = revision.name
        level = meta.get(mt.LOG_LEVEL_META_KEY)
        self.log_level: mt.LoggingLevel | None = level if level in LOG_LEVELS else None
        info = meta.get(mt.CLIENT_INFO_META_KEY)
        caps = meta.get(mt.CLIENT_CAPABILITIES_META_KEY)
        self.client_info: dict[str, Any] = info if isinstance(info, dict) else {}
        self.client_capabilities: dict[str, Any] = caps if isinstance(caps, dict) else {}
        self.subscriptions: set[str] | frozenset[str] = NO_SUBSCRIPTIONS  # (2026: subscriptions/listen)
        self.known: dict[str, Any] = {}
        self.used: dict[str, Any] = {}
        self.missing: dict[str, dict[str, Any]] = {}
        """Input requests the handler made that the client has not answered yet (from any of its
        tasks): they all go into the one input-required result."""
        self._responder = responder

    @property
    def owner(self) -> str | None:
        """The principal's owner key (``Context.client_session_key``), made when asked (a keyed hash)."""
        return None if self.principals is None else self.principals.key(self.principal)

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


class ModernEndpoint:
    """Serves modern requests for one app."""

    def __init__(self, server: ServerCore, config: ServerConfig) -> None:
        self.server = server
        self.config = config
        ring = secret_ring(config)
        self.state = request_state(ring)
        self.principals = PrincipalKeys(ring)
        """Owner keys of principals, for tasks and sessions alike: under the cluster's ring when there
        is one (workers sharing a task store then agree on them), else a random key of this app."""
        self.inflight = 0
        self.stopping = False
        """The app stops: a new request is refused (503, -32000; see :meth:`aclose`)."""
        self._running: InFlight[Responder] = InFlight()
        """The requests being handled, by answer (``subscriptions/listen`` streams aside)."""
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
        store = config.rate_limit_store_factory
        self.limits = RateLimits(config.rate_limits, self.principals, store() if store is not None else None)
        """The rate limits (``config.rate_limits``): every HTTP request, WebSocket and stdio message of
        the app is counted here (its store's connection runs in :meth:`MCPApp.run`)."""
        self.subscriptions = Subscriptions(server, config, self.tasks, self.principals)
        """The open ``subscriptions/listen`` streams."""
        self.keepalive = KeepAlive(config.keepalive_interval)
        """Comments on answers whose handler is silent (its task runs in :meth:`MCPApp.run`)."""
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
        if self.stopping:
            raise shutting_down(request.id)
        responder = Responder(send, json_only=self.config.json_response)
        listen = request.method == "subscriptions/listen"
        listener = self.subscriptions.listener(request, principal) if listen else None
        self.inflight += 1
        running = self._running  # (not a listen stream: it ends with the subscriptions, answered by them)
        try:
            if on_disconnect is None:
                async with trio.open_nursery() as nursery:
                    if listener is None:
                        running[responder] = nursery.cancel_scope
                    nursery.start_soon(watch_disconnect, receive, nursery.cancel_scope, responder)
                    await self._respond(request, revision, responder, principal, listener)
                    nursery.cancel_scope.cancel()
            else:
                # the request's own scope (already entered by the caller), or else one of ours
                with (
                    contextlib.nullcontext(request_scope)
                    if request_scope is not None
                    else trio.CancelScope() as scope
                ):
                    if listener is None:
                        running[responder] = scope
                    on_disconnect.set(functools.partial(disconnected, scope, responder))
                    try:
                        await self._respond(request, revision, responder, principal, listener, on_disconnect)
                    finally:
                        on_disconnect.set(None)
        finally:
            self.inflight -= 1
            if listener is None:
                if running.halted(responder):  # cancelled by the shutdown rule: answered so (shielded)
                    await responder.last_words(shutdown_answer(request.id))
                running.ended(responder)

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
            with self.listening(request, revision, principal, HTTP):
                await self.subscriptions.listen_sse(listener, responder.send)
            return
        if self.config.json_response:  # one JSON body: no comments (proxies must wait for the answer)
            message, status = await self.answer(request, revision, responder, principal)
            responder.answered = True
        else:
            self.keepalive.watch(responder)
            try:
                message, status = await self.answer(request, revision, responder, principal)
                responder.answered = True
            finally:
                self.keepalive.unwatch(responder)
                if responder.beat is not None:
                    await responder.settle()
        if on_disconnect is not None:
            on_disconnect.set(None)
        await responder.finish(message, status, shield=on_disconnect is None)

    @contextlib.contextmanager
    def listening(
        self, request: mt.JSONRPCRequest, revision: versions.Revision, principal: object, carrier: Carrier
    ) -> Iterator[None]:
        """A ``subscriptions/listen`` stream, recorded as one operation from its request to its end (a
        client closing it, or the server's shutdown, ends it: that is no failure)."""
        operation = self.server.telemetry.operation(
            request.method, request.params, request.id, incoming=True, carrier=carrier,
            protocol_version=revision.name, principal=principal,
        )  # fmt: skip
        if operation is None:
            yield
            return
        try:
            yield
        except trio.Cancelled:
            operation.finish({"result": {}})
            raise
        except BaseException as exc:
            operation.fail(exc)
            raise
        operation.finish({"result": {}})

    async def answer(
        self,
        request: mt.JSONRPCRequest,
        revision: versions.Revision,
        responder: Responder,
        principal: object = None,
        carrier: Carrier = HTTP,
    ) -> tuple[dict[str, Any], int]:
        """The answer to one request and its HTTP status; recorded (a SERVER span, the operation
        histogram, the request log) when the server's telemetry records anything."""
        operation = self.server.telemetry.operation(
            request.method,
            request.params,
            request.id,
            incoming=True,
            carrier=carrier,
            protocol_version=revision.name,
            principal=principal,
        )
        if operation is None:
            return await self._answer(request, revision, responder, principal, carrier)
        try:
            answer = await self._answer(request, revision, responder, principal, carrier)
        except BaseException as exc:
            operation.fail(exc)
            raise
        operation.finish(answer[0])
        return answer

    async def _answer(
        self,
        request: mt.JSONRPCRequest,
        revision: versions.Revision,
        responder: Responder,
        principal: object,
        carrier: Carrier,
    ) -> tuple[dict[str, Any], int]:
        params = request.params or {}
        meta = params.get("_meta")
        peer = RequestPeer(
            revision,
            meta if isinstance(meta, dict) else {},
            responder,
            principal,
            self.tasks,
            carrier,
            self.principals,
        )
        ctx = Context(
            request.id, request.method, peer, meta if isinstance(meta, dict) else {}, self.server.telemetry
        )
        with contained(f"handler of {request.method}"):
            try:
                if self.server.own_request_state:
                    peer.known = self._answers_brought(request.method, params)
                result = await self.server.handle_request(ctx, request.method, params)
            except RPCError as exc:
                error = jsonrpc.error_envelope(request.id, exc.code, exc.message, exc.data)
                return error, HTTP_STATUS.get(exc.code, 200)
            except BaseException as exc:
                if _only(exc, InputRequired) and peer.missing:  # from any number of the handler's tasks
                    return self._input_required(request, peer), 200
                raise  # contained: logged, answered -32603 below (cancellation goes on)
            return jsonrpc.response(request.id, result), 200
        return jsonrpc.error_envelope(request.id, mt.INTERNAL_ERROR, "Internal error"), 500

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

    def stop(self) -> None:
        """Stop admitting: a new request gets 503 with ``Retry-After`` and -32000."""
        self.stopping = True

    async def aclose(self, grace: float | None = None) -> None:
        """Shutdown, once :meth:`stop` was called: every open listen stream gets its completion result
        and ends (within the grace); the requests being handled get ``grace`` seconds
        (``shutdown_grace``) to finish, then those still running are cancelled and each is answered
        -32000 ``Server shutting down`` (on its SSE stream if it has one, else as its JSON body), within
        :data:`~.config.LAST_WORDS` (see :class:`~.inflight.InFlight`); a send still stuck then is cut."""
        self.stop()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.subscriptions.aclose)
            grace = self.config.shutdown_grace if grace is None else grace
            await self._running.settle(grace, spare=lambda responder: responder.answered)
            for responder in self._running:  # a client that stopped reading: cut (where that is safe)
                if isinstance(responder.send, GuardedSend):
                    responder.send.abort()

    def statistics(self) -> dict[str, Any]:
        listeners = len(self.subscriptions.open)
        return {
            "modern_inflight": self.inflight,
            "listeners": listeners,
            "keepalive_watched": len(self.keepalive),
            "keepalive_comments": self.keepalive.comments,
            **self.tasks.statistics(),
            **self.limits.statistics(),
        }
