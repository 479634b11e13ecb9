"""What the transport's HTTP endpoints share: the ASGI callables' types and the response headers of
an event stream and of a JSON body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["JSON_HEADERS", "SSE_HEADERS", "Receive", "Scope", "Send"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    # No proxy or browser cache may keep or transform a stream; nginx must not buffer it.
    (b"cache-control", b"no-store, no-transform"),
    (b"x-accel-buffering", b"no"),
]
JSON_HEADERS = [(b"content-type", b"application/json")]
