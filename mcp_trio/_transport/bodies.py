"""A POST's body: read whole, within the app's size limit and its ``body_timeout``.

The time the body may take is kept by one clock for every request (:class:`BodyDeadlines`, a task of
:meth:`MCPApp.run`): the request's cancel scope is put on it while the body is read, and the clock
cancels the scope if the body has not arrived ``body_timeout`` after the request began (a
:class:`~.clocks.UniformClock`).  Before, each POST gave its scope a deadline of its own, which costs
Trio about as much again as the scope (and keeps an entry in its deadline heap until that deadline
passes, long after the body came).
"""

from __future__ import annotations

import trio

from .._protocol import http
from .clocks import UniformClock
from .wire import Receive

__all__ = ["BodyDeadlines", "ClientGone", "read_body"]


class ClientGone(Exception):
    """The client went away while its request body was being read: there is no one to answer."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body: 413 past ``limit`` bytes (the caller bounds the time it takes)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            http.body_too_large(limit)
        if not message.get("more_body", False):  # usually the only message: its body as it is
            return b"".join((*chunks, chunk)) if chunks else bytes(chunk)
        chunks.append(chunk)


class BodyDeadlines(UniformClock[trio.CancelScope]):
    """One clock (:meth:`run`) for the arrival of every request body: :meth:`watch` a request's scope
    while its body is read, :meth:`unwatch` it once read; a scope still watched ``interval`` seconds
    after it was put on the clock is cancelled, and so is one still watched when the clock ends.  Only
    while :attr:`running` (an app that is not running gives its scopes deadlines of their own)."""

    __slots__ = ()

    def __init__(self, interval: float) -> None:
        super().__init__(interval, trio.CancelScope.cancel, repeat=False)
