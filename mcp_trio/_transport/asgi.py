"""The ASGI application: Streamable HTTP for protocol revisions 2025-03-26, 2025-06-18 and 2025-11-25.

Each request is checked by the sans-IO rules in ``_protocol.http`` before anything is allocated.
Streams are written by tasks in their session's nursery; the ASGI request task (owned by the HTTP
server) only waits for its exchange to end while watching ``receive()`` for ``http.disconnect``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from math import inf
from typing import Any, Literal, Protocol

import mcp_types as mt
import trio

from .._app.principal import principal_identity
from .._app.server import MCPServer
from .._protocol import http, jsonrpc, versions
from .._protocol import modern as modern_rules
from .._protocol.cluster import session_owner
from .._protocol.session import parse_event_id
from .._runtime.contract import CANCELLABLE_SEND, DISCONNECT_CALLBACK, DisconnectHook
from ..auth.server._resource import BearerGuard
from ..auth.server._token import AccessToken
from ..errors import RemoteProtocolError, RPCError, SessionError
from .config import HTTPRequestInfo, ServerConfig
from .manager import SessionManager
from .modern import ModernEndpoint
from .quotas import QuotaExceeded, client_address
from .session import Session
from .streams import TRANSPORT_ERRORS, Exchange, GuardedSend, Stream, content_length
from .websocket import SUBPROTOCOL, WebSocketConnection, http_response_send
from .wire import Receive, Scope, Send

__all__ = ["MCPApp"]

logger = logging.getLogger(__name__)

STALLED_AFTER = 1.0
"""A send under way for longer than this (seconds) counts as stalled in :meth:`MCPApp.statistics`."""
STATS_MAX_AGE = 0.05
"""``stats_path`` answers statistics computed at most this long ago (seconds): however many requests
come, they are computed at most 20 times a second."""



class WorkerLink(Protocol):
    """What a notification bus offers when it also links the workers (the Redis bus does): see
    docs/deploy/workers.  Found on ``server.notifications`` by its ``attach_worker`` method.

    ``deliver`` (given to ``attach_worker``) takes a forwarded body with its session id and the tag
    of the principal that sent it; ``session_opened``/``session_closed`` keep the link's record of
    this worker's sessions (what other workers forward to); ``principal_matches`` compares a tag with
    a principal's identity (:func:`principal_identity`)."""

    def attach_worker(self, worker_id: str, deliver: Callable[[str, bytes, str], bool]) -> None: ...

    def session_opened(self, session_id: str, principal: bytes) -> None: ...

    def session_closed(self, session_id: str) -> None: ...

    def principal_matches(self, principal: bytes, tag: str) -> bool: ...

    async def has_session(self, worker: str, session_id: str, principal: bytes) -> bool | None: ...

    async def forward_to_worker(
        self, worker: str, session_id: str, body: bytes, principal: bytes
    ) -> Literal["sent", "unknown", "full", "gone", "unavailable"]: ...


