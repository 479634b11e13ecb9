"""JSON-RPC 2.0 framing on top of the mcp-types envelope models.

Sans-IO: bytes in, validated ``mcp_types`` envelopes out (or a :class:`RemoteProtocolError` that
carries the JSON-RPC code to answer with); envelopes in, bytes out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import mcp_types as mt
import pydantic

from ..errors import RemoteProtocolError
from . import safejson

__all__ = [
    "Incoming",
    "decode",
    "encode",
    "error_body",
    "error_envelope",
    "notification",
    "parse_body",
    "request",
    "response",
]

Message = mt.JSONRPCRequest | mt.JSONRPCNotification | mt.JSONRPCResponse | mt.JSONRPCError


@dataclass(frozen=True, slots=True)
class Incoming:
    """The messages of one HTTP body, and whether they came as a batch array."""

    messages: tuple[Message, ...]
    batch: bool
    requests: tuple[mt.JSONRPCRequest, ...] = field(init=False)
    """The requests among :attr:`messages` (picked once: an ``isinstance`` on a pydantic model is an
    ``ABCMeta`` check, and the transport asks several times per POST)."""

    def __post_init__(self) -> None:
        requests = tuple(m for m in self.messages if type(m) is mt.JSONRPCRequest)
        object.__setattr__(self, "requests", requests)


def parse_body(body: bytes, *, allow_batch: bool) -> Incoming:
    """Parse one POST body into JSON-RPC envelopes.

    Raises :class:`RemoteProtocolError` with ``-32700`` for bytes that are not UTF-8 JSON (or JSON that
    cannot be represented faithfully: ``NaN``, out-of-range or overlong numbers, strings with a lone
    UTF-16 surrogate) and ``-32600`` for JSON that is not a valid message (or a batch where batches are
    not allowed).
    """
    data = decode(body)
    if isinstance(data, list):
        if not allow_batch:
            raise RemoteProtocolError("Invalid Request: JSON-RPC batches are not supported by this revision")
        if not data:
            raise RemoteProtocolError("Invalid Request: empty batch")
        return Incoming(tuple(parse_message(item) for item in data), batch=True)
    return Incoming((parse_message(data),), batch=False)


MAX_DEPTH = 512
"""Nesting deeper than this is a parse error (below the interpreter's recursion limit, so decoding never
depends on it); values nested less deeply but too deeply for a tool's schema get that tool's error."""


def decode(body: bytes) -> Any:
    """The JSON value of a body (by the one decoder of peers' JSON, :mod:`.safejson`: bounded nesting
    and numbers, strict UTF-8, no lone surrogates), or a -32700 :class:`RemoteProtocolError`."""
    try:
        return safejson.loads(body, max_depth=MAX_DEPTH)
    except safejson.JSONRejected as exc:
        raise RemoteProtocolError(f"Parse error: {exc}", code=mt.PARSE_ERROR) from exc


def parse_message(data: Any) -> Message:
    """Validate one decoded JSON value as a JSON-RPC envelope."""
    if not isinstance(data, dict):
        raise RemoteProtocolError("Invalid Request: a JSON-RPC message must be an object")
    model: type[Message]
    if "method" in data:
        model = mt.JSONRPCRequest if "id" in data else mt.JSONRPCNotification
    elif "result" in data:
        model = mt.JSONRPCResponse
    elif "error" in data:
        model = mt.JSONRPCError
    else:
        raise RemoteProtocolError("Invalid Request: not a request, notification or response")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        request_id = data.get("id") if isinstance(data.get("id"), (str, int)) else None
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
        raise RemoteProtocolError(f"Invalid Request: {detail}", request_id=request_id) from exc


def _dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON that any peer can parse, whatever a handler put in ``obj``.

    NaN and the infinities are not JSON: they go out as ``null`` (as JavaScript's ``JSON.stringify``
    does). A string with a lone surrogate cannot be UTF-8: that character goes out as its ``\\uXXXX``
    escape (surrogates can only stand inside JSON strings, where that escape is what ``ensure_ascii``
    would write). A circular or unserializable ``obj`` still raises, as ``json.dumps`` does."""
    try:
        text = _ENCODER.encode(obj)
    except ValueError:  # NaN or an infinity; a circular structure raises again here
        json.dumps(obj, separators=(",", ":"))
        text = _ENCODER.encode(_finite(obj))
    return text.encode("utf-8", "backslashreplace")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""``json.dumps`` with these options builds an encoder per call; this one is made once."""


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: _finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(value) for value in obj]
    return obj


def response(request_id: mt.RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def request(request_id: mt.RequestId, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def error_envelope(
    request_id: mt.RequestId | None, code: int, message: str, data: Any = None
) -> dict[str, Any]:
    """An error response; without a known request id it has no ``id`` member (as the MCP specs ask of
    HTTP error bodies, and the 2026-07-28 schema requires)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    if request_id is None:
        return {"jsonrpc": "2.0", "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def error_body(exc: RemoteProtocolError) -> bytes:
    """The JSON body that answers a rejected HTTP request."""
    return _dumps(error_envelope(exc.request_id, exc.code, exc.message, exc.data))


def encode(message: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    """Serialize a wire message (or a batch of them) as compact UTF-8 JSON."""
    return _dumps(message)
