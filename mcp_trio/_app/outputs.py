"""What a tool returns: its output schema from the return annotation (as the python-sdk derives it), the
check of a returned value against it, and the ``CallToolResult`` made of the value.

A pydantic model, a dataclass, a ``TypedDict``, an annotated class or a ``dict[str, T]`` is an object:
its own schema is the ``outputSchema`` and the value the ``structuredContent``.  Anything else (``str``,
``int``, ``list[T]``, ``T | None``, ``None``, ...) is wrapped, as the spec wants an object schema:
``{"result": T}``, and ``structuredContent`` is ``{"result": value}``.  Content blocks and
``CallToolResult`` have no schema (they are what the model reads), nor has a tool without a return
annotation.  The content of a result stays what it was without a schema (a ``str`` is its text, a list
one block per item, an object its JSON), so a client that ignores ``structuredContent`` sees no change.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import GenericAlias, NoneType, UnionType
from typing import Annotated, Any, Protocol, Union, get_args, get_origin, get_type_hints

import mcp_types as mt
import pydantic
import pydantic_core
import typing_extensions
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaWarningKind

__all__ = ["OutputMismatch", "SchemaCheck", "ToolOutput", "to_call_tool_result"]

_CONTENT_TYPES = (mt.TextContent, mt.ImageContent, mt.AudioContent, mt.EmbeddedResource, mt.ResourceLink)
_SCALARS = (str, int, float, bool)
_WRAPPED_SCALARS = frozenset({str, int, bool})
"""Return types whose ``{"result": value}`` needs no validation pass when the value is of exactly that
type (a float may be NaN or infinite, which JSON has no word for: it goes through pydantic)."""


class OutputMismatch(ValueError):
    """A tool returned a value its output schema refuses: a failure of the server, not the client."""


class SchemaCheck(Protocol):
    """The validator of an explicit schema (:class:`~mcp_trio._app.tools.ArgumentsSchema`)."""

    async def find_error(self, value: Any) -> str | None: ...


class _StrictJsonSchema(GenerateJsonSchema):
    """Schema generation that fails where pydantic would only warn (a default it cannot serialize, say):
    such a return type gets no schema rather than a wrong one."""

    def emit_warning(self, kind: JsonSchemaWarningKind, detail: str) -> None:
        raise ValueError(f"JSON schema warning: {kind} - {detail}")


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """How one tool's return value becomes its result: the advertised ``outputSchema`` (None: no
    structured output) and what validates a value against it."""

    tool: str
    schema: dict[str, Any] | None = None
    adapter: pydantic.TypeAdapter[Any] | None = None
    """Validates and dumps a value (a schema derived from the return annotation)."""
    wrap: bool = False
    """Whether ``structuredContent`` is ``{"result": value}``."""
    fast: type | None = None
    """The wrapped scalar type whose exact instances skip the validation pass."""
    check: SchemaCheck | None = None
    """Validates ``structuredContent`` against an explicit ``output_schema``."""

    @classmethod
    def build(
        cls,
        fn: Callable[..., Any],
        tool: str,
        *,
        structured_output: bool | None,
        output_schema: dict[str, Any] | None,
        check: SchemaCheck | None,
    ) -> ToolOutput:
        """The output of ``fn``: an explicit ``output_schema`` wins; ``structured_output=False`` opts out;
        ``True`` insists (a return annotation that gives no schema raises :class:`TypeError`)."""
        if output_schema is not None:
            return cls(tool, output_schema, check=check)
        if structured_output is False:
            return cls(tool)
        annotation = inspect.signature(fn).return_annotation
        if annotation is not inspect.Signature.empty:
            annotation = get_type_hints(fn, include_extras=True).get("return", annotation)
        derived = _derive(tool, annotation) if annotation is not inspect.Signature.empty else None
        if derived is None:
            if structured_output:
                raise TypeError(f"tool {tool}: its return annotation gives no output schema")
            return cls(tool)
        return derived

    async def result(self, value: Any) -> dict[str, Any]:
        """The ``CallToolResult`` wire dict of what the tool returned; :class:`OutputMismatch` if the
        value does not match the output schema."""
        if self.schema is None:
            return to_call_tool_result(value)
        if isinstance(value, mt.CallToolResult):
            result = value.model_dump(by_alias=True, exclude_none=True, mode="json")
            if not value.is_error:
                result["structuredContent"] = await self._structured(value.structured_content, raw=True)
            return result
        structured = await self._structured(value)
        if value is None or isinstance(value, (str, *_CONTENT_TYPES)) or type(value) in (list, tuple):
            content = _blocks(value)
        else:  # an object (its JSON as text), or a scalar of another type the value was coerced to
            content = [_content(structured["result"] if self.wrap else structured)]
        return {"content": content, "structuredContent": structured}

    async def _structured(self, value: Any, *, raw: bool = False) -> dict[str, Any]:
        """``structuredContent`` of ``value`` (``raw``: already ``structuredContent``, not wrapped)."""
        if self.check is not None:
            structured = value if raw else _jsonable(value)
            error = await self.check.find_error(structured)
            if error is not None:
                raise OutputMismatch(f"tool {self.tool} returned a value its output schema refuses: {error}")
            if not isinstance(structured, dict):
                raise OutputMismatch(f"tool {self.tool} returned {type(value).__name__}, not an object")
            return structured
        if self.wrap and not raw:
            if type(value) is self.fast:
                return {"result": value}
            value = {"result": value}
        assert self.adapter is not None
        try:
            validated = self.adapter.validate_python(value, by_alias=True, by_name=True)
            if isinstance(validated, pydantic.BaseModel):  # a returned subclass keeps its own fields
                dumped = validated.model_dump(mode="json", by_alias=True)
            else:
                dumped = self.adapter.dump_python(validated, mode="json", by_alias=True)
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
            detail = _first_error(exc) if isinstance(exc, pydantic.ValidationError) else str(exc)
            raise OutputMismatch(
                f"tool {self.tool} returned a value its output schema refuses: {detail}"
            ) from exc
        result: dict[str, Any] = dumped
        return result


def _derive(tool: str, annotation: Any) -> ToolOutput | None:
    """The output of a tool with this return annotation, or None if it has no schema."""
    bare = annotation
    while get_origin(bare) is Annotated:
        bare = get_args(bare)[0]
    if _is_content(bare):
        return None
    model, wrap = _output_model(tool, annotation, bare)
    if model is None:
        return None
    try:
        adapter = pydantic.TypeAdapter(model)
        schema = _inline_root_ref(adapter.json_schema(schema_generator=_StrictJsonSchema))
    except (pydantic.PydanticUserError, TypeError, ValueError, NameError, pydantic_core.SchemaError):
        return None  # a type pydantic cannot describe: no structured output, as the python-sdk does
    fast = bare if wrap and bare in _WRAPPED_SCALARS else None
    return ToolOutput(tool, schema, adapter, wrap, fast)


def _output_model(tool: str, annotation: Any, bare: Any) -> tuple[Any, bool]:
    """(the type a value is validated as, whether it is wrapped in ``{"result": ...}``)."""
    if bare is None or bare is NoneType or bare in _SCALARS or bare is bytes:
        return _wrapped(tool, annotation), True
    if isinstance(bare, GenericAlias) or get_origin(bare) is not None:
        args = get_args(bare)
        if get_origin(bare) is dict and len(args) == 2 and args[0] is str:
            return Annotated[bare, pydantic.Field(title=f"{tool}Output")], False
        return _wrapped(tool, annotation), True
    if not isinstance(bare, type):
        return _wrapped(tool, annotation), True  # a Literal, a type alias, ...
    if issubclass(bare, pydantic.BaseModel) or dataclasses.is_dataclass(bare):
        return annotation, False
    if typing_extensions.is_typeddict(bare):
        return _readable_typeddict(bare), False
    if issubclass(bare, dict):
        return Annotated[bare, pydantic.Field(title=f"{tool}Output")], False
    hints = {name: hint for name, hint in get_type_hints(bare).items() if not name.startswith("_")}
    if not hints:
        return None, False  # a class pydantic knows nothing of
    defaults = {**vars(bare), **getattr(bare, "_field_defaults", {})}  # a NamedTuple's are there
    fields: dict[str, Any] = {name: (hint, _default(defaults.get(name, ...))) for name, hint in hints.items()}
    config = pydantic.ConfigDict(from_attributes=True)
    return pydantic.create_model(bare.__name__, __config__=config, **fields), False


def _default(value: Any) -> Any:
    """A class attribute as a field's default: a descriptor (a property, a NamedTuple's field) is none."""
    return ... if hasattr(type(value), "__get__") else value


def _wrapped(tool: str, annotation: Any) -> type[pydantic.BaseModel]:
    return pydantic.create_model(f"{tool}Output", result=(annotation, ...))


def _is_content(annotation: Any) -> bool:
    """Whether a return annotation declares content blocks or results (bare, as the items of a list or
    tuple, or an arm of a union): what the model reads, not data with a schema."""
    origin = get_origin(annotation)
    if origin is None:
        return isinstance(annotation, type) and issubclass(annotation, (*_CONTENT_TYPES, mt.CallToolResult))
    if origin is Annotated:
        return _is_content(get_args(annotation)[0])
    return any(_is_content(arg) for arg in get_args(annotation) if arg is not Ellipsis) and (
        origin in (list, tuple, Sequence) or _is_union(annotation)
    )


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, UnionType)


def _readable_typeddict(td: type) -> Any:
    """pydantic takes only ``typing_extensions.TypedDict`` below Python 3.12: a ``typing.TypedDict`` is
    rebuilt as one with the same keys (which are required, its docstring and name)."""
    if sys.version_info >= (3, 12) or type(td).__module__ != "typing":  # pragma: no cover - 3.12+
        return td
    hints = get_type_hints(td, include_extras=True)
    required: frozenset[str] = getattr(td, "__required_keys__", frozenset())
    optional = typing_extensions.NotRequired
    items = {name: hint if name in required else optional[hint] for name, hint in hints.items()}
    make: Any = typing_extensions.TypedDict  # the functional form, with keys known only now
    rebuilt: Any = make(td.__name__, items)
    rebuilt.__doc__ = td.__doc__
    return rebuilt


def _inline_root_ref(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema whose root is a ``$ref`` into ``$defs`` (a self-referencing model) with that definition
    copied to the root: an output schema's root must be an object schema."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return schema
    definition: dict[str, Any] = schema["$defs"][ref.removeprefix("#/$defs/")]
    return {**definition, **{key: value for key, value in schema.items() if key != "$ref"}}


def _first_error(exc: pydantic.ValidationError) -> str:
    err = exc.errors(include_input=False)[0]
    where = ".".join(str(part) for part in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def _jsonable(value: Any) -> Any:
    """A value as JSON data (a model or dataclass dumped by alias); a value that has no JSON form raises
    :class:`OutputMismatch`."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    try:
        return pydantic_core.to_jsonable_python(value, by_alias=True)
    except pydantic_core.PydanticSerializationError as exc:
        raise OutputMismatch(f"the value has no JSON form: {exc}") from exc


def _content(item: Any) -> dict[str, Any]:
    if isinstance(item, _CONTENT_TYPES):
        return item.model_dump(by_alias=True, exclude_none=True, mode="json")
    if isinstance(item, str):
        return {"type": "text", "text": item}
    return {"type": "text", "text": json.dumps(item, default=_json_default)}


def _json_default(value: Any) -> Any:
    return pydantic_core.to_jsonable_python(value, by_alias=True, fallback=str)


def _blocks(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    return [_content(item) for item in items]


def to_call_tool_result(value: Any) -> dict[str, Any]:
    """What a tool without an output schema returned, as a ``CallToolResult`` wire dict.

    ``CallToolResult`` passes through; a string or content block becomes one content item; a list
    becomes several; a dict (or pydantic model) becomes ``structuredContent`` plus its JSON as text.
    """
    if isinstance(value, mt.CallToolResult):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    if isinstance(value, pydantic.BaseModel) and not isinstance(value, _CONTENT_TYPES):
        value = value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        return {"content": [_content(json.dumps(value, default=_json_default))], "structuredContent": value}
    return {"content": _blocks(value)}
