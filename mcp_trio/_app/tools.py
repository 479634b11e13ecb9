"""Tools: registration, input schemas from type hints, argument validation (output schemas and result
conversion are in :mod:`.outputs`)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, get_type_hints

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import mcp_types as mt
import pydantic
import referencing
import referencing.exceptions
import trio

from .._protocol.modern import header_parameters
from .context import Context, is_context
from .outputs import ToolOutput, to_call_tool_result
from .tasks import NOT_A_TASK, TaskStarter, TaskSupport

__all__ = ["ArgumentsSchema", "InvalidArguments", "ToolSpec"]

ToolFn = Callable[..., Awaitable[Any]]
TASK_STATUS_PARAM = "task_status"
"""The parameter (by name, as with :meth:`trio.Nursery.start`) through which a tool starts its task."""


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
    schema: ArgumentsSchema | None = None
    """Validates arguments against an explicit ``input_schema``; None when they come from type hints."""
    task_support: TaskSupport = "forbidden"
    """Whether a call may run as a task (tasks extension, 2026 era): never, when the client supports
    it, or always (a client without the extension gets -32021)."""
    task_status_param: bool = False
    """Whether the function takes ``task_status`` (it then calls ``task_status.started()`` itself)."""
    output: ToolOutput | None = None
    """Its ``outputSchema`` and how a returned value becomes the result (None: as without a schema)."""

    @classmethod
    def build(
        cls,
        fn: ToolFn,
        *,
        name: str | None,
        title: str | None,
        description: str | None,
        input_schema: dict[str, Any] | None,
        output_schema: dict[str, Any] | None,
        annotations: mt.ToolAnnotations | None,
        task: TaskSupport,
        structured_output: bool | None = None,
    ) -> ToolSpec:
        if task not in ("forbidden", "optional", "required"):
            raise ValueError(f"task must be 'forbidden', 'optional' or 'required', not {task!r}")
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn!r} must be an async function (run blocking work with trio.to_thread)")
        hints = get_type_hints(fn, include_extras=True)
        params = inspect.signature(fn).parameters
        context_param = next((p for p in params if is_context(hints.get(p))), None)
        task_status_param = TASK_STATUS_PARAM in params
        if task_status_param and task == "forbidden":
            raise TypeError(f"tool {fn.__name__}: task_status needs task='optional' or 'required'")
        name = name or fn.__name__
        model = schema = None
        if input_schema is None:
            skip = {context_param, TASK_STATUS_PARAM}
            model = _arguments_model(fn, params, hints, skip)
            input_schema = model.model_json_schema()
            input_schema.pop("title", None)
        else:
            schema = ArgumentsSchema.build(name, input_schema)
        check = None if output_schema is None else ArgumentsSchema.build(name, output_schema, "output_schema")
        output = ToolOutput.build(
            fn, name, structured_output=structured_output, output_schema=output_schema, check=check
        )
        definition = mt.Tool(
            name=name,
            title=title,
            description=description if description is not None else inspect.getdoc(fn),
            input_schema=input_schema,
            output_schema=output.schema,
            annotations=annotations,
        )
        return cls(
            definition=definition,
            fn=fn,
            arguments=model,
            context_param=context_param,
            header_params=header_parameters(input_schema),
            schema=schema,
            task_support=task,
            task_status_param=task_status_param,
            output=output,
        )

    def wire(self) -> dict[str, Any]:
        return self.definition.model_dump(by_alias=True, exclude_none=True, mode="json")

    async def call(
        self, ctx: Context, arguments: dict[str, Any], task_status: TaskStarter = NOT_A_TASK
    ) -> Any:
        """Validate ``arguments`` and run the tool (see :meth:`bind`); what it returned."""
        return await self.fn(**await self.bind(ctx, arguments, task_status))

    async def result(self, value: Any) -> dict[str, Any]:
        """The ``CallToolResult`` wire dict of what the tool returned; :class:`~.outputs.OutputMismatch`
        if it does not match the output schema."""
        if self.output is None:
            return to_call_tool_result(value)
        return await self.output.result(value)

    async def bind(
        self, ctx: Context, arguments: dict[str, Any], task_status: TaskStarter = NOT_A_TASK
    ) -> dict[str, Any]:
        """The keyword arguments to call the tool with.  Invalid arguments raise
        ``pydantic.ValidationError`` (schema from type hints) or :class:`InvalidArguments` (explicit
        schema).  A tool without a ``task_status`` parameter is started (``task_status.started()``)."""
        if self.arguments is not None:
            validated = self.arguments.model_validate(arguments)
            kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        else:
            if self.schema is not None:
                await self.schema.check(arguments)
            kwargs = dict(arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        if self.task_status_param:
            kwargs[TASK_STATUS_PARAM] = task_status
        else:
            task_status.started()
        return kwargs


def _arguments_model(
    fn: ToolFn, params: Any, hints: dict[str, Any], skip: set[str | None]
) -> type[pydantic.BaseModel]:
    fields: dict[str, Any] = {}
    for pname, param in params.items():
        if pname in skip:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args and **kwargs are not supported")
        default = ... if param.default is param.empty else param.default
        fields[pname] = (hints.get(pname, Any), default)
    return pydantic.create_model(f"{fn.__name__}_arguments", **fields)


class InvalidArguments(ValueError):
    """Arguments that do not satisfy a tool's explicit input schema.  The message is short (at most
    ``MAX_ERROR_TEXT`` characters): the first error only, without the offending value in full."""


MAX_ERROR_TEXT = 240
"""Longest description of invalid arguments (or of an invalid schema) put in an error."""
INLINE_VALIDATION_VALUES = 2_000
"""Arguments holding more JSON values than this are validated in a worker thread: validation takes time
per value, and a large body of numbers would otherwise stall the event loop (docs/performance.md, "The
server API")."""
_NO_REMOTE_REFS = referencing.Registry()
"""Where a ``$ref`` may resolve besides inside the schema itself: nowhere (no network, no files)."""

try:  # jsonschema's own helpers of its unevaluated* keywords (private, present since 4.0)
    from jsonschema._utils import (  # type: ignore[import-untyped, unused-ignore]
        find_evaluated_item_indexes_by_schema,
        find_evaluated_property_keys_by_schema,
    )
except ImportError:  # pragma: no cover - then jsonschema's own (quadratic) keywords stay
    find_evaluated_item_indexes_by_schema = find_evaluated_property_keys_by_schema = None


@dataclass(frozen=True, slots=True)
class ArgumentsSchema:
    """The validator of an explicit ``input_schema``, built once when the tool is registered.

    The dialect is the schema's ``$schema`` (JSON Schema 2020-12 without one, as MCP specifies).
    ``format`` is an annotation (not asserted), ``$ref`` resolves only inside the schema, and the
    keywords whose jsonschema implementations are quadratic in the size of an array or object
    (``uniqueItems``, ``unevaluatedItems``, ``unevaluatedProperties``) are replaced by linear ones, so
    validation time is linear in the size of the arguments for those keywords.
    """

    tool: str
    validator: Any

    which: str = "input_schema"
    """Which of the tool's schemas it is (``input_schema`` or ``output_schema``), for messages."""

    @classmethod
    def build(cls, tool: str, schema: dict[str, Any], which: str = "input_schema") -> ArgumentsSchema:
        """Check ``schema`` against its dialect's meta-schema; :class:`ValueError` if it is invalid."""
        base = _dialect(tool, schema, which)
        try:
            base.check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = _path(exc.absolute_path)
            detail = f"at {where}: {exc.message}" if where else exc.message
            raise ValueError(_shorten(f"tool {tool}: invalid {which} {detail}")) from exc
        return cls(tool, _hardened(base)(schema, registry=_NO_REMOTE_REFS), which)

    async def check(self, arguments: dict[str, Any]) -> None:
        """Raise :class:`InvalidArguments` unless ``arguments`` satisfy the schema."""
        error = await self.find_error(arguments)
        if error is not None:
            raise InvalidArguments(error)

    async def find_error(self, value: Any) -> str | None:
        """:meth:`first_error`, in a worker thread for a value of more than
        :data:`INLINE_VALIDATION_VALUES` values."""
        if _more_values_than(value, INLINE_VALIDATION_VALUES):
            return await trio.to_thread.run_sync(self.first_error, value, abandon_on_cancel=True)
        return self.first_error(value)

    def first_error(self, arguments: Any) -> str | None:
        """A short description of the first way ``arguments`` break the schema, or None if they don't."""
        try:
            error = next(self.validator.iter_errors(arguments), None)
        except RecursionError:
            what = "arguments are" if self.which == "input_schema" else "the value is"
            return f"{what} nested too deeply to validate"
        except referencing.exceptions.Unresolvable as exc:  # a server bug, not the client's
            text = f"tool {self.tool}: {self.which} has an unresolvable $ref {exc.ref!r}"
            raise RuntimeError(_shorten(text)) from exc
        if error is None:
            return None
        where = _path(error.absolute_path)
        return _shorten(f"{where}: {error.message}" if where else str(error.message))


def _dialect(tool: str, schema: dict[str, Any], which: str) -> Any:
    """The jsonschema validator class of the schema's ``$schema`` (2020-12 when absent)."""
    if "$schema" not in schema:
        return jsonschema.Draft202012Validator
    uri = schema["$schema"]
    found = jsonschema.validators.validator_for(schema, default=None) if isinstance(uri, str) else None
    if found is None:
        raise ValueError(_shorten(f"tool {tool}: {which} has an unknown $schema {uri!r}"))
    return found


_HARDENED: dict[Any, Any] = {}


def _hardened(base: Any) -> Any:
    """``base`` with linear implementations of the keywords jsonschema implements quadratically."""
    hardened = _HARDENED.get(base)
    if hardened is None:
        overrides: dict[str, Any] = {"uniqueItems": _unique_items}
        if base is jsonschema.Draft202012Validator and find_evaluated_item_indexes_by_schema is not None:
            overrides["unevaluatedItems"] = _unevaluated_items
            overrides["unevaluatedProperties"] = _unevaluated_properties
        hardened = _HARDENED[base] = jsonschema.validators.extend(base, validators=overrides)
    return hardened


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``uniqueItems`` with a set of hashable stand-ins (jsonschema compares unsortable items pairwise)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Hashable] = set()
    for index, item in enumerate(instance):
        key = _json_key(item)
        if key in seen:
            yield jsonschema.ValidationError(f"items are not unique (item {index} repeats an earlier one)")
            return
        seen.add(key)


