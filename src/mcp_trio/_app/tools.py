"""Tools: registration, input schemas from type hints, argument validation, result conversion."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

import mcp_types as mt
import pydantic

from .._protocol.modern import header_parameters
from .context import Context

__all__ = ["ToolSpec", "to_call_tool_result"]

ToolFn = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A registered tool: its wire definition and how to call it."""

    definition: mt.Tool
    fn: ToolFn
    arguments: type[pydantic.BaseModel] | None
    """Validates arguments when the schema came from type hints; None for an explicit schema."""
    context_param: str | None
    header_params: dict[str, tuple[str, ...]]
    """``x-mcp-header`` annotations of the input schema: header name (lower-case) -> argument path."""

    @classmethod
    def build(
        cls,
        fn: ToolFn,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        annotations: mt.ToolAnnotations | None = None,
    ) -> ToolSpec:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn!r} must be an async function (run blocking work with trio.to_thread)")
        hints = get_type_hints(fn, include_extras=True)
        params = inspect.signature(fn).parameters
        context_param = next((p for p in params if hints.get(p) is Context), None)
        model = None
        if input_schema is None:
            model = _arguments_model(fn, params, hints, context_param)
            input_schema = model.model_json_schema()
            input_schema.pop("title", None)
        definition = mt.Tool(
            name=name or fn.__name__,
            title=title,
            description=description if description is not None else inspect.getdoc(fn),
            input_schema=input_schema,
            output_schema=output_schema,
            annotations=annotations,
        )
        return cls(
            definition=definition,
            fn=fn,
            arguments=model,
            context_param=context_param,
            header_params=header_parameters(input_schema),
        )

    def wire(self) -> dict[str, Any]:
        return self.definition.model_dump(by_alias=True, exclude_none=True, mode="json")

    async def call(self, ctx: Context, arguments: dict[str, Any]) -> Any:
        if self.arguments is not None:
            validated = self.arguments.model_validate(arguments)
            kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        else:
            kwargs = dict(arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return await self.fn(**kwargs)


def _arguments_model(
    fn: ToolFn, params: Any, hints: dict[str, Any], context_param: str | None
) -> type[pydantic.BaseModel]:
    fields: dict[str, Any] = {}
    for pname, param in params.items():
        if pname == context_param:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args and **kwargs are not supported")
        default = ... if param.default is param.empty else param.default
        fields[pname] = (hints.get(pname, Any), default)
    return pydantic.create_model(f"{fn.__name__}_arguments", **fields)


_CONTENT_TYPES = (mt.TextContent, mt.ImageContent, mt.AudioContent, mt.EmbeddedResource, mt.ResourceLink)


def _content(item: Any) -> dict[str, Any]:
    if isinstance(item, _CONTENT_TYPES):
        return item.model_dump(by_alias=True, exclude_none=True, mode="json")
    if isinstance(item, str):
        return {"type": "text", "text": item}
    return {"type": "text", "text": json.dumps(item, default=str)}


def to_call_tool_result(value: Any) -> dict[str, Any]:
    """Turn what a tool returned into a ``CallToolResult`` wire dict.

    ``CallToolResult`` passes through; a string or content block becomes one content item; a list
    becomes several; a dict (or pydantic model) becomes ``structuredContent`` plus its JSON as text.
    """
    if isinstance(value, mt.CallToolResult):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    if isinstance(value, pydantic.BaseModel) and not isinstance(value, _CONTENT_TYPES):
        value = value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        return {"content": [_content(json.dumps(value))], "structuredContent": value}
    if value is None:
        return {"content": []}
    items = value if isinstance(value, (list, tuple)) else [value]
    return {"content": [_content(item) for item in items]}
