"""A request's params in, a result out, without a validation pass more than needed: what
:meth:`MCPServer.handle_request <mcp_trio.MCPServer.handle_request>` does around a handler.

mcp-types validates a client request twice (the revision's surface model, then the version-free
monolith model its handlers read) and a result once more on the way out.  For the usual requests and
the usual ``tools/call`` result (text blocks alone) the second pass cannot refuse what the first
accepted, so it is skipped, with the same answer.
"""

from __future__ import annotations

import functools
from typing import Any

import mcp_types.methods as mtm
import pydantic
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS

__all__ = ["Layout", "first_error", "parse_params", "text_result"]

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


def parse_params(method: str, version: str, params: dict[str, Any] | None) -> Any:
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


Layout = tuple[dict[str, Any], bool, dict[str, Any]]


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


def text_result(
    layouts: dict[tuple[str, bool], tuple[Any, Layout | None]], version: str, result: dict[str, Any]
) -> dict[str, Any] | None:
    """What ``serialize_server_result`` makes of a ``tools/call`` result of text blocks alone (the
    usual one), without a validation pass: None for any other result.  The blocks may come with a
    ``structuredContent`` of one scalar ``{"result": ...}`` (a tool annotated ``-> str``, say).  Its
    layout is taken, once per revision, kind and ``_meta``, from the serializer itself (a one-block
    probe), and text (and such a ``structuredContent``) is any ``str`` to it, so the answer is the same.
    Our results of this shape are built by :mod:`.outputs` and ``MCPServer``'s result metadata."""
    content = result.get("content")
    if type(content) is not list:
        return None
    meta = result.get("_meta")
    structured = result.get("structuredContent")
    if structured is not None and not _scalar_result(structured):
        return None
    if len(result) != (1 if meta is None else 3) + (structured is not None):
        return None
    if meta is not None and result.get("resultType") != "complete":
        return None
    for item in content:
        if type(item) is not dict or len(item) != 2 or item.get("type") != "text":
            return None
        if type(item.get("text")) is not str:
            return None
    key = (version, structured is not None)
    cached = layouts.get(key)
    if cached is None or cached[0] != meta:
        cached = layouts[key] = (_copy_json(meta), _text_layout(version, meta, structured is not None))
    layout = cached[1]
    if layout is None:
        return None
    head, text_first, tail = layout
    if text_first:
        blocks = [{"text": item["text"], "type": "text"} for item in content]
    else:
        blocks = [{"type": "text", "text": item["text"]} for item in content]
    answer = {**_copy_json(head), "content": blocks, **_copy_json(tail)}  # a fresh answer each time
    if structured is not None:
        answer["structuredContent"] = {"result": structured["result"]}  # where the probe's was
    return answer


def _scalar_result(structured: Any) -> bool:
    """Whether ``structuredContent`` is ``{"result": s}`` with ``s`` a ``str``, ``int`` or ``bool``
    (what the serializer passes on as it is)."""
    return type(structured) is dict and len(structured) == 1 and type(structured.get("result")) in _SCALARS


_SCALARS = (str, int, bool)


def _text_layout(version: str, meta: Any, structured: bool) -> Layout | None:
    """How the serializer lays out a text-only ``tools/call`` result with this ``_meta`` (and a scalar
    ``structuredContent`` if ``structured``) in ``version``: (members before ``content``, whether a
    block starts with ``text``, members after), or None if its answer is not of that plain shape."""
    probe: dict[str, Any] = {"content": [{"type": "text", "text": "probe"}]}
    if structured:
        probe["structuredContent"] = {"result": "probe"}
    if meta is not None:
        probe.update(resultType="complete", _meta=_copy_json(meta))
    answer = mtm.serialize_server_result("tools/call", version, probe)
    blocks = answer.get("content")
    if blocks not in ([{"type": "text", "text": "probe"}],) or set(answer) != set(probe):
        return None
    if structured and answer["structuredContent"] != {"result": "probe"}:
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


def first_error(exc: pydantic.ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
