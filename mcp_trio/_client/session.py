"""The MCP client: :func:`open_client_session`, an async context manager that owns a nursery."""

from __future__ import annotations

import inspect
import itertools
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar, cast, overload

import httpx
import mcp_types as mt
import pydantic
import trio

from .._protocol import modern as modern_rules
from .._protocol import versions
from ..errors import MCPTrioError, RPCError
from . import skills as skills_ext
from .http import (
    MAX_MESSAGE_SIZE,
    HTTPTransport,
    MessageStream,
    SessionExpired,
    TransportError,
    _ErrorAnswer,
    modern_headers,
    peer_log,
    valid_id,
)
from .messages import MessageTransport
from .stdio import StdioTransport, start_process
from .tasks import CANCEL_GRACE, TASKS_EXTENSION, TaskCancelled, TaskError, TaskInfo, TaskStatusHandler
from .websocket import WebSocketTransport

__all__ = [
    "ClientSession",
    "ElicitationHandler",
    "LogHandler",
    "NotificationHandler",
    "ProgressHandler",
    "RootsHandler",
    "SamplingHandler",
    "Subscription",
    "TaskCancelled",
    "TaskError",
    "TaskInfo",
    "TaskStatusHandler",
    "open_client_session",
    "open_stdio_client",
    "open_websocket_client",
]

logger = logging.getLogger(__name__)

Mode = Literal["auto", "legacy", "modern"]

# The callbacks.  Each may be a plain function or an async one (or anything callable: a
# functools.partial, an object with a plain or an async __call__): the client calls it and awaits what
# it returns if that is awaitable.  A plain callback runs directly in a Trio task of the session, so it
# must not block; do blocking work in an async callback with ``await trio.to_thread.run_sync(...)``.

SamplingHandler: TypeAlias = Callable[
    [mt.CreateMessageRequestParams], Awaitable[mt.CreateMessageResult] | mt.CreateMessageResult
]
"""``sampling=``: ``(CreateMessageRequestParams) -> CreateMessageResult``, plain or async.  Answers the
server's ``sampling/createMessage``; raise :class:`RPCError` to answer an error."""

ElicitationHandler: TypeAlias = Callable[
    [mt.ElicitRequestParams], Awaitable[mt.ElicitResult] | mt.ElicitResult
]
"""``elicitation=``: ``(ElicitRequestParams) -> ElicitResult``, plain or async (the params are an
``ElicitRequestFormParams`` or an ``ElicitRequestURLParams``).  Answers ``elicitation/create``."""

RootsHandler: TypeAlias = Callable[[], Awaitable[mt.ListRootsResult] | mt.ListRootsResult]
"""``roots=``: ``() -> ListRootsResult``, plain or async.  Answers ``roots/list``."""

LogHandler: TypeAlias = Callable[[mt.LoggingMessageNotificationParams], Awaitable[None] | None]
"""``on_log=``: ``(LoggingMessageNotificationParams) -> None``, plain or async.  Gets each
``notifications/message`` (level, logger, data)."""

NotificationHandler: TypeAlias = Callable[[dict[str, Any]], Awaitable[None] | None]
"""``on_notification=``: ``(message: dict) -> None``, plain or async.  Gets every notification the
server sends, as the JSON-RPC message (progress and log messages included)."""

ProgressHandler: TypeAlias = Callable[[float, float | None, str | None], Awaitable[None] | None]
"""``progress=`` of :meth:`ClientSession.call_tool` and :meth:`ClientSession.request`:
``(progress, total, message) -> None``, plain or async; ``total`` and ``message`` may be None."""

_SIGNATURES = {
    "progress": "(progress, total, message) -> None",
    "sampling": "(CreateMessageRequestParams) -> CreateMessageResult",
    "elicitation": "(ElicitRequestParams) -> ElicitResult",
    "roots": "() -> ListRootsResult",
    "on_log": "(LoggingMessageNotificationParams) -> None",
    "on_notification": "(message: dict) -> None",
    "on_task_status": "(TaskInfo) -> None",
}
M = TypeVar("M", bound=pydantic.BaseModel)
R = TypeVar("R")
MAX_INPUT_ROUNDS = 10
Transport = HTTPTransport | MessageTransport


def _rpc_error(error: Any) -> RPCError:
    """The :class:`RPCError` of a JSON-RPC error object from a server (a code that is not an integer is
    taken as -32603, a message that is not a string as empty: what a server sends is not trusted)."""
    if not isinstance(error, dict):
        return RPCError(mt.INTERNAL_ERROR, f"the server's error is not an error object: {error!r:.200}")
    code = error.get("code")
    message = error.get("message")
    return RPCError(
        code if valid_id(code) and isinstance(code, int) else mt.INTERNAL_ERROR,
        message if isinstance(message, str) else "",
        error.get("data"),
    )


def _validated(model: type[M], value: Any, what: str) -> M:
    """``value`` as ``model``; a server's answer that is not one is a :class:`TransportError`."""
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise TransportError(f"the answer to {what} is not a valid {model.__name__}: {exc}") from None


