"""The session core: one conversation with an MCP server over any transport.

Requests and their responses (an id each; the transport brings the response back), the notifications
and server-to-client requests that arrive meanwhile (routed to the request they came with, else to the
session), the cancellation of a request its caller gave up on, the handshake of either era, and the
answers to the server's requests (``sampling``, ``elicitation``, ``roots``: ``serving.py``), and what
each of these records (``observe.py``).  The typed methods are built on :meth:`SessionCore.request`
(``api.py``, ``tasks.py``, ``listen.py``, ``skills.py``).
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import mcp_types as mt
import pydantic
import trio

from .._observe.telemetry import Operation, Telemetry
from .._protocol import clientsession, versions
from .._protocol.tasks import TASKS_EXTENSION
from ..errors import MCPTrioError, RPCError, SessionExpired, TransportError
from .callbacks import ProgressHandler, check_callback, invoke
from .http import HTTPTransport, _ErrorAnswer
from .messages import MessageTransport
from .observe import Listed, error_type, failed, parent_of, sent, trace_context
from .options import DEFAULT_CLIENT_INFO, SessionOptions
from .retry import RetryPolicy, until_admitted
from .serving import reply_to, serve_request
from .wire import object_of, result_of, rpc_error, text_of, valid_id

if TYPE_CHECKING:
    from .renewal import Renewal

__all__ = ["SessionCore", "Transport", "object_of", "rpc_error", "text_of"]

logger = logging.getLogger(__name__)

MAX_INPUT_ROUNDS = 10
Transport = HTTPTransport | MessageTransport


@dataclass(eq=False)
class _Call:
    """One request in flight: its progress callback, its cancel scope, and the first exception a
    callback raised for it (the request then fails with that exception)."""

    progress: ProgressHandler | None
    scope: trio.CancelScope
    failure: Exception | None = None

    def fail(self, exc: Exception) -> None:
        if self.failure is None:
            self.failure = exc
        self.scope.cancel()


class SessionCore:
    """The core of :class:`ClientSession`: what every method of it is built on."""

    def __init__(self, transport: Transport, nursery: trio.Nursery, options: SessionOptions) -> None:
        self._transport = transport
        self._nursery = nursery
        self._ids = itertools.count(1)
        self.client_info = options.get("client_info") or DEFAULT_CLIENT_INFO
        self._sampling = options.get("sampling")
        self._elicitation = options.get("elicitation")
        self._roots = options.get("roots")
        self._on_notification = options.get("on_notification")
        self._on_log = options.get("on_log")
        self._progress: dict[Any, _Call] = {}
        self._failure: Exception | None = None  # a session-level callback failed: the session ends
        self.log_level = options.get("log_level")
        given = clientsession.parse(options.get("client_session_id"))
        self.client_session_id = given or clientsession.new_id()
        """The id this session gives the conversation (``Mcp-Client-Session-Id``, following SEP-2822, a
        proposal): in every request's ``_meta``, and a header of every HTTP request; a renewed session
        keeps it."""
        self.modern = False
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        self.instructions: str | None = None
        # per tool, the arguments that travel in Mcp-Param-* headers (learnt from tools/list; HTTP only)
        self._header_params: dict[str, dict[str, tuple[str, ...]]] = {}
        if isinstance(transport, HTTPTransport):
            transport.header_params = self._header_params
            transport.client_session_id = self.client_session_id
        self._running: set[trio.CancelScope] = set()
        self._tasks = options.get("tasks", True)  # declare the tasks extension (2026 era)
        self._closing = False
        self._renewal: Renewal | None = None  # a 2025-era HTTP session's GET stream and renewal
        self._subscribed: set[str] = set()  # the resources subscribed to (subscribed again on renewal)
        self._listed = Listed()  # the tools and prompts the server listed (metric attribute values)
        self.telemetry = Telemetry("client", self._listed.known, trusted_targets=True)
        """What this session's requests and its duration are recorded into (OpenTelemetry with the
        ``otel`` extra while a provider is set; ``telemetry.request_log = True`` logs each request)."""

    def _operation(
        self,
        method: str,
        params: dict[str, Any] | None,
        request_id: object,
        *,
        incoming: bool = False,
        current: bool = True,
    ) -> Operation | None:
        """Begin recording one message of this session (None when nothing records; see
        :mod:`.observe`)."""
        return self.telemetry.operation(
            method,
            params,
            request_id,
            incoming=incoming,
            carrier=self._transport.carrier,
            protocol_version=self.protocol_version,
            session_id=self._transport.session_id,
            current=current,
        )

    @property
    def session_id(self) -> str | None:
        """The session's id (``Mcp-Session-Id``: a 2025-era session over HTTP; a renewed session's new
        id), else None."""
        return self._transport.session_id

    @property
    def renewals(self) -> int:
        """How many times the session was renewed after the server answered 404 for it."""
        return self._renewal.renewals if self._renewal is not None else 0

    def _expired(self, exc: SessionExpired) -> None:
        """The server answered 404 for the session: renew it, for the calls that follow."""
        if self._renewal is not None:
            self._renewal.expired(exc.session_id)

    def _owned(self) -> AbstractContextManager[None]:
        """A task of the current session (cancelled if a renewal replaces it)."""
        return self._renewal.owned() if self._renewal is not None else nullcontext()

    def _cancel_running(self) -> None:
        """The session ends: requests still waiting (in any task) fail promptly."""
        self._closing = True
        for scope in self._running:
            scope.cancel()

    def _fail(self, exc: Exception) -> None:
        """A callback failed outside any request: the session ends, and its block raises ``exc``."""
        if self._failure is None:
            self._failure = exc
        self._nursery.cancel_scope.cancel()

    def _set_era(self, version: versions.Revision | None) -> None:
        """The version the session speaks from now on (None: not known yet), on the session and its
        transport alike."""
        self.modern = self._transport.modern = version is not None and version.modern
        self.protocol_version = self._transport.protocol_version = version.name if version else None

    # -- handshake ----------------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        caps: dict[str, Any] = {}
        if self._sampling is not None:
            caps["sampling"] = {}
        if self._elicitation is not None:
            caps["elicitation"] = {"form": {}, "url": {}}
        if self._roots is not None:
            caps["roots"] = {}
        if self.modern and self._tasks:  # declared per request, so 2026 era only
            caps["extensions"] = {TASKS_EXTENSION: {}}
        return caps

    async def _initialize(self, version: str) -> None:
        params = {
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "clientInfo": self.client_info,
        }
        result = await self.request("initialize", params)
        negotiated = result.get("protocolVersion")
        found = versions.revision(negotiated) if isinstance(negotiated, str) else None
        if found is None or found.modern:
            raise TransportError(f"the server answered initialize with unsupported version {negotiated!r}")
        self._set_era(found)
        self.server_info = object_of(result.get("serverInfo"))
        self.server_capabilities = object_of(result.get("capabilities"))
        self.instructions = text_of(result.get("instructions"))
        await self.notify("notifications/initialized")
        if self.log_level is not None and "logging" in self.server_capabilities:
            try:  # log_level= means the same in both eras: the server's logs from this level up
                await self.request("logging/setLevel", {"level": self.log_level})
            except RPCError as exc:
                logger.warning("the server refused logging/setLevel %s: %s", self.log_level, exc.message)

    async def _discover(self) -> bool:
        """Try the modern era: True if the server answers ``server/discover`` as a modern server."""
        self._set_era(versions.LATEST_MODERN)
        result: dict[str, Any] | None = None
        for _attempt in range(2):  # a -32022 naming our version is worth one retry
            try:
                result = await self.request("server/discover")
                break
            except RPCError as exc:
                supported = object_of(exc.data).get("supported")
                if exc.code != mt.UNSUPPORTED_PROTOCOL_VERSION or versions.LATEST_MODERN.name not in (
                    supported if isinstance(supported, list) else ()
                ):
                    return self._fall_back(exc)
            except TransportError as exc:
                return self._fall_back(exc)
        offered = result.get("supportedVersions") if result is not None else None
        if result is None or versions.LATEST_MODERN.name not in (
            offered if isinstance(offered, list) else ()
        ):
            return self._fall_back(
                f"server/discover did not offer {versions.LATEST_MODERN.name}: {result!r:.300}"
            )
        self.server_info = object_of(object_of(result.get("_meta")).get(mt.SERVER_INFO_META_KEY))
        self.server_capabilities = object_of(result.get("capabilities"))
        self.instructions = text_of(result.get("instructions"))
        return True

    def _fall_back(self, why: object) -> bool:
        self._set_era(None)
        logger.info("not a modern server (%s): falling back to initialize", why)
        return False

    # -- messages -----------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            versions.PROTOCOL_VERSION_META_KEY: self.protocol_version,
            mt.CLIENT_INFO_META_KEY: self.client_info,
            mt.CLIENT_CAPABILITIES_META_KEY: self.capabilities(),
            clientsession.META_KEY: self.client_session_id,
        }
        if self.log_level is not None:
            meta[mt.LOG_LEVEL_META_KEY] = self.log_level
        return meta

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, progress: ProgressHandler | None = None
    ) -> dict[str, Any]:
        """Send a request; return its result (raises :class:`RPCError` for an error answer).

        ``progress`` (plain or async, see ``ProgressHandler``) gets the request's progress
        notifications; if it raises, the request is cancelled and this raises its exception.

        Cancelling the caller cancels the request: the POST is abandoned (which is the cancellation of
        a 2026-era request) and a 2025-era session also gets ``notifications/cancelled``."""
        check_callback("progress", progress)
        params = dict(params or {})
        if self.modern:
            params["_meta"] = {**self._meta(), **params.get("_meta", {})}
        else:  # 2025 era: the client session id alone (SEP-2822 sends it with every request)
            params["_meta"] = {clientsession.META_KEY: self.client_session_id, **params.get("_meta", {})}
        policy = getattr(self._transport, "retry", None)  # (an HTTP transport retries its 429s itself)
        for _round in range(MAX_INPUT_ROUNDS):
            once = functools.partial(self._request_once, method, params, progress)
            result = await until_admitted(method, once, policy if isinstance(policy, RetryPolicy) else None)
            if result.get("resultType") != "input_required":
                return result
            params = await self._answer_inputs(params, result)
        raise TransportError(f"{method}: the server still wanted input after {MAX_INPUT_ROUNDS} rounds")

    async def _request_once(
        self, method: str, params: dict[str, Any], progress: ProgressHandler | None
    ) -> dict[str, Any]:
        if self._renewal is not None:  # a session being renewed: wait for the new one (no checkpoint
            await self._renewal.ready()  # from here to the POST, which takes the session id it finds)
        request_id = next(self._ids)
        operation = self._operation(method, params, request_id)
        if operation is None:
            return result_of(method, await self._exchange(method, params, progress, request_id, None))
        try:
            answer = await self._exchange(method, params, progress, request_id, operation)
            result = result_of(method, answer)
        except BaseException as exc:
            failed(operation, exc)
            raise
        if method == "initialize":  # the session and its version are known now
            version = result.get("protocolVersion")
            operation.set_session(self._transport.session_id, version if isinstance(version, str) else None)
        operation.finish(answer)
        return result

    async def _exchange(
        self,
        method: str,
        params: dict[str, Any],
        progress: ProgressHandler | None,
        request_id: int,
        operation: Operation | None,
    ) -> dict[str, Any]:
        """Send one request and wait for its answer (the JSON-RPC response message)."""
        call = _Call(progress, trio.CancelScope())
        if progress is not None:
            params = {**params, "_meta": {**params.get("_meta", {}), "progressToken": request_id}}
            self._progress[request_id] = call
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params or self.modern:
            message["params"] = params
        if operation is not None:
            message = operation.inject(message)
            sent.set(trace_context(message))

        async def on_message(message: dict[str, Any]) -> None:  # what arrives on this request's answer
            await self._dispatch(message, call)

        answer = None
        try:
            with call.scope:  # cancelled if the session ends first, or if a callback fails
                self._running.add(call.scope)
                try:
                    answer = await self._transport.post(message, on_message)
                except _ErrorAnswer as exc:
                    answer = exc.body
                except SessionExpired as exc:
                    self._expired(exc)
                    raise
                finally:
                    self._running.discard(call.scope)
        except trio.Cancelled:
            await self._abandon(method, request_id)
            raise
        finally:
            self._progress.pop(request_id, None)
        if call.failure is not None:
            if answer is None:
                await self._abandon(method, request_id)
            raise call.failure
        if answer is None:
            raise TransportError(f"{method}: the session ended before the answer arrived")
        return answer

    async def _abandon(self, method: str, request_id: int) -> None:
        """We gave up on a request.  HTTP 2026: abandoning the POST is the cancellation; elsewhere the
        server is told."""
        messages = isinstance(self._transport, MessageTransport)  # stdio, WebSocket
        if (messages or not self.modern) and method != "initialize":
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                try:
                    await self.notify("notifications/cancelled", {"requestId": request_id})
                except (MCPTrioError, httpx.HTTPError) as exc:  # an OAuthError too: best effort only
                    logger.info("could not cancel the server's %s: %r", method, exc)

    async def _answer_inputs(self, params: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """Answer the input requests of an input-required result, for the retry."""
        requests = result.get("inputRequests")
        if requests is not None and not isinstance(requests, dict):
            raise TransportError(f"the server's inputRequests is not an object: {requests!r:.200}")
        answers = await self._gather_inputs(requests or {})
        retry = {k: v for k, v in params.items() if k not in ("inputResponses", "requestState")}
        retry["inputResponses"] = answers
        if "requestState" in result:
            retry["requestState"] = result["requestState"]
        return retry

    async def _gather_inputs(self, requests: Mapping[str, Any]) -> dict[str, Any]:
        """Answer input requests (key -> ``{"method", "params"}``) concurrently with the callbacks.  A
        handler's exception (there is no error answer to an input request) cancels the others and is
        raised as it is."""
        answers: dict[str, Any] = {}
        round_meta = sent.get()  # the trace context of the request whose answer asked for them

        async def answer(key: str, request: dict[str, Any]) -> None:
            await trio.lowlevel.checkpoint_if_cancelled()  # a sibling failed already
            params = request.get("params")
            params = params if isinstance(params, dict) else {}
            method = str(request.get("method", ""))
            operation = self._operation(method, parent_of(params, round_meta), None, incoming=True)
            if operation is None:
                answers[key] = await self._serve(method, params)
                return
            try:
                answers[key] = await self._serve(method, params)
            except BaseException as exc:
                failed(operation, exc)
                raise
            operation.finish({"result": answers[key]})

        try:
            async with trio.open_nursery() as nursery:
                for key, request in requests.items():
                    nursery.start_soon(answer, key, request if isinstance(request, dict) else {})
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        return answers

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if self._renewal is not None:
            await self._renewal.ready()
        operation = self._operation(method, params, None)
        if operation is not None:
            message = operation.inject(message)
        try:
            await self._transport.post(message, self._dispatch)
        except BaseException as exc:
            if operation is not None:
                failed(operation, exc)
            if isinstance(exc, SessionExpired):
                self._expired(exc)
            raise
        if operation is not None:
            operation.finish()

    async def _dispatch(self, message: dict[str, Any], call: _Call | None = None) -> None:
        """A message from the server that is not the awaited response.  ``call`` is the request on
        whose answer it arrived (None: the GET stream, stdio's reader).

        A callback that raises fails the request it belongs to: the progress callback's own request,
        else ``call``; with no request, the session (:meth:`_fail`)."""
        if "method" in message and "id" in message:
            self._nursery.start_soon(self._answer_server_request, message)
            return
        method = message.get("method")
        if not isinstance(method, str) or (call is not None and call.failure is not None):
            return  # a stray response, or the rest of the answer of a request that failed already
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "notifications/progress":
            token = params.get("progressToken")
            owner = self._progress.get(token) if valid_id(token) else None
            if owner is not None and owner.progress is not None and owner.failure is None:
                try:
                    progress = params.get("progress", 0)
                    await invoke(owner.progress, progress, params.get("total"), params.get("message"))
                except Exception as exc:
                    owner.fail(exc)
                    await trio.lowlevel.checkpoint()  # the failed request, if it is this task, ends here
                    return
        elif method == "notifications/message" and self._on_log is not None:
            try:
                log = mt.LoggingMessageNotificationParams.model_validate(params)
            except pydantic.ValidationError as exc:
                logger.info("a malformed log notification was not passed to on_log: %s", exc)
            else:
                if not await self._run_callback(self._on_log, log, call):
                    return
        if self._on_notification is not None:
            await self._run_callback(self._on_notification, message, call)

    async def _run_callback(
        self, fn: Callable[[Any], Awaitable[None] | None], arg: Any, call: _Call | None
    ) -> bool:
        """Run a notification callback; False if it raised (the failure is then routed)."""
        try:
            await invoke(fn, arg)
        except Exception as exc:
            if call is not None:
                call.fail(exc)
            else:
                self._fail(exc)
            await trio.lowlevel.checkpoint()  # whoever failed, if it is this task, ends here
            return False
        return True

    async def _answer_server_request(self, message: dict[str, Any]) -> None:
        with self._owned():
            await self._answer(message)

    async def _answer(self, message: dict[str, Any]) -> None:
        """Answer a request of the server (recorded as a SERVER span under the server's CLIENT span)."""
        params = message.get("params")
        operation = self._operation(
            message["method"], params if isinstance(params, dict) else None, message["id"], incoming=True
        )
        try:
            reply = await reply_to(message, self._serve)
            try:
                await self._transport.post(reply, self._dispatch)
            except (TransportError, httpx.HTTPError) as exc:
                logger.info("could not answer the server's %s: %r", message["method"], exc)
                if isinstance(exc, SessionExpired):
                    self._expired(exc)
                if operation is not None:
                    operation.finish(reply, error_type(exc), str(exc))
                return
        except BaseException as exc:
            if operation is not None:
                failed(operation, exc)
            raise
        if operation is not None:
            operation.finish(reply)

    async def _serve(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run the handler of a server-to-client request (or input request)."""
        return await serve_request(method, params, self._sampling, self._elicitation, self._roots)
