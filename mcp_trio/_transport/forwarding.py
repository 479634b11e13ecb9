"""2025 sessions across workers: requests for a session another worker owns (see docs/deploy/workers).

A session id made with a worker id starts with its owner (``"<worker>.<random>"``, see
``_protocol.cluster.session_owner``).  A request for another worker's session is answered here: a POST
holding only responses and notifications is forwarded to the owner through the worker link; anything
else is told to go to the owner (503) or that there is no such session (404).  Bodies forwarded to this
worker come in through :meth:`Forwarding.deliver`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from .._app.principal import principal_identity
from .._protocol import http, jsonrpc
from .._protocol.admission import lives_elsewhere
from .._protocol.cluster import session_owner
from ..errors import RemoteProtocolError
from .manager import SessionManager
from .session import Session
from .streams import GuardedSend, respond

__all__ = ["RELEASE_BODY", "Forwarding", "WorkerLink"]

RELEASE_BODY = b'{"jsonrpc":"2.0","method":"notifications/mcp_trio/release"}'
"""What a session's home puts in the owner's inbox to have the session handed back (a worker writes
it, signed as every inbox entry; a client's POST of the same bytes is refused: see ``ownership``)."""


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


class Forwarding:
    """The worker link of one app (this worker is ``worker``), once :meth:`MCPApp.run` found one."""

    __slots__ = ("link", "manager", "on_release", "worker")

    def __init__(self, link: WorkerLink, worker: str, manager: SessionManager) -> None:
        self.link = link
        self.worker = worker
        self.manager = manager
        self.on_release: Callable[[Session], None] | None = None
        """Called when a session's home asks for it back (``ownership.RELEASE_BODY`` in the inbox)."""
        link.attach_worker(worker, self.deliver)
        manager.on_forget = lambda session: link.session_closed(session.session_id)

    async def elsewhere(
        self, facts: http.RequestFacts, send: GuardedSend, body: bytes | None, principal: object
    ) -> bool:
        """A request for a session another worker owns.  ``body`` (a POST holding only responses and
        notifications, from ``principal``) is forwarded to the owner's inbox and answered 202 if the
        owner has that session with that principal; 404 if it has not (or is gone), decided before
        anything is written; 503 with ``Retry-After`` if Redis cannot tell now, or the owner's inbox is
        full.  The rest (requests, GET, DELETE) is 503 with ``Retry-After`` if the owner has the session
        of that principal (or Redis cannot tell), 404 if not.  Principals are compared by
        :func:`principal_identity` (a custom principal needs a stable ``repr``).  False: not another
        worker's session (the request goes on as usual)."""
        if not facts.session_id:
            return False
        session_id = http.check_session_header(facts)
        owner = session_owner(session_id)
        if owner is None or owner == self.worker:
            return False
        http.check_protocol_version(facts)
        if body == RELEASE_BODY:  # never from a client
            raise http.session_not_found()
        identity = principal_identity(principal)
        alive: bool | None
        if body is not None:
            outcome = await self.link.forward_to_worker(owner, session_id, body, identity)
            if outcome == "sent":
                await respond(send, 202, b"", content_type=None)
                return True
            alive = None if outcome in ("unavailable", "full") else False
        else:
            known = await self.link.has_session(owner, session_id, identity)
            alive = False if known is False else None  # it has the session: 503, send it there
        if alive is False:
            raise http.session_not_found()
        raise lives_elsewhere(owner)

    def deliver(self, session_id: str, body: bytes, principal_tag: str) -> bool:
        """A POST body another worker forwarded to this one (responses and notifications of one of its
        sessions, sent by the principal of ``principal_tag``), handled as a POST of them here would be;
        False if it cannot be (no such session here, a session of another principal, or invalid for
        it): the caller drops and counts it."""
        session = self.manager.get(session_id)
        if session is None:
            return False
        if not self.link.principal_matches(principal_identity(session.principal), principal_tag):
            return False
        if body == RELEASE_BODY:
            if self.on_release is None:
                return False
            self.on_release(session)
            return True
        try:
            incoming = jsonrpc.parse_body(body, allow_batch=True)
            if incoming.requests or (incoming.batch and not session.revision.batches):
                return False
            with session.activity():
                session.receive_messages(incoming.messages)
        except RemoteProtocolError:
            return False
        return True
