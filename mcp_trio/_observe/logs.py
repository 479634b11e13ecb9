"""Logs as JSON lines: ``mcp-trio serve --log-format json``.

One JSON object per record: time (RFC 3339, UTC), level, logger, message, and what the record carries
besides: a request record (``mcp_trio.requests``, see :class:`~.telemetry.Operation`) its method,
target, status, duration, request id, hashed session id and principal, client session id, and the
trace and span ids of its span; any other record, when a span is current (a tool's own log line),
that span's ids, so logs and traces correlate.  An exception's traceback is one string field.

Each record is one line, whatever a client put in a name: JSON escapes the C0 controls, and this
formatter escapes DEL, the C1 controls and the line and paragraph separators (``\\u0085``,
``\\u2028``, which ``str.splitlines`` and some log shippers take for line ends) too; every field
decodes to what it held.  A request record's fields keep the names as the client sent them (cut at
256 characters, as span attributes are); its ``message`` is the text line, escaped as the text
format writes it (:func:`~mcp_trio._runtime.peerlog.printable`).
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

__all__ = ["JSONFormatter"]


_UNESCAPED = re.compile("[\x7f-\x9f\u2028\u2029]")
"""What ``json.dumps(..., ensure_ascii=False)`` leaves raw that a line reader may split on or a
terminal act on."""


def _escape(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def _current_ids() -> tuple[str, str] | None:
    try:
        from .otel import OtelInstruments
    except ImportError:
        return None
    return OtelInstruments.trace_ids()


class JSONFormatter(logging.Formatter):
    """A :class:`logging.Formatter` writing each record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.gmtime(record.created)
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "mcp", None)
        if isinstance(fields, dict):
            out.update(fields)
        elif (ids := _current_ids()) is not None:
            out["trace_id"], out["span_id"] = ids
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        line = json.dumps(out, default=str, ensure_ascii=False)
        return _UNESCAPED.sub(_escape, line)  # only inside strings: the JSON text's own are ASCII