class MCPApp:
    """An ASGI application serving one :class:`MCPServer` over Streamable HTTP.

    Sessions live in a nursery that the app owns while it runs: under an ASGI server that runs the
    lifespan protocol (hypercorn does) that happens by itself; otherwise start it with
    ``await nursery.start(app.run)`` or ``async with app.running():``.
    """

    def __init__(self, server: MCPServer, config: ServerConfig | None = None) -> None:
        self.server = server
        self.config = config or ServerConfig()
        self._manager = SessionManager(server, self.config)
        self._modern = ModernEndpoint(server, self.config)
        self._sends: set[GuardedSend] = set()
        """Sends under way (each HTTP request's, while one is being written)."""
        cors = self.config.cors_origins
        self._cors = http.CORSPolicy.of(cors) if cors else None
        """None: CORS is off (no CORS headers; OPTIONS gets 405)."""
        self._protected = http.OriginPolicy.protecting(
            self.config.allowed_hosts or (), self.config.allowed_origins or (), self._cors
        )
        self._allow_lists = bool(self.config.allowed_hosts or self.config.allowed_origins)
        oauth = self.config.oauth
        self._oauth = BearerGuard(oauth, self.config.path) if oauth is not None else None
        """With ``config.oauth``: the bearer check of every request, and the resource metadata."""
        self._websockets: set[WebSocketConnection] = set()
        """The WebSocket connections being served (each one 2025-era session, or 2026 requests)."""
        self._closing = False
        self._told_not_running = False
        self._stats_cache: tuple[float, bytes] | None = None
        """When the statistics ``stats_path`` serves were computed, and their JSON."""
        self._link: WorkerLink | None = None
        """With a worker id and a bus that links workers: how to reach the other workers (set by
        :meth:`run`, so a bus given to the server after the app was made counts)."""

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the sessions' nursery until cancelled.  Cancelling ends every session at once; call
        :meth:`aclose` first for a graceful end.  A notification bus with tasks of its own (one with a
        ``run`` method, such as :class:`mcp_trio.redis.RedisNotificationBus`) runs here too, and ends
        with the app."""
        bus = self.server.notifications
        if self.config.worker_id is not None and callable(getattr(bus, "attach_worker", None)):
            bus.attach_worker(self.config.worker_id, self._deliver_forwarded)  # type: ignore[attr-defined]
            link: WorkerLink = bus  # type: ignore[assignment]
            self._link = link
            self._manager.on_forget = lambda session: link.session_closed(session.session_id)
        bus_run = getattr(bus, "run", None)
        tasks = self._modern.tasks
        tasks.publish = bus.publish
        async with trio.open_nursery() as nursery:
            if bus_run is not None:
                await nursery.start(bus_run)
            store_run = getattr(tasks.store, "run", None)
            if store_run is not None:  # a store with tasks of its own (a shared one's signals)
                await nursery.start(store_run, tasks)
            await nursery.start(tasks.run)
            await self._manager.run(task_status=task_status)
            nursery.cancel_scope.cancel()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[MCPApp]:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.run)
            try:
                yield self
            finally:
                await self.aclose()
                nursery.cancel_scope.cancel()

    async def aclose(self) -> None:
        """Close every session, subscription and WebSocket connection (each open stream ends cleanly,
        each WebSocket with close code 1001 after what was queued for it) within
        ``config.shutdown_grace``."""
        self._closing = True
        for connection in list(self._websockets):
            connection.stop()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._modern.aclose)
            nursery.start_soon(self._modern.tasks.aclose)
            nursery.start_soon(self._manager.aclose)

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
        stats["websocket_requests"] = sum(c.statistics()["inflight"] for c in self._websockets)
        stats["writes_in_progress"] = len(self._sends)
        stats["writes_stalled"] = sum(now - guard.since > STALLED_AFTER for guard in self._sends)
        return stats

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        else:
            raise RuntimeError(f"mcp_trio does not serve ASGI {kind!r} scopes")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(self.run)
            except Exception as exc:  # pragma: no cover - run() starts unconditionally
                await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            await self.aclose()
            nursery.cancel_scope.cancel()
        await send({"type": "lifespan.shutdown.complete"})

    async def _http(self, scope: Scope, receive: Receive, raw_send: Send) -> None:
        extensions = scope.get("extensions")
        abortable = isinstance(extensions, dict) and CANCELLABLE_SEND in extensions
        facts = http.RequestFacts.from_headers(scope["method"], scope.get("headers", ()))
        metadata = self._oauth is not None and scope.get("path", "/").rstrip("/") in self._oauth.paths
        if self._cors is not None and not metadata:  # every response of this request carries its CORS headers
            cors_headers = self._cors.response_headers(facts.origin)
            if cors_headers:
                raw_send = _with_headers(raw_send, cors_headers)
        send = GuardedSend(raw_send, abortable=abortable, in_progress=self._sends)
        try:
            if facts.ambiguous_framing:  # before anything else: the request's end is in doubt
                await _reject(send, _AMBIGUOUS_FRAMING)
            elif metadata:
                await self._metadata(facts, send)
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
            self._check_path(path)
            if self._cors is not None and http.is_preflight(facts):
                http.check_duplicates(facts)
                headers = http.cors_preflight(facts, self._cors)  # its origin passes check_origin
                http.check_origin(facts, self._origin_policy(scope))
                await _respond(send, 204, b"", content_type=None, extra=headers)
                return
            http.check_method(facts)
            principal = await self._admit(scope, facts)
            if facts.method == "POST":
                client = scope.get("client")
                await self._post(facts, receive, send, principal, _disconnect_hook(scope), client)
            elif facts.method == "GET":
                await self._get(facts, receive, send, principal)
            else:
                await self._delete(facts, send, principal)
        except RemoteProtocolError as exc:
            await _reject(send, exc)
        except _ClientGone:
            return

    async def _statistics_endpoint(self, scope: Scope, facts: http.RequestFacts, send: GuardedSend) -> None:
        """``GET`` on ``stats_path``: the admission of the endpoint (``Host``/``Origin``, then the bearer
        check or ``authenticate``), then :meth:`statistics` as JSON, computed at most once per
        :data:`STATS_MAX_AGE` whatever the rate of requests (it counts every task of the process)."""
        if facts.method != "GET":
            raise RemoteProtocolError(
                f"Method Not Allowed: {facts.method}", http_status=405, headers=(("allow", "GET"),)
            )
        await self._admit(scope, facts)
        now = trio.current_time()
        cached = self._stats_cache
        if cached is None or now - cached[0] >= STATS_MAX_AGE or now < cached[0]:
            cached = self._stats_cache = (now, json.dumps(self.statistics()).encode())
        await _respond(send, 200, cached[1])

    def _check_path(self, path: str) -> None:
        """404 off the endpoint."""
        if self.config.path is not None and path.rstrip("/") != self.config.path.rstrip("/"):
            raise RemoteProtocolError("Not Found", http_status=404)

    async def _admit(self, scope: Scope, facts: http.RequestFacts) -> object:
        """The checks every request to the endpoint passes (an HTTP one or a WebSocket upgrade): no
        duplicated MCP header, a known ``Host``/``Origin``, then authentication; its principal."""
        http.check_duplicates(facts)
        http.check_origin(facts, self._origin_policy(scope))
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
            self._check_path(scope.get("path", "/"))
            principal = await self._admit(scope, facts)
            if SUBPROTOCOL not in (scope.get("subprotocols") or ()):
                raise RemoteProtocolError(
                    f"Bad Request: a WebSocket client must ask for the {SUBPROTOCOL!r} subprotocol",
                    http_status=400,
                )
            if not self._manager.started:
                raise self._not_running()
            if self._closing or len(self._websockets) >= self.config.max_sessions:
                raise RemoteProtocolError(
                    "Service Unavailable: no more connections, try again later",
                    http_status=503,
                    headers=(("retry-after", "1"),),
                )
            try:  # a connection counts against the quotas as a session does
                quota = self._manager.quotas.take(
                    self._modern.principals.key(principal), client_address(scope.get("client"))
                )
            except QuotaExceeded as exc:
                raise _over_quota(exc, None) from None
        except RemoteProtocolError as exc:
            http_send = http_response_send(scope, send)
            if http_send is None:
                await send({"type": "websocket.close", "code": 1008})
            else:
                await _reject(http_send, exc)
            return
        connection = WebSocketConnection(self.server, self.config, self._modern, receive, send)
        connection.principal = principal
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

    async def _metadata(self, facts: http.RequestFacts, send: GuardedSend) -> None:
        """The protected resource metadata (RFC 9728): public, for any origin, before any other rule."""
        assert self._oauth is not None
        status, headers, body = self._oauth.metadata_response(facts.method, facts.cors_headers)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

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

    def _origin_policy(self, scope: Scope) -> http.OriginPolicy:
        server = scope.get("server")
        enabled = http.protection_applies(
            self.config.dns_rebinding_protection,
            allow_lists=self._allow_lists,
            local_address=server[0] if server else None,
        )
        return self._protected if enabled else _UNPROTECTED

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
        """A POST; ``client``: the ASGI scope's ``client`` (whose address a new session counts against
        its quota)."""
        http.check_post(facts, max_body_size=self.config.max_body_size, json_only=False)
        if self._oauth is not None and isinstance(principal, AccessToken):
            header_revision = versions.revision(facts.protocol_version or "")
            if header_revision is not None and header_revision.modern:  # scopes by the headers, unread body
                self._oauth.require_for(principal, facts.mcp_method, _header_name(facts))
        # One scope for the request: its deadline bounds the body's arrival (408), then it is the scope a
        # 2026 handler runs under (a scope costs about as much as the rest of a small request's checks).
        body = None
        with trio.CancelScope(deadline=trio.current_time() + self.config.body_timeout) as request_scope:
            body = await _read_body(receive, self.config.max_body_size)
            request_scope.deadline = inf
            await self._post_body(facts, body, receive, send, principal, on_disconnect, request_scope, client)
        if body is None:
            raise RemoteProtocolError(
                f"Request Timeout: the body did not arrive within {self.config.body_timeout:g} s",
                http_status=408,
                headers=(("connection", "close"),),
            )

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
        initialize = [m for m in incoming.requests if m.method == "initialize"]
        first = incoming.messages[0]
        params = first.params if isinstance(first, (mt.JSONRPCRequest, mt.JSONRPCNotification)) else None
        modern = versions.select_era(
            header_version=facts.protocol_version,
            meta_version=modern_rules.meta_version(params),
        )
        if modern:
            await self._post_modern(facts, incoming, receive, send, principal, on_disconnect, request_scope)
            return
        http.check_protocol_version(facts)
        if self._oauth is not None and isinstance(principal, AccessToken):
            self._oauth.require_for_messages(principal, incoming.messages)
        if initialize:
            if incoming.batch:
                raise RemoteProtocolError("Invalid Request: initialize must not be part of a batch")
            await self._initialize(initialize[0], receive, send, principal, client_address(client))
            return
        if await self._elsewhere(facts, send, None if incoming.requests else body, principal):
            return
        await self._post_legacy(facts, incoming, receive, send, principal)

    async def _post_legacy(
        self,
        facts: http.RequestFacts,
        incoming: jsonrpc.Incoming,
        receive: Receive,
        send: GuardedSend,
        principal: object,
    ) -> None:
        session = self._session(facts, principal)
        if incoming.batch and not session.revision.batches:
            raise RemoteProtocolError(
                f"Invalid Request: JSON-RPC batches are not supported in {session.revision.name}"
            )
        if incoming.batch and len(incoming.messages) > self.config.stream_buffer:
            raise RemoteProtocolError(
                f"Invalid Request: a batch may hold at most {self.config.stream_buffer} messages"
            )
        session.check_request_ids(incoming.requests)
        with session.activity():
            for message in incoming.messages:
                if isinstance(message, mt.JSONRPCNotification):
                    session.receive_notification(message)
                elif not isinstance(message, mt.JSONRPCRequest):
                    session.receive_response(message)
            requests = incoming.requests
            if not requests:
                await _respond(send, 202, b"", content_type=None)
                return
            stream = session.open_post_stream(requests, batch=incoming.batch)
            exchange = Exchange(send)
            with session.connection(stream, exchange):
                for request in requests:
                    session.start_request(request)
                await _wait(exchange, receive, quick=self.config.sse_start_delay)

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
            await _respond(send, 202, b"", content_type=None)
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

    async def _initialize(
        self,
        request: mt.JSONRPCRequest,
        receive: Receive,
        send: GuardedSend,
        principal: object,
        address: str | None,
    ) -> None:
        try:
            accepted = self.server.initialize(request.params)
        except RPCError as exc:
            raise RemoteProtocolError(exc.message, code=exc.code, request_id=request.id) from exc
        owner = self._modern.principals.key(principal)
        try:  # validated: only now is a session made
            session = await self._manager.create(accepted.revision, owner=owner, address=address)
        except QuotaExceeded as exc:
            raise _over_quota(exc, request.id) from None
        except SessionError as exc:
            if not self._manager.started:
                raise self._not_running(request.id) from exc
            raise http.server_busy() from exc
        session.principal = principal
        if self._link is not None:  # other workers may forward this session's answers here
            self._link.session_opened(session.session_id, principal_identity(principal))
        result = session.accept(accepted)
        with session.activity():
            stream = session.open_post_stream((request,), batch=False)
            exchange = Exchange(send, head=((b"mcp-session-id", session.session_id.encode()),))
            with session.connection(stream, exchange):
                await session.answer_now(request.id, jsonrpc.response(request.id, result))
                await _wait(exchange, receive)

    # -- sessions of other workers ----------------------------------------------------------------

    async def _elsewhere(
        self, facts: http.RequestFacts, send: GuardedSend, body: bytes | None, principal: object
    ) -> bool:
        """A request for a session another worker owns, with a worker link.  ``body`` (a POST holding
        only responses and notifications, from ``principal``) is forwarded to the owner's inbox and
        answered 202 if the owner has that session with that principal; 404 if it has not (or is
        gone), decided before anything is written; 503 with ``Retry-After`` if Redis cannot tell now,
        or the owner's inbox is full.  The rest (requests, GET, DELETE) is 503 with ``Retry-After``
        if the owner has the session of that principal (or Redis cannot tell), 404 if not.  Principals
        are compared by :func:`principal_identity` (a custom principal needs a stable ``repr``).
        False: not another worker's session (the request goes on as usual)."""
        link, worker = self._link, self.config.worker_id
        if link is None or worker is None or not facts.session_id:
            return False
        session_id = http.check_session_header(facts)
        owner = session_owner(session_id)
        if owner is None or owner == worker:
            return False
        http.check_protocol_version(facts)
        identity = principal_identity(principal)
        alive: bool | None
        if body is not None:
            outcome = await link.forward_to_worker(owner, session_id, body, identity)
            if outcome == "sent":
                await _respond(send, 202, b"", content_type=None)
                return True
            alive = None if outcome in ("unavailable", "full") else False
        else:
            known = await link.has_session(owner, session_id, identity)
            alive = False if known is False else None  # it has the session: 503, send it there
        if alive is False:
            raise http.session_not_found()
        raise RemoteProtocolError(
            f"Service Unavailable: this session lives on worker {owner}; send its requests there",
            http_status=503,
            code=mt.INTERNAL_ERROR,
            headers=(("retry-after", "1"),),
        )

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

    def _deliver_forwarded(self, session_id: str, body: bytes, principal_tag: str) -> bool:
        """A POST body another worker forwarded to this one (responses and notifications of one of
        its sessions, sent by the principal of ``principal_tag``), handled as :meth:`_post_legacy`
        would; False if it cannot be (no such session here, a session of another principal, or
        invalid for it): the caller drops and counts it."""
        session = self._manager.get(session_id)
        link = self._link
        if session is None or link is None:
            return False
        if not link.principal_matches(principal_identity(session.principal), principal_tag):
            return False
        try:
            incoming = jsonrpc.parse_body(body, allow_batch=True)
            if incoming.requests or (incoming.batch and not session.revision.batches):
                return False
            with session.activity():
                for message in incoming.messages:
                    if isinstance(message, mt.JSONRPCNotification):
                        session.receive_notification(message)
                    elif not isinstance(message, mt.JSONRPCRequest):
                        session.receive_response(message)
        except RemoteProtocolError:
            return False
        return True

    def _session(self, facts: http.RequestFacts, principal: object) -> Session:
        session_id = http.check_session_header(facts)
        worker = self.config.worker_id
        if worker is not None and session_owner(session_id, (worker,)) is None:
            raise http.session_not_found()  # malformed, or another worker's: not a session of ours
        session = self._manager.get(session_id)
        if session is None or (  # its creator's alone (the very principal object it was made with is)
            principal is not session.principal and not self._modern.principals.owns(session.owner, principal)
        ):
            raise http.session_not_found()
        if isinstance(principal, AccessToken):
            session.principal = principal  # its owner's newest token (a refreshed one, say)
        return session

    # -- GET and DELETE -----------------------------------------------------------------------

    async def _get(
        self, facts: http.RequestFacts, receive: Receive, send: GuardedSend, principal: object
    ) -> None:
        _refuse_modern(facts)
        http.check_get(facts)
        if await self._elsewhere(facts, send, None, principal):
            return
        session = self._session(facts, principal)
        http.check_protocol_version(facts)
        stream, replay_after = session.streams.resume(facts.last_event_id)
        with session.activity():
            exchange = Exchange(send)
            with session.connection(stream, exchange, replay_after):
                await _wait(exchange, receive)

    async def _delete(self, facts: http.RequestFacts, send: GuardedSend, principal: object) -> None:
        _refuse_modern(facts)
        if await self._elsewhere(facts, send, None, principal):
            return
        session = self._session(facts, principal)
        http.check_protocol_version(facts)
        await session.aclose()
        await _respond(send, 200, b"", content_type=None)