def _object(value: Any) -> dict[str, Any]:
    """``value`` if a server sent an object there, else an empty one."""
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_ELICIT_PARAMS: pydantic.TypeAdapter[mt.ElicitRequestParams] = pydantic.TypeAdapter(mt.ElicitRequestParams)


def _params(model: Any, method: str, params: dict[str, Any]) -> Any:
    """A server's request params validated (``model`` a model class or a TypeAdapter); params of the
    wrong shape are an :class:`RPCError` -32602 (the error answer to the server's request; raised out
    of the call whose input it was, in the 2026 era)."""
    try:
        if isinstance(model, pydantic.TypeAdapter):
            return model.validate_python(params)
        return model.model_validate(params)
    except pydantic.ValidationError as exc:
        peer_log(logging.INFO, "bad-params", "the server's %.100s had invalid params", method)
        raise RPCError(
            mt.INVALID_PARAMS, f"invalid params for {method}: {exc.error_count()} errors"
        ) from None


def _check_callback(name: str, value: object) -> None:
    """Refuse, at once, a callback that cannot be called."""
    if value is None or callable(value):
        return
    hint = " (pass the function itself, not the result of calling it)" if inspect.isawaitable(value) else ""
    raise TypeError(f"{name}= takes a function {_SIGNATURES[name]}, plain or async{hint}; got {value!r:.200}")


async def _call(fn: Callable[..., Awaitable[R] | R], *args: Any) -> R:
    """Call a user callback, plain or async.

    Calling it and awaiting the result if it is awaitable covers every kind at once: coroutine
    functions, ``functools.partial`` of them, objects with an async ``__call__``, plain functions that
    return an awaitable, and plain functions (whose result is used as it is)."""
    result = fn(*args)
    if inspect.isawaitable(result):
        return cast(R, await result)
    return result


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


@dataclass(eq=False)
class _Watch:
    """A task being waited for: as last seen, and whether it ended (a terminal status, or gone)."""

    task: TaskInfo
    ended: bool = False


def _task_outcome(task: TaskInfo) -> mt.CallToolResult:
    """What the call of an ended task returns or raises."""
    if task.status == "completed":
        if task.result is None:
            raise TransportError(f"task {task.task_id} completed without a result")
        return mt.CallToolResult.model_validate(task.result)
    if task.status == "failed":
        error = task.error or {}
        code, message = error.get("code"), error.get("message")
        raise RPCError(
            code if isinstance(code, int) and not isinstance(code, bool) else mt.INTERNAL_ERROR,
            message if isinstance(message, str) else task.status_message or f"task {task.task_id} failed",
            error.get("data"),
        )
    why = f": {task.status_message}" if task.status_message else ""
    raise TaskCancelled(f"task {task.task_id} was cancelled{why}", task)


