"""Rules of the modern (2026-07-28) era that need no I/O: request-metadata headers, ``x-mcp-header``
parameters, and tamper-evident ``requestState`` for input-required results."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import mcp_types as mt

from ..errors import RemoteProtocolError
from . import versions
from .http import RequestFacts

__all__ = [
    "NAMED_METHODS",
    "RequestState",
    "check_headers",
    "check_meta",
    "decode_header_value",
    "header_annotations_valid",
    "header_parameters",
    "meta_version",
    "unsupported_version",
]

NAMED_METHODS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
"""Methods that need ``Mcp-Name``, and the param it mirrors (the tasks extension's name the task)."""

_SENTINEL = re.compile(r"=\?base64\?(.*)\?=", re.DOTALL)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_STATE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}")
"""A sealed ``requestState``: unpadded URL-safe base64 of the payload, a dot, then that of its HMAC."""
_METADATA_HEADERS = frozenset({"mcp-method", "mcp-name", "mcp-protocol-version"})


def header_mismatch(message: str, request_id: mt.RequestId | None = None) -> RemoteProtocolError:
    return RemoteProtocolError(f"Header mismatch: {message}", code=mt.HEADER_MISMATCH, request_id=request_id)


def unsupported_version(requested: str, request_id: mt.RequestId | None = None) -> RemoteProtocolError:
    return RemoteProtocolError(
        "Unsupported protocol version",
        code=mt.UNSUPPORTED_PROTOCOL_VERSION,
        request_id=request_id,
        data={"supported": versions.supported_versions(), "requested": requested},
    )


