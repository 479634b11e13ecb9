"""The ASGI application: MCP over Streamable HTTP (2025-era sessions and 2026-era requests) and WebSocket.

It routes and admits: each request is checked by the sans-IO rules of ``_protocol.admission`` and
``_protocol.http`` before anything is allocated, then handed to the 2025-era endpoint
(:mod:`.legacy`), the 2026-era one (:mod:`.modern`) or a WebSocket connection (:mod:`.websocket`).
It also owns the sessions' nursery while it runs (the ASGI lifespan, or :meth:`MCPApp.running`).
"""

from __future__ import annotations

import json
import logging
from contextlib import AbstractAsyncContextManager
from math import inf
from typing import Any

import mcp_types as mt
import trio

from .._protocol import admission, http, jsonrpc, versions
from .._protocol import modern as modern_rules
from .._runtime.contract import CANCELLABLE_SEND, DISCONNECT_CALLBACK, DisconnectHook
from ..auth.server._resource import BearerGuard
from ..auth.server._token import AccessToken
from ..errors import RemoteProtocolError
from . import clientsession, lifetime
from .bodies import BodyDeadlines, ClientGone, read_body
from .config import HTTPRequestInfo, ServerConfig
from .core import ServerCore
from .forwarding import Forwarding, WorkerLink
from .legacy import LegacyEndpoint
from .manager import SessionManager
from .modern import ModernEndpoint
from .ownership import Ownership, close_sessions, drain
from .public import PublicDocuments
from .quotas import QuotaExceeded, client_address
from .streams import TRANSPORT_ERRORS, GuardedSend, reject, respond
from .websocket import SUBPROTOCOL, WebSocketConnection, http_response_send
from .wire import Receive, Scope, Send

__all__ = ["MCPApp", "WorkerLink"]

logger = logging.getLogger(__name__)

STALLED_AFTER = 1.0
"""A send under way for longer than this (seconds) counts as stalled in :meth:`MCPApp.statistics`."""
STATS_MAX_AGE = 0.05
"""``stats_path`` answers statistics computed at most this long ago (seconds): however many requests
come, they are computed at most 20 times a second."""


