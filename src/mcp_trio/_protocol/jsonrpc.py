"""JSON-RPC 2.0 framing on top of the mcp-types envelope models.

Sans-IO: bytes in, validated ``mcp_types`` envelopes out (or a :class:`RemoteProtocolError` that
carries the JSON-RPC code to answer with); envelopes in, bytes out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as mt
import pydantic

from .._exceptions import RemoteProtocolError

__all__ = [
    "Incoming",
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

    @property
    def requests(self) -> tuple[mt.JSONRPCRequest, ...]:
        return tuple(m for m in self.messages if isinstance(m, mt.JSONRPCRequest))


def parse_body(body: bytes, *, allow_batch: bool) -> Incoming:
    """Parse one POST body into JSON-RPC envelopes.

    Raises :class:`RemoteProtocolError` with ``-32700`` for bytes that are not UTF-8 JSON and
    ``-32600`` for JSON that is not a valid message (or a batch where batches are not allowed).
    """
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RemoteProtocolError("Parse error: body is not valid JSON", code=mt.PARSE_ERROR) from exc
    if isinstance(data, list):
        if not allow_batch:
            raise RemoteProtocolError("Invalid Request: JSON-RPC batches are not supported by this revision")
        if not data:
            raise RemoteProtocolError("Invalid Request: empty batch")
        return Incoming(tuple(parse_message(item) for item in data), batch=True)
    return Incoming((parse_message(data),), batch=False)


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
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


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
