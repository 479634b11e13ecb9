"""The bodies of HTTP answers and requests, as the client reads and sends them: a streamed answer read
message by message (:class:`MessageStream`), a body read up to a bound (:func:`read_capped`), a body
given up on (:func:`unwind`), and a request body sent in one piece (:class:`WholeBody`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import trio

from .._protocol.sse import SSEDecoder, SSEProtocolError
from ..errors import TransportError
from .wire import MAX_MESSAGE_SIZE, read_message

__all__ = ["MessageStream", "WholeBody", "drain", "read_capped", "unwind"]


class MessageStream:
    """The messages of one streamed answer, read by whoever iterates it."""

    def __init__(self, response: httpx.Response, max_message_size: int = MAX_MESSAGE_SIZE) -> None:
        self.response = response
        self.pending: list[dict[str, Any]] = []
        self._chunks = response.aiter_bytes()
        self._max = max_message_size
        self._decoder = SSEDecoder(max_event_size=max_message_size)
        self._ended = False

    async def next_message(self) -> dict[str, Any] | None:
        """The next message, or None when the server ended the answer."""
        while not self.pending:
            if self._ended or self.response.is_closed:
                return None
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._ended = True
                return None
            except httpx.HTTPError as exc:
                self._ended = True
                raise TransportError(f"the stream broke off: {exc}") from exc
            try:
                events = self._decoder.feed(chunk)
            except SSEProtocolError as exc:
                self._ended = True
                raise TransportError(f"the stream broke a limit: {exc}") from exc
            for event in events:
                message = read_message(event.data, self._max, "an SSE event")
                if message is not None:
                    self.pending.append(message)
        return self.pending.pop(0)

    async def aclose(self) -> None:
        if not self._ended and not self.response.is_closed:
            await unwind(self._chunks)
        with trio.CancelScope(shield=True):
            await self.response.aclose()


async def read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """A response's body, at most ``limit`` bytes of it; the bool says whether that is the whole body
    (False: there was more, not read; a ``Content-Length`` over the limit is believed without reading)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return b"", False
    body = bytearray()
    chunks = response.aiter_bytes()
    while True:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            return bytes(body), True
        body += chunk
        if len(body) > limit:
            await unwind(chunks)
            return bytes(body[:limit]), False


async def drain(chunks: AsyncIterator[bytes]) -> bool:
    """Read a body to its end; True once it ended."""
    while True:
        try:
            await chunks.__anext__()
        except StopAsyncIteration:
            return True


async def unwind(chunks: AsyncIterator[bytes]) -> None:
    """Give up on a body.  ``aclose()`` on httpx's outer generator would leave its inner ones to the
    garbage collector (a ResourceWarning each, encode/httpx#3686); a read in a cancelled scope unwinds
    the whole chain instead, and httpcore drops the connection on the way."""
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await drain(chunks)
        except httpx.HTTPError:
            pass


class WholeBody(httpx.AsyncByteStream):
    """A request body sent in one piece, iterated by a plain object instead of httpx's async generator:
    a send cancelled halfway (a call cancelled by its caller) then leaves no generator to be finalized
    by the garbage collector, which Trio reports as a ResourceWarning."""

    __slots__ = ("_body",)

    def __init__(self, body: bytes) -> None:
        self._body = body

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Once(self._body)


class _Once:
    """An async iterator yielding one bytes object."""

    __slots__ = ("_body",)

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body

    def __aiter__(self) -> _Once:
        return self

    async def __anext__(self) -> bytes:
        body, self._body = self._body, None
        if body is None:
            raise StopAsyncIteration
        return body