class ClientSession:
    """A conversation with one MCP server, in the era the server speaks (see :func:`open_client_session`)."""

    def __init__(
        self,
        transport: Transport,
        nursery: trio.Nursery,
        *,
        client_info: dict[str, Any],
        sampling: SamplingHandler | None,
        elicitation: ElicitationHandler | None,
        roots: RootsHandler | None,
        on_notification: NotificationHandler | None,
        log_level: mt.LoggingLevel | None,
        on_log: LogHandler | None = None,
        tasks: bool = True,
    ) -> None:
        self._transport = transport
        self._nursery = nursery
        self._ids = itertools.count(1)
        self.client_info = client_info
        self._sampling = sampling
        self._elicitation = elicitation
        self._roots = roots
        self._on_notification = on_notification
        self._on_log = on_log
        self._progress: dict[Any, _Call] = {}
        self._failure: Exception | None = None  # a session-level callback failed: the session ends
        self.log_level = log_level
        self.modern = False
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        self.instructions: str | None = None
        self._header_params: dict[str, dict[str, tuple[str, ...]]] = {}
        self._running: set[trio.CancelScope] = set()
        self._tasks = tasks  # declare the tasks extension (2026 era)
        self._closing = False

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
        self.protocol_version = self._transport.protocol_version = found.name
        self.server_info = _object(result.get("serverInfo"))
        self.server_capabilities = _object(result.get("capabilities"))
        self.instructions = _text(result.get("instructions"))
        await self.notify("notifications/initialized")
        if self.log_level is not None and "logging" in self.server_capabilities:
            try:  # log_level= means the same in both eras: the server's logs from this level up
                await self.request("logging/setLevel", {"level": self.log_level})
            except RPCError as exc:
                logger.warning("the server refused logging/setLevel %s: %s", self.log_level, exc.message)

    async def _discover(self) -> bool:
        """Try the modern era: True if the server answers ``server/discover`` as a modern server."""
        self.modern = True
        self.protocol_version = self._transport.protocol_version = versions.LATEST_MODERN.name
        result: dict[str, Any] | None = None
        for _attempt in range(2):  # a -32022 naming our version is worth one retry
            try:
                result = await self.request("server/discover")
                break
            except RPCError as exc:
                supported = _object(exc.data).get("supported")
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
        self.server_info = _object(_object(result.get("_meta")).get(mt.SERVER_INFO_META_KEY))
        self.server_capabilities = _object(result.get("capabilities"))
        self.instructions = _text(result.get("instructions"))
        return True

    def _fall_back(self, why: object) -> bool:
        self.modern = False
        self.protocol_version = self._transport.protocol_version = None
        logger.info("not a modern server (%s): falling back to initialize", why)
        return False

    # -- messages -----------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            versions.PROTOCOL_VERSION_META_KEY: self.protocol_version,
            mt.CLIENT_INFO_META_KEY: self.client_info,
            mt.CLIENT_CAPABILITIES_META_KEY: self.capabilities(),
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
        _check_callback("progress", progress)
        params = dict(params or {})
        if self.modern:
            params["_meta"] = {**self._meta(), **params.get("_meta", {})}
        for _round in range(MAX_INPUT_ROUNDS):
            result = await self._request_once(method, params, progress)
            if result.get("resultType") != "input_required":
                return result
            params = await self._answer_inputs(params, result)
        raise TransportError(f"{method}: the server still wanted input after {MAX_INPUT_ROUNDS} rounds")

    async def _request_once(
        self, method: str, params: dict[str, Any], progress: ProgressHandler | None
    ) -> dict[str, Any]:
        request_id = next(self._ids)
        call = _Call(progress, trio.CancelScope())
        if progress is not None:
            params = {**params, "_meta": {**params.get("_meta", {}), "progressToken": request_id}}
            self._progress[request_id] = call
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params or self.modern:
            message["params"] = params
        extra = (
            modern_headers(message, self._header_params.get(params.get("name", ""))) if self.modern else None
        )

        async def on_message(message: dict[str, Any]) -> None:  # what arrives on this request's answer
            await self._dispatch(message, call)

        answer = None
        try:
            with call.scope:  # cancelled if the session ends first, or if a callback fails
                self._running.add(call.scope)
                try:
                    answer = await self._transport.post(message, on_message, extra_headers=extra)
                except _ErrorAnswer as exc:
                    answer = exc.body
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
        if "error" in answer:
            raise _rpc_error(answer["error"])
        result = answer.get("result")
        if result is None:
            return {}
        if not isinstance(result, dict):
            raise TransportError(f"{method}: the server's result is not an object: {result!r:.200}")
        return result

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

        async def answer(key: str, request: dict[str, Any]) -> None:
            await trio.lowlevel.checkpoint_if_cancelled()  # a sibling failed already
            params = request.get("params")
            answers[key] = await self._serve(
                str(request.get("method", "")), params if isinstance(params, dict) else {}
            )

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
        await self._transport.post(message, self._dispatch)

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
                    await _call(owner.progress, progress, params.get("total"), params.get("message"))
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
            await _call(fn, arg)
        except Exception as exc:
            if call is not None:
                call.fail(exc)
            else:
                self._fail(exc)
            await trio.lowlevel.checkpoint()  # whoever failed, if it is this task, ends here
            return False
        return True

    async def _answer_server_request(self, message: dict[str, Any]) -> None:
        params = message.get("params")
        try:
            if params is not None and not isinstance(params, dict):
                raise RPCError(mt.INVALID_PARAMS, "params must be an object")
            result = await self._serve(message["method"], params or {})
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        except RPCError as exc:
            error = {"code": exc.code, "message": exc.message}
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": error}
        except Exception as exc:  # a handler of ours failed: the server gets an error, the session lives on
            logger.exception("handler of the server's %s failed", message.get("method"))
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": mt.INTERNAL_ERROR, "message": str(exc)},
            }
        try:
            await self._transport.post(reply, self._dispatch)
        except (TransportError, httpx.HTTPError) as exc:
            logger.info("could not answer the server's %s: %r", message["method"], exc)

    async def _serve(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run the handler of a server-to-client request (or input request)."""
        result: object
        if method == "ping":
            return {}
        if method == "sampling/createMessage" and self._sampling is not None:
            name, expected = "sampling", "CreateMessageResult"
            sampling_params = _params(mt.CreateMessageRequestParams, method, params)
            result = await _call(self._sampling, sampling_params)
        elif method == "elicitation/create" and self._elicitation is not None:
            name, expected = "elicitation", "ElicitResult"
            elicit_params: mt.ElicitRequestParams = _params(_ELICIT_PARAMS, method, params)
            result = await _call(self._elicitation, elicit_params)
        elif method == "roots/list" and self._roots is not None:
            name, expected = "roots", "ListRootsResult"
            result = await _call(self._roots)
        else:
            raise RPCError(mt.METHOD_NOT_FOUND, f"the client does not handle {method}")
        if not isinstance(result, pydantic.BaseModel):
            raise TypeError(f"the {name}= callback returned {result!r:.200}, not a {expected}")
        dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        return dumped

    # -- the API ------------------------------------------------------------------------------

    async def _typed(self, model: type[M], method: str, params: dict[str, Any] | None = None, **kw: Any) -> M:
        return _validated(model, await self.request(method, params, **kw), method)

    async def ping(self) -> None:
        await self.request("ping")

    async def list_tools(self, cursor: str | None = None) -> mt.ListToolsResult:
        result = await self._typed(mt.ListToolsResult, "tools/list", {"cursor": cursor} if cursor else None)
        valid = []
        for tool in result.tools:
            if not modern_rules.header_annotations_valid(tool.input_schema):
                logger.warning("tool %r dropped: its x-mcp-header annotations are invalid", tool.name)
                continue
            self._header_params[tool.name] = modern_rules.header_parameters(tool.input_schema)
            valid.append(tool)
        result.tools = valid
        return result

    @overload
    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: ProgressHandler | None = None,
        on_task_status: TaskStatusHandler | None = None,
        wait_for_task: Literal[True] = True,
    ) -> mt.CallToolResult: ...

    @overload
    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: ProgressHandler | None = None,
        on_task_status: TaskStatusHandler | None = None,
        wait_for_task: bool,
    ) -> mt.CallToolResult | TaskInfo: ...

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: ProgressHandler | None = None,
        on_task_status: TaskStatusHandler | None = None,
        wait_for_task: bool = True,
    ) -> mt.CallToolResult | TaskInfo:
        """``tools/call``.  ``progress`` (plain or async, see ``ProgressHandler``) gets the call's
        progress notifications; if it raises, the call is cancelled and raises its exception.

        2026 era, tasks extension: the server may answer with a task instead of the result.  The call
        then polls ``tasks/get`` (at the server's ``pollIntervalMs``, see :attr:`TaskInfo.poll_interval`)
        until the task ends, answers the task's input requests with the ``sampling``, ``elicitation``
        and ``roots`` callbacks (each key once, sent with ``tasks/update``), and ends as the call
        would have without a task: the task's result is returned (``completed``), its JSON-RPC error is
        raised as :class:`RPCError` (``failed``).  A task that was cancelled raises
        :class:`TaskCancelled`; one the server no longer knows (expired) raises :class:`TaskError`.
        ``on_task_status`` (plain or async, see ``TaskStatusHandler``) gets the task as created and at
        each change of its status or status message.

        The call owns its task: if it ends before the task does (the caller is cancelled, a callback
        raises, Ctrl-C), it sends ``tasks/cancel`` on the way out (shielded, for at most
        ``CANCEL_GRACE`` seconds), except when the session itself is closing.

        ``wait_for_task=False`` returns the task as created (a :class:`TaskInfo`) instead of waiting
        for it: follow it with :meth:`task_result`, :meth:`get_task`, :meth:`update_task` and
        :meth:`cancel_task`.  A tool the server runs without a task still returns its result."""
        _check_callback("on_task_status", on_task_status)
        if on_task_status is not None and not wait_for_task:
            raise TypeError("on_task_status= goes with waiting for the task (wait_for_task=True)")
        result = await self._call_tool(name, arguments, progress)
        if result.get("resultType") != "task":
            return _validated(mt.CallToolResult, result, f"tools/call {name}")
        if not (self.modern and self._tasks):
            raise TransportError(f"tools/call {name}: the server answered with a task, which was not offered")
        task = TaskInfo.from_wire(result)
        if task.terminal:  # a CreateTaskResult has no result or error: tasks/get has them
            task = await self.get_task(task.task_id)
        if not wait_for_task:
            return task
        return await self._wait(task, on_task_status, owned=True)

    async def _call_tool(
        self, name: str, arguments: dict[str, Any] | None, progress: ProgressHandler | None
    ) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments or {}}
        try:
            return await self.request("tools/call", params, progress=progress)
        except RPCError as exc:
            if exc.code != mt.HEADER_MISMATCH or not self.modern or name in self._header_params:
                raise
        await self.list_tools()  # learn which arguments travel in Mcp-Param-* headers, then try again
        return await self.request("tools/call", params, progress=progress)

    # -- the tasks extension (2026 era) ----------------------------------------------------------

    async def get_task(self, task_id: str) -> TaskInfo:
        """``tasks/get``: the task as the server describes it now (:class:`RPCError` -32602 if the
        server does not know it, or no longer: tasks expire)."""
        task = TaskInfo.from_wire(await self.request("tasks/get", {"taskId": task_id}))
        if task.task_id != task_id:
            raise TransportError(f"tasks/get {task_id}: the server answered for task {task.task_id}")
        return task

    async def update_task(self, task_id: str, responses: Mapping[str, Any]) -> None:
        """``tasks/update``: answers to the task's ``input_requests``, by key (each an
        ``ElicitResult``, ``CreateMessageResult`` or ``ListRootsResult``, or its JSON).  The server
        applies them eventually: the next :meth:`get_task` may still show the old status."""
        answers = {
            key: value.model_dump(by_alias=True, exclude_none=True, mode="json")
            if isinstance(value, pydantic.BaseModel)
            else value
            for key, value in responses.items()
        }
        await self.request("tasks/update", {"taskId": task_id, "inputResponses": answers})

    async def cancel_task(self, task_id: str) -> None:
        """``tasks/cancel``: ask the server to cancel the task.  Cooperative and eventually
        consistent: the ``cancelled`` status shows in a later :meth:`get_task`, if at all (a task
        that finished first keeps its result)."""
        await self.request("tasks/cancel", {"taskId": task_id})

    async def task_result(
        self, task: TaskInfo | str, *, on_task_status: TaskStatusHandler | None = None
    ) -> mt.CallToolResult:
        """Wait for a task (a :class:`TaskInfo`, or a task id) as :meth:`call_tool` does, and end as it
        does: its result, or :class:`RPCError`, :class:`TaskCancelled`, :class:`TaskError`.  Its input
        requests are answered with the session's callbacks.

        Unlike :meth:`call_tool`, this only watches: cancelling the caller stops the wait, not the
        task (use :meth:`cancel_task` for that)."""
        _check_callback("on_task_status", on_task_status)
        info = task if isinstance(task, TaskInfo) else await self.get_task(task)
        return await self._wait(info, on_task_status, owned=False)

    async def _wait(
        self, task: TaskInfo, on_status: TaskStatusHandler | None, *, owned: bool
    ) -> mt.CallToolResult:
        watch = _Watch(task)
        try:
            with trio.CancelScope() as scope:  # cancelled if the session ends first
                self._running.add(scope)
                try:
                    await self._follow(watch, on_status)
                finally:
                    self._running.discard(scope)
        except BaseException:  # cancelled, interrupted, or failed: the task is of no use to anyone
            if owned and not watch.ended and not self._closing:
                await self._cancel_quietly(watch.task.task_id)
            raise
        if not watch.ended:
            raise TransportError(f"the session ended while task {task.task_id} was running")
        return _task_outcome(watch.task)

    async def _follow(self, watch: _Watch, on_status: TaskStatusHandler | None) -> None:
        """Poll the task until it ends, answering its input requests (each key once)."""
        answered: set[str] = set()
        seen: tuple[str, str | None] | None = None
        while True:
            task = watch.task
            watch.ended = task.terminal
            if on_status is not None and (task.status, task.status_message) != seen:
                seen = (task.status, task.status_message)
                await _call(on_status, task)
            if task.terminal:
                return
            fresh = {k: v for k, v in task.input_requests.items() if k not in answered}
            if task.status == "input_required" and fresh:
                answers = await self._gather_inputs(fresh)
                answered.update(fresh)
                try:
                    await self.update_task(task.task_id, answers)
                except RPCError:
                    watch.task = await self._poll(watch)
                    if not answers.keys() & watch.task.input_requests.keys():
                        continue  # it moved on meanwhile (ended, or answered by another client)
                    raise  # the answers themselves were refused
            else:
                await trio.sleep(task.poll_interval)
            watch.task = await self._poll(watch)

    async def _poll(self, watch: _Watch) -> TaskInfo:
        try:
            return await self.get_task(watch.task.task_id)
        except RPCError as exc:
            if exc.code != mt.INVALID_PARAMS:
                raise
            watch.ended = True
            raise TaskError(
                f"task {watch.task.task_id} is gone: the server no longer knows it ({exc.message})",
                watch.task,
            ) from exc

    async def _cancel_quietly(self, task_id: str) -> None:
        """``tasks/cancel`` on the way out of a call that gave up on its task: shielded, bounded."""
        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_GRACE):
            try:
                await self.cancel_task(task_id)
            except (MCPTrioError, httpx.HTTPError) as exc:  # best effort only
                logger.info("could not cancel task %s: %r", task_id, exc)

    async def list_resources(self, cursor: str | None = None) -> mt.ListResourcesResult:
        return await self._typed(
            mt.ListResourcesResult, "resources/list", {"cursor": cursor} if cursor else None
        )

    async def list_resource_templates(self) -> mt.ListResourceTemplatesResult:
        return await self._typed(mt.ListResourceTemplatesResult, "resources/templates/list")

    async def read_resource(self, uri: str) -> mt.ReadResourceResult:
        return await self._typed(mt.ReadResourceResult, "resources/read", {"uri": uri})

    async def subscribe_resource(self, uri: str) -> None:
        await self.request("resources/subscribe", {"uri": uri})

    async def unsubscribe_resource(self, uri: str) -> None:
        await self.request("resources/unsubscribe", {"uri": uri})

    async def list_prompts(self, cursor: str | None = None) -> mt.ListPromptsResult:
        return await self._typed(mt.ListPromptsResult, "prompts/list", {"cursor": cursor} if cursor else None)

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> mt.GetPromptResult:
        params: dict[str, Any] = {"name": name}
        if arguments:
            params["arguments"] = dict(arguments)
        return await self._typed(mt.GetPromptResult, "prompts/get", params)

    async def complete(
        self, ref: dict[str, Any], argument: dict[str, str], context: dict[str, Any] | None = None
    ) -> mt.CompleteResult:
        params: dict[str, Any] = {"ref": ref, "argument": argument}
        if context is not None:
            params["context"] = context
        return await self._typed(mt.CompleteResult, "completion/complete", params)

    @asynccontextmanager
    async def listen(
        self,
        *,
        tools: bool = False,
        prompts: bool = False,
        resources: bool = False,
        resource_uris: Sequence[str] = (),
    ) -> AsyncIterator[Subscription]:
        """2026 era: ``subscriptions/listen``.  Yields a ``Subscription`` once the server has
        acknowledged it; iterate it for the notifications asked for.  Leaving the block closes the
        stream (which ends the subscription)."""
        if not self.modern or not isinstance(self._transport, HTTPTransport):
            raise TransportError("subscriptions/listen needs a 2026-07-28 session over HTTP")
        wanted: dict[str, Any] = {}
        if tools:
            wanted["toolsListChanged"] = True
        if prompts:
            wanted["promptsListChanged"] = True
        if resources:
            wanted["resourcesListChanged"] = True
        if resource_uris:
            wanted["resourceSubscriptions"] = list(resource_uris)
        request_id = next(self._ids)
        params = {"notifications": wanted, "_meta": self._meta()}
        message = {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}
        try:
            async with self._transport.open_stream(
                message, extra_headers=modern_headers(message, None)
            ) as stream:
                ack = await stream.next_message()
                if ack is None or ack.get("method") != "notifications/subscriptions/acknowledged":
                    if ack is not None and "error" in ack:
                        raise _rpc_error(ack["error"])
                    raise TransportError(f"subscriptions/listen was not acknowledged: {ack!r}")
                notifications = _object(_object(ack.get("params")).get("notifications"))
                yield Subscription(request_id, notifications, stream)
        except _ErrorAnswer as exc:
            raise _rpc_error(exc.body["error"]) from None

    # -- the Skills extension (SEP-2640) --------------------------------------------------------

    async def list_skills(self) -> list[dict[str, Any]]:
        """``skills/list``: the server's skill entries (``uri``, ``frontmatter``, ``resources``).  Lists
        only: no file is read until a skill is loaded."""
        skills: list[dict[str, Any]] = []
        cursor = None
        for _page in range(100):
            result = await self.request("skills/list", {"cursor": cursor} if cursor else None)
            listed = result.get("skills")
            skills.extend(s for s in (listed if isinstance(listed, list) else ()) if isinstance(s, dict))
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return skills

    async def read_skill_file(self, skill: Mapping[str, Any], uri: str) -> bytes:
        """Read one file of a skill and verify it against the skill's entry (size and digest);
        :class:`SkillVerificationError` if it differs: the content must not be used."""
        data = skills_ext.contents_bytes(await self.request("resources/read", {"uri": uri}))
        skills_ext.check_file(skill, uri, data)
        return data

    async def load_skill(self, skill: Mapping[str, Any]) -> str:
        """Load a skill: read its SKILL.md, verify it, and compare its frontmatter with the entry's;
        returns the SKILL.md text.  Supporting files are read later, when needed, with
        :meth:`read_skill_file`."""
        text = (await self.read_skill_file(skill, str(skill["uri"]))).decode()
        skills_ext.check_frontmatter(skill, text)
        return text

    async def set_logging_level(self, level: mt.LoggingLevel) -> None:
        """2025 era: ``logging/setLevel``; 2026 era: the level travels in every request's ``_meta``."""
        self.log_level = level
        if not self.modern:
            await self.request("logging/setLevel", {"level": level})


class Subscription:
    """An acknowledged ``subscriptions/listen`` stream: ``acknowledged`` is the filter the server
    honours; iterating yields each notification (``None`` ends it: the server closed the subscription,
    ``closed_gracefully`` tells whether with its completion result)."""

    def __init__(self, request_id: int, acknowledged: dict[str, Any], stream: MessageStream) -> None:
        self.id = request_id
        self.acknowledged = acknowledged
        self._stream = stream
        self.closed_gracefully = False

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        message = await self._stream.next_message()
        if message is None:
            raise StopAsyncIteration
        if "method" not in message and message.get("id") == self.id:
            self.closed_gracefully = "result" in message
            raise StopAsyncIteration
        return message


@asynccontextmanager
async def open_client_session(
    url: str,
    *,
    mode: Mode = "auto",
    http: httpx.AsyncClient | None = None,
    auth: httpx.Auth | None = None,
    client_info: dict[str, Any] | None = None,
    sampling: SamplingHandler | None = None,
    elicitation: ElicitationHandler | None = None,
    roots: RootsHandler | None = None,
    on_notification: NotificationHandler | None = None,
    on_log: LogHandler | None = None,
    log_level: mt.LoggingLevel | None = None,
    legacy_version: str = versions.LATEST.name,
    get_stream: bool = True,
    delete_grace: float = 2.0,
    tasks: bool = True,
    max_message_size: int = MAX_MESSAGE_SIZE,
) -> AsyncIterator[ClientSession]:
    """Open a session with the MCP server at ``url``; it ends when the block does.

    ``mode="auto"`` tries the 2026-07-28 era (``server/discover``) and falls back to ``initialize``;
    ``"modern"`` and ``"legacy"`` choose.  A 2025-era session opens the standalone GET stream (a 405 or a
    failure there never harms requests) and sends DELETE on exit, bounded by ``delete_grace`` seconds.
    Requests still running when the block ends are cancelled.  The session owns a nursery: handlers of
    server-to-client requests and the GET stream run in it.

    The callbacks (``sampling``, ``elicitation``, ``roots``, ``on_log``, ``on_notification``, and
    ``progress=`` of :meth:`ClientSession.call_tool`) may be plain or async functions; a plain one runs
    in a Trio task of the session and must not block.  Anything that is not callable is refused with
    :class:`TypeError` before anything is sent.  An exception from ``sampling``, ``elicitation`` or
    ``roots`` is the error answer to the server's request (2025 era), or is raised out of the call
    whose input it was to provide (2026 era); one from ``progress`` is raised out of its call; one from
    ``on_log`` or ``on_notification`` out of the call whose answer carried the notification, or, for a
    notification that arrived outside any call, out of this block, which it ends.

    ``auth`` authenticates every request of the session (the POSTs, the GET stream, the DELETE):
    :class:`mcp_trio.auth.OAuth` for an OAuth-protected server, or any ``httpx.Auth``.  With ``http``
    too, it is applied per request and takes the place of that client's own ``auth``.

    ``tasks``: a 2026-era session declares the tasks extension (``io.modelcontextprotocol/tasks``) in
    every request, so a server may answer ``tools/call`` with a task, which
    :meth:`ClientSession.call_tool` then waits for; ``tasks=False`` declares nothing (a tool that
    requires a task is then refused with :class:`RPCError` -32021).

    The server is not trusted: a JSON answer or an SSE event longer than ``max_message_size`` bytes
    (default 4 MiB), or one that is not JSON the client accepts (nested deeper than 128 levels, a
    number over 1000 characters or out of range, a lone surrogate, bytes that are not UTF-8), fails its
    call with :class:`TransportError` (an event of the kind is skipped and logged); an HTTP error
    answer's body is read up to 64 KiB.
    """
    handlers = _Handlers(client_info, sampling, elicitation, roots, on_notification, on_log, log_level, tasks)
    if auth is not None and not isinstance(auth, httpx.Auth):
        raise TypeError(f"auth= takes an httpx.Auth (e.g. mcp_trio.auth.OAuth(...)), not {auth!r:.200}")
    own_http = http is None
    client = http or httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None))
    transport = HTTPTransport(client, url, auth=auth, max_message_size=max_message_size)

    async def finish(session: ClientSession) -> None:
        if not session.modern:
            with trio.CancelScope(shield=True), trio.move_on_after(delete_grace):
                try:
                    await transport.delete()
                except TransportError as exc:
                    logger.info("DELETE failed: %r", exc)

    try:
        async with _run_session(transport, handlers, mode, legacy_version, get_stream, finish) as session:
            yield session
    finally:
        if own_http:
            with trio.CancelScope(shield=True):
                await client.aclose()


