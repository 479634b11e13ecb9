"""The MCP server object users register tools, resources and prompts on, and its request dispatcher.

The handlers of the core protocol's requests are in :mod:`.handlers`; parsing a request's params and
serializing its result in :mod:`.codec`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import mcp_types as mt
import mcp_types.methods as mtm
import pydantic
import pydantic_core

from .._observe.telemetry import Telemetry
from .._protocol import jsonrpc, versions
from ..errors import RPCError
from .bus import LocalNotificationBus, NotificationBus, Subscriber
from .codec import Layout, first_error, parse_params, text_result
from .context import Context
from .failures import Failures
from .handlers import RESOURCE_NOT_FOUND, CompletionFn, CoreHandlers
from .lifespan import Lifespan, LifespanT
from .principal import principal_identity
from .prompts import PromptFn, PromptSpec
from .resources import ResourceFn, ResourceSpec
from .tasks import TASK_METHODS, TaskSupport
from .tools import ToolFn, ToolSpec

__all__ = ["RESOURCE_NOT_FOUND", "MCPServer"]

MAX_URI_LENGTH = 8192
"""Default of :attr:`MCPServer.max_uri_length`: the usual limit of a URL in HTTP servers and proxies."""

Handler = Callable[[Context, Any], Awaitable[dict[str, Any]]]
MethodHandler = Callable[[Context, "dict[str, Any] | None"], Awaitable[dict[str, Any]]]
"""An extension's request handler (see :meth:`MCPServer.add_method`)."""


@dataclass(frozen=True, slots=True)
class Initialized:
    """An accepted ``initialize``: the negotiated revision, what the client declared (as JSON), the
    result to answer with."""

    revision: versions.Revision
    client_info: dict[str, Any]
    client_capabilities: dict[str, Any]
    result: dict[str, Any]
    state: Any = None
    """What the server keeps for the session it opens (a hosted python-sdk server's session kernel;
    nothing for an :class:`MCPServer`): the session holds it as its ``hosted`` attribute."""


