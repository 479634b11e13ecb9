"""The core protocol's request handlers (``tools/*``, ``resources/*``, ``prompts/*``, completion,
logging, ``server/discover``): :class:`CoreHandlers`, the part of :class:`~mcp_trio.MCPServer` that
answers what a client asks of what was registered on it.  What a failing handler's client gets is in
:mod:`.failures`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as mt
import pydantic

from .._protocol import versions
from ..errors import RPCError
from .codec import first_error
from .context import LOG_LEVELS, Context
from .failures import Failures, tool_error
from .prompts import PromptSpec
from .resources import ResourceSpec
from .tasks import NOT_A_TASK, TASKS_EXTENSION, TaskStarter, declares_tasks, missing_extension
from .tools import InvalidArguments, ToolSpec

__all__ = ["RESOURCE_NOT_FOUND", "CompletionFn", "CoreHandlers"]

RESOURCE_NOT_FOUND = -32002
"""The spec's error code for ``resources/read`` of an unknown URI."""

CompletionFn = Callable[..., Awaitable[Any]]


class CoreHandlers:
    """The handlers :class:`~mcp_trio.MCPServer` dispatches the core protocol's requests to."""

    # What the server provides:
    name: str
    instructions: str | None
    max_subscriptions: int
    max_uri_length: int
    _tools: dict[str, ToolSpec]
    _resources: dict[str, ResourceSpec]
    _templates: dict[str, ResourceSpec]
    _prompts: dict[str, PromptSpec]
    _completion: CompletionFn | None
    failures: Failures

    def capabilities(self) -> dict[str, Any]:
        raise NotImplementedError

    def has_tasks(self) -> bool:
        raise NotImplementedError

    async def _ping(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {}

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
        """Call a tool: invalid arguments and :class:`~mcp_trio.errors.ToolError` are an ``isError``
        result with their text, :class:`RPCError` a JSON-RPC error, anything else (a value that does not
        match the output schema too) a failure under the error policy (:mod:`.failures`)."""
        try:
            try:
                kwargs = await spec.bind(ctx, params.arguments or {}, task_status)
            except pydantic.ValidationError as exc:
                return tool_error(f"Invalid arguments for tool {params.name}: {first_error(exc)}")
            except InvalidArguments as exc:
                return tool_error(f"Invalid arguments for tool {params.name}: {exc}")
            return await spec.result(await spec.fn(**kwargs))
        except RPCError:
            raise
        except Exception as exc:
            return self.failures.tool_result(params.name, exc)

    async def _run_method(
        self, handler: Callable[[Context, Any], Awaitable[dict[str, Any]]], ctx: Context, params: Any
    ) -> dict[str, Any]:
        """Run an extension's method (:meth:`MCPServer.add_method <mcp_trio.MCPServer.add_method>`)."""
        try:
            return await handler(ctx, params)
        except RPCError:
            raise
        except Exception as exc:
            raise self.failures.rpc_error(f"method {ctx.method}", exc) from exc

    async def _list_resources(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"resources": [spec.wire() for spec in self._resources.values()]}

    async def _list_templates(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"resourceTemplates": [spec.wire() for spec in self._templates.values()]}

    async def _read_resource(self, ctx: Context, params: mt.ReadResourceRequestParams) -> dict[str, Any]:
        uri = str(params.uri)
        spec = self._resources.get(uri)
        variables: dict[str, str] | None = {}
        if spec is None:
            for spec in self._templates.values():
                variables = spec.match(uri)
                if variables is not None:
                    break
        if spec is not None and variables is not None:
            try:
                return await spec.read(ctx, uri, variables)
            except RPCError:
                raise
            except Exception as exc:
                what = f"resource template {spec.uri}" if spec.is_template else f"resource {spec.uri}"
                raise self.failures.rpc_error(what, exc) from exc
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
        if not isinstance(subscriptions, set):  # its first: sessions share one empty frozenset until then
            subscriptions = ctx.peer.subscriptions = set()
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
        subscriptions = ctx.peer.subscriptions
        if isinstance(subscriptions, set):
            subscriptions.discard(str(params.uri))
        return {}

    async def _list_prompts(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"prompts": [spec.wire() for spec in self._prompts.values()]}

    async def _get_prompt(self, ctx: Context, params: mt.GetPromptRequestParams) -> dict[str, Any]:
        spec = self._prompts.get(params.name)
        if spec is None:
            raise RPCError(mt.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        try:
            return await spec.get(ctx, params.arguments or {})
        except RPCError:
            raise
        except Exception as exc:
            raise self.failures.rpc_error(f"prompt {spec.name}", exc) from exc

    async def _complete(self, ctx: Context, params: mt.CompleteRequestParams) -> dict[str, Any]:
        try:
            return await self._completion_result(params)
        except RPCError:
            raise
        except Exception as exc:
            raise self.failures.rpc_error("completion", exc) from exc

    async def _completion_result(self, params: mt.CompleteRequestParams) -> dict[str, Any]:
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
