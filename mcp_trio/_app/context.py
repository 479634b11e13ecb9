"""What a handler sees of the request it serves: :class:`Context`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, get_origin

import mcp_types as mt
from typing_extensions import TypeVar

from .._observe.telemetry import PIPE, Telemetry
from .._protocol import clientsession, jsonrpc, versions
from .inputs import InputRequest, missing_capability
from .lifespan import Lifespan

__all__ = ["LOG_LEVELS", "Context", "Peer", "is_context"]

LifespanT_co = TypeVar("LifespanT_co", covariant=True, default=Any)
"""The type of the server's lifespan value, as a handler sees it: ``Context[AppState]``."""

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


NO_SUBSCRIPTIONS: frozenset[str] = frozenset()
"""The resource subscriptions of a peer that has none: one shared empty frozenset (an empty set is 216
bytes per session); a handler that subscribes gives the peer a set of its own."""


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
    subscriptions: set[str] | frozenset[str]
    """The resource URIs it subscribed to (a shared empty frozenset until its first subscription)."""

    async def send_message(self, message: dict[str, Any], related: mt.RequestId | None = None) -> None: ...

    async def request(
        self, method: str, params: dict[str, Any] | None, related: mt.RequestId | None = None
    ) -> dict[str, Any]:
        """Send a server-to-client request and wait for its result (:class:`RPCError` for an error)."""
        ...

    async def ask(
        self, requests: Mapping[str, dict[str, Any]], related: mt.RequestId | None
    ) -> dict[str, Any]:
        """Get the client's raw answers to input requests (``{"method", "params"}`` by key)."""
        ...

    def close_sse_stream(self, related: mt.RequestId | None = None) -> None:
        """End the current HTTP connection of a stream without ending the stream (SSE polling)."""
        ...


