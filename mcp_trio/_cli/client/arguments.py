"""The ``arguments`` of ``mcp-trio call``: ``--json``'s object and each ``--arg KEY=VALUE``, the VALUE
typed by the JSON types the tool's input schema accepts for KEY (the table is in ``call --help``);
and those of ``mcp-trio prompt``, the same options, whose values are text."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from ..output import UsageError

__all__ = ["accepted_types", "parse_arguments", "parse_prompt_arguments", "type_value"]

_TRIED_IN_ORDER = ("null", "boolean", "integer", "number", "array", "object")
_TYPE_NAMES = {
    "null": "null",
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
    "array": "a JSON array (e.g. [1, 2])",
    "object": 'a JSON object (e.g. {"key": 1})',
    "string": "text",
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json(text: str) -> tuple[bool, Any]:
    """``(True, value)`` if ``text`` is strict JSON (no NaN or Infinity), else ``(False, None)``."""
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return False, None


def _parse_as(kind: str, text: str) -> tuple[bool, Any]:
    if kind == "null":
        return text == "null", None
    if kind == "boolean":
        lowered = text.lower()
        return lowered in ("true", "false"), lowered == "true"
    ok, value = _json(text)
    if not ok:
        return False, None
    fits = {
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }
    return fits.get(kind, False), value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _resolve(root: dict[str, Any], ref: str) -> Any:
    """A local ``$ref`` (``#/$defs/name``) in ``root``, or None."""
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict):
            return None
        node = node.get(part.replace("~1", "/").replace("~0", "~"))
    return node


def accepted_types(schema: Any, root: dict[str, Any], depth: int = 0) -> set[str] | None:
    """The JSON types a parameter's schema accepts, or None when it does not say."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind):
        return set(kind)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        return accepted_types(_resolve(root, ref), root, depth + 1)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        types: set[str] = set()
        for branch in branches:
            found = accepted_types(branch, root, depth + 1)
            if found is None:  # a branch that takes anything: VALUE cannot be typed
                return None
            types |= found
        return types
    values = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if values is None and "const" in schema:
        values = [schema["const"]]
    return {_json_type(value) for value in values} if values else None


def _describe(types: Iterable[str]) -> str:
    ordered = [kind for kind in (*_TRIED_IN_ORDER, "string") if kind in types]
    return " or ".join(_TYPE_NAMES[kind] for kind in ordered)


def type_value(key: str, text: str, types: set[str] | None) -> Any:
    """``text`` as the value of a parameter accepting ``types`` (None: untyped, JSON else text)."""
    known = (types or set()) & _TYPE_NAMES.keys()
    if not known:
        ok, value = _json(text)
        return value if ok else text
    for kind in _TRIED_IN_ORDER:
        if kind in known:
            ok, value = _parse_as(kind, text)
            if ok:
                return value
    if "string" in known:
        return text
    raise UsageError(f"--arg {key}={text}: {key} expects {_describe(known)}, got {text!r}")


def _json_object(json_object: str | None) -> dict[str, Any]:
    """``--json``'s object (empty without one)."""
    if json_object is None:
        return {}
    ok, value = _json(json_object)
    if not ok or not isinstance(value, dict):
        raise UsageError(f'--json wants a JSON object such as \'{{"text": "hi"}}\', got {json_object!r}')
    return value


def _pairs(pairs: Iterable[str]) -> Iterable[tuple[str, str]]:
    """Each ``--arg KEY=VALUE`` as (KEY, VALUE)."""
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--arg wants KEY=VALUE, got {pair!r}")
        yield key, text


def parse_arguments(
    pairs: Iterable[str], json_object: str | None = None, input_schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``arguments`` of ``tools/call``: ``--json``'s object, then each ``--arg`` (which wins), its
    value typed by ``input_schema``'s property of that name."""
    arguments = _json_object(json_object)
    schema = input_schema or {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for key, text in _pairs(pairs):
        types = accepted_types(properties[key], schema) if key in properties else None
        arguments[key] = type_value(key, text, types)
    return arguments


def parse_prompt_arguments(pairs: Iterable[str], json_object: str | None = None) -> dict[str, str]:
    """The ``arguments`` of ``prompts/get``, which are text: ``--json``'s object (its values strings),
    then each ``--arg`` (which wins), its value as typed."""
    arguments = _json_object(json_object)
    for key, value in arguments.items():
        if not isinstance(value, str):
            raise UsageError(
                f"--json: prompt arguments are text, but {key} is {json.dumps(value)} "
                f"(write it as a string: {json.dumps(json.dumps(value))})"
            )
    arguments.update(_pairs(pairs))
    return arguments