def client_declared(request: mt.InitializeRequestParams) -> tuple[dict[str, Any], dict[str, Any]]:
    """What an accepted ``initialize`` says of the client (its info, its capabilities) as the JSON a
    session and its record keep; -32602 when that cannot be serialized back (nested deeper than
    pydantic serializes, say)."""
    try:
        client_info = request.client_info.model_dump(by_alias=True, exclude_none=True, mode="json")
        capabilities = request.capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
        jsonrpc.encode({"i": client_info, "c": capabilities})
    except (ValueError, RecursionError, pydantic_core.PydanticSerializationError) as exc:
        raise RPCError(mt.INVALID_PARAMS, "Invalid params: clientInfo or capabilities unusable") from exc
    return client_info, capabilities


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class MCPServer(CoreHandlers, Generic[LifespanT]):
    """An MCP server: a name, a version, and what it offers (tools, resources, prompts, completion).

    Handlers are ``async`` functions (blocking work goes through ``trio.to_thread.run_sync``). Each runs
    as a task in the nursery of the session that asked (or, for 2026-era requests, in the request's
    scope), so ``notifications/cancelled``, the end of the session and server shutdown cancel it.

    ``lifespan``: a function taking the server and returning an async context manager (an
    ``@asynccontextmanager`` function), entered before the server accepts anything and left after it
    has stopped; it may open a nursery for the app's own tasks.  What it yields is every handler's
    :attr:`Context.lifespan_context` (see docs/lifespan.md).
    """

    def __init__(
        self,
        name: str,
        version: str = "0.1.0",
        *,
        instructions: str | None = None,
        cache_ttl_ms: int = 0,
        cache_scope: Literal["public", "private"] = "private",
        max_subscriptions: int = 1000,
        notification_bus: NotificationBus | None = None,
        lifespan: Callable[[MCPServer[Any]], AbstractAsyncContextManager[LifespanT]] | None = None,
        error_details: bool = False,
    ) -> None:
        self.name = name
        self.version = version
        self.instructions = instructions
        self.cache_ttl_ms = cache_ttl_ms
        """``ttlMs`` of list and read results (2026 era): how long clients may cache them."""
        self.cache_scope = cache_scope
        """``cacheScope`` of list and read results (2026 era): may shared intermediaries cache them."""
        self.max_subscriptions = max_subscriptions
        """Most resource URIs one session subscribes to (``resources/subscribe``), and most entries of one
        ``subscriptions/listen`` filter's ``resourceSubscriptions``; beyond it the request gets -32602."""
        self.max_uri_length = MAX_URI_LENGTH
        """Longest resource URI (in characters) a subscription may name; a longer one gets -32602."""
        self.lifespan: Lifespan[LifespanT] = Lifespan(f"MCPServer {name!r}", lifespan)
        """The server's lifespan: its function (``lifespan.fn``), its phase, its value while it runs."""
        self._tools: dict[str, ToolSpec] = {}
        self._resources: dict[str, ResourceSpec] = {}
        self._templates: dict[str, ResourceSpec] = {}
        self._prompts: dict[str, PromptSpec] = {}
        self._completion: CompletionFn | None = None
        self.failures = Failures(details=error_details)
        """What a handler's unexpected exception becomes: logged at ERROR with its traceback and a
        reference, answered with a generic message and that reference, or with the exception's type and
        text too when ``error_details`` is true (``failures.details``; docs/api.md, "Errors")."""
        self._text_layouts: dict[tuple[str, bool], tuple[Any, Layout | None]] = {}
        """Per revision and kind (with a scalar ``structuredContent`` or not): how
        ``serialize_server_result`` lays out a text-only ``tools/call`` result (see
        :func:`.codec.text_result`)."""
        self.telemetry = Telemetry("server", self._registered, principal_identity)
        """What this server's requests and sessions are recorded into: OpenTelemetry (with the ``otel``
        extra, while a provider is set), an operations listener's Prometheus registry, the request log
        (see docs/operations.md)."""
        self.notifications: NotificationBus = (
            LocalNotificationBus() if notification_bus is None else notification_bus
        )
        """Where ``notify_*`` publishes (see :class:`~mcp_trio.server.NotificationBus`)."""
        modern = frozenset(r.name for r in versions.MODERN)
        self._extensions: dict[str, tuple[MethodHandler, frozenset[str] | None]] = {
            method: (self._task_method, modern) for method in TASK_METHODS
        }
        self._handlers: dict[str, Handler] = {
            "ping": self._ping,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "resources/list": self._list_resources,
            "resources/templates/list": self._list_templates,
            "resources/read": self._read_resource,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "prompts/list": self._list_prompts,
            "prompts/get": self._get_prompt,
            "completion/complete": self._complete,
            "logging/setLevel": self._set_level,
            "server/discover": self._discover,
        }

    def _registered(self, kind: str, name: str) -> bool:
        """Whether a tool (``kind == "tool"``), prompt (``"prompt"``) or extension method
        (``"method"``) of this name is registered: only those names are span names' targets and
        metric attributes."""
        if kind == "tool":
            return name in self._tools
        if kind == "prompt":
            return name in self._prompts
        return kind == "method" and name in self._extensions

    # -- registration -------------------------------------------------------------------------

    def tool(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        annotations: mt.ToolAnnotations | None = None,
        task: TaskSupport = "forbidden",
        structured_output: bool | None = None,
    ) -> Callable[[F], F]:
        """Decorator: register an async function as a tool.  Its input schema comes from its type
        hints unless ``input_schema`` is given; a parameter annotated :class:`Context` gets the context.

        ``task``: whether a 2026-era call may run as a task (the tasks extension, see docs/tasks):
        ``"forbidden"`` (default), ``"optional"`` (a task when the client declared the extension, else an
        ordinary call) or ``"required"`` (a client without the extension gets -32021).  A task-capable
        tool may take a ``task_status`` parameter and call ``task_status.started()`` when it becomes a
        task (see :class:`~mcp_trio.server.TaskStarter`); without one it is a task from the start.

        The output schema comes from the return annotation (a model, dataclass or ``TypedDict`` as
        itself, other types wrapped as ``{"result": ...}``; see docs/api.md) unless ``output_schema`` is
        given; ``structured_output=False`` gives none, ``True`` insists on one (``TypeError`` if the
        annotation gives none).  A returned value is checked against it."""
        options: dict[str, Any] = {
            "name": name,
            "title": title,
            "description": description,
            "input_schema": input_schema,
            "output_schema": output_schema,
            "annotations": annotations,
            "task": task,
            "structured_output": structured_output,
        }
        return self._decorator(lambda fn: self._add_tool(ToolSpec.build(fn, **options)))

    def add_tool(self, fn: ToolFn, **options: Any) -> None:
        """Register ``fn`` as a tool: ``@tool(**options)`` without the decorator."""
        self.tool(**options)(fn)

    def _add_tool(self, spec: ToolSpec) -> None:
        self._tools[spec.definition.name] = spec

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        size: int | None = None,
        annotations: dict[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Decorator: register an async function as the resource at ``uri``.  A URI with ``{name}``
        parts is a template; the function takes those parts as arguments.  Return ``str`` (text),
        ``bytes`` (a blob) or contents models."""
        options: dict[str, Any] = {
            "name": name,
            "title": title,
            "description": description,
            "mime_type": mime_type,
            "size": size,
            "annotations": annotations,
        }
        return self._decorator(lambda fn: self._add_resource(ResourceSpec.build(uri, fn, **options)))

    def add_resource(self, uri: str, fn: ResourceFn, **options: Any) -> None:
        """Register ``fn`` as the resource at ``uri``: ``@resource(uri, **options)`` without the
        decorator."""
        self.resource(uri, **options)(fn)

    def _add_resource(self, spec: ResourceSpec) -> None:
        (self._templates if spec.is_template else self._resources)[spec.uri] = spec

    def prompt(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        argument_descriptions: dict[str, str] | None = None,
    ) -> Callable[[F], F]:
        """Decorator: register an async function as a prompt; its parameters are the arguments.
        Return a string (one user message), content blocks, ``PromptMessage`` models, or a
        ``GetPromptResult``."""
        options: dict[str, Any] = {
            "name": name,
            "title": title,
            "description": description,
            "argument_descriptions": argument_descriptions,
        }
        return self._decorator(lambda fn: self._add_prompt(PromptSpec.build(fn, **options)))

    def add_prompt(self, fn: PromptFn, **options: Any) -> None:
        """Register ``fn`` as a prompt: ``@prompt(**options)`` without the decorator."""
        self.prompt(**options)(fn)

    def _add_prompt(self, spec: PromptSpec) -> None:
        self._prompts[spec.name] = spec

    def completion(self) -> Callable[[F], F]:
        """Decorator: the ``completion/complete`` handler, called as ``fn(ref, argument, context)`` with
        the request's ``ref`` (prompt or resource reference), ``argument`` (``name``/``value``) and
        ``context`` (or None).  Return a list of strings or a ``Completion``."""

        def register(fn: CompletionFn) -> None:
            self._completion = fn

        return self._decorator(register)

    @staticmethod
    def _decorator(register: Callable[[Any], None]) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            register(fn)
            return fn

        return decorate

    # -- notifications to connected clients -----------------------------------------------------

    def attach(self, peer: Subscriber) -> None:
        """A peer (session, listen stream, stdio connection) starts receiving this server's notifications."""
        self.notifications.subscribe(peer)

    def detach(self, peer: Subscriber) -> None:
        self.notifications.unsubscribe(peer)

    async def _broadcast(self, method: str, params: dict[str, Any] | None, uri: str | None = None) -> None:
        await self.notifications.publish(jsonrpc.notification(method, params), uri)

    async def notify_tools_changed(self) -> None:
        """Send ``notifications/tools/list_changed`` to every connected session."""
        await self._broadcast("notifications/tools/list_changed", None)

    async def notify_resources_changed(self) -> None:
        await self._broadcast("notifications/resources/list_changed", None)

    async def notify_prompts_changed(self) -> None:
        await self._broadcast("notifications/prompts/list_changed", None)

    async def notify_resource_updated(self, uri: str) -> None:
        """Send ``notifications/resources/updated`` to the sessions subscribed to ``uri``."""
        await self._broadcast("notifications/resources/updated", {"uri": uri}, uri=uri)

    # -- lifespan ---------------------------------------------------------------------------

    def open_lifespan(
        self, *, grace: float, graceful: Callable[[], bool] = lambda: False
    ) -> AbstractAsyncContextManager[LifespanT]:
        """Enter the server's lifespan for the time of the ``async with`` body: what runs the server
        does (:meth:`MCPApp.run <mcp_trio.MCPApp.run>`, ``serve_stdio``).  ``grace``: seconds the code
        after its ``yield`` runs uncancelled after a graceful stop; ``graceful()``: whether a
        cancellation of the body comes after the runner began a graceful stop.  Raises the lifespan's
        own exception when it fails, and ``RuntimeError`` while it runs already (docs/lifespan.md)."""
        return self.lifespan.open(self, grace=grace, graceful=graceful)

    @property
    def lifespan_context(self) -> LifespanT:
        """What the lifespan yielded, while it runs (None without a lifespan); RuntimeError otherwise."""
        return self.lifespan.value

    # -- protocol ---------------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        caps: dict[str, Any] = {"logging": {}}
        if self._tools:
            caps["tools"] = {"listChanged": True}
        if self._resources or self._templates:
            caps["resources"] = {"subscribe": True, "listChanged": True}
        if self._prompts:
            caps["prompts"] = {"listChanged": True}
        if self._completion is not None:
            caps["completions"] = {}
        return caps

    def initialize(self, params: dict[str, Any] | None) -> Initialized:
        """Validate ``initialize`` params and answer them (-32602 for params that are invalid, or that
        cannot be serialized back, such as nesting deeper than pydantic serializes)."""
        try:
            request = mt.InitializeRequestParams.model_validate(params or {})
        except pydantic.ValidationError as exc:
            raise RPCError(mt.INVALID_PARAMS, f"Invalid params: {first_error(exc)}") from exc
        client_info, capabilities = client_declared(request)
        revision = versions.negotiate(request.protocol_version)
        result: dict[str, Any] = {
            "protocolVersion": revision.name,
            "capabilities": self.capabilities(),
            "serverInfo": {"name": self.name, "version": self.version},
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return Initialized(revision, client_info, capabilities, result)

    async def initialize_session(self, params: dict[str, Any] | None) -> Initialized:
        """:meth:`initialize`, as the transport calls it (a hosted server answers asynchronously)."""
        return self.initialize(params)

    def notified(
        self, peer: object, method: str, params: dict[str, Any] | None
    ) -> Callable[[], Awaitable[object]] | None:
        """A client's notification to a session: the transport's own business here (nothing to run)."""
        return None

    own_request_state = True
    """Whether the transport seals and opens a 2026 request's ``requestState`` for this server (its
    input rounds, :meth:`Context.ask`); a hosted python-sdk server keeps its own."""

    async def handle_request(
        self, ctx: Context, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Run the handler of one request; raises :class:`RPCError` for a JSON-RPC error answer."""
        ctx._lifespan = self.lifespan
        extension = self._extensions.get(method)
        if extension is not None:
            result = await self._run_method(extension[0], ctx, params)
            self._add_metadata_if_modern(ctx, method, result)
            return result
        handler = self._handlers.get(method)
        if handler is None:
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {method}")
        try:
            request_params = parse_params(method, ctx.protocol_version, params)
        except pydantic.ValidationError as exc:
            raise RPCError(mt.INVALID_PARAMS, f"Invalid params: {first_error(exc)}") from exc
        except (KeyError, ValueError) as exc:
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {method}") from exc
        result = await handler(ctx, request_params)
        self._add_metadata_if_modern(ctx, method, result)
        if result.get("resultType") == "task":  # a CreateTaskResult: no model in mcp-types
            return result
        if method == "tools/call":
            text = text_result(self._text_layouts, ctx.protocol_version, result)
            if text is not None:
                return text
        try:
            return mtm.serialize_server_result(method, ctx.protocol_version, result)
        except Exception as exc:  # a handler's result the protocol has no room for (a wire dict, say)
            raise self.failures.rpc_error(f"the result of {method}", exc) from exc

    def _add_metadata_if_modern(self, ctx: Context, method: str, result: dict[str, Any]) -> None:
        revision = versions.revision(ctx.protocol_version)
        if revision is not None and revision.result_metadata:
            self._add_result_metadata(method, result)

    def knows(self, method: str, revision: versions.Revision) -> bool:
        """Whether ``method`` is served in ``revision`` (unknown ones get -32601)."""
        extension = self._extensions.get(method)
        if extension is not None:
            return extension[1] is None or revision.name in extension[1]
        return (method in self._handlers or method == "subscriptions/listen") and (
            (method, revision.name) in mtm.CLIENT_REQUESTS
        )

    def add_method(
        self, method: str, handler: MethodHandler, *, revisions: Iterable[str] | None = None
    ) -> None:
        """Serve a request method of an extension (``tasks/get``, say): ``await handler(ctx, params)``
        gets the raw params (validate them yourself) and returns the result dict; raise
        :class:`RPCError` for an error answer.  ``revisions``: the protocol revisions it is served in
        (default: all).  The methods of the core protocol cannot be replaced."""
        if method in self._handlers or method == "subscriptions/listen":
            raise ValueError(f"{method} is a method of the core protocol")
        if method in TASK_METHODS:
            raise ValueError(f"{method} is served by mcp_trio's tasks extension")
        self._extensions[method] = (handler, frozenset(revisions) if revisions is not None else None)

    def tool_header_params(self, name: object) -> dict[str, tuple[str, ...]] | None:
        """The ``x-mcp-header`` parameters of a tool (header name -> argument path), if any."""
        spec = self._tools.get(name) if isinstance(name, str) else None
        return spec.header_params if spec is not None else None

    def result_meta(self) -> dict[str, Any]:
        """The ``_meta`` of every 2026-era result: who answered."""
        return {mt.SERVER_INFO_META_KEY: {"name": self.name, "version": self.version}}

    def _add_result_metadata(self, method: str, result: dict[str, Any]) -> None:
        result.setdefault("resultType", "complete")
        if method in mtm.CACHEABLE_METHODS:
            result.setdefault("ttlMs", self.cache_ttl_ms)
            result.setdefault("cacheScope", self.cache_scope)
        result["_meta"] = {**(result.get("_meta") or {}), **self.result_meta()}

    def subscription_filter(self, wanted: mt.SubscriptionFilter) -> mt.SubscriptionFilter:
        """The part of a ``subscriptions/listen`` filter this server honours (what it can send).

        Raises :class:`RPCError` (-32602) for more than :attr:`max_subscriptions` resource URIs or one
        longer than :attr:`max_uri_length`, whether or not the server has resources."""
        uris = wanted.resource_subscriptions or ()
        if len(uris) > self.max_subscriptions:
            raise self._too_many_subscriptions()
        for uri in uris:
            self._check_uri(uri)
        has_resources = bool(self._resources or self._templates)
        return mt.SubscriptionFilter(
            tools_list_changed=(wanted.tools_list_changed and bool(self._tools)) or None,
            prompts_list_changed=(wanted.prompts_list_changed and bool(self._prompts)) or None,
            resources_list_changed=(wanted.resources_list_changed and has_resources) or None,
            resource_subscriptions=(wanted.resource_subscriptions if has_resources else None) or None,
        )

    def has_tasks(self) -> bool:
        """Whether a tool may run as a task (then ``server/discover`` advertises the extension)."""
        return any(spec.task_support != "forbidden" for spec in self._tools.values())
