"""Where the transport takes a client's session id (``Mcp-Client-Session-Id``, following SEP-2822, a
proposal): the header of an HTTP POST is made the id of its messages (in ``params._meta``), and a
malformed id, in the header or in ``_meta`` on any transport, is ignored and logged (rate-limited,
INFO on ``mcp_trio._transport.clientsession``: at most 10 lines a minute, whatever clients send)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .._protocol import clientsession
from .._protocol.http import RequestFacts
from .._runtime.peerlog import MAX_LOGGED_VALUE, RateLimitedLog, printable

__all__ = ["take", "take_header"]

logger = logging.getLogger(__name__)
malformed_log = RateLimitedLog(logger)
_CONFLICTING = "(conflicting copies)"
"""Stands for the header value of a request with different copies of it (never a valid id)."""


def take_header(facts: RequestFacts, messages: Iterable[object]) -> None:
    """An HTTP POST's messages take its ``Mcp-Client-Session-Id`` (see
    :func:`~mcp_trio._protocol.clientsession.adopt`)."""
    header = facts.client_session_id
    if (
        header is not None
        and facts.conflicts
        and (clientsession.HEADER in facts.conflicts or clientsession.ALIAS_HEADER in facts.conflicts)
    ):
        header = _CONFLICTING
    _log(clientsession.adopt(header, messages))


def take(messages: Iterable[object]) -> None:
    """A message transport's (stdio, WebSocket) messages: their ids are in ``_meta`` already; a
    malformed one is logged."""
    _log(clientsession.malformed(messages))


def _log(malformed: tuple[str, ...]) -> None:
    if malformed:
        malformed_log.log(
            logging.INFO,
            "ignored a malformed client session id %r (Mcp-Client-Session-Id must be a UUID)",
            printable(malformed[0], MAX_LOGGED_VALUE),
        )
