"""What a 2025-era session is to its handlers, whatever carries its messages.

An HTTP session (:class:`~mcp_trio._transport.session.Session`) and a message connection
(:class:`~mcp_trio._transport.connection.MessageConnection`: stdio today) differ only in how a message
reaches the client.  The rest of a 2025 session is here, once: what ``initialize`` agreed, the
handler's answer as a JSON-RPC message, ``notifications/cancelled``, and server-to-client requests
(sampling, elicitation, roots) with the client's answers routed back to the waiting handler.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as mt

from .._app.context import NO_SUBSCRIPTIONS, Context
from .._app.outgoing import PendingRequests, ask_concurrently
from .._observe.telemetry import PIPE, Carrier
from .._protocol import jsonrpc
from .._runtime.containment import contained
from ..errors import RPCError

if TYPE_CHECKING:
    from .._app.server import Initialized
    from .core import ServerCore

__all__ = ["RECORDED_METHODS", "SessionPeer"]

RECORDED_METHODS = frozenset({"logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
"""The requests that change what a session's record holds (see :attr:`SessionPeer.on_change`)."""

logger = logging.getLogger(__name__)


class SessionPeer:
    """The transport-neutral half of a 2025 session (a :class:`~mcp_trio._app.context.Peer`).

    A subclass sets :attr:`server` and carries messages: :meth:`_send_request` sends a server-to-client
    request for a handler, :meth:`_send_notice` a ``notifications/cancelled`` when the handler stops
    waiting; :meth:`_cancel_request` cancels a running request's handler.
    """

    __slots__ = (
        "_outgoing",
        "client_capabilities",
        "client_info",
        "hosted",
        "log_level",
        "on_change",
        "protocol_version",
        "subscriptions",
    )

    server: ServerCore
    session_id: str | None
    closing: bool
    principal: object
    protocol_version: str
    carrier: Carrier = PIPE
    """How the session's messages travel (its telemetry's ``network.*`` attributes)."""

    def _init_session(self) -> None:
        self.log_level: mt.LoggingLevel | None = None
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.subscriptions: set[str] | frozenset[str] = NO_SUBSCRIPTIONS  # a set once it subscribes
        self._outgoing = PendingRequests()
        self.hosted: object = None
        """What the server keeps for this session (:attr:`Initialized.state`): a hosted python-sdk
        server's session kernel, None otherwise (and in a session adopted from another worker, until
        the server rebuilds it)."""
        self.on_change: Callable[[SessionPeer], None] | None = None
        """Called when what the session's record holds changed (``notifications/initialized``, the
        log level, its subscriptions): a worker that keeps its sessions in Redis writes it again."""

    def accept(self, accepted: Initialized) -> dict[str, Any]:
        """Take on what ``initialize`` agreed; returns the response to send."""
        self.protocol_version = accepted.revision.name
        self.client_info = accepted.client_info
        self.client_capabilities = accepted.client_capabilities
        self.hosted = accepted.state
        return accepted.result

    # -- incoming -------------------------------------------------------------------------------

    def receive_messages(self, messages: Iterable[jsonrpc.Message]) -> None:
        """The notifications and responses among a POST body's ``messages`` (its requests are the
        caller's to start)."""
        for message in messages:
            if isinstance(message, mt.JSONRPCNotification):
                self.receive_notification(message)
            elif not isinstance(message, mt.JSONRPCRequest):
                self.receive_response(message)

    def receive_notification(self, message: mt.JSONRPCNotification) -> None:
        operation = self.server.telemetry.operation(
            message.method,
            message.params,
            None,
            incoming=True,
            carrier=self.carrier,
            protocol_version=self.protocol_version,
            session_id=self.session_id,
        )
        self._notification(message)
        if operation is not None:
            operation.finish()

    def _notification(self, message: mt.JSONRPCNotification) -> None:
        if message.method == "notifications/initialized":
            self._initialized()
            if self.on_change is not None:
                self.on_change(self)
        elif message.method == "notifications/cancelled":
            request_id = (message.params or {}).get("requestId")
            if isinstance(request_id, (str, int)):
                self._cancel_request(request_id)
                return
        job = self.server.notified(self, message.method, message.params)
        if job is not None:  # the server's own handling of it (a hosted server's notification handler)
            self._spawn(job, name=f"mcp notification {message.method}")

    def _initialized(self) -> None:
        raise NotImplementedError

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None:
        """Start a task of the session (in its nursery)."""
        raise NotImplementedError

    def _cancel_request(self, request_id: mt.RequestId) -> None:
        raise NotImplementedError

    def receive_response(self, message: mt.JSONRPCResponse | mt.JSONRPCError) -> None:
        """A client's answer to a server-to-client request: wakes the handler waiting for it."""
        if not self._outgoing.deliver(message):
            logger.debug("session %s: response %r has no waiting request", self.session_id, message.id)

    async def answer(self, request: mt.JSONRPCRequest) -> dict[str, Any]:
        """Run the request's handler; its result or error as the JSON-RPC message to send.  A handler
        that fails unexpectedly is logged and answered -32603.  Recorded (a SERVER span, the operation
        histogram, the request log) when the server's telemetry records anything."""
        operation = self.server.telemetry.operation(
            request.method,
            request.params,
            request.id,
            incoming=True,
            carrier=self.carrier,
            protocol_version=self.protocol_version,
            session_id=self.session_id,
            principal=self.principal,
        )
        if operation is None:
            return await self._answer(request)
        try:
            message = await self._answer(request)
        except BaseException as exc:
            operation.fail(exc)
            raise
        operation.finish(message)
        return message

    async def _answer(self, request: mt.JSONRPCRequest) -> dict[str, Any]:
        params = request.params
        meta = params.get("_meta") if params else None
        ctx = Context(
            request.id, request.method, self, meta if isinstance(meta, dict) else {}, self.server.telemetry
        )
        with contained(f"handler of {request.method}") as failure:
            try:
                result = await self.server.handle_request(ctx, request.method, params)
            except RPCError as exc:
                return jsonrpc.error_envelope(request.id, exc.code, exc.message, exc.data)
            if self.on_change is not None and request.method in RECORDED_METHODS:
                self.on_change(self)
            return jsonrpc.response(request.id, result)
        assert failure.caught is not None
        return jsonrpc.error_envelope(request.id, mt.INTERNAL_ERROR, "Internal error")

    # -- server-to-client requests --------------------------------------------------------------

    async def request(
        self, method: str, params: dict[str, Any] | None, related: mt.RequestId | None = None
    ) -> dict[str, Any]:
        """Send a server-to-client request (related to a handler's request) and wait for the answer
        (a CLIENT span, its trace context in the request's ``params._meta``, when traced)."""
        operation = self.server.telemetry.operation(
            method,
            params,
            None,
            incoming=False,
            carrier=self.carrier,
            protocol_version=self.protocol_version,
            session_id=self.session_id,
        )
        call = self._outgoing.call(
            method,
            params,
            lambda message: self._send_request(
                message if operation is None else operation.inject(message), related
            ),
            lambda notice: None if self.closing else self._send_notice(notice, related),
        )
        if operation is None:
            return await call
        try:
            result = await call
        except RPCError as exc:
            operation.finish({"error": {"code": exc.code, "message": exc.message}})
            raise
        except BaseException as exc:
            operation.fail(exc)
            raise
        operation.finish({"result": result})
        return result

    async def ask(
        self, requests: Mapping[str, dict[str, Any]], related: mt.RequestId | None
    ) -> dict[str, Any]:
        """Input requests of a handler: sent as server-to-client requests, concurrently."""
        return await ask_concurrently(self.request, requests, related)

    # -- what a transport provides -------------------------------------------------------------

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None:
        raise NotImplementedError

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:
        raise NotImplementedError

    async def _send_request(self, message: dict[str, Any], related: mt.RequestId | None) -> None:
        raise NotImplementedError

    def _send_notice(self, notice: dict[str, Any], related: mt.RequestId | None) -> None:
        raise NotImplementedError
