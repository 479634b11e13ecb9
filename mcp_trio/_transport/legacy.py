"""The 2025-era endpoint: POST, GET and DELETE of Streamable HTTP sessions (2025-03-26 to 2025-11-25).

A POST's ``initialize`` makes a session; later POSTs give it notifications, responses and requests,
each request answered on the POST's own stream (SSE, or one JSON body); a GET opens (or, with
``Last-Event-ID``, resumes) a stream; a DELETE ends the session.  Streams are written by tasks in their
session's nursery (see :class:`~mcp_trio._transport.session.Session`); the ASGI request task only waits
for its exchange to end while watching ``receive()`` for ``http.disconnect`` (:func:`wait`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as mt
import trio

from .._app.principal import PrincipalKeys, principal_identity
from .._observe.telemetry import HTTP
from .._protocol import http, jsonrpc
from .._protocol.admission import over_quota, refuse_modern, shutting_down
from .._protocol.cluster import session_owner
from .._protocol.session import check_batch
from ..auth.server._resource import BearerGuard
from ..auth.server._token import AccessToken
from ..errors import RemoteProtocolError, RPCError, SessionError
from .config import ServerConfig
from .core import ServerCore
from .forwarding import Forwarding
from .manager import SessionManager
from .ownership import Ownership
from .quotas import QuotaExceeded, client_address
from .session import Session
from .streams import Exchange, GuardedSend, reject, respond
from .wire import Receive

__all__ = ["LegacyEndpoint", "wait"]


class LegacyEndpoint:
    """The 2025-era requests of one app, once admitted (and, for a POST, its body read and its era
    chosen).  ``not_running`` makes the answer of an app that was never started."""

    def __init__(
        self,
        server: ServerCore,
        config: ServerConfig,
        manager: SessionManager,
        principals: PrincipalKeys,
        oauth: BearerGuard | None,
        not_running: Callable[[mt.RequestId | None], RemoteProtocolError],
    ) -> None:
        self.server = server
        self.config = config
        self.manager = manager
        self.principals = principals
        self.oauth = oauth
        self.not_running = not_running
        self.forwarding: Forwarding | None = None
        """With a worker id and a bus that links workers: how to reach the other workers."""
        self.ownership: Ownership | None = None
        """With a link that also keeps session records: adoption and hand-over of sessions."""

    # -- POST -------------------------------------------------------------------------------

    async def post(
        self,
        facts: http.RequestFacts,
        incoming: jsonrpc.Incoming,
        body: bytes,
        receive: Receive,
        send: GuardedSend,
        principal: object,
        client: object,
    ) -> None:
        """A 2025-era POST (``client``: the ASGI scope's, whose address a new session counts against
        its quota)."""
        http.check_protocol_version(facts)
        if self.oauth is not None and isinstance(principal, AccessToken):
            self.oauth.require_for_messages(principal, incoming.messages)
        initialize = [m for m in incoming.requests if m.method == "initialize"]
        if initialize:
            if incoming.batch:
                raise RemoteProtocolError("Invalid Request: initialize must not be part of a batch")
            await self._initialize(initialize[0], receive, send, principal, client_address(client))
            return
        if self.forwarding is None:  # one worker (the common case: no coroutine more per POST)
            session = self.session(facts, principal)
        else:
            found = await self._find(facts, send, None if incoming.requests else body, principal, client)
            if found is None:
                return
            session = found
        if incoming.requests and self.manager.stopping:  # notifications and answers are still taken
            raise shutting_down(incoming.requests[0].id if not incoming.batch else None)
        check_batch(incoming.batch, len(incoming.messages), session.revision, self.config.stream_buffer)
        session.check_request_ids(incoming.requests)
        with session.activity():
            session.receive_messages(incoming.messages)
            requests = incoming.requests
            if not requests:
                await respond(send, 202, b"", content_type=None)
                return
            stream = session.open_post_stream(requests, batch=incoming.batch)
            exchange = Exchange(send)
            with session.connection(stream, exchange):
                for request in requests:
                    session.start_request(request)
                await wait(exchange, receive, quick=self.config.sse_start_delay)

    async def _initialize(
        self,
        request: mt.JSONRPCRequest,
        receive: Receive,
        send: GuardedSend,
        principal: object,
        address: str | None,
    ) -> None:
        operation = self.server.telemetry.operation(
            "initialize", request.params, request.id, incoming=True, carrier=HTTP, principal=principal
        )
        try:
            session, result = await self._open_session(request, principal, address)
        except RemoteProtocolError as exc:
            if operation is not None:
                operation.finish(jsonrpc.error_envelope(request.id, exc.code, exc.message))
            raise
        except BaseException as exc:
            if operation is not None:
                operation.fail(exc)
            raise
        if operation is not None:
            operation.set_session(session.session_id, session.protocol_version)
            operation.finish({"result": result})
        with session.activity():
            stream = session.open_post_stream((request,), batch=False)
            exchange = Exchange(send, head=((b"mcp-session-id", session.session_id.encode()),))
            with session.connection(stream, exchange):
                await session.answer_now(request.id, jsonrpc.response(request.id, result))
                await wait(exchange, receive)

    async def _open_session(
        self, request: mt.JSONRPCRequest, principal: object, address: str | None
    ) -> tuple[Session, dict[str, Any]]:
        """The session an accepted ``initialize`` makes, and its answer's result."""
        try:
            accepted = await self.server.initialize_session(request.params)
        except RPCError as exc:
            raise RemoteProtocolError(exc.message, code=exc.code, request_id=request.id) from exc
        owner = self.principals.key(principal)
        try:  # validated: only now is a session made
            session = await self.manager.create(accepted.revision, owner=owner, address=address)
        except QuotaExceeded as exc:
            raise over_quota(exc.what, request.id) from None
        except SessionError as exc:
            if not self.manager.started:
                raise self.not_running(request.id) from exc
            if self.manager.refusing or self.manager.stopping:
                raise shutting_down(request.id) from exc
            raise http.server_busy() from exc
        session.principal = principal
        result = session.accept(accepted)
        if self.ownership is not None:  # its record, so that another worker can adopt it
            await self.ownership.opened(session)
        elif self.forwarding is not None:  # other workers may forward this session's answers here
            self.forwarding.link.session_opened(session.session_id, principal_identity(principal))
        return session, result

    async def _find(
        self,
        facts: http.RequestFacts,
        send: GuardedSend,
        answers: bytes | None,
        principal: object,
        client: object,
    ) -> Session | None:
        """The session a request names (``answers``: the body of a POST of only responses and
        notifications, which another worker's session gets through its inbox); None if the request
        was answered so."""
        if self.ownership is not None:
            found = await self.ownership.find(facts, send, answers, principal, client_address(client))
            return None if found is None else self._principal_owns(found, principal)
        if self.forwarding is not None and await self.forwarding.elsewhere(facts, send, answers, principal):
            return None
        return self.session(facts, principal)

    def session(self, facts: http.RequestFacts, principal: object) -> Session:
        """The session a request names, if it is this worker's and ``principal``'s; else 404."""
        session_id = http.check_session_header(facts)
        worker = self.config.worker_id
        if worker is not None and session_owner(session_id, (worker,)) is None:
            raise http.session_not_found()  # malformed, or another worker's: not a session of ours
        session = self.manager.get(session_id)
        if session is None:
            raise http.session_not_found()
        return self._principal_owns(session, principal)

    def _principal_owns(self, session: Session, principal: object) -> Session:
        if (  # its creator's alone (the very principal object it was made with is)
            principal is not session.principal and not self.principals.owns(session.owner, principal)
        ):
            raise http.session_not_found()
        if isinstance(principal, AccessToken):
            session.principal = principal  # its owner's newest token (a refreshed one, say)
        return session

    # -- GET and DELETE -----------------------------------------------------------------------

    async def get(
        self,
        facts: http.RequestFacts,
        receive: Receive,
        send: GuardedSend,
        principal: object,
        client: object = None,
    ) -> None:
        refuse_modern(facts)
        http.check_get(facts)
        session = await self._find(facts, send, None, principal, client)
        if session is None:
            return
        http.check_protocol_version(facts)
        stream, replay_after = session.streams.resume(facts.last_event_id)
        with session.activity():
            exchange = Exchange(send)
            with session.connection(stream, exchange, replay_after):
                await wait(exchange, receive)

    async def delete(
        self, facts: http.RequestFacts, send: GuardedSend, principal: object, client: object = None
    ) -> None:
        refuse_modern(facts)
        session = await self._find(facts, send, None, principal, client)
        if session is None:
            return
        http.check_protocol_version(facts)
        await session.aclose()
        await respond(send, 200, b"", content_type=None)


async def wait(exchange: Exchange, receive: Receive, *, quick: float = 0.0) -> None:
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
        await reject(exchange.send, http.session_not_found())
