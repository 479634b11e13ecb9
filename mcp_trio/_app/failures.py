"""What a handler's failure becomes: one policy for tools, resources, prompts, completion and extension
methods, in both eras and on every transport (they all answer through :class:`~mcp_trio.MCPServer`).

- :class:`~mcp_trio.errors.ToolError` (a tool's failure on purpose): an ``isError`` result with its text.
- :class:`~mcp_trio.RPCError`: the JSON-RPC error it says (left to the caller: it is not caught here).
- anything else: logged at ERROR with its traceback and a short random reference, rate-limited against a
  flood; the client gets a generic message with the same reference (a tool: an ``isError`` result, since
  the spec makes a tool's failure a result; the others: -32603).  With ``error_details`` the exception's
  type and text follow the reference.
- cancellation (``trio.Cancelled``, a ``BaseException``) is never a failure: nothing here catches it.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import mcp_types as mt

from .._runtime.peerlog import MAX_LOGGED_VALUE, RateLimitedLog, printable
from ..errors import RPCError, ToolError

__all__ = ["FAILURE_LOG_BURST", "Failures", "leaf", "tool_error"]

logger = logging.getLogger("mcp_trio.handlers")

FAILURE_LOG_BURST = 10
"""Tracebacks of failed handlers logged per minute and server; the others are counted, and the next line
logged says how many were left out."""
MAX_DETAIL = 1000
"""Longest exception text put in an answer with ``error_details``."""


def tool_error(text: str) -> dict[str, Any]:
    """A ``CallToolResult`` wire dict with ``isError: true`` and one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def leaf(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` if it is a ``kind``; the first ``kind`` in a group of nothing else (a tool's own nursery
    wraps what its tasks raise); else None."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(kind)
        if rest is not None or matched is None:
            return None
        first: BaseException = matched
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        return first
    return None


class Failures:
    """Reports the failures of one server's handlers through one rate-limited log."""

    __slots__ = ("details", "log")

    def __init__(self, *, details: bool = False, log: RateLimitedLog | None = None) -> None:
        self.details = details
        """Whether answers carry the exception's type and text (``MCPServer(error_details=True)``)."""
        self.log = log if log is not None else RateLimitedLog(logger, burst=FAILURE_LOG_BURST)

    def report(self, what: str, exc: BaseException) -> tuple[str, str]:
        """Log ``exc`` (``"{what} failed (reference R)"`` at ERROR, with its traceback; ``what``, which
        may hold a name the client sent, escaped and cut at :data:`MAX_LOGGED_VALUE` characters);
        ``(R, the message for the client)``."""
        reference = secrets.token_hex(4)
        what = printable(what, MAX_LOGGED_VALUE)
        self.log.log(logging.ERROR, "%s failed (reference %s)", what, reference, exc_info=exc)
        message = f"Internal error (reference {reference})"
        if self.details:
            detail = f"{type(exc).__name__}: {exc}"
            if len(detail) > MAX_DETAIL:
                detail = detail[: MAX_DETAIL - 1] + "\u2026"
            message = f"{message}: {detail}"
        return reference, message

    def rpc_error(self, what: str, exc: BaseException) -> RPCError:
        """The -32603 error that answers a failed resource, prompt, completion or extension method."""
        reference, message = self.report(what, exc)
        return RPCError(mt.INTERNAL_ERROR, message, {"reference": reference})

    def tool_result(self, tool: str, exc: Exception) -> dict[str, Any]:
        """The result of a tool that raised ``exc``: a :class:`ToolError`'s text, the JSON-RPC error of an
        :class:`RPCError` (raised), else a failure reported under a reference."""
        explicit = leaf(exc, ToolError)
        if explicit is not None:
            return tool_error(str(explicit) or type(explicit).__name__)
        rpc = leaf(exc, RPCError)
        if rpc is not None:
            raise rpc
        return tool_error(self.report(f"tool {tool}", exc)[1])
