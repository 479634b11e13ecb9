"""Prompts: templates of messages with arguments."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from ..errors import RPCError
from .context import Context, is_context

__all__ = ["PromptSpec"]

PromptFn = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class PromptSpec:
    name: str
    fn: PromptFn
    title: str | None
    description: str | None
    arguments: tuple[mt.PromptArgument, ...]
    context_param: str | None

    @classmethod
    def build(
        cls,
        fn: PromptFn,
        *,
        name: str | None,
        title: str | None,
        description: str | None,
        argument_descriptions: dict[str, str] | None,
    ) -> PromptSpec:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"prompt {fn!r} must be an async function")
        descriptions = argument_descriptions or {}
        arguments = []
        context_param = None
        for pname, param in inspect.signature(fn).parameters.items():
            if is_context(param.annotation):
                context_param = pname
                continue
            arguments.append(
                mt.PromptArgument(
                    name=pname, description=descriptions.get(pname), required=param.default is param.empty
                )
            )
        return cls(
            name=name or fn.__name__,
            fn=fn,
            title=title,
            description=description if description is not None else inspect.getdoc(fn),
            arguments=tuple(arguments),
            context_param=context_param,
        )

    def wire(self) -> dict[str, Any]:
        prompt = mt.Prompt(
            name=self.name,
            title=self.title,
            description=self.description,
            arguments=list(self.arguments) or None,
        )
        return prompt.model_dump(by_alias=True, exclude_none=True, mode="json")

    async def get(self, ctx: Context, arguments: dict[str, str]) -> dict[str, Any]:
        known = {a.name for a in self.arguments}
        missing = [a.name for a in self.arguments if a.required and a.name not in arguments]
        if missing:
            raise RPCError(mt.INVALID_PARAMS, f"Missing required arguments for prompt {self.name}: {missing}")
        kwargs: dict[str, Any] = {k: v for k, v in arguments.items() if k in known}
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return self._result(await self.fn(**kwargs))

    def _result(self, value: Any) -> dict[str, Any]:
        if isinstance(value, mt.GetPromptResult):
            return value.model_dump(by_alias=True, exclude_none=True, mode="json")
        items = value if isinstance(value, list) else [value]
        result: dict[str, Any] = {"messages": [_message(item) for item in items]}
        if self.description is not None:
            result["description"] = self.description
        return result


def _message(item: Any) -> dict[str, Any]:
    """A prompt message from a string (user text), a content block (a user message), a
    ``PromptMessage`` or a wire dict."""
    if isinstance(item, str):
        return {"role": "user", "content": {"type": "text", "text": item}}
    if hasattr(item, "model_dump"):
        dumped: dict[str, Any] = item.model_dump(by_alias=True, exclude_none=True, mode="json")
        return dumped if isinstance(item, mt.PromptMessage) else {"role": "user", "content": dumped}
    if isinstance(item, dict):  # a wire message: checked here (a 2026 answer would drop it silently)
        return mt.PromptMessage.model_validate(item).model_dump(by_alias=True, exclude_none=True, mode="json")
    raise TypeError(f"a prompt cannot return {type(item).__name__}")