@asynccontextmanager
async def open_stdio_client(
    command: Sequence[str],
    *,
    mode: Mode = "auto",
    env: Mapping[str, str] | None = None,
    client_info: dict[str, Any] | None = None,
    sampling: SamplingHandler | None = None,
    elicitation: ElicitationHandler | None = None,
    roots: RootsHandler | None = None,
    on_notification: NotificationHandler | None = None,
    on_log: LogHandler | None = None,
    log_level: mt.LoggingLevel | None = None,
    legacy_version: str = versions.LATEST.name,
    terminate_grace: float = 2.0,
    tasks: bool = True,
) -> AsyncIterator[ClientSession]:
    """Start ``command`` as an MCP server speaking stdio and open a session with it.

    On exit the child's stdin is closed; a child still running ``terminate_grace`` seconds later gets
    SIGTERM, then SIGKILL after as long again.  The child is always reaped.  The callbacks are those of
    :func:`open_client_session`; everything a stdio server sends outside a response arrives outside
    any call, so an exception from ``on_log`` or ``on_notification`` ends the session; ``tasks`` is
    that of :func:`open_client_session`."""
    handlers = _Handlers(client_info, sampling, elicitation, roots, on_notification, on_log, log_level, tasks)
    process = await start_process(command, env)
    transport = StdioTransport(process)

    async def finish(session: ClientSession) -> None:
        await transport.aclose(terminate_grace)

    try:
        async with _run_session(transport, handlers, mode, legacy_version, False, finish) as session:
            yield session
    finally:
        await transport.aclose(terminate_grace)