def _over_quota(exc: QuotaExceeded, request_id: mt.RequestId | None) -> RemoteProtocolError:
    """429 with ``Retry-After`` for a new session (or WebSocket connection) over one of its quotas."""
    return RemoteProtocolError(
        f"Too Many Requests: this {exc.what} holds too many sessions; end one, or try again later",
        http_status=429,
        code=mt.INTERNAL_ERROR,
        request_id=request_id,
        headers=(("retry-after", "5"),),
    )


def _disconnect_hook(scope: Scope) -> DisconnectHook | None:
    """The server's disconnect callback hook of this request (mcp_trio's own servers offer one)."""
    extensions = scope.get("extensions")
    hook = extensions.get(DISCONNECT_CALLBACK) if isinstance(extensions, dict) else None
    return hook if isinstance(hook, DisconnectHook) else None


def _header_name(facts: http.RequestFacts) -> str | None:
    """The decoded ``Mcp-Name`` header, or None (absent or malformed: the body check refuses that)."""
    if facts.mcp_name is None:
        return None
    try:
        return modern_rules.decode_header_value(facts.mcp_name)
    except ValueError:
        return None


def _refuse_modern(facts: http.RequestFacts) -> None:
    """GET and DELETE do not exist in the modern era: 405 (the legacy era keeps them)."""
    found = versions.revision(facts.protocol_version) if facts.protocol_version else None
    if found is not None and found.modern:
        raise RemoteProtocolError(
            f"Method Not Allowed: {facts.method} in {found.name}",
            http_status=405,
            headers=(("allow", "POST"),),
        )


