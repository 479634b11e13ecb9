"""The core protocol's request handlers (``tools/*``, ``resources/*``, ``prompts/*``, completion,
logging, ``server/discover``): :class:`CoreHandlers`, the part of :class:`~mcp_trio.MCPServer` that
answers what a client asks of what was registered on it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as mt
import pydantic

from .._protocol import versions
from ..errors import RPCError
from .codec import first_error
from .context import LOG_LEVELS, Context
from .prompts import PromptSpec
from .resources import ResourceSpec
from .tasks import NOT_A_TASK, TASKS_EXTENSION, TaskStarter, declares_tasks, missing_extension
from .tools import InvalidArguments, ToolSpec, to_call_tool_result

__all__ = ["RESOURCE_NOT_FOUND", "CompletionFn", "CoreHandlers"]

logger = logging.getLogger("mcp_trio._app.server")

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
        try:
            value = await spec.call(ctx, params.arguments or {}, task_status)
        except RPCError:
            raise
        except pydantic.ValidationError as exc:
            return _tool_error(f"Invalid arguments for tool {params.name}: {first_error(exc)}")
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


def _tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}
