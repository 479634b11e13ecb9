"""Resources: static ones by URI and templated ones (RFC 6570 level 1, ``{name}`` segments)."""

from __future__ import annotations

import base64
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from .context import Context, is_context

__all__ = ["ResourceSpec", "to_read_result"]

ResourceFn = Callable[..., Awaitable[Any]]
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """A registered resource, or a resource template when its URI has ``{variables}``."""

    uri: str
    name: str
    fn: ResourceFn
    title: str | None
    description: str | None
    mime_type: str | None
    size: int | None
    annotations: dict[str, Any] | None
    pattern: re.Pattern[str] | None
    context_param: str | None

    @classmethod
    def build(
        cls,
        uri: str,
        fn: ResourceFn,
        *,
        name: str | None,
        title: str | None,
        description: str | None,
        mime_type: str | None,
        size: int | None,
        annotations: dict[str, Any] | None,
    ) -> ResourceSpec:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"resource {uri}: {fn!r} must be an async function")
        params = inspect.signature(fn).parameters
        context_param = next((p for p, v in params.items() if is_context(v.annotation)), None)
        variables = _VARIABLE.findall(uri)
        pattern = None
        if variables:
            missing = set(variables) - set(params)
            if missing:
                raise TypeError(f"resource template {uri}: {fn.__name__} lacks parameters {sorted(missing)}")
            regex = "".join(
                f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part)
                for i, part in enumerate(_VARIABLE.split(uri))
            )
            pattern = re.compile(regex)
        return cls(
            uri=uri,
            name=name or fn.__name__,
            fn=fn,
            title=title,
            description=description if description is not None else inspect.getdoc(fn),
            mime_type=mime_type,
            size=size,
            annotations=annotations,
            pattern=pattern,
            context_param=context_param,
        )

    @property
    def is_template(self) -> bool:
        return self.pattern is not None

    def wire(self) -> dict[str, Any]:
        key = "uriTemplate" if self.is_template else "uri"
        fields = {
            key: self.uri,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "mimeType": self.mime_type,
            "size": None if self.is_template else self.size,
            "annotations": self.annotations,
        }
        return {k: v for k, v in fields.items() if v is not None}

    def match(self, uri: str) -> dict[str, str] | None:
        if self.pattern is None:
            return {} if uri == self.uri else None
        found = self.pattern.fullmatch(uri)
        return found.groupdict() if found else None

    async def read(self, ctx: Context, uri: str, variables: dict[str, str]) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(variables)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return to_read_result(await self.fn(**kwargs), uri, self.mime_type)


def _contents(value: Any, uri: str, mime_type: str | None) -> dict[str, Any]:
    if isinstance(value, (mt.TextResourceContents, mt.BlobResourceContents)):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    if isinstance(value, dict):  # wire contents: checked here (a 2026 answer would drop them silently)
        model = mt.BlobResourceContents if "blob" in value else mt.TextResourceContents
        return model.model_validate(value).model_dump(by_alias=True, exclude_none=True, mode="json")
    contents: dict[str, Any] = {"uri": uri}
    if isinstance(value, bytes):
        contents["blob"] = base64.b64encode(value).decode()
        contents["mimeType"] = mime_type or "application/octet-stream"
    else:
        contents["text"] = str(value)
        contents["mimeType"] = mime_type or "text/plain"
    return contents


def to_read_result(value: Any, uri: str, mime_type: str | None) -> dict[str, Any]:
    """What a resource function returned -> a ``ReadResourceResult``: ``str`` is text, ``bytes`` a blob,
    a list several contents; ``ReadResourceResult`` and contents models pass through."""
    if isinstance(value, mt.ReadResourceResult):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    items = value if isinstance(value, list) else [value]
    return {"contents": [_contents(item, uri, mime_type) for item in items]}
