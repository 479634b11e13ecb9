"""What a client session records (:class:`~mcp_trio._observe.telemetry.Telemetry`, side ``"client"``).

- Each request it sends, each round of a 2026-era input-required exchange included, and each
  notification: a CLIENT span ``{mcp.method.name} {target}`` (its trace context injected into the
  message's ``params._meta``, so the server's span is its child) and a point of
  ``mcp.client.operation.duration``, from the moment it is sent until its answer arrives.
- Each request of the server it answers (``sampling``, ``elicitation``, ``roots``, ``ping``; 2025 era)
  and each input request of a 2026-era round or task it answers: a SERVER span, whose parent is the
  trace context in the request's ``params._meta``, or for an input request without one, the CLIENT span
  of the round (or ``tasks/get``) that brought it; and a point of ``mcp.server.operation.duration``
  (the conventions measure what a side receives in the receiver's histogram).
- The session: ``mcp.client.session.duration``, from the opening of the session to its close (in the
  2026 era, where there is no session on the wire, the life of the :class:`ClientSession`).

Metric attributes stay bounded whatever the server sends: a tool or prompt name is the attribute's value
only if the server listed it in this session (a ``tools/list`` or ``prompts/list`` answer, at most
:data:`MAX_LISTED` names of each kind), else ``_OTHER``.  Span names carry the name the application
called, listed or not.  An operation that fails without an answer has an ``error.type`` of ``timeout``
(a timeout of the transport), ``cancelled``, or its exception's class name (``TransportError``,
``ServerBusy``, ``SessionExpired``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from .._observe.telemetry import Carrier, Operation
from ..errors import RPCError

__all__ = [
    "MAX_LISTED",
    "Listed",
    "carrier_of",
    "error_type",
    "failed",
    "parent_of",
    "sent",
    "trace_context",
]

MAX_LISTED = 1000
"""How many tool (and prompt) names of a session's listings are remembered as metric attribute values."""

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}

sent: ContextVar[Mapping[str, Any] | None] = ContextVar("mcp_trio_client_sent", default=None)
"""The trace context (a ``_meta`` carrying ``traceparent``) of the latest request this task sent: the
parent of the spans of the input requests its answer brought."""


def carrier_of(url: str, protocol: str) -> Carrier:
    """The carrier of a connection to ``url`` (``protocol`` ``http`` or ``websocket``): TCP, and the
    server's host and port (the scheme's default port if the URL names none)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a port: the transport will refuse the URL
        port = None
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme)
    return Carrier("tcp", protocol, parts.hostname or None, port)


class Listed:
    """The tools and prompts a server listed in one session: the names metric attributes may carry."""

    def __init__(self) -> None:
        self._names: dict[str, set[str]] = {"tool": set(), "prompt": set()}

    def add(self, kind: str, names: list[str]) -> None:
        known = self._names[kind]
        for name in names:
            if len(known) >= MAX_LISTED:
                return
            known.add(name)

    def known(self, kind: str, name: str) -> bool:
        found = self._names.get(kind)
        return found is not None and name in found


def error_type(exc: BaseException) -> str:
    """The ``error.type`` of an operation that ``exc`` ended without an answer: ``cancelled``,
    ``timeout`` (a timeout of the transport, whatever wraps it), else the exception's class name."""
    if isinstance(exc, trio.Cancelled):
        return "cancelled"
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            break
        if isinstance(seen, httpx.TimeoutException | trio.TooSlowError | TimeoutError):
            return "timeout"
        seen = seen.__cause__
    return type(exc).__qualname__


def failed(operation: Operation, exc: BaseException) -> None:
    """``operation`` ended by ``exc``: an :class:`RPCError` is the JSON-RPC error it stands for (its
    code is ``error.type`` and ``rpc.response.status_code``), anything else :func:`error_type`."""
    if isinstance(exc, RPCError):
        operation.finish({"error": {"code": exc.code, "message": exc.message}})
    else:
        operation.finish(None, error_type(exc), None if isinstance(exc, trio.Cancelled) else str(exc))


def parent_of(params: dict[str, Any], round_meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The params an input request is recorded with: its own, with the trace context of the round
    that brought it (``round_meta``) as ``_meta`` if it carries none of its own."""
    meta = params.get("_meta")
    if round_meta is None or (isinstance(meta, Mapping) and "traceparent" in meta):
        return params
    return {**params, "_meta": round_meta}


def trace_context(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The trace context injected into ``message`` (its ``traceparent`` and ``tracestate``), if any."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping) or "traceparent" not in meta:
        return None
    return {key: meta[key] for key in ("traceparent", "tracestate") if key in meta}
