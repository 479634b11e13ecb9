"""A client's own session id, following SEP-2822 (a proposal: it may change).

A client names the conversation its requests belong to with an id it makes itself, a UUID: in the
``Mcp-Client-Session-Id`` header of every Streamable HTTP request, and in every request's
``params._meta.clientSessionId`` (the only place on stdio and WebSocket).  A server must not refuse a
request for it; it may use it for logs, traces and as an application state key, scoped by the
principal (see ``Context.client_session_key``).

Sans-IO: the rules for the value's form and for which copy counts.  A value of another form (not the
8-4-4-4-12 hexadecimal UUID text) is ignored, never a reason to refuse.  On HTTP the header counts, then
the meta; a header sent twice with different values is ignored, as a malformed one is.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import mcp_types as mt

__all__ = ["ALIAS_HEADER", "HEADER", "META_KEY", "adopt", "from_meta", "malformed", "new_id", "parse"]

HEADER = "mcp-client-session-id"
"""The HTTP header (lower-case, as ASGI gives header names)."""
ALIAS_HEADER = "x-mcp-client-session-id"
"""The header Claude Code sends to its connector proxy today: taken where ``HEADER`` is absent."""
META_KEY = "clientSessionId"
"""The key in a request's ``params._meta``."""

_FORM = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def new_id() -> str:
    """A fresh client session id: a random (version 4) UUID, as text."""
    return str(uuid.uuid4())


def parse(value: object) -> str | None:
    """The id ``value`` carries, lower-case; None for anything but the 36-character UUID text (any
    version: the proposal asks clients for version 4, a server takes what identifies as well)."""
    if isinstance(value, str) and len(value) == 36 and _FORM.fullmatch(value) is not None:
        return value.lower()
    return None


def from_meta(meta: Mapping[str, Any] | None) -> str | None:
    """The valid id in a request's ``_meta``, if it has one."""
    return parse(meta.get(META_KEY)) if meta else None


def adopt(header: str | None, messages: Iterable[object]) -> tuple[str, ...]:
    """An HTTP request's ``header`` value (None: absent, or ignored) made the id of each request and
    notification among ``messages``, in its ``params._meta`` (the header counts over the body: one
    place for handlers, spans and the log to read).  Returns the malformed values seen (the header's,
    else those in ``_meta``), for the caller to log: they are ignored, never refused."""
    valid = parse(header) if header is not None else None
    if valid is None:
        found = malformed(messages)
        return found if header is None else (header, *found)
    for message in messages:
        if not isinstance(message, (mt.JSONRPCRequest, mt.JSONRPCNotification)):
            continue
        params = message.params
        meta = params.get("_meta") if params is not None else None
        if params is None:
            message.params = {"_meta": {META_KEY: valid}}
        elif meta is None:
            params["_meta"] = {META_KEY: valid}
        elif type(meta) is dict:
            meta[META_KEY] = valid
    return ()


def malformed(messages: Iterable[object]) -> tuple[str, ...]:
    """The ids of another form in the ``_meta`` of ``messages`` (a cheap look when there are none: this
    runs for every message)."""
    found: tuple[str, ...] = ()
    for message in messages:
        params = getattr(message, "params", None)  # requests and notifications (answers have none)
        meta = params.get("_meta") if type(params) is dict else None
        if type(meta) is dict and META_KEY in meta and parse(meta[META_KEY]) is None:
            found += (str(meta[META_KEY]),)
    return found
