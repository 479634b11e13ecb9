"""What a server sends, as the client reads it, whatever the transport: the one safe decoder of its JSON
(:func:`decode_json`, on :func:`safejson.loads`: bounded in size, nesting and number length, strict
about Unicode), the shape a JSON-RPC message from it must have, and the rate-limited log of what it
does wrong."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as mt

from .._protocol import safejson
from .._runtime.peerlog import line
from ..errors import RPCError, TransportError

__all__ = [
    "MAX_MESSAGE_SIZE",
    "OnMessage",
    "decode_json",
    "envelope",
    "object_of",
    "peer_log",
    "read_message",
    "result_of",
    "rpc_error",
    "text_of",
    "valid_id",
]

logger = logging.getLogger(__name__)

OnMessage = Callable[[dict[str, Any]], Awaitable[None]]
"""Where a transport hands each message that is not the response it waits for."""

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""Default bound on one JSON answer, one SSE event and one stdio or WebSocket message from a server."""


class _RateLimitedLog:
    """At most one log line per ``interval`` seconds for a kind of peer misbehaviour (a hostile server
    must not flood the client's log); the lines skipped are counted in the next one."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def __call__(self, level: int, key: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._skipped[key] = self._skipped.get(key, 0) + 1
            return
        self._last[key] = now
        skipped = self._skipped.pop(key, 0)
        if skipped:
            message += f" ({skipped} more like it not logged)"
        logger.log(level, "%s", line(message, args))  # one line, escaped


peer_log = _RateLimitedLog()
"""The client's log of what servers do wrong (shared by every transport)."""


def decode_json(data: bytes | str, max_size: int | None, what: str) -> Any:
    """The JSON value of something a server sent (:func:`safejson.loads`: bounded in size, nesting and
    number length, strict about Unicode), or a :class:`TransportError` saying why not.  Every JSON the
    client reads from a server goes through here."""
    try:
        return safejson.loads(data, max_size=max_size)
    except safejson.JSONRejected as exc:
        raise TransportError(f"{what} is not JSON the client accepts: {exc}") from None


def read_message(data: bytes | str, max_size: int | None, what: str) -> dict[str, Any] | None:
    """The JSON-RPC message in one unit a server sent (an SSE event's data, a stdio line, a WebSocket
    text message).  None for an empty one (an SSE priming event), and for one that is not JSON the
    client accepts or not a message, which is logged and skipped: one bad unit does not end a stream."""
    if not data.strip():
        return None
    try:
        message = envelope(decode_json(data, max_size, what))
    except TransportError as exc:
        peer_log(logging.INFO, "message-json", "%s; ignored", exc)
        return None
    if message is None:
        peer_log(logging.INFO, "message-shape", "%s is JSON but not a message; ignored: %.99r", what, data)
    return message


def valid_id(value: Any) -> bool:
    """Whether ``value`` can be a JSON-RPC request id (a string or an integer; never a bool)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def envelope(value: Any) -> dict[str, Any] | None:
    """``value`` if it can be a JSON-RPC message from a server: an object whose ``method`` (if any) is a
    string and whose ``id`` (if any) is a string, an integer or null.  None otherwise (routing it could
    not go well: an unhashable id, a method that is not a name)."""
    if not isinstance(value, dict):
        return None
    if "method" in value and not isinstance(value["method"], str):
        return None
    if "id" in value and not (value["id"] is None or valid_id(value["id"])):
        return None
    return value


def rpc_error(error: Any) -> RPCError:
    """The :class:`RPCError` of a JSON-RPC error object from a server (a code that is not an integer is
    taken as -32603, a message that is not a string as empty: what a server sends is not trusted)."""
    if not isinstance(error, dict):
        return RPCError(mt.INTERNAL_ERROR, f"the server's error is not an error object: {error!r:.200}")
    code = error.get("code")
    message = error.get("message")
    return RPCError(
        code if valid_id(code) and isinstance(code, int) else mt.INTERNAL_ERROR,
        message if isinstance(message, str) else "",
        error.get("data"),
    )


def object_of(value: Any) -> dict[str, Any]:
    """``value`` if a server sent an object there, else an empty one."""
    return value if isinstance(value, dict) else {}


def text_of(value: Any) -> str | None:
    """``value`` if a server sent a string there, else None."""
    return value if isinstance(value, str) else None


def result_of(method: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The result of a request's answer; an error answer is raised as :class:`RPCError`."""
    if "error" in answer:
        raise rpc_error(answer["error"])
    result = answer.get("result")
    if result is None:
        return {}
    if not isinstance(result, dict):
        raise TransportError(f"{method}: the server's result is not an object: {result!r:.200}")
    return result