def _json_key(value: Any) -> Hashable:
    """A hashable stand-in of a JSON value, equal to another exactly when JSON Schema deems the values
    equal: ``1 == 1.0`` but ``true != 1``, and the order of an object's keys does not matter."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(_json_key(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((key, _json_key(item)) for key, item in value.items()))
    return ("z", None) if value is None else ("?", id(value))


def _unevaluated_items(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """2020-12 ``unevaluatedItems``, with the evaluated indexes in a set (jsonschema scans a list)."""
    if not validator.is_type(instance, "array"):
        return
    evaluated = set(find_evaluated_item_indexes_by_schema(validator, instance, schema))
    extra = sum(1 for index in range(len(instance)) if index not in evaluated)
    if extra:
        yield jsonschema.ValidationError(f"Unevaluated items are not allowed ({extra} unexpected)")


def _unevaluated_properties(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """2020-12 ``unevaluatedProperties``, with the evaluated keys in a set (jsonschema scans a list)."""
    if not validator.is_type(instance, "object"):
        return
    evaluated = set(find_evaluated_property_keys_by_schema(validator, instance, schema))
    for key in instance:
        if key in evaluated:
            continue
        if next(validator.descend(instance[key], unevaluated, path=key, schema_path=key), None) is not None:
            how = "not allowed" if unevaluated is False else "not valid under the given schema"
            yield jsonschema.ValidationError(f"Unevaluated property {key!r} is {how}")
            return


def _more_values_than(value: Any, limit: int) -> bool:
    """Whether a JSON value holds more than ``limit`` values (itself, containers and scalars inside),
    counted without recursion and only as far as needed."""
    seen, stack = 1, [value]
    while stack:
        item = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        seen += len(children)
        if seen > limit:
            return True
        stack.extend(children)
    return False


def _path(path: Any) -> str:
    """A JSON location as pydantic writes it in its errors: ``a.0.b``."""
    return ".".join(str(part) for part in path)


def _shorten(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
