"""Sans-IO Server-Sent Events: an encoder and an incremental decoder.

The decoder follows the WHATWG event-stream interpretation exactly:
https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

Nothing here does I/O; callers feed bytes in and write the encoded bytes out themselves.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_EVENT_SIZE",
    "SSEDecoder",
    "SSEProtocolError",
    "ServerSentEvent",
    "encode_comment",
    "encode_event",
    "encode_retry",
]

DEFAULT_MAX_EVENT_SIZE = 16 * 1024 * 1024
"""Default limit, in characters, on one pending line and on one event's data buffer."""

_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"


class SSEProtocolError(ValueError):
    """The event stream exceeded a limit of the decoder; the stream should be abandoned."""


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event.

    ``id`` is the event's own ``id`` field (``None`` if it carried none); ``retry`` is the
    reconnection time in force when the event was dispatched (``None`` if the stream never set one).
    """

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


def encode_event(
    data: str, *, event: str | None = None, id: str | None = None, retry: int | None = None
) -> bytes:
    """Return the UTF-8 bytes of one event: fields ``id``, ``event``, ``retry``, ``data``, then a blank line.

    Every line break in ``data`` (CRLF, CR or LF) starts a new ``data:`` line, so a decoder sees it
    as LF. ``encode_event("", id="x")`` is a dispatchable event with empty data (MCP's priming event).
    Raises ``ValueError`` if ``id`` contains CR, LF or NUL, ``event`` contains CR or LF, ``retry``
    is negative, or a string holds a lone surrogate (``UnicodeEncodeError``).
    """
    lines: list[str] = []
    if id is not None:
        lines.append(_field("id", _checked("id", id, "\r\n\0")))
    if event is not None:
        lines.append(_field("event", _checked("event", event, "\r\n")))
    if retry is not None:
        lines.append(_field("retry", str(_checked_retry(retry))))
    lines.extend(_field("data", part) for part in _LINE_END.split(data))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def encode_retry(retry: int) -> bytes:
    """Return a ``retry`` field alone and a blank line: sets the client's reconnection delay and
    dispatches nothing (the last words of a stream whose client should reconnect)."""
    return f"retry: {_checked_retry(retry)}\n\n".encode()


def encode_comment(text: str = "") -> bytes:
    """Return a comment line and a blank line (a keep-alive that dispatches nothing)."""
    _checked("comment", text, "\r\n")
    return f": {text}\n\n".encode() if text else b":\n\n"


def _field(name: str, value: str) -> str:
    # Always one space after the colon when there is a value: the decoder strips exactly one.
    return f"{name}: {value}" if value else f"{name}:"


def _checked(name: str, value: str, forbidden: str) -> str:
    if any(char in value for char in forbidden):
        raise ValueError(f"an SSE {name} must not contain any of {forbidden!r}: {value!r}")
    return value


def _checked_retry(retry: int) -> int:
    if isinstance(retry, bool) or not isinstance(retry, int):
        raise TypeError(f"an SSE retry must be an int, not {type(retry).__name__}")
    if retry < 0:
        raise ValueError(f"an SSE retry must not be negative: {retry}")
    return retry


class SSEDecoder:
    """Incremental, chunking-independent decoder following the WHATWG event-stream interpretation.

    ``feed`` returns the events completed by a chunk, whatever the chunk boundaries. ``close`` ends
    the stream; an incomplete pending event is discarded, as the spec requires.
    ``max_event_size`` bounds, in characters, both one pending line and one event's data buffer;
    exceeding it raises `SSEProtocolError` and leaves the decoder unusable.
    """

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        if max_event_size < 1:
            raise ValueError(f"max_event_size must be positive: {max_event_size}")
        self._max_size = max_event_size
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._bom_checked = False
        self._after_cr = False
        self._closed = False
        self._line: list[str] = []
        self._line_size = 0
        self._data: list[str] = []
        self._data_size = 0
        self._event_type = ""
        self._event_id: str | None = None
        self._id_buffer = ""
        self._last_event_id = ""
        self._retry: int | None = None

    @property
    def last_event_id(self) -> str:
        """The last event ID, as set by the ``id`` fields of every ended event, dispatched or not.

        This is the spec's "last event ID string": it takes the ID buffer's value at each blank line,
        so an ``id`` in an event the stream never finished does not count (resuming with it would
        skip that event).
        """
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The last valid ``retry`` value seen, in milliseconds, or ``None``."""
        return self._retry

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode a chunk of the stream; return the events it completed."""
        if self._closed:
            raise RuntimeError("SSEDecoder.feed() called after close()")
        return self._feed_text(self._utf8.decode(chunk))

    def close(self) -> list[ServerSentEvent]:
        """End the stream. A pending incomplete event is discarded, so this returns no events."""
        if self._closed:
            return []
        events = self._feed_text(self._utf8.decode(b"", final=True))
        self._closed = True
        self._line.clear()
        self._reset_event()
        return events

    def _feed_text(self, text: str) -> list[ServerSentEvent]:
        text = self._strip_prefix(text)
        if not text:
            return []
        events: list[ServerSentEvent] = []
        start = 0
        for match in _LINE_END.finditer(text):
            event = self._process_line(self._take_line(text[start : match.start()]))
            if event is not None:
                events.append(event)
            start = match.end()
        self._after_cr = text.endswith("\r")
        self._keep_partial(text[start:])
        return events

    def _strip_prefix(self, text: str) -> str:
        """Drop the stream's leading BOM, and an LF that completes a CRLF split across chunks."""
        if not text:
            return text
        if not self._bom_checked:
            self._bom_checked = True
            text = text.removeprefix(_BOM)
        if self._after_cr and text:
            self._after_cr = False
            text = text.removeprefix("\n")
        return text

    def _take_line(self, tail: str) -> str:
        self._check_size("line", self._line_size + len(tail))
        line = "".join(self._line) + tail
        self._line.clear()
        self._line_size = 0
        return line

    def _keep_partial(self, part: str) -> None:
        if part:
            self._check_size("line", self._line_size + len(part))
            self._line.append(part)
            self._line_size += len(part)

    def _check_size(self, what: str, size: int) -> None:
        if size > self._max_size:
            raise SSEProtocolError(f"SSE {what} longer than max_event_size ({self._max_size} characters)")

    def _process_line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        self._process_field(name, value)
        return None

    def _process_field(self, name: str, value: str) -> None:
        if name == "event":
            self._event_type = value
        elif name == "data":
            self._check_size("event data", self._data_size + len(value) + 1)
            self._data.append(value)
            self._data_size += len(value) + 1
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = self._event_id = value
        elif name == "retry":
            self._set_retry(value)

    def _set_retry(self, value: str) -> None:
        if value.isascii() and value.isdigit():
            try:
                self._retry = int(value.lstrip("0") or "0")
            except ValueError:  # more digits than int() accepts: no meaningful delay, ignore it
                pass

    def _dispatch(self) -> ServerSentEvent | None:
        self._last_event_id = self._id_buffer
        event = None
        if self._data:
            data = "\n".join(self._data)
            event = ServerSentEvent(data, self._event_type or "message", self._event_id, self._retry)
        self._reset_event()
        return event

    def _reset_event(self) -> None:
        self._data.clear()
        self._data_size = 0
        self._event_type = ""
        self._event_id = None