class MCPApp:
    """An ASGI application serving one :class:`MCPServer` over Streamable HTTP (or a python-sdk server
    hosted by :func:`mcp_trio.sdk.hosted_app`).

    Sessions live in a nursery the app owns while it runs: an ASGI server running the lifespan protocol
    (hypercorn does) starts it, else ``await nursery.start(app.run)`` or ``async with app.running():``.
    """

    def __init__(self, server: ServerCore, config: ServerConfig | None = None) -> None:
        self.server = server
        self.config = config or ServerConfig()
        self._manager = SessionManager(server, self.config)
        self._bodies = BodyDeadlines(self.config.body_timeout)
        self._modern = ModernEndpoint(server, self.config)
        self._sends: set[GuardedSend] = set()
        """Sends under way (each HTTP request's, while one is being written)."""
        config = self.config
        self._admission = admission.Admission.of(
            path=config.path,
            allowed_hosts=config.allowed_hosts,
            allowed_origins=config.allowed_origins,
            cors_origins=config.cors_origins,
            dns_rebinding_protection=config.dns_rebinding_protection,
        )
        oauth = config.oauth
        self._oauth = BearerGuard(oauth, config.path) if oauth is not None else None
        """With ``config.oauth``: the bearer check of every request."""
        self._public = PublicDocuments(server, config, self._oauth, self._sends)
        """The documents any client may fetch before the endpoint's rules (OAuth metadata, server card)."""
        self._legacy = LegacyEndpoint(
            server, config, self._manager, self._modern.principals, self._oauth, self._not_running
        )
        self._websockets: set[WebSocketConnection] = set()
        """The WebSocket connections being served (each one 2025-era session, or 2026 requests)."""
        self._closing = False
        self._closed: trio.Event | None = None  # (made by aclose, set once it is over)
        self._draining = False
        """Readiness has turned (see :meth:`_drain`)."""
        self._told_not_running = False
        self.startup_failure: BaseException | None = None
        """Why the app's last ASGI ``lifespan.startup`` failed (None: it did not).  hypercorn reports
        itself listening even then (it goes on to bind before it notices), so ``serve`` asks."""
        self._stats_cache: tuple[float, dict[str, Any]] | None = None
        """When :meth:`recent_statistics` were computed, and what they were."""
        self._refused: dict[int, int] = {}
        """Requests refused before any handler (admission, framing, unknown sessions), by HTTP status."""

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the sessions' nursery until cancelled.  Cancelling ends every session at once; call
        :meth:`aclose` first for a graceful end.  A notification bus with tasks of its own (one with a
        ``run`` method, such as :class:`mcp_trio.redis.RedisNotificationBus`) runs here too, and ends
        with the app; so do a task store's and an event store's ``run`` (such as
        :class:`mcp_trio.redis.RedisEventStore`'s writer).

        The server's lifespan (``MCPServer(lifespan=...)``) is entered first, before ``task_status``
        reports the app started, and left last: after :meth:`aclose` (then the code after its
        ``yield`` gets ``config.shutdown_grace`` seconds uncancelled), or cancelled with the rest when
        the run is cancelled without it.  If entering it raises, or its tasks crash, the app stops and
        ``run`` raises that exception."""
        bus = self.server.notifications
        if self.config.worker_id is not None and callable(getattr(bus, "attach_worker", None)):
            # here, not in __init__: a bus given to the server later counts (the Redis bus: its link)
            link: WorkerLink = getattr(bus, "worker_link", bus)  # type: ignore[arg-type]
            forwarding = self._legacy.forwarding = Forwarding(link, self.config.worker_id, self._manager)
            if (leases := getattr(bus, "session_leases", None)) is not None:  # it keeps session records
                self._legacy.ownership = Ownership(
                    leases, forwarding, self._manager, self._modern.principals, self.config
                )
        bus_run = getattr(bus, "run", None)
        tasks = self._modern.tasks
        tasks.publish = bus.publish
        lifespan = self.server.open_lifespan(grace=self.config.shutdown_grace, graceful=lambda: self._closing)
        async with lifespan, trio.open_nursery() as nursery:
            if bus_run is not None:
                await nursery.start(bus_run)
            store_run = getattr(tasks.store, "run", None)
            if store_run is not None:  # a store with tasks of its own (a shared one's signals)
                await nursery.start(store_run, tasks)
            events_run = getattr(self._manager.event_store, "run", None)
            if events_run is not None:  # an event store with a task of its own (a shared one's writer)
                await nursery.start(events_run)
            await nursery.start(tasks.run)
            await nursery.start(self._modern.limits.run)
            await nursery.start(self._modern.keepalive.run)
            await nursery.start(self._bodies.run)
            await self._manager.run(task_status=task_status)
            nursery.cancel_scope.cancel()

    def running(self) -> AbstractAsyncContextManager[MCPApp]:
        """``async with app.running():`` runs the app (:meth:`run`) for the time of the body, then ends
        it gracefully (:meth:`aclose`); what keeps it from starting, or its lifespan's failure while the
        body runs (the body is then cancelled), is raised as it was raised."""
        return lifetime.running(self)

    async def aclose(self) -> None:
        """End gracefully, by the shutdown rule of both eras (docs/transport.md, "Shutdown"): drain, stop
        admitting (503, -32000), give the requests in flight ``config.shutdown_grace``, then answer those
        still running -32000 on their own streams; every stream ends cleanly, sessions kept in Redis
        are handed over.  A second call waits for the first."""
        if self._closed is not None:
            await self._closed.wait()
            return
        self._closed = trio.Event()
        try:
            self._closing = self._draining = True
            ownership = self._legacy.ownership
            await drain(self._manager, ownership, self.config)
            self._modern.stop()
            async with trio.open_nursery() as nursery:
                for connection in list(self._websockets):
                    connection.stop()
                    nursery.start_soon(connection.ended.wait)
                nursery.start_soon(close_sessions, self._manager, ownership)
                nursery.start_soon(self._modern.aclose)
                nursery.start_soon(self._modern.tasks.aclose)
        finally:
            self._closed.set()

    def statistics(self) -> dict[str, Any]:
        stats = self._manager.statistics()
        stats.update(self._modern.statistics())
        store = self._manager.event_store
        if store is not None and hasattr(store, "statistics"):
            stats["event_store"] = store.statistics()
        bus_statistics = getattr(self.server.notifications, "statistics", None)
        if callable(bus_statistics):
            stats["notification_bus"] = bus_statistics()
        now = trio.current_time()
        stats["websocket_connections"] = len(self._websockets)
        connections = [c.statistics() for c in self._websockets]
        stats["websocket_requests"] = sum(c["inflight"] for c in connections)
        stats["websocket_modern_requests"] = modern = sum(c["modern_inflight"] for c in connections)
        stats["websocket_legacy_requests"] = stats["websocket_requests"] - modern
        stats["writes_in_progress"] = len(self._sends)
        stats["writes_stalled"] = sum(now - guard.since > STALLED_AFTER for guard in self._sends)
        stats["refused"] = {str(status): count for status, count in sorted(self._refused.items())}
        return stats

    def recent_statistics(self) -> dict[str, Any]:
        """:meth:`statistics` computed at most ``STATS_MAX_AGE`` (0.05 s) ago, whatever the rate of
        requests for them (``stats_path``, an operations listener): they count every task of the process."""
        now = trio.current_time()
        cached = self._stats_cache
        if cached is None or not 0 <= now - cached[0] < STATS_MAX_AGE:
            cached = self._stats_cache = (now, self.statistics())
        return cached[1]

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await (self._public.serve if self._public.serves(scope) else self._http)(scope, receive, send)
        elif kind == "lifespan":
            await lifetime.asgi_lifespan(self, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        else:
            raise RuntimeError(f"mcp_trio does not serve ASGI {kind!r} scopes")

    async def _http(self, scope: Scope, receive: Receive, raw_send: Send) -> None:
        extensions = scope.get("extensions")
        abortable = isinstance(extensions, dict) and CANCELLABLE_SEND in extensions
        facts = http.RequestFacts.from_headers(scope["method"], scope.get("headers", ()))
        if self._admission.cors is not None:  # every response carries its CORS headers
            cors_headers = self._admission.cors_headers(facts.origin)
            if cors_headers:
                raw_send = _with_headers(raw_send, cors_headers)
        send = GuardedSend(raw_send, abortable=abortable, in_progress=self._sends)
        try:
            if facts.ambiguous_framing:  # before anything else: the request's end is in doubt
                self._refused[400] = self._refused.get(400, 0) + 1
                await reject(send, admission.AMBIGUOUS_FRAMING)
            else:
                await self._route(scope, facts, receive, send)
        except TRANSPORT_ERRORS:  # the connection was abandoned (a send was cut): nothing more to say
            return

    async def _route(
        self, scope: Scope, facts: http.RequestFacts, receive: Receive, send: GuardedSend
    ) -> None:
        path = scope.get("path", "/")
        try:
            if self.config.stats_path is not None and path == self.config.stats_path:
                await self._statistics_endpoint(scope, facts, send)
                return
            self._admission.check_path(path)
            if self._admission.cors is not None and facts.method == "OPTIONS":
                preflight = self._admission.preflight(facts, _local_address(scope))
                if preflight is not None:
                    await respond(send, 204, b"", content_type=None, extra=preflight)
                    return
            http.check_method(facts)
            if self._draining and facts.method == "GET" and not facts.session_id:
                raise admission.handing_over()  # not ready: a balancer's health check sees 503 at once
            principal = await self._admit(scope, facts)
            if facts.method == "POST":
                client = scope.get("client")
                await self._post(facts, receive, send, principal, _disconnect_hook(scope), client)
            elif facts.method == "GET":
                await self._legacy.get(facts, receive, send, principal, scope.get("client"))
            else:
                await self._legacy.delete(facts, send, principal, scope.get("client"))
        except RemoteProtocolError as exc:
            self._refused[exc.http_status] = self._refused.get(exc.http_status, 0) + 1
            await reject(send, exc)
        except ClientGone:
            return

    async def _statistics_endpoint(self, scope: Scope, facts: http.RequestFacts, send: GuardedSend) -> None:
        """``GET`` on ``stats_path``: the admission of the endpoint (``Host``/``Origin``, then the bearer
        check or ``authenticate``), then :meth:`recent_statistics` as JSON."""
        admission.check_stats_method(facts)
        await self._admit(scope, facts)
        await respond(send, 200, json.dumps(self.recent_statistics()).encode())

    async def _admit(self, scope: Scope, facts: http.RequestFacts) -> object:
        """The checks every request to the endpoint passes (an HTTP one or a WebSocket upgrade): no
        duplicated MCP header, a known ``Host``/``Origin``, then authentication; its principal."""
        self._admission.check(facts, _local_address(scope))
        return await self._authenticate(scope)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket upgrade on the endpoint: the checks of a GET (an HTTP refusal where the server
        offers one), then one :class:`WebSocketConnection` served until it ends."""
        facts = http.RequestFacts.from_headers("GET", scope.get("headers", ()))
        try:
            connect = await receive()
            if connect.get("type") != "websocket.connect":
                return  # gone before the handshake
            http.check_framing(facts)
            self._admission.check_path(scope.get("path", "/"))
            principal = await self._admit(scope, facts)
            if SUBPROTOCOL not in (scope.get("subprotocols") or ()):
                raise RemoteProtocolError(
                    f"Bad Request: a WebSocket client must ask for the {SUBPROTOCOL!r} subprotocol",
                    http_status=400,
                )
            if not self._manager.started:
                raise self._not_running()
            if self._closing:
                raise admission.shutting_down()
            if len(self._websockets) >= self.config.max_sessions:
                raise admission.no_more_connections()
            try:  # a connection counts against the quotas as a session does
                quota = self._manager.quotas.take(
                    self._modern.principals.key(principal), client_address(scope.get("client"))
                )
            except QuotaExceeded as exc:
                raise admission.over_quota(exc.what, None) from None
        except RemoteProtocolError as exc:
            http_send = http_response_send(scope, send)
            if http_send is None:
                await send({"type": "websocket.close", "code": 1008})
            else:
                await reject(http_send, exc)
            return
        connection = WebSocketConnection(self.server, self.config, self._modern, receive, send)
        connection.principal, connection.address = principal, client_address(scope.get("client"))
        oauth = self._oauth
        if oauth is not None and isinstance(principal, AccessToken):  # the scopes of each operation

            def authorize(message: mt.JSONRPCRequest | mt.JSONRPCNotification) -> None:
                oauth.require_for_messages(principal, (message,))

            connection.authorize = authorize
        self._websockets.add(connection)
        try:
            await send({"type": "websocket.accept", "subprotocol": SUBPROTOCOL})
            await connection.serve()
        finally:
            self._websockets.discard(connection)
            self._manager.quotas.give_back(quota)

    async def _authenticate(self, scope: Scope) -> object:
        """The principal of a request, by ``config.oauth`` (its :class:`AccessToken`) or
        ``config.authenticate`` (None without either); they raise :class:`RemoteProtocolError` (400,
        401, 403, 503) to refuse."""
        if self._oauth is not None:
            return await self._oauth.authenticate(scope.get("headers", ()))
        hook = self.config.authenticate
        if hook is None:
            return None
        client = scope.get("client")
        info = HTTPRequestInfo(
            method=scope.get("method", "GET"),  # a WebSocket upgrade is a GET
            path=scope.get("path", "/"),
            headers=tuple((bytes(name).lower(), bytes(value)) for name, value in scope.get("headers", ())),
            client=(str(client[0]), int(client[1])) if client else None,
        )
        return await hook(info)

    # -- POST -------------------------------------------------------------------------------

    async def _post(
        self,
        facts: http.RequestFacts,
        receive: Receive,
        send: GuardedSend,
        principal: object,
        on_disconnect: DisconnectHook | None = None,
        client: object = None,
    ) -> None:
        """A POST; ``client``: the ASGI scope's ``client`` (for a new session's quota)."""
        http.check_post(facts, max_body_size=self.config.max_body_size, json_only=False)
        if self._oauth is not None and isinstance(principal, AccessToken):
            header_revision = versions.revision(facts.protocol_version or "")
            if header_revision is not None and header_revision.modern:  # scopes by the headers, unread body
                self._oauth.require_for(principal, facts.mcp_method, admission.header_name(facts))
        # One scope for the request: its deadline bounds the body's arrival (408), then it is the scope a
        # 2026 handler runs under (a scope costs about as much as the rest of a small request's checks).
        # The body's deadline is kept by the app's one clock while it runs (a deadline of the scope's own
        # costs Trio about as much again as the scope).
        body, clock = None, self._bodies if self._bodies.running else None
        with (
            trio.CancelScope()
            if clock is not None
            else trio.CancelScope(deadline=trio.current_time() + self.config.body_timeout)
        ) as request_scope:
            if clock is not None:
                clock.watch(request_scope)
            try:
                body = await read_body(receive, self.config.max_body_size)
            finally:
                if clock is not None:
                    clock.unwatch(request_scope)
            if clock is None:
                request_scope.deadline = inf
            await self._post_body(facts, body, receive, send, principal, on_disconnect, request_scope, client)
        if body is None:
            raise admission.body_timeout(self.config.body_timeout)

    async def _post_body(
        self,
        facts: http.RequestFacts,
        body: bytes,
        receive: Receive,
        send: GuardedSend,
        principal: object,
        on_disconnect: DisconnectHook | None,
        request_scope: trio.CancelScope,
        client: object = None,
    ) -> None:
        incoming = jsonrpc.parse_body(body, allow_batch=True)
        clientsession.take_header(facts, incoming.messages)
        if (limits := self._modern.limits) and incoming.requests:  # once who and what are known (both eras)
            address, session = client_address(client), facts.session_id
            await limits.admit(incoming.requests, principal, address, session, batch=incoming.batch)
        first = incoming.messages[0]
        params = first.params if isinstance(first, (mt.JSONRPCRequest, mt.JSONRPCNotification)) else None
        modern = versions.select_era(
            header_version=facts.protocol_version,
            meta_version=modern_rules.meta_version(params),
        )
        if modern:
            await self._post_modern(facts, incoming, receive, send, principal, on_disconnect, request_scope)
            return
        await self._legacy.post(facts, incoming, body, receive, send, principal, client)

    async def _post_modern(
        self,
        facts: http.RequestFacts,
        incoming: jsonrpc.Incoming,
        receive: Receive,
        send: GuardedSend,
        principal: object,
        on_disconnect: DisconnectHook | None = None,
        request_scope: trio.CancelScope | None = None,
    ) -> None:
        """A 2026-era POST: one request (or notification), validated against its headers.
        ``on_disconnect``: the server's disconnect callback hook, if it offers one (see
        :data:`~mcp_trio._http.hypercorn_server.DISCONNECT_CALLBACK`); ``request_scope``: the
        request's cancel scope, entered by the caller, for the handler to run under."""
        (message,) = incoming.messages if not incoming.batch else (None,)
        if message is None:
            raise RemoteProtocolError("Invalid Request: JSON-RPC batches are not supported in 2026-07-28")
        if isinstance(message, mt.JSONRPCNotification):
            await respond(send, 202, b"", content_type=None)
            return
        if not isinstance(message, mt.JSONRPCRequest):
            raise RemoteProtocolError("Invalid Request: clients do not send responses in 2026-07-28")
        header_params = self._header_params(message)
        revision = modern_rules.check_headers(
            facts, message.id, message.method, message.params, header_params
        )
        if self._oauth is not None and isinstance(principal, AccessToken):  # the headers were the body's
            field = modern_rules.NAMED_METHODS.get(message.method)
            name = (message.params or {}).get(field) if field else None
            self._oauth.require_for(
                principal, message.method, name if isinstance(name, str) else None, message.id
            )
        if not self.server.knows(message.method, revision):
            raise RemoteProtocolError(
                f"Method not found: {message.method}",
                http_status=404,
                code=mt.METHOD_NOT_FOUND,
                request_id=message.id,
            )
        await self._modern.handle(message, revision, receive, send, principal, on_disconnect, request_scope)

    def _header_params(self, message: mt.JSONRPCRequest) -> dict[str, tuple[str, ...]] | None:
        if message.method != "tools/call" or not message.params:
            return None
        return self.server.tool_header_params(message.params.get("name"))

    def _not_running(self, request_id: mt.RequestId | None = None) -> RemoteProtocolError:
        """The answer of an app that was never started, logged once (the operator's mistake, not the
        client's: the log says how to mend it)."""
        if not self._told_not_running:
            self._told_not_running = True
            logger.error(
                "MCPApp is not running: its ASGI server did not run the lifespan protocol (a mount that "
                "does not forward it?); start it with `async with app.running():` or "
                "`await nursery.start(app.run)`. Sessions are refused with 503 until then."
            )
        return http.app_not_running(request_id)


def _disconnect_hook(scope: Scope) -> DisconnectHook | None:
    """The server's disconnect callback hook of this request (mcp_trio's own servers offer one)."""
    extensions = scope.get("extensions")
    hook = extensions.get(DISCONNECT_CALLBACK) if isinstance(extensions, dict) else None
    return hook if isinstance(hook, DisconnectHook) else None


def _local_address(scope: Scope) -> str | None:
    """The server's own address on the request's connection (DNS-rebinding protection asks)."""
    server = scope.get("server")
    return server[0] if server else None


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """``send`` adding ``extra`` to the response head (CORS headers)."""

    async def send_with_headers(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return send_with_headers
