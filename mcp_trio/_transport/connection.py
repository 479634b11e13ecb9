"""The transport-neutral message connection: one client connection that carries whole JSON-RPC messages
(a stdio line, a WebSocket frame), serving both eras on it.

A :class:`MessageConnection` owns one Trio nursery: the single writer task and every handler task.  The
transport frames bytes into messages (:meth:`MessageConnection._read_loop`, which hands each to
:meth:`~MessageConnection.receive_message`) and writes encoded messages
(:meth:`MessageConnection._transmit`); everything else is here, once:

* **2025** (a session opened by ``initialize``): version negotiation, ``notifications/initialized``,
  requests run as tasks, ``notifications/cancelled`` cancels a handler (no response is sent),
  server-to-client requests (sampling, elicitation, roots) routed back to the waiting handler; progress
  and log notifications; the server's own notifications (once the session is initialized).  Requests
  other than ``ping`` before ``initialize`` get -32600.
* **2026-07-28** (a request whose ``_meta`` names a protocol version): served by the HTTP transport's
  public endpoint (:class:`~mcp_trio._transport.modern.ModernEndpoint`: ``answer``, and its
  ``subscriptions`` for ``subscriptions/listen``);
  ``notifications/cancelled`` cancels such a request too.

Bad input never ends the loop: a message that is not JSON gets -32700, one that is not a JSON-RPC message
(or a request with an id already in flight) gets -32600, one longer than ``config.max_body_size`` gets
-32600 and is dropped unread.  JSON-RPC batches are not supported (a JSON array gets -32600).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as mt
import trio

from .._protocol import jsonrpc, versions
from .._protocol import modern as modern_rules
from .._protocol.admission import SHUTTING_DOWN, SHUTTING_DOWN_CODE, shutdown_answer
from .._protocol.ratelimits import refused
from .._runtime.containment import contained
from .._runtime.peerlog import MAX_LOGGED_VALUE, RateLimitedLog, printable
from ..errors import RemoteProtocolError, RPCError
from . import clientsession
from .config import LAST_WORDS, ServerConfig
from .core import ServerCore
from .modern import ModernEndpoint
from .peer import SessionPeer
from .responder import Responder
from .subscriptions import Listener

__all__ = ["MessageConnection"]

logger = logging.getLogger(__name__)
peer_log = RateLimitedLog(logger)
"""What peers do wrong (or too slowly): one line each, at most ten a minute."""


class _Call:
    """One request being handled: its cancel scope, whether the client cancelled it (then nothing
    more is written for it, even what was already queued), and whether it is a 2026-era request."""

    __slots__ = ("cancelled", "id", "modern", "scope")

    def __init__(self, request_id: mt.RequestId, modern: bool = False) -> None:
        self.id = request_id
        self.scope = trio.CancelScope()
        self.cancelled = False
        self.modern = modern

    def cancel(self) -> None:
        self.cancelled = True
        self.scope.cancel()


class _ConnectionResponder(Responder):
    """Where a 2026 request's notifications go: the connection, tagged with the request."""

    __slots__ = ("_call", "_connection")

    def __init__(self, connection: MessageConnection, call: _Call) -> None:
        super().__init__(_no_send, json_only=True)
        self._connection = connection
        self._call = call

    async def notify(self, message: dict[str, Any]) -> None:
        await self._connection.write(message, self._call)

    async def finish(  # pragma: no cover
        self, message: dict[str, Any], status: int = 200, *, shield: bool = True
    ) -> None:
        await self._connection.write(message, self._call)


async def _no_send(message: dict[str, Any]) -> None:  # pragma: no cover - never called
    raise AssertionError("a message connection has no HTTP response")


