"""The OpenTelemetry semantic conventions for MCP, as data (semantic-conventions-genai, ``mcp.md``).

Sans-IO: what a request's span is called, which attributes it and its duration carry, and how its
answer's outcome reads (``error.type``, ``rpc.response.status_code``), from the JSON-RPC messages alone.
Attribute values bounded in cardinality for metrics (:func:`metric_attributes`): a method the spec does
not name, a tool or prompt the server did not register and an error code outside JSON-RPC's and MCP's
become ``_OTHER``, so a hostile client cannot grow the number of series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .._runtime.peerlog import MAX_LOGGED_VALUE

__all__ = [
    "DURATION_BUCKETS",
    "HISTOGRAMS",
    "KNOWN_METHODS",
    "OTHER",
    "SESSION_BUCKETS",
    "Histogram",
    "bounded_error",
    "describe",
    "metric_attributes",
    "operation_histogram",
    "outcome",
    "session_histogram",
    "span_name",
]

DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""The explicit bucket boundaries the conventions give every MCP duration histogram (seconds)."""

SESSION_BUCKETS = (
    0.1, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 43200.0, 86400.0
)  # fmt: skip
"""Our bucket boundaries for the session duration histograms (seconds: 100 ms to 24 h).  The
conventions advise the operation buckets for sessions too, whose last bound (300 s) would put every
session of an interactive client (minutes to hours) in ``+Inf``; a one-shot client's session (a
command-line call: well under a second) still has buckets of its own."""


class Histogram(NamedTuple):
    """One duration histogram of the conventions: its OpenTelemetry name and description, and the
    bucket boundaries we give it (the unit is always seconds)."""

    name: str
    description: str
    buckets: tuple[float, ...]


HISTOGRAMS = {
    ("server", "operation"): Histogram(
        "mcp.server.operation.duration",
        "MCP request or notification duration as observed on the receiver from the time it was received "
        "until the result or ack is sent.",
        DURATION_BUCKETS,
    ),
    ("client", "operation"): Histogram(
        "mcp.client.operation.duration",
        "The duration of the MCP request or notification as observed on the sender from the time it was "
        "sent until the response or ack is received.",
        DURATION_BUCKETS,
    ),
    ("server", "session"): Histogram(
        "mcp.server.session.duration",
        "The duration of the MCP session as observed on the MCP server.",
        SESSION_BUCKETS,
    ),
    ("client", "session"): Histogram(
        "mcp.client.session.duration",
        "The duration of the MCP session as observed on the MCP client.",
        SESSION_BUCKETS,
    ),
}
"""The conventions' four histograms, by (``"server"`` or ``"client"``, ``"operation"`` or ``"session"``)."""


def operation_histogram(incoming: bool) -> Histogram:
    """The histogram an operation's duration goes to: the conventions measure an operation on the side
    that receives it (``mcp.server.operation.duration``: the receiver's, a SERVER span) and on the side
    that sends it (``mcp.client.operation.duration``: the sender's, a CLIENT span), whichever side of
    the connection that is.  So a server's notifications (progress, log messages, list changes) and its
    requests to the client (sampling, elicitation, roots) are in the client histogram, never in the
    server's; a client's answers to the server's requests are in the server histogram."""
    return HISTOGRAMS["server" if incoming else "client", "operation"]


def session_histogram(side: str) -> Histogram:
    """The session duration histogram of ``side`` (``"server"`` or ``"client"``)."""
    return HISTOGRAMS[side, "session"]


OTHER = "_OTHER"
"""The conventions' fallback value of a low-cardinality attribute."""

KNOWN_METHODS = frozenset(
    {
        # the conventions' well-known values
        "completion/complete", "elicitation/create", "initialize", "logging/setLevel",
        "notifications/cancelled", "notifications/initialized", "notifications/message",
        "notifications/progress", "notifications/prompts/list_changed",
        "notifications/resources/list_changed", "notifications/resources/updated",
        "notifications/roots/list_changed", "notifications/tools/list_changed", "ping", "prompts/get",
        "prompts/list", "resources/list", "resources/read", "resources/subscribe",
        "resources/templates/list", "resources/unsubscribe", "roots/list", "sampling/createMessage",
        "tools/call", "tools/list",
        # the 2025-11-25 and 2026-07-28 revisions' own
        "server/discover", "subscriptions/listen", "tasks/get", "tasks/result", "tasks/list",
        "tasks/cancel", "notifications/tasks/status", "notifications/elicitation/complete",
    }
)  # fmt: skip
"""Methods named as themselves in metrics; any other is ``_OTHER`` there (spans keep the name)."""

_KNOWN_CODES = frozenset(
    {-32700, -32600, -32601, -32602, -32603, -32000, -32001, -32002, -32003, -32042, -32800}
)
"""JSON-RPC's error codes and those MCP's revisions define or our transport answers."""