async def _wait(exchange: Exchange, receive: Receive, *, quick: float = 0.0) -> None:
    """Wait for the writer of ``exchange`` to finish; a client disconnect cancels the writer.

    ``quick`` (the session's ``sse_start_delay``, > 0 only for a POST's stream): first wait for the
    exchange alone, without watching ``receive()``, until the session's start timer rouses this task
    that long after (most POSTs are answered well within it, and then no receive has to be started
    and cancelled, and no deadline set)."""
    if quick > 0 and not exchange.done.is_set():
        await exchange.park()
    if not exchange.done.is_set():
        with trio.CancelScope() as exchange.wait_scope:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    exchange.cancel_writer()
                    break
        await exchange.done.wait()
    if exchange.finished or (exchange.guard is not None and exchange.guard.broken):
        return  # a response cut short (the client stopped reading) ends with its connection
    exchange.end()
    if exchange.started:
        await exchange.send({"type": "http.response.body", "body": b"", "more_body": False})
    else:  # the session ended before the writer could start the response
        await _reject(exchange.send, http.session_not_found())


_UNPROTECTED = http.OriginPolicy.off()


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """``send`` adding ``extra`` to the response head (CORS headers)."""

    async def send_with_headers(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return send_with_headers


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body: 413 past ``limit`` bytes (the caller bounds the time it takes)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            http.body_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class _ClientGone(Exception):
    """The client went away while its request body was being read: there is no one to answer."""


_AMBIGUOUS_FRAMING = RemoteProtocolError(http.AMBIGUOUS_FRAMING, headers=(("connection", "close"),))
"""The answer to a request with both ``Content-Length`` and ``Transfer-Encoding`` (``http.check_framing``):
400, then the connection closes (the ``Connection: close`` of the answer makes both servers close it)."""


async def _reject(send: Send, exc: RemoteProtocolError) -> None:
    headers = [(name.encode(), value.encode()) for name, value in exc.headers]
    await _respond(send, exc.http_status, jsonrpc.error_body(exc), extra=headers)


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes | None = b"application/json",
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-type", content_type)] if content_type and body else []
    headers.extend(extra or ())
    if status != 204:
        headers.append(content_length(body))
    start = {"type": "http.response.start", "status": status, "headers": headers}
    end = {"type": "http.response.body", "body": body, "more_body": False}
    if isinstance(send, GuardedSend):  # one shielded scope for the two sends
        await send.whole(start, end)
    else:
        await send(start)
        await send(end)