class MessageConnection(SessionPeer):
    """One client connection that carries whole JSON-RPC messages, and (once ``initialize`` is answered)
    its 2025 session.  Transport-neutral: a subclass frames the bytes (:meth:`_read_loop` reads
    messages and hands each to :meth:`receive_message`; :meth:`_transmit` writes a batch of them).

    It is the :class:`~mcp_trio.Peer` of 2025-era handlers.  Every task it starts runs in the nursery
    of :meth:`run`: the single writer (the only code that writes to the transport, so messages never
    interleave) and every handler.
    """

    session_id: str | None = None
    principal: object = None
    """Who the client is (a WebSocket upgrade's bearer token or ``authenticate`` hook's answer; None over
    stdio): handlers see it as ``ctx.principal``, and the 2026 tasks it starts belong to it."""
    address: str | None = None
    """The client's address as rate limits and quotas count it (a WebSocket's; None over stdio)."""
    authorize: Callable[[mt.JSONRPCRequest | mt.JSONRPCNotification], None] | None = None
    """Checks each request and notification before it is served (a WebSocket's per-operation OAuth
    scopes); raises :class:`RemoteProtocolError` to refuse it (a request gets that error, a
    notification is dropped)."""
    max_inflight = 1000
    """Requests of this connection handled at once; beyond it a request is answered -32603 at once (a
    client that sends without reading cannot make the server hold unbounded work for it)."""

    @property
    def owner(self) -> str:
        """The principal's owner key (``Context.client_session_key`` of its 2025 session's requests)."""
        return self._modern.principals.key(self.principal)

    def __init__(
        self, server: ServerCore, config: ServerConfig | None = None, endpoint: ModernEndpoint | None = None
    ) -> None:
        self.server = server
        self.config = config = config or ServerConfig()
        self.max_message = config.max_body_size
        self._owns_endpoint = endpoint is None
        """Whether the 2026 endpoint (and its task manager) is this connection's own (stdio) or an app's
        (a WebSocket connection shares its app's, so tasks outlive the connection as over HTTP)."""
        self._modern = endpoint or ModernEndpoint(server, config)
        # the 2025 session
        self.revision: versions.Revision | None = None
        self.initialized = False
        self.protocol_version = versions.LATEST.name
        self._init_session()
        # tasks and messages
        self.closing = False
        self.stopping = False
        """The connection ends: a new request is answered -32000 ``Server shutting down`` (what else
        the client sends, notifications and answers to the server's requests, is still taken)."""
        self._inflight: dict[mt.RequestId, _Call] = {}
        self._running = 0
        self._idle = trio.Event()
        self._idle.set()
        self._writer_done = trio.Event()
        self._queue_send, self._queue_receive = trio.open_memory_channel[tuple[_Call | None, bytes]](
            max(1, config.stream_buffer)
        )
        self._nursery: trio.Nursery | None = None
        self._connection_key = f"c:{secrets.token_hex(12)}"
        """What a ``session`` rate limit counts this connection's requests by."""

    # -- lifetime -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until the input ends (or the output breaks)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._write_loop, name="mcp connection writer")
            if self._owns_endpoint:
                self._modern.tasks.publish = self.server.notifications.publish  # notifications/tasks
                await nursery.start(self._modern.tasks.run)
                await nursery.start(self._modern.limits.run)
            self.server.attach(self)
            clock = self.server.telemetry.session(self.carrier)
            try:
                task_status.started()
                await self._read_loop()
                await self._shutdown()
            finally:
                self.closing = True
                self.server.detach(self)
                nursery.cancel_scope.cancel()
                if clock is not None and self.revision is not None:  # it was a 2025 session
                    clock.end(self.protocol_version)

    async def _shutdown(self) -> None:
        """End of input: requests already read get ``shutdown_grace`` to finish (so a script piped in
        gets its answers), then the rest are cancelled and answered -32000; what is queued is flushed."""
        grace = self.config.shutdown_grace
        self.stopping = True
        with trio.move_on_after(grace):
            await self._idle.wait()
        if self._owns_endpoint:
            await self._modern.tasks.aclose()
        self.closing = True
        await self.settle(0)
        self._queue_send.close()  # the writer sends what is queued, then ends
        with trio.move_on_after(grace):
            await self._writer_done.wait()

    async def settle(self, grace: float) -> None:
        """The shutdown rule (new requests are refused once :attr:`stopping` is set): the requests in
        flight get ``grace`` seconds to finish, then those still running are cancelled, each answered
        -32000 ``Server shutting down`` (a request the client cancelled gets nothing), and get
        :data:`~.config.LAST_WORDS` to unwind."""
        with trio.move_on_after(grace):
            await self._idle.wait()
        if self._running:
            for call in self._inflight.values():
                call.scope.cancel()  # not call.cancel(): the client did not cancel it (see _task)
            with trio.move_on_after(LAST_WORDS):
                await self._idle.wait()

    def statistics(self) -> dict[str, Any]:
        return {
            "initialized": self.initialized,
            "inflight": len(self._inflight),
            "modern_inflight": sum(call.modern for call in self._inflight.values()),
            "tasks": self._running,
            "outgoing": len(self._outgoing),
        }

    # -- reading --------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        """Read messages until the input ends, handing each to :meth:`receive_message` (and telling
        :meth:`refuse_oversized` of one longer than ``max_message``)."""
        raise NotImplementedError

    async def _transmit(self, messages: list[bytes]) -> None:
        """Write encoded messages, in order (``BrokenResourceError``/``ClosedResourceError``: gone)."""
        raise NotImplementedError

    async def refuse_oversized(self) -> None:
        """A message longer than ``max_message`` was dropped unread: tell the client (-32600)."""
        peer_log.log(logging.WARNING, "dropped a message longer than %d bytes", self.max_message)
        message = f"Invalid Request: message longer than {self.max_message} bytes"
        await self.write(jsonrpc.error_envelope(None, mt.INVALID_REQUEST, message))

    async def receive_message(self, line: bytes) -> None:
        """One message from the client (surrounding whitespace ignored)."""
        line = line.strip()
        if not line:
            return
        try:
            incoming = jsonrpc.parse_body(line, allow_batch=False)
        except RemoteProtocolError as exc:
            await self.write(jsonrpc.error_envelope(exc.request_id, exc.code, exc.message, exc.data))
            return
        (message,) = incoming.messages
        clientsession.take(incoming.messages)
        if self.authorize is not None and not isinstance(message, (mt.JSONRPCResponse, mt.JSONRPCError)):
            try:
                self.authorize(message)
            except RemoteProtocolError as exc:
                if isinstance(message, mt.JSONRPCRequest):
                    await self._error(message.id, exc.code, exc.message, exc.data)
                else:
                    method = printable(message.method, MAX_LOGGED_VALUE)
                    peer_log.log(logging.INFO, "dropped %s: %s", method, exc.message)
                return
        if isinstance(message, mt.JSONRPCRequest):
            await self._receive_request(message)
        elif isinstance(message, mt.JSONRPCNotification):
            self.receive_notification(message)
        else:
            self.receive_response(message)

    async def _receive_request(self, request: mt.JSONRPCRequest) -> None:
        if self.stopping:
            await self._error(request.id, SHUTTING_DOWN_CODE, SHUTTING_DOWN)
            return
        if request.id in self._inflight:
            await self._error(request.id, mt.INVALID_REQUEST, f"Invalid Request: id {request.id!r} is in use")
            return
        if len(self._inflight) >= self.max_inflight:
            message = f"Too many requests in flight on this connection (limit {self.max_inflight})"
            await self._error(request.id, mt.INTERNAL_ERROR, message)
            return
        if self._modern.limits:  # the rate limits: the JSON-RPC error alone (no HTTP status here)
            session = self.session_id or self._connection_key
            refusal = await self._modern.limits.check((request,), self.principal, self.address, session)
            if refusal is not None:
                answer = refused(refusal, request.id)
                await self._error(request.id, answer.code, answer.message, answer.data)
                return
        try:
            if modern_rules.meta_version(request.params) is not None:
                self._start_modern(request)
            elif request.method == "initialize":
                await self._initialize(request)
            elif self.revision is None and request.method != "ping":
                raise RPCError(
                    mt.INVALID_REQUEST,
                    "Invalid Request: send initialize first (or name a protocol version in _meta)",
                )
            else:
                self._start(request.id, self._run_request, request)
        except RPCError as exc:
            await self._error(request.id, exc.code, exc.message, exc.data)
        except RemoteProtocolError as exc:
            await self._error(request.id, exc.code, exc.message, exc.data)

    # -- 2025: the session ----------------------------------------------------------------------

    async def _initialize(self, request: mt.JSONRPCRequest) -> None:
        operation = self.server.telemetry.operation(
            "initialize", request.params, request.id, incoming=True, carrier=self.carrier,
            principal=self.principal,
        )  # fmt: skip
        try:
            if self.revision is not None:
                raise RPCError(mt.INVALID_REQUEST, "Invalid Request: the session is already initialized")
            accepted = await self.server.initialize_session(request.params)
        except RPCError as exc:
            if operation is not None:
                operation.finish(jsonrpc.error_envelope(request.id, exc.code, exc.message))
            raise
        self.revision = accepted.revision
        answer = jsonrpc.response(request.id, self.accept(accepted))
        if operation is not None:
            operation.set_session(None, self.protocol_version)
            operation.finish(answer)
        await self.write(answer)

    def _initialized(self) -> None:
        if self.revision is not None:
            self.initialized = True

    def _cancel_request(self, request_id: mt.RequestId) -> None:
        call = self._inflight.get(request_id)
        if call is not None:
            call.cancel()

    async def _run_request(self, call: _Call, request: mt.JSONRPCRequest) -> None:
        await self.write(await self.answer(request), call)

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None:
        """A handler's notification (related to its request), or one of the server's own: these are
        sent to an initialized session only, and dropped rather than waited for if the client is behind."""
        if related is not None:
            await self.write(message, self._inflight.get(related))
        else:
            self.notify_nowait(message)

    def notify_nowait(self, message: dict[str, Any]) -> None:
        """A server notification (from the notification bus)."""
        if self.initialized and message.get("method") != "notifications/tasks":  # listen streams only
            self.write_nowait(message)

    async def request(
        self, method: str, params: dict[str, Any] | None, related: mt.RequestId | None = None
    ) -> dict[str, Any]:
        """Send a server-to-client request and wait for the client's answer."""
        if self.revision is None:
            raise RPCError(mt.INTERNAL_ERROR, f"{method}: no 2025 session to send requests on")
        return await super().request(method, params, related)

    async def _send_request(self, message: dict[str, Any], related: mt.RequestId | None) -> None:
        await self.write(message, self._inflight.get(related) if related is not None else None)

    def _send_notice(self, notice: dict[str, Any], related: mt.RequestId | None) -> None:
        self.write_nowait(notice)  # tell the client we no longer wait for it

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:
        """No SSE over stdio: nothing to do."""

    # -- 2026: modern requests ------------------------------------------------------------------

    def _start_modern(self, request: mt.JSONRPCRequest) -> None:
        """Validate a 2026-era request (raises for an error answer) and start its task."""
        modern_rules.check_meta(request.id, request.params)
        version = modern_rules.meta_version(request.params)
        assert isinstance(version, str)  # check_meta made sure
        revision = versions.revision(version)
        if revision is None or not revision.modern:
            raise modern_rules.unsupported_version(version, request.id)
        if not self.server.knows(request.method, revision):
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {request.method}")
        if request.method == "subscriptions/listen":
            listener = self._modern.subscriptions.listener(request, self.principal)
            self._start(request.id, self._run_listener, listener, request, revision, modern=True)
        else:
            self._start(request.id, self._run_modern, request, revision, modern=True)

    async def _run_modern(self, call: _Call, request: mt.JSONRPCRequest, revision: versions.Revision) -> None:
        message, _status = await self._modern.answer(
            request, revision, _ConnectionResponder(self, call), self.principal, self.carrier
        )
        await self.write(message, call)

    async def _run_listener(
        self, call: _Call, listener: Listener, request: mt.JSONRPCRequest, revision: versions.Revision
    ) -> None:
        """A ``subscriptions/listen`` request: the modern endpoint runs it, each message written for it
        (until the client cancels it, or it falls behind: then it just ends)."""
        with self._modern.listening(request, revision, self.principal, self.carrier):
            await self._modern.subscriptions.listen(listener, lambda message: self.write(message, call))

    # -- tasks ----------------------------------------------------------------------------------

    def _start(
        self, request_id: mt.RequestId, fn: Callable[..., Awaitable[None]], *args: Any, modern: bool = False
    ) -> None:
        """Run ``fn(call, *args)`` as the task of one request (a 2026-era one if ``modern``), in the
        connection's nursery."""
        assert self._nursery is not None, "connection not running"
        call = self._inflight[request_id] = _Call(request_id, modern)
        self._running += 1
        self._idle = trio.Event()
        self._nursery.start_soon(self._task, fn, call, *args, name=f"mcp request {request_id!r}")

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None:
        """A task of the connection that answers nothing (a hosted server's notification handler)."""
        assert self._nursery is not None, "connection not running"
        self._nursery.start_soon(self._contained, fn, *args, name=name)

    @staticmethod
    async def _contained(fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        with contained("a notification's task"):
            await fn(*args)

    async def _task(self, fn: Callable[..., Awaitable[None]], call: _Call, *args: Any) -> None:
        try:  # a bug must not end the server (handler errors are answered before this)
            with contained(f"the task of request {call.id!r}"), call.scope:
                await fn(call, *args)
            if call.scope.cancelled_caught and not call.cancelled:
                # cancelled by the shutdown rule (settle), not by the client: it is answered so
                await self.write(shutdown_answer(call.id), call)
        finally:
            if self._inflight.get(call.id) is call:
                del self._inflight[call.id]
            self._running -= 1
            if not self._running:
                self._idle.set()

    async def _error(self, request_id: mt.RequestId, code: int, message: str, data: Any = None) -> None:
        await self.write(jsonrpc.error_envelope(request_id, code, message, data))

    # -- writing --------------------------------------------------------------------------------

    async def write(self, message: dict[str, Any], call: _Call | None = None) -> None:
        """Queue one message for the client (waiting while the queue is full).  Nothing is written for a
        request the client cancelled, nor after the connection ends."""
        if call is not None and call.cancelled:
            return
        try:
            await self._queue_send.send((call, jsonrpc.encode(message)))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def write_nowait(self, message: dict[str, Any]) -> None:
        """Queue a message without waiting; dropped (with a warning) if the queue is full."""
        try:
            self._queue_send.send_nowait((None, jsonrpc.encode(message)))
        except trio.WouldBlock:
            peer_log.log(
                logging.WARNING, "the client is behind; dropped %s", message.get("method", "a message")
            )
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def _write_loop(self) -> None:
        """The one writer of the transport: sends queued messages (several at once when they pile up)."""
        try:
            async with self._queue_receive:
                async for call, line in self._queue_receive:
                    lines = [line] if call is None or not call.cancelled else []
                    while len(lines) < 64:
                        try:
                            call, line = self._queue_receive.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        if call is None or not call.cancelled:
                            lines.append(line)
                    if lines:
                        await self._transmit(lines)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            logger.info("the client's side is gone (%r); shutting down", exc)
            self.closing = True
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
        finally:
            self._writer_done.set()
