"""The typed API of :class:`ClientSession`: one method per MCP request, each answer validated as its
``mcp_types`` model (a server's answer that is not one is a :class:`TransportError`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, overload

import mcp_types as mt
import pydantic

from .._protocol import modern as modern_rules
from .._protocol.tasks import TaskInfo
from ..errors import RPCError, TransportError
from .callbacks import ProgressHandler, TaskStatusHandler, check_callback
from .tasks import TaskAPI

__all__ = ["TypedAPI"]

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=pydantic.BaseModel)


def _validated(model: type[M], value: Any, what: str) -> M:
    """``value`` as ``model``; a server's answer that is not one is a :class:`TransportError`."""
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise TransportError(f"the answer to {what} is not a valid {model.__name__}: {exc}") from None


class TypedAPI(TaskAPI):
    """The typed methods of :class:`ClientSession`."""

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
        self._listed.add("tool", [tool.name for tool in valid])
        return result

    # The overloads lead with what tells them apart: a call that waits for its task returns the result.
    @overload
    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        wait_for_task: Literal[True] = True,
        progress: ProgressHandler | None = None,
        on_task_status: TaskStatusHandler | None = None,
    ) -> mt.CallToolResult: ...

    @overload
    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        wait_for_task: bool,
        progress: ProgressHandler | None = None,
        on_task_status: TaskStatusHandler | None = None,
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
        check_callback("on_task_status", on_task_status)
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

    async def list_resources(self, cursor: str | None = None) -> mt.ListResourcesResult:
        return await self._typed(
            mt.ListResourcesResult, "resources/list", {"cursor": cursor} if cursor else None
        )

    async def list_resource_templates(self, cursor: str | None = None) -> mt.ListResourceTemplatesResult:
        params = {"cursor": cursor} if cursor else None
        return await self._typed(mt.ListResourceTemplatesResult, "resources/templates/list", params)

    async def read_resource(
        self, uri: str, *, progress: ProgressHandler | None = None
    ) -> mt.ReadResourceResult:
        """``resources/read``; ``progress`` as for :meth:`call_tool`."""
        return await self._typed(mt.ReadResourceResult, "resources/read", {"uri": uri}, progress=progress)

    async def subscribe_resource(self, uri: str) -> None:
        """``resources/subscribe`` (2025 era).  A session renewed after a 404 subscribes again."""
        await self.request("resources/subscribe", {"uri": uri})
        self._subscribed.add(uri)

    async def unsubscribe_resource(self, uri: str) -> None:
        self._subscribed.discard(uri)
        await self.request("resources/unsubscribe", {"uri": uri})

    async def list_prompts(self, cursor: str | None = None) -> mt.ListPromptsResult:
        params = {"cursor": cursor} if cursor else None
        result = await self._typed(mt.ListPromptsResult, "prompts/list", params)
        self._listed.add("prompt", [prompt.name for prompt in result.prompts])
        return result

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        progress: ProgressHandler | None = None,
    ) -> mt.GetPromptResult:
        """``prompts/get``; ``progress`` as for :meth:`call_tool`."""
        params: dict[str, Any] = {"name": name}
        if arguments:
            params["arguments"] = dict(arguments)
        return await self._typed(mt.GetPromptResult, "prompts/get", params, progress=progress)

    async def complete(
        self, ref: dict[str, Any], argument: dict[str, str], context: dict[str, Any] | None = None
    ) -> mt.CompleteResult:
        params: dict[str, Any] = {"ref": ref, "argument": argument}
        if context is not None:
            params["context"] = context
        return await self._typed(mt.CompleteResult, "completion/complete", params)

    async def set_logging_level(self, level: mt.LoggingLevel) -> None:
        """2025 era: ``logging/setLevel``; 2026 era: the level travels in every request's ``_meta``."""
        self.log_level = level
        if not self.modern:
            await self.request("logging/setLevel", {"level": level})
