"""The MCP server object users register tools, resources and prompts on, and its request dispatcher."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import mcp_types as mt
import mcp_types.methods as mtm
import pydantic
import pydantic_core
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS

from .._protocol import jsonrpc, versions
from ..errors import RPCError
from .bus import LocalNotificationBus, NotificationBus, Subscriber
from .context import LOG_LEVELS, Context
from .prompts import PromptFn, PromptSpec
from .resources import ResourceFn, ResourceSpec
from .tasks import (
    NOT_A_TASK,
    TASK_METHODS,
    TASKS_EXTENSION,
    TaskStarter,
    TaskSupport,
    declares_tasks,
    missing_extension,
)
from .tools import InvalidArguments, ToolFn, ToolSpec, to_call_tool_result

__all__ = ["RESOURCE_NOT_FOUND", "MCPServer"]

logger = logging.getLogger(__name__)

RESOURCE_NOT_FOUND = -32002
"""The spec's error code for ``resources/read`` of an unknown URI."""
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


CompletionFn = Callable[..., Awaitable[Any]]
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class MCPServer:
    """An MCP server: a name, a version, and what it offers (tools, resources, prompts, completion).

    Handlers are ``async`` functions (blocking work goes through ``trio.to_thread.run_sync``). Each runs
    as a task in the nursery of the session that asked (or, for 2026-era requests, in the request's
    scope), so ``notifications/cancelled``, the end of the session and server shutdown cancel it.
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
        self._tools: dict[str, ToolSpec] = {}
        self._resources: dict[str, ResourceSpec] = {}
        self._templates: dict[str, ResourceSpec] = {}
        self._prompts: dict[str, PromptSpec] = {}
        self._completion: CompletionFn | None = None
        self._text_layouts: dict[str, tuple[Any, _Layout | None]] = {}
        """Per revision: how ``serialize_server_result`` lays out a text-only ``tools/call`` result
        (see :meth:`_text_result`)."""
        self.notifications: NotificationBus = (
            LocalNotificationBus() if notification_bus is None else notification_bus
        )
        """Where ``notify_*`` publishes (see :class:`~mcp_trio.NotificationBus`)."""
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
    ) -> Callable[[F], F]:
        """Decorator: register an async function as a tool.  Its input schema comes from its type
        hints unless ``input_schema`` is given; a parameter annotated :class:`Context` gets the context.

        ``task``: whether a 2026-era call may run as a task (the tasks extension, see docs/tasks):
        ``"forbidden"`` (default), ``"optional"`` (a task when the client declared the extension, else an
        ordinary call) or ``"required"`` (a client without the extension gets -32021).  A task-capable
        tool may take a ``task_status`` parameter and call ``task_status.started()`` when it becomes a
        task (see :class:`~mcp_trio.TaskStarter`); without one it is a task from the start."""
        options = {
            "name": name,
            "title": title,
            "description": description,
            "input_schema": input_schema,
            "output_schema": output_schema,
            "annotations": annotations,
            "task": task,
        }
        return self._decorator(lambda fn: self.add_tool(fn, **options))

    def add_tool(self, fn: ToolFn, **options: Any) -> None:
        spec = ToolSpec.build(fn, **options)
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
        options = {
            "name": name,
            "title": title,
            "description": description,
            "mime_type": mime_type,
            "size": size,
            "annotations": annotations,
        }
        return self._decorator(lambda fn: self.add_resource(uri, fn, **options))

    def add_resource(self, uri: str, fn: ResourceFn, **options: Any) -> None:
        spec = ResourceSpec.build(uri, fn, **options)
        (self._templates if spec.is_template else self._resources)[uri] = spec

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
        options = {
            "name": name,
            "title": title,
            "description": description,
            "argument_descriptions": argument_descriptions,
        }
        return self._decorator(lambda fn: self.add_prompt(fn, **options))

    def add_prompt(self, fn: PromptFn, **options: Any) -> None:
        spec = PromptSpec.build(fn, **options)
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
            client_info = request.client_info.model_dump(by_alias=True, exclude_none=True, mode="json")
            capabilities = request.capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
            jsonrpc.encode({"i": client_info, "c": capabilities})
        except pydantic.ValidationError as exc:
            raise RPCError(mt.INVALID_PARAMS, f"Invalid params: {_first_error(exc)}") from exc
        except (ValueError, RecursionError, pydantic_core.PydanticSerializationError) as exc:
            raise RPCError(mt.INVALID_PARAMS, "Invalid params: clientInfo or capabilities unusable") from exc
        revision = versions.negotiate(request.protocol_version)
        result: dict[str, Any] = {
            "protocolVersion": revision.name,
            "capabilities": self.capabilities(),
            "serverInfo": {"name": self.name, "version": self.version},
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return Initialized(revision, client_info, capabilities, result)

    async def handle_request(
        self, ctx: Context, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Run the handler of one request; raises :class:`RPCError` for a JSON-RPC error answer."""
        extension = self._extensions.get(method)
        if extension is not None:
            result = await extension[0](ctx, params)
            self._add_metadata_if_modern(ctx, method, result)
            return result
        handler = self._handlers.get(method)
        if handler is None:
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {method}")
        try:
            request_params = _parse_params(method, ctx.protocol_version, params)
        except pydantic.ValidationError as exc:
            raise RPCError(mt.INVALID_PARAMS, f"Invalid params: {_first_error(exc)}") from exc
        except (KeyError, ValueError) as exc:
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {method}") from exc
        result = await handler(ctx, request_params)
        self._add_metadata_if_modern(ctx, method, result)
        if result.get("resultType") == "task":  # a CreateTaskResult: no model in mcp-types
            return result
        if method == "tools/call":
            text = self._text_result(ctx.protocol_version, result)
            if text is not None:
                return text
        return mtm.serialize_server_result(method, ctx.protocol_version, result)

    def _text_result(self, version: str, result: dict[str, Any]) -> dict[str, Any] | None:
        """What ``serialize_server_result`` makes of a ``tools/call`` result of text blocks alone (the
        usual one), without a validation pass: None for any other result.  Its layout is taken, once per
        revision and ``_meta``, from the serializer itself (a one-block probe), and text is any ``str``
        to it, so the answer is the same.  Our results of this shape are built by
        :func:`to_call_tool_result` and :meth:`_add_result_metadata`."""
        content = result.get("content")
        if type(content) is not list:
            return None
        meta = result.get("_meta")
        if len(result) != (1 if meta is None else 3):
            return None
        if meta is not None and result.get("resultType") != "complete":
            return None
        for item in content:
            if type(item) is not dict or len(item) != 2 or item.get("type") != "text":
                return None
            if type(item.get("text")) is not str:
                return None
        cached = self._text_layouts.get(version)
        if cached is None or cached[0] != meta:
            cached = self._text_layouts[version] = (_copy_json(meta), _text_layout(version, meta))
        layout = cached[1]
        if layout is None:
            return None
        head, text_first, tail = layout
        if text_first:
            blocks = [{"text": item["text"], "type": "text"} for item in content]
        else:
            blocks = [{"type": "text", "text": item["text"]} for item in content]
        return {**_copy_json(head), "content": blocks, **_copy_json(tail)}  # a fresh answer each time

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

    # -- handlers ---------------------------------------------------------------------------

    async def _ping(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {}

    def has_tasks(self) -> bool:
        """Whether a tool may run as a task (then ``server/discover`` advertises the extension)."""
        return any(spec.task_support != "forbidden" for spec in self._tools.values())

    async def _discover(self, ctx: Context, params: Any) -> dict[str, Any]:
        capabilities = self.capabilities()
        if self.has_tasks():
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
        result: dict[str, Any] = {
            "supportedVersions": versions.supported_versions(),
            "capabilities": capabilities,
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return result

    async def _list_tools(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"tools": [spec.wire() for spec in self._tools.values()]}

    async def _call_tool(self, ctx: Context, params: mt.CallToolRequestParams) -> dict[str, Any]:
        spec = self._tools.get(params.name)
        if spec is None:
            raise RPCError(mt.INVALID_PARAMS, f"Unknown tool: {params.name}")
        revision = versions.revision(ctx.protocol_version)
        if spec.task_support != "forbidden" and revision is not None and revision.modern:
            if declares_tasks(ctx.peer.client_capabilities):
                tasks = getattr(ctx.peer, "tasks", None)
                if tasks is not None:
                    return await tasks.call_tool(  # type: ignore[no-any-return]
                        ctx, lambda ctx, status: self._run_tool(spec, ctx, params, status)
                    )
            elif spec.task_support == "required":
                raise missing_extension()
        return await self._run_tool(spec, ctx, params, NOT_A_TASK)

    async def _task_method(self, ctx: Context, params: dict[str, Any] | None) -> dict[str, Any]:
        """``tasks/get``, ``tasks/update``, ``tasks/cancel`` (2026 era, where the app runs tasks)."""
        tasks = getattr(ctx.peer, "tasks", None)
        if tasks is None:
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {ctx.method}")
        handler = {"tasks/get": tasks.get, "tasks/update": tasks.update, "tasks/cancel": tasks.cancel}
        result: dict[str, Any] = await handler[ctx.method](ctx, params)
        return result

    async def _run_tool(
        self, spec: ToolSpec, ctx: Context, params: mt.CallToolRequestParams, task_status: TaskStarter
    ) -> dict[str, Any]:
        try:
            value = await spec.call(ctx, params.arguments or {}, task_status)
        except RPCError:
            raise
        except pydantic.ValidationError as exc:
            return _tool_error(f"Invalid arguments for tool {params.name}: {_first_error(exc)}")
        except InvalidArguments as exc:
            return _tool_error(f"Invalid arguments for tool {params.name}: {exc}")
        except Exception as exc:
            logger.info("tool %s raised %r", params.name, exc)
            return _tool_error(str(exc) or type(exc).__name__)
        return to_call_tool_result(value)

    async def _list_resources(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"resources": [spec.wire() for spec in self._resources.values()]}

    async def _list_templates(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"resourceTemplates": [spec.wire() for spec in self._templates.values()]}

    async def _read_resource(self, ctx: Context, params: mt.ReadResourceRequestParams) -> dict[str, Any]:
        uri = str(params.uri)
        spec = self._resources.get(uri)
        if spec is not None:
            return await spec.read(ctx, uri, {})
        for template in self._templates.values():
            variables = template.match(uri)
            if variables is not None:
                return await template.read(ctx, uri, variables)
        revision = versions.revision(ctx.protocol_version)
        code = revision.resource_not_found_code if revision is not None else RESOURCE_NOT_FOUND
        raise RPCError(code, "Resource not found", {"uri": uri})

    async def _subscribe(self, ctx: Context, params: mt.SubscribeRequestParams) -> dict[str, Any]:
        """Subscribe the session to a URI: at most :attr:`max_subscriptions` of them (subscribing again
        to one it has is fine), none longer than :attr:`max_uri_length`."""
        uri = self._check_uri(str(params.uri))
        subscriptions = ctx.peer.subscriptions
        if uri not in subscriptions and len(subscriptions) >= self.max_subscriptions:
            raise self._too_many_subscriptions()
        subscriptions.add(uri)
        return {}

    def _check_uri(self, uri: str) -> str:
        """``uri`` itself, or :class:`RPCError` (-32602) if it is longer than :attr:`max_uri_length`."""
        if len(uri) > self.max_uri_length:
            limit = self.max_uri_length
            raise RPCError(mt.INVALID_PARAMS, f"Resource URI too long (limit {limit} characters)")
        return uri

    def _too_many_subscriptions(self) -> RPCError:
        return RPCError(mt.INVALID_PARAMS, f"Too many subscriptions (limit {self.max_subscriptions})")

    async def _unsubscribe(self, ctx: Context, params: mt.UnsubscribeRequestParams) -> dict[str, Any]:
        ctx.peer.subscriptions.discard(str(params.uri))
        return {}

    async def _list_prompts(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"prompts": [spec.wire() for spec in self._prompts.values()]}

    async def _get_prompt(self, ctx: Context, params: mt.GetPromptRequestParams) -> dict[str, Any]:
        spec = self._prompts.get(params.name)
        if spec is None:
            raise RPCError(mt.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        return await spec.get(ctx, params.arguments or {})

    async def _complete(self, ctx: Context, params: mt.CompleteRequestParams) -> dict[str, Any]:
        values: Any = []
        if self._completion is not None:
            ref = params.ref.model_dump(by_alias=True, exclude_none=True, mode="json")
            argument = params.argument.model_dump(by_alias=True, exclude_none=True, mode="json")
            context = (
                params.context.model_dump(by_alias=True, exclude_none=True, mode="json")
                if params.context
                else None
            )
            values = await self._completion(ref, argument, context)
        if isinstance(values, mt.Completion):
            return {"completion": values.model_dump(by_alias=True, exclude_none=True, mode="json")}
        values = list(values)[:100]
        return {"completion": {"values": values, "total": len(values), "hasMore": False}}

    async def _set_level(self, ctx: Context, params: mt.SetLevelRequestParams) -> dict[str, Any]:
        ctx.peer.log_level = params.level if params.level in LOG_LEVELS else None
        return {}


_REQUEST_STUB = {"jsonrpc": "2.0", "id": 0}
_PLAIN_PARAMS = {
    "tools/call": frozenset({"name", "arguments", "_meta"}),
    "ping": frozenset({"_meta"}),
    "tools/list": frozenset({"_meta"}),
    "resources/list": frozenset({"_meta"}),
    "resources/templates/list": frozenset({"_meta"}),
    "prompts/list": frozenset({"_meta"}),
    "server/discover": frozenset({"_meta"}),
}
"""Per method, the params members whose monolith (version-free) model in mcp-types accepts whatever
the revision's surface model accepted: requests holding no others need only the surface pass.  Their
handlers read nothing but these (``tools/call``: ``name`` and ``arguments``; the others: nothing).
``requestState`` counts too in a revision whose surface has it (typed ``str | None`` in both)."""
_PROGRESS_KEYS = ("progressToken", "progress_token")
"""``_meta`` members the monolith types more narrowly than a surface does (a null token, say)."""


def _parse_params(method: str, version: str, params: dict[str, Any] | None) -> Any:
    """The params of a client request, as ``mtm.parse_client_request(...).params`` gives them, with
    the same errors (ValueError: unknown version; KeyError: not in that revision; ValidationError);
    when the monolith model cannot refuse what the surface accepted (:data:`_PLAIN_PARAMS`), the
    surface model's params stand in for it and the second validation pass is skipped."""
    if version not in KNOWN_PROTOCOL_VERSIONS:
        raise ValueError(f"version must be a known protocol version, got {version!r}")
    surface = mtm.CLIENT_REQUESTS[(method, version)]
    body: dict[str, Any] = {"method": method}
    if params is not None:
        body["params"] = params
    validated = surface.model_validate({**_REQUEST_STUB, **body}, by_name=False)
    plain = _plain_params(method, version)
    if plain is not None and (params is None or plain.issuperset(params)):
        meta = params.get("_meta") if params is not None else None
        if not isinstance(meta, dict) or not any(key in meta for key in _PROGRESS_KEYS):
            return getattr(validated, "params", None)
    return mtm.MONOLITH_REQUESTS[method].model_validate(body, by_name=False).params


_Layout = tuple[dict[str, Any], bool, dict[str, Any]]


@functools.cache
def _plain_params(method: str, version: str) -> frozenset[str] | None:
    """:data:`_PLAIN_PARAMS` of ``method`` in ``version`` (with ``requestState`` where it is typed)."""
    plain = _PLAIN_PARAMS.get(method)
    if plain is None:
        return None
    fields = mtm.CLIENT_REQUESTS[(method, version)].model_fields["params"].annotation
    typed = getattr(fields, "model_fields", {}).get("request_state")
    if typed is not None and typed.alias == "requestState" and typed.annotation == (str | None):
        return plain | {"requestState"}
    return plain


def _text_layout(version: str, meta: Any) -> _Layout | None:
    """How the serializer lays out a text-only ``tools/call`` result with this ``_meta`` in
    ``version``: (members before ``content``, whether a block starts with ``text``, members after), or
    None if its answer is not of that plain shape."""
    probe: dict[str, Any] = {"content": [{"type": "text", "text": "probe"}]}
    if meta is not None:
        probe.update(resultType="complete", _meta=_copy_json(meta))
    answer = mtm.serialize_server_result("tools/call", version, probe)
    blocks = answer.get("content")
    if blocks not in ([{"type": "text", "text": "probe"}],) or set(answer) != set(probe):
        return None
    if meta is not None and (answer["_meta"] != meta or answer["resultType"] != "complete"):
        return None
    keys = list(answer)
    where = keys.index("content")
    head = {key: answer[key] for key in keys[:where]}
    tail = {key: answer[key] for key in keys[where + 1 :]}
    return head, next(iter(blocks[0])) == "text", tail


def _copy_json(value: Any) -> Any:
    """A copy of a JSON value made of dicts, lists and scalars (so no answer shares the layout's)."""
    if type(value) is dict:
        return {key: _copy_json(item) if type(item) in _CONTAINERS else item for key, item in value.items()}
    if type(value) is list:
        return [_copy_json(item) if type(item) in _CONTAINERS else item for item in value]
    return value


_CONTAINERS = (dict, list)


def _tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _first_error(exc: pydantic.ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