def meta_version(params: Mapping[str, Any] | None) -> object:
    """The ``io.modelcontextprotocol/protocolVersion`` of a request's ``_meta`` (None if absent)."""
    meta = params.get("_meta") if params else None
    return meta.get(versions.PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None


def decode_header_value(value: str) -> str:
    """A header value as sent: plain visible ASCII, or the ``=?base64?...?=`` form of UTF-8 text (a value
    of that shape is never plain: clients must encode such a value, so it must hold valid base64)."""
    found = _SENTINEL.fullmatch(value)
    if found is None:
        if not all(0x20 <= ord(c) <= 0x7E or c == "\t" for c in value):
            raise ValueError("invalid characters")
        return value
    try:
        return base64.b64decode(found.group(1), validate=True).decode("utf-8")
    except ValueError as exc:  # binascii.Error, UnicodeDecodeError, or non-ASCII text
        raise ValueError("invalid base64 value") from exc


def header_parameters(input_schema: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """``x-mcp-header`` annotations of a tool's input schema: lower-case header name -> property path.

    Only properties reachable through ``properties`` keys count (as the spec requires)."""
    found: dict[str, tuple[str, ...]] = {}
    stack: list[tuple[Mapping[str, Any], tuple[str, ...]]] = [(input_schema, ())]
    while stack:
        schema, path = stack.pop()
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            continue
        for key, sub in properties.items():
            if not isinstance(sub, Mapping):
                continue
            name = sub.get("x-mcp-header")
            if isinstance(name, str) and _TOKEN.match(name):
                found[name.lower()] = (*path, key)
            stack.append((sub, (*path, key)))
    return found


def header_annotations_valid(input_schema: Any) -> bool:
    """Whether every ``x-mcp-header`` of a tool's input schema obeys the 2026 rules (clients must drop
    tools that break them): a non-empty token, unique regardless of case, on a string, integer or boolean
    property reachable from the root through ``properties`` keys only."""
    names: set[str] = set()

    def walk(node: Any, on_chain: bool) -> bool:
        if isinstance(node, list):
            return all(walk(item, False) for item in node)
        if not isinstance(node, Mapping):
            return True
        if "x-mcp-header" in node:
            name = node["x-mcp-header"]
            if not on_chain or not isinstance(name, str) or not _TOKEN.match(name) or name.lower() in names:
                return False
            if node.get("type") not in ("string", "integer", "boolean"):
                return False
            names.add(name.lower())
        for key, value in node.items():
            if key == "properties" and on_chain and isinstance(value, Mapping):
                if not all(walk(sub, True) for sub in value.values()):
                    return False
            elif key != "x-mcp-header" and not walk(value, False):
                return False
        return True

    return walk(input_schema, True)


def _value_at(arguments: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(arguments, Mapping) or key not in arguments:
            return None
        arguments = arguments[key]
    return arguments


def _same(header: str, value: Any) -> bool:
    """Whether a decoded ``Mcp-Param`` value mirrors a body value: strings exactly, booleans as ``true``
    or ``false``, numbers as a plain decimal of the same value (``42.0`` is 42, 9007199254740993 is not
    9007199254740992; ``+42``, ``4_2``, ``4.2e1``, ``nan`` or a padded ``42`` are no numbers here)."""
    if isinstance(value, bool):
        return header == ("true" if value else "false")
    if isinstance(value, (int, float)):
        if _DECIMAL.fullmatch(header) is None:
            return False
        # An int compares exactly; a float was rounded to binary when the body was parsed, so is the header.
        return (Decimal(header) if isinstance(value, int) else float(header)) == value
    return isinstance(value, str) and header == value


def check_headers(
    facts: RequestFacts,
    request_id: mt.RequestId | None,
    method: str,
    params: Mapping[str, Any] | None,
    header_params: Mapping[str, tuple[str, ...]] | None = None,
) -> versions.Revision:
    """Validate a modern request's metadata headers against its body; return its revision.

    -32020 (HeaderMismatch) for a missing, malformed, mismatched or conflicting (sent twice, differently)
    ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` or ``Mcp-Param-*``; -32022 for a version we
    do not serve.
    """
    _check_conflicts(facts, request_id)
    if facts.protocol_version is None:
        raise header_mismatch("MCP-Protocol-Version header is required", request_id)
    check_meta(request_id, params)
    body_version = meta_version(params)
    if body_version != facts.protocol_version:
        raise header_mismatch(
            f"MCP-Protocol-Version header {facts.protocol_version!r} does not match _meta {body_version!r}",
            request_id,
        )
    found = versions.revision(facts.protocol_version)
    if found is None or not found.modern:
        raise unsupported_version(facts.protocol_version, request_id)
    if facts.mcp_method is None:
        raise header_mismatch("Mcp-Method header is required", request_id)
    if facts.mcp_method != method:
        raise header_mismatch(
            f"Mcp-Method header {facts.mcp_method!r} does not match body {method!r}", request_id
        )
    _check_name(facts, request_id, method, params)
    if header_params:
        _check_params(facts, request_id, (params or {}).get("arguments"), header_params)
    return found


def _check_conflicts(facts: RequestFacts, request_id: mt.RequestId | None) -> None:
    """Two different copies of a metadata header: an intermediary may have routed on either one."""
    for name in facts.conflicts:
        if name in _METADATA_HEADERS or name.startswith("mcp-param-"):
            raise header_mismatch(f"conflicting duplicate {name} headers", request_id)


def check_meta(request_id: mt.RequestId | None, params: Mapping[str, Any] | None) -> None:
    """A modern request's ``_meta`` must name its protocol version and the client's capabilities
    (-32602, HTTP 400, otherwise)."""
    meta = params.get("_meta") if params else None
    if not isinstance(meta, dict):
        raise RemoteProtocolError(
            "Invalid params: _meta is required", code=mt.INVALID_PARAMS, request_id=request_id
        )
    for key in (versions.PROTOCOL_VERSION_META_KEY, mt.CLIENT_CAPABILITIES_META_KEY):
        if key not in meta:
            raise RemoteProtocolError(
                f"Invalid params: _meta lacks {key}", code=mt.INVALID_PARAMS, request_id=request_id
            )
    if not isinstance(meta[versions.PROTOCOL_VERSION_META_KEY], str):
        raise RemoteProtocolError(
            "Invalid params: the protocol version must be a string",
            code=mt.INVALID_PARAMS,
            request_id=request_id,
        )
    if not isinstance(meta[mt.CLIENT_CAPABILITIES_META_KEY], dict):
        raise RemoteProtocolError(
            "Invalid params: clientCapabilities must be an object",
            code=mt.INVALID_PARAMS,
            request_id=request_id,
        )


def _check_name(
    facts: RequestFacts, request_id: mt.RequestId | None, method: str, params: Mapping[str, Any] | None
) -> None:
    field = NAMED_METHODS.get(method)
    if field is None:
        return
    if facts.mcp_name is None:
        raise header_mismatch("Mcp-Name header is required", request_id)
    try:
        name = decode_header_value(facts.mcp_name)
    except ValueError as exc:
        raise header_mismatch(f"Mcp-Name header: {exc}", request_id) from exc
    body = (params or {}).get(field)
    if name != body:
        raise header_mismatch(
            f"Mcp-Name header value {name!r} does not match body value {body!r}", request_id
        )


def _check_params(
    facts: RequestFacts,
    request_id: mt.RequestId | None,
    arguments: Any,
    header_params: Mapping[str, tuple[str, ...]],
) -> None:
    """Every ``Mcp-Param`` header the tool declares: required when the body has a value for it, then
    equal to it; well-formed whenever sent; and not sent for an absent or null body value (a conforming
    client omits it there, and a header the body does not back is the mismatch this check exists for)."""
    sent = dict(facts.mcp_params)
    for name, path in header_params.items():
        value = _value_at(arguments, path)
        raw = sent.get(name)
        if raw is None:
            if value is not None:
                raise header_mismatch(f"Mcp-Param-{name} header is required", request_id)
            continue
        try:
            decoded = decode_header_value(raw)
        except ValueError as exc:
            raise header_mismatch(f"Mcp-Param-{name} header: {exc}", request_id) from exc
        if value is None:
            raise header_mismatch(f"Mcp-Param-{name} header is sent but the body has no value", request_id)
        if not _same(decoded, value):
            raise header_mismatch(
                f"Mcp-Param-{name} header value {decoded!r} does not match body value {value!r}", request_id
            )


@dataclass(frozen=True, slots=True)
class RequestState:
    """Tamper-evident ``requestState``: the input responses collected so far, bound to one request
    (method and name) and an expiry, signed with HMAC-SHA256 under the server's secret.

    A key ring rotates the secret: ``secret`` seals, and a state sealed under any of ``previous``
    verifies too (workers that share the ring accept each other's states; see :meth:`ring`)."""

    secret: bytes
    previous: tuple[bytes, ...] = ()

    @classmethod
    def ring(cls, keys: Sequence[bytes]) -> RequestState:
        """The first key seals, every one verifies."""
        if not keys:
            raise ValueError("a key ring needs at least one key")
        return cls(keys[0], tuple(keys[1:]))

    def seal(self, binding: str, responses: Mapping[str, Any], expires_at: float) -> str:
        payload = json.dumps({"b": binding, "e": int(expires_at), "r": responses}, separators=(",", ":"))
        body = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}"

    def open(self, state: str, binding: str, now: float) -> dict[str, Any]:
        """The responses sealed in ``state``; ValueError if it was altered, expired, or is for another
        request."""
        if not _STATE.fullmatch(state):  # also keeps non-ASCII text away from compare_digest
            raise ValueError("requestState failed verification")
        body, _, signature = state.partition(".")
        keys = (self.secret, *self.previous)
        if not any(hmac.compare_digest(signature, self._sign(body, key)) for key in keys):
            raise ValueError("requestState failed verification")
        try:
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, binascii.Error) as exc:  # pragma: no cover - signed by us, so well-formed
            raise ValueError("requestState is malformed") from exc
        if payload.get("b") != binding:
            raise ValueError("requestState belongs to another request")
        if payload.get("e", 0) < now:
            raise ValueError("requestState has expired")
        responses = payload.get("r")
        return responses if isinstance(responses, dict) else {}

    def _sign(self, body: str, key: bytes | None = None) -> str:
        digest = hmac.new(self.secret if key is None else key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