@asynccontextmanager
async def open_websocket_client(
    url: str,
    *,
    mode: Mode = "auto",
    headers: Mapping[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    client_info: dict[str, Any] | None = None,
    sampling: SamplingHandler | None = None,
    elicitation: ElicitationHandler | None = None,
    roots: RootsHandler | None = None,
    on_notification: NotificationHandler | None = None,
    on_log: LogHandler | None = None,
    log_level: mt.LoggingLevel | None = None,
    legacy_version: str = versions.LATEST.name,
    max_message_size: int = 4 * 1024 * 1024,
    connect_timeout: float = 30.0,
    close_timeout: float = 2.0,
    tasks: bool = True,
) -> AsyncIterator[ClientSession]:
    """Open a session with the MCP server at ``url`` over WebSocket (``ws://`` or ``wss://``; an
    ``http(s)://`` URL is taken as its ``ws(s)://`` twin), subprotocol ``mcp``; it ends when the block
    does, with the WebSocket close handshake (bounded by ``close_timeout`` seconds).

    The connection is the session: a 2025-era session
    (``initialize``) or 2026-07-28 requests (``mode`` as for :func:`open_client_session`), with the same
    :class:`ClientSession` API and callbacks; everything the server sends outside a response arrives
    outside any call, as over stdio.  ``headers`` go with the upgrade request (``Authorization: Bearer
    ...`` for a protected server); ``ssl_context`` is for ``wss://``.  A refused upgrade (an HTTP answer
    such as 401, or a server that does not speak the ``mcp`` subprotocol), a message longer than
    ``max_message_size`` from the server, or no connection within ``connect_timeout`` raise
    :class:`TransportError`."""
    handlers = _Handlers(client_info, sampling, elicitation, roots, on_notification, on_log, log_level, tasks)
    if url.startswith(("http://", "https://")):
        url = "ws" + url[4:]
    try:
        with trio.fail_after(connect_timeout):
            transport = await WebSocketTransport.connect(
                url, headers=headers, ssl_context=ssl_context, max_message_size=max_message_size
            )
    except trio.TooSlowError:
        raise TransportError(f"no WebSocket connection to {url} within {connect_timeout} s") from None

    async def finish(session: ClientSession) -> None:
        await transport.aclose(close_timeout)

    try:
        async with _run_session(transport, handlers, mode, legacy_version, False, finish) as session:
            yield session
    finally:
        await transport.aclose(close_timeout)


@dataclass(frozen=True)
class _Handlers:
    client_info: dict[str, Any] | None
    sampling: SamplingHandler | None
    elicitation: ElicitationHandler | None
    roots: RootsHandler | None
    on_notification: NotificationHandler | None
    on_log: LogHandler | None
    log_level: mt.LoggingLevel | None
    tasks: bool = True

    def __post_init__(self) -> None:
        for name in ("sampling", "elicitation", "roots", "on_notification", "on_log"):
            _check_callback(name, getattr(self, name))


@asynccontextmanager
async def _run_session(
    transport: Transport,
    handlers: _Handlers,
    mode: Mode,
    legacy_version: str,
    get_stream: bool,
    finish: Callable[[ClientSession], Awaitable[None]],
) -> AsyncIterator[ClientSession]:
    """The life of a session over any transport, in its own nursery."""
    body_error: BaseException | None = None
    session: ClientSession | None = None
    try:
        async with trio.open_nursery() as nursery:
            session = ClientSession(
                transport,
                nursery,
                client_info=handlers.client_info or {"name": "mcp-trio", "version": "0.1.0"},
                sampling=handlers.sampling,
                elicitation=handlers.elicitation,
                roots=handlers.roots,
                on_notification=handlers.on_notification,
                on_log=handlers.on_log,
                log_level=handlers.log_level,
                tasks=handlers.tasks,
            )
            if isinstance(transport, MessageTransport):
                await nursery.start(transport.read_loop, session._dispatch)
            if mode == "modern" or (mode == "auto" and await session._discover()):
                session.modern = True
                session.protocol_version = transport.protocol_version = versions.LATEST_MODERN.name
            else:
                await session._initialize(legacy_version)
                if get_stream:
                    await nursery.start(transport.listen_get, session._dispatch)
            try:
                yield session
            except BaseException as exc:  # re-raised below as it is, not wrapped in an ExceptionGroup
                body_error = exc
            finally:
                session._cancel_running()
                nursery.cancel_scope.cancel()
                await finish(session)
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and body_error is None:  # a failure while opening the session
            raise group.exceptions[0] from None
        raise
    failure = session._failure if session is not None else None
    if failure is not None and (body_error is None or isinstance(body_error, trio.Cancelled)):
        raise failure  # a callback failed outside any request: that ended the session
    if body_error is not None:
        raise body_error


__all__ += ["SessionExpired", "TransportError"]