@dataclass(slots=True)
class Context(Generic[LifespanT_co]):
    """Handed to the handlers that ask for it (a parameter annotated ``Context``, or
    ``Context[AppState]`` to type :attr:`lifespan_context`).

    Messages sent through it are related to the request: on an SSE response they travel on the
    request's own stream.
    """

    request_id: mt.RequestId
    method: str
    peer: Peer
    meta: dict[str, Any] = field(default_factory=dict)
    telemetry: Telemetry | None = None
    """What the notifications it sends are recorded into (its server's; None: not recorded)."""
    _asked: int = 0
    _lifespan: Lifespan[Any] | None = None
    """The lifespan of the server that answers (set by ``MCPServer.handle_request``)."""

    @property
    def lifespan_context(self) -> LifespanT_co:
        """What the server's lifespan yielded (``MCPServer(lifespan=...)``; None without one): the app's
        state, shared by every request while the server runs."""
        if self._lifespan is None:
            raise RuntimeError("this Context was not made by an MCPServer: it has no lifespan value")
        value: LifespanT_co = self._lifespan.value
        return value

    @property
    def session_id(self) -> str | None:
        return self.peer.session_id

    @property
    def protocol_version(self) -> str:
        return self.peer.protocol_version

    @property
    def principal(self) -> object:
        """Who sent the request: with ``ServerConfig.oauth``, its :class:`~mcp_trio.auth.AccessToken`
        (in a 2025 session, the newest token its owner sent); with ``ServerConfig.authenticate``, what
        the hook returned; None without authentication, and over stdio."""
        return getattr(self.peer, "principal", None)

    @property
    def client_session_id(self) -> str | None:
        """The id the client gave the conversation this request belongs to (``Mcp-Client-Session-Id``,
        following SEP-2822, a proposal that may change): a UUID, lower-case; None if the client sent
        none, or one of another form (ignored).  The client chose it: for state, use
        :attr:`client_session_key`."""
        return clientsession.from_meta(self.meta)

    @property
    def client_session_key(self) -> str | None:
        """:attr:`client_session_id` scoped by the principal: ``"{owner}/{id}"``, where ``owner`` is the
        principal's owner key (a keyed hash of who it is, ``""`` without authentication; the key that
        2025 sessions and 2026 tasks belong by).  Keep per-conversation state under this key, never
        under the bare id: two principals that send the same id get different keys, so one can never
        reach the other's state.  Workers agree on it when they share ``request_state_secret``.  None
        without a valid id, or when the peer cannot name the principal's owner key."""
        client_session_id = self.client_session_id
        if client_session_id is None:
            return None
        owner = getattr(self.peer, "owner", None)
        if not isinstance(owner, str):
            if self.principal is not None:
                return None  # no owner key to scope by: no key at all rather than a shared one
            owner = ""
        return f"{owner}/{client_session_id}"

    @property
    def progress_token(self) -> mt.ProgressToken | None:
        token = self.meta.get("progressToken")
        return token if isinstance(token, (str, int)) else None

    async def send_notification(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification related to the request (a CLIENT span when traced)."""
        message = jsonrpc.notification(method, params)
        operation = (
            None
            if self.telemetry is None
            else self.telemetry.operation(
                method,
                params,
                None,
                incoming=False,
                carrier=getattr(self.peer, "carrier", PIPE),
                protocol_version=self.protocol_version,
                session_id=self.session_id,
            )
        )
        if operation is None:
            await self.peer.send_message(message, self.request_id)
            return
        try:
            await self.peer.send_message(operation.inject(message), self.request_id)
        except BaseException as exc:
            operation.fail(exc)
            raise
        operation.finish()

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
        if threshold is None:
            revision = versions.revision(self.protocol_version)
            if revision is not None and revision.logs_need_opt_in:
                return  # 2026 era: no log notifications unless the request named a level
        elif LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
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

    # -- input from the client: sampling, elicitation, roots ------------------------------------

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send any request to the client (2025-era sessions only), related to this request, and wait
        for its result.  Raises :class:`RPCError` if the client answers an error."""
        return await self.peer.request(method, params, self.request_id)

    async def ask(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        """Ask the client for several inputs at once; returns each answer (as its result model) by key.

        2025 era: the requests go to the client concurrently on this request's stream.  2026 era: the
        missing ones are returned to the client in one ``InputRequiredResult``; the client retries and
        this handler runs again, finding them (handlers must therefore be safe to run again up to the
        point where they ask).  Raises -32021 if the client did not declare the capability."""
        for request in requests.values():
            if request.capability not in self.peer.client_capabilities:
                raise missing_capability(request.capability)
        revision = versions.revision(self.protocol_version)
        wire = {key: request.wire(revision) for key, request in requests.items()}
        answers = await self.peer.ask(wire, self.request_id)
        return {key: request.parse(key, answers[key]) for key, request in requests.items()}

    def _key(self, kind: str, key: str | None) -> str:
        if key is not None:
            return key
        self._asked += 1
        return f"{kind}-{self._asked}"

    async def sample(
        self,
        messages: list[mt.SamplingMessage | dict[str, Any]] | str,
        *,
        max_tokens: int = 1000,
        key: str | None = None,
        **params: Any,
    ) -> mt.CreateMessageResult:
        """``sampling/createMessage``: ask the client's LLM.  A string is one user text message;
        ``params`` are further params by their wire names (``systemPrompt``, ``modelPreferences`` ...).
        ``key`` names the input request in 2026-era results (default: a counter)."""
        key = self._key("sampling", key)
        answer: mt.CreateMessageResult = (
            await self.ask({key: InputRequest.sampling(messages, max_tokens=max_tokens, **params)})
        )[key]
        return answer

    async def elicit(
        self, message: str, requested_schema: dict[str, Any], *, key: str | None = None
    ) -> mt.ElicitResult:
        """``elicitation/create`` in form mode: ask the user for values matching ``requested_schema``."""
        key = self._key("elicitation", key)
        answer: mt.ElicitResult = (
            await self.ask({key: InputRequest.elicitation(message, requested_schema)})
        )[key]
        return answer

    async def elicit_url(
        self, message: str, url: str, elicitation_id: str | None = None, *, key: str | None = None
    ) -> mt.ElicitResult:
        """``elicitation/create`` in URL mode: send the user to ``url``."""
        key = self._key("elicitation", key)
        answer: mt.ElicitResult = (
            await self.ask({key: InputRequest.elicitation_url(message, url, elicitation_id)})
        )[key]
        return answer

    async def list_roots(self, *, key: str | None = None) -> mt.ListRootsResult:
        """``roots/list``: the client's roots."""
        key = self._key("roots", key)
        answer: mt.ListRootsResult = (await self.ask({key: InputRequest.roots()}))[key]
        return answer

    def close_sse_stream(self) -> None:
        """Close this request's SSE connection now, without ending its stream: the client reconnects
        with ``Last-Event-ID`` (after the ``retry`` delay) and gets the rest (SSE polling, 2025-11-25)."""
        self.peer.close_sse_stream(self.request_id)


_CONTEXT_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)*Context(?:\[.*\])?")


def is_context(annotation: object) -> bool:
    """Whether a parameter's annotation asks for the :class:`Context`: ``Context``, ``Context[T]``,
    or the same as a string (a module with ``from __future__ import annotations``)."""
    if annotation is Context or get_origin(annotation) is Context:
        return True
    return isinstance(annotation, str) and _CONTEXT_NAME.fullmatch(annotation.strip()) is not None