_ERROR_NAMES = frozenset(
    {
        "tool_error", "cancelled", "timeout", OTHER,
        "TransportError", "ServerBusy", "SessionExpired", "OAuthError",
    }
)  # fmt: skip
"""The ``error.type`` values that are no error code: a tool's error result, a cancellation, a timeout,
and the exceptions a client's transport raises (mcp_trio's own classes: a bounded set)."""

_MAX_VALUE = MAX_LOGGED_VALUE
"""Longest attribute value taken from a message (a tool name, a resource URI), in characters (the
request log's bound too): a longer one is cut, its last character ``…``."""


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "\u2026"


def _text(value: object) -> str | None:
    return _clip(value) if isinstance(value, str) else None


def describe(method: str, params: Mapping[str, Any] | None, request_id: object = None) -> dict[str, Any]:
    """The span attributes one request or notification carries on its own: ``mcp.method.name``,
    ``jsonrpc.request.id`` (not for a notification), and by method ``gen_ai.tool.name`` with
    ``gen_ai.operation.name`` (``execute_tool``), ``gen_ai.prompt.name`` or ``mcp.resource.uri``."""
    attributes: dict[str, Any] = {"mcp.method.name": _clip(method)}
    if request_id is not None:
        attributes["jsonrpc.request.id"] = str(request_id)[:_MAX_VALUE]
    if params:
        if method == "tools/call":
            name = _text(params.get("name"))
            if name is not None:
                attributes["gen_ai.tool.name"] = name
            attributes["gen_ai.operation.name"] = "execute_tool"
        elif method == "prompts/get":
            name = _text(params.get("name"))
            if name is not None:
                attributes["gen_ai.prompt.name"] = name
        elif method in ("resources/read", "resources/subscribe", "resources/unsubscribe",
                        "notifications/resources/updated"):  # fmt: skip
            uri = _text(params.get("uri"))
            if uri is not None:
                attributes["mcp.resource.uri"] = uri
    return attributes


def span_name(attributes: Mapping[str, Any], known: Callable[[str, str], bool] | None = None) -> str:
    """``{mcp.method.name} {target}``: the target is the tool or prompt name, and only one that
    ``known(kind, name)`` says is registered (``kind`` ``"tool"`` or ``"prompt"``; without ``known``,
    any): a span name is low-cardinality, whatever names a peer sends.  For the same reason a method
    that is neither MCP's nor ``known("method", name)`` (an extension the side serves) is named
    ``_OTHER`` (its ``mcp.method.name`` attribute still says what it was)."""
    method: str = attributes["mcp.method.name"]
    if known is not None and method not in KNOWN_METHODS and not known("method", method):
        return OTHER
    for key, kind in (("gen_ai.tool.name", "tool"), ("gen_ai.prompt.name", "prompt")):
        name = attributes.get(key)
        if name is not None and (known is None or known(kind, name)):
            return f"{method} {name}"
    return method


def outcome(message: Mapping[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    """``(error.type, rpc.response.status_code, description)`` of an answer: a JSON-RPC error is its
    code (as a string) for both, with its message; a ``tools/call`` result with ``isError`` is
    ``tool_error``; a success is ``(None, None, None)``."""
    if message is None:
        return None, None, None
    error = message.get("error")
    if isinstance(error, Mapping):
        code = error.get("code")
        text = error.get("message")
        code_text = str(code) if isinstance(code, int) else OTHER
        return code_text, code_text, text[:_MAX_VALUE] if isinstance(text, str) else None
    result = message.get("result")
    if isinstance(result, Mapping) and result.get("isError") is True:
        return "tool_error", None, None
    return None, None, None


def metric_attributes(
    attributes: Mapping[str, Any],
    error_type: str | None,
    status_code: str | None,
    known: Callable[[str, str], bool] | None,
) -> dict[str, Any]:
    """The attributes of an operation's duration measurement, bounded in cardinality: no request id,
    no resource URI; an unknown method, unregistered tool or prompt, or an error code outside the
    known ones is ``_OTHER``."""
    method = attributes["mcp.method.name"]
    named = method in KNOWN_METHODS or (known is not None and known("method", method))
    out: dict[str, Any] = {"mcp.method.name": method if named else OTHER}
    for key, kind in (("gen_ai.tool.name", "tool"), ("gen_ai.prompt.name", "prompt")):
        name = attributes.get(key)
        if name is not None:
            out[key] = name if known is not None and known(kind, name) else OTHER
    if "gen_ai.operation.name" in attributes:
        out["gen_ai.operation.name"] = attributes["gen_ai.operation.name"]
    if error_type is not None:
        out["error.type"] = bounded_error(error_type)
    if status_code is not None:
        out["rpc.response.status_code"] = bounded_error(status_code)
    return out


def bounded_error(value: str) -> str:
    """``value`` as a metric's ``error.type`` (or status code): itself if it is a known error code or
    one of the known names, else ``_OTHER``."""
    if value in _ERROR_NAMES:
        return value
    try:
        return value if int(value) in _KNOWN_CODES else OTHER
    except ValueError:
        return OTHER
