"""The client side of Streamable HTTP on httpx: one POST per message, JSON or SSE answers, the 2025-era
standalone GET stream and ``Last-Event-ID`` resumption, and the 2026-era request-metadata headers."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from .._exceptions import MCPTrioError, SessionExpired, TransportError
from .._protocol import modern as modern_rules
from .._protocol.sse import ServerSentEvent, SSEDecoder
from ..auth._client_errors import OAuthError

__all__ = ["HTTPTransport", "MessageStream", "SessionExpired", "TransportError"]

logger = logging.getLogger(__name__)

OnMessage = Callable[[dict[str, Any]], Awaitable[None]]
ACCEPT = "application/json, text/event-stream"
DRAIN_SECONDS = 1.0


def _header_value(value: Any) -> str:
    """A header value per the 2026 rules: plain if safe ASCII, else the ``=?base64?...?=`` form."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    safe = text == text.strip() and all(0x20 <= ord(c) <= 0x7E for c in text)
    if safe and not (text.startswith("=?base64?") and text.endswith("?=")):
        return text
    return f"=?base64?{base64.b64encode(text.encode()).decode()}?="


def modern_headers(
    message: Mapping[str, Any], header_params: Mapping[str, tuple[str, ...]] | None
) -> dict[str, str]:
    """``Mcp-Method``, ``Mcp-Name`` and ``Mcp-Param-*`` for a 2026-era request."""
    method = message["method"]
    params = message.get("params") or {}
    headers = {"mcp-method": method}
    field = modern_rules.NAMED_METHODS.get(method)
    if field is not None and field in params:
        headers["mcp-name"] = _header_value(params[field])
    for name, path in (header_params or {}).items():
        value: Any = params.get("arguments")
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None:
            headers[f"mcp-param-{name}"] = _header_value(value)
    return headers


def _reason(exc: BaseException) -> str:
    """Why a request failed, in words: httpx's errors are often empty (an untrusted TLS certificate
    says why only in the exception's cause)."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        text = str(seen).strip()
        if text and not any(text in part or part in text for part in parts):
            parts.append(text)
        seen = seen.__cause__ or seen.__context__
    return ": ".join(parts) or type(exc).__name__


class HTTPTransport:
    """Talks to one MCP endpoint.  Owns nothing but what ``open_client_session`` hands it: the httpx
    client and the session nursery (for the GET stream)."""

    def __init__(
        self, http: httpx.AsyncClient, url: str, *, max_reconnects: int = 3, auth: httpx.Auth | None = None
    ) -> None:
        self.http = http
        self.url = url
        # applied to every request (the client's own default otherwise): mcp_trio.auth.OAuth, typically
        self.auth = auth if auth is not None else httpx.USE_CLIENT_DEFAULT
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.max_reconnects = max_reconnects

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        if self.protocol_version is not None:
            headers["mcp-protocol-version"] = self.protocol_version
        headers.update(extra or {})
        return headers

    async def post(
        self,
        message: dict[str, Any],
        on_message: OnMessage,
        *,
        extra_headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """POST one message.  For a request, return its response message (notifications and
        server requests met on the way go to ``on_message``); for anything else, None."""
        expect = message.get("id") if "method" in message else None
        body = json.dumps(message, separators=(",", ":")).encode()
        request = self.http.build_request(
            "POST", self.url, content=body, headers=self._headers(extra_headers)
        )
        try:
            response = await self.http.send(request, stream=True, auth=self.auth)
        except httpx.HTTPError as exc:
            raise TransportError(f"POST {self.url} failed: {_reason(exc)}") from exc
        try:
            if "mcp-session-id" in response.headers and message.get("method") == "initialize":
                self.session_id = response.headers["mcp-session-id"]
            if response.status_code == 202:
                return None
            if response.status_code >= 400:
                await self._raise_for(response, expect)
            kind = response.headers.get("content-type", "")
            if kind.startswith("text/event-stream"):
                return await self._read_sse(response, expect, on_message)
            data = json.loads(await response.aread())
            return await self._take_json(data, expect, on_message)
        except (httpx.HTTPError, ValueError) as exc:
            raise TransportError(f"the answer from {self.url} broke off or was not JSON: {exc}") from exc
        finally:
            with trio.CancelScope(shield=True):
                await response.aclose()

    async def _raise_for(self, response: httpx.Response, expect: Any = None) -> None:
        text = (await response.aread()).decode(errors="replace")
        try:
            body = json.loads(text)
        except ValueError:
            body = text
        if isinstance(body, dict) and "error" in body and expect is not None and body.get("id") == expect:
            raise _ErrorAnswer(body)
        if response.status_code == 404 and self.session_id is not None:
            raise SessionExpired(f"the server does not know session {self.session_id}", status=404, body=body)
        raise TransportError(
            f"HTTP {response.status_code} from {self.url}: {text[:300]}",
            status=response.status_code,
            body=body,
        )

    async def _take_json(self, data: Any, expect: Any, on_message: OnMessage) -> dict[str, Any] | None:
        messages = data if isinstance(data, list) else [data]
        if not all(isinstance(message, dict) for message in messages):
            raise TransportError("the JSON answer is not a JSON-RPC message")
        answer = None
        for message in messages:
            if expect is not None and message.get("id") == expect and "method" not in message:
                answer = message
            else:
                await on_message(message)
        if expect is not None and answer is None:
            raise TransportError("the JSON answer carried no response to the request")
        return answer

    async def _read_sse(
        self, response: httpx.Response, expect: Any, on_message: OnMessage
    ) -> dict[str, Any] | None:
        decoder = SSEDecoder()
        answer = await self._pump(response.aiter_bytes(), decoder, expect, on_message)
        attempts = 0
        while answer is None and expect is not None:
            # python-sdk #1811: a stream that ends without the response must not hang the caller.
            if not decoder.last_event_id or attempts >= self.max_reconnects:
                raise TransportError("the server closed the stream before sending the response")
            attempts += 1
            await trio.sleep((decoder.retry or 1000) / 1000)
            answer = await self._resume(decoder, expect, on_message)
        return answer

    async def _resume(self, decoder: SSEDecoder, expect: Any, on_message: OnMessage) -> dict[str, Any] | None:
        headers = self._headers({"accept": "text/event-stream", "last-event-id": decoder.last_event_id})
        try:
            async with self.http.stream("GET", self.url, headers=headers, auth=self.auth) as response:
                if response.status_code >= 400:
                    await self._raise_for(response)
                return await self._pump(response.aiter_bytes(), decoder, expect, on_message)
        except httpx.HTTPError as exc:
            logger.info("resuming the stream failed: %r", exc)
            return None

    async def _pump(
        self, chunks: AsyncIterator[bytes], decoder: SSEDecoder, expect: Any, on_message: OnMessage
    ) -> dict[str, Any] | None:
        """Read SSE events until ``expect``'s response (returned) or the end of the body (None)."""
        exhausted = False
        try:
            while True:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    exhausted = True
                    return None
                for event in decoder.feed(chunk):
                    message = _message_of(event)
                    if message is None:
                        continue
                    if expect is not None and message.get("id") == expect and "method" not in message:
                        # the response ends its stream: read to the end so the connection is reused
                        # (python-sdk #1274), but do not wait long for a server that keeps it open
                        with trio.move_on_after(DRAIN_SECONDS):
                            exhausted = await _drain(chunks)
                        return message
                    await on_message(message)
        finally:
            if not exhausted:
                await _unwind(chunks)

    @asynccontextmanager
    async def open_stream(
        self, message: dict[str, Any], *, extra_headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[MessageStream]:
        """POST a long-lived request (``subscriptions/listen``) and read its SSE answer message by message."""
        body = json.dumps(message, separators=(",", ":")).encode()
        request = self.http.build_request(
            "POST", self.url, content=body, headers=self._headers(extra_headers)
        )
        try:
            response = await self.http.send(request, stream=True, auth=self.auth)
        except httpx.HTTPError as exc:
            raise TransportError(f"POST {self.url} failed: {_reason(exc)}") from exc
        stream = MessageStream(response)
        try:
            if response.status_code >= 400:
                await self._raise_for(response, message.get("id"))
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                stream.pending.extend(await self._json_messages(response))
            yield stream
        finally:
            await stream.aclose()

    async def _json_messages(self, response: httpx.Response) -> list[dict[str, Any]]:
        data = json.loads(await response.aread())
        messages = data if isinstance(data, list) else [data]
        return [m for m in messages if isinstance(m, dict)]

    async def listen_get(self, on_message: OnMessage, *, task_status: trio.TaskStatus[None]) -> None:
        """The 2025-era standalone GET stream, resumed with ``Last-Event-ID`` after drops.  A 405 (or any
        failure) ends it quietly: the GET stream never harms the POSTs (go-sdk #1175)."""
        decoder = SSEDecoder()
        task_status.started()
        failures = 0
        while failures <= self.max_reconnects:
            extra = {"accept": "text/event-stream"}
            if decoder.last_event_id:
                extra["last-event-id"] = decoder.last_event_id
            try:
                async with self.http.stream(
                    "GET", self.url, headers=self._headers(extra), auth=self.auth
                ) as response:
                    if response.status_code == 405:
                        return
                    if response.status_code >= 400:
                        logger.info("GET stream refused: HTTP %s", response.status_code)
                        return
                    failures = 0
                    await self._pump(response.aiter_bytes(), decoder, None, on_message)
            except OAuthError as exc:  # no authorization for the stream: never ask again from here
                logger.info("GET stream given up: %s", exc)
                return
            except (httpx.HTTPError, MCPTrioError) as exc:
                logger.info("GET stream dropped: %r", exc)
            failures += 1
            await trio.sleep((decoder.retry or 1000) / 1000)

    async def delete(self) -> None:
        if self.session_id is None:
            return
        try:
            response = await self.http.delete(self.url, headers=self._headers(), auth=self.auth)
        except OAuthError as exc:  # the session ends anyway: no authorization just to say goodbye
            raise TransportError(f"DELETE {self.url} needed an authorization that failed: {exc}") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"DELETE {self.url} failed: {_reason(exc)}") from exc
        if response.status_code not in (200, 202, 204, 404, 405):
            logger.info("DELETE answered %s", response.status_code)


class MessageStream:
    """The messages of one streamed answer, read by whoever iterates it."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.pending: list[dict[str, Any]] = []
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
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
            for event in self._decoder.feed(chunk):
                message = _message_of(event)
                if message is not None:
                    self.pending.append(message)
        return self.pending.pop(0)

    async def aclose(self) -> None:
        if not self._ended and not self.response.is_closed:
            await _unwind(self._chunks)
        with trio.CancelScope(shield=True):
            await self.response.aclose()


class _ErrorAnswer(Exception):
    """An HTTP error status whose body is the JSON-RPC error response to our request."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("error"))
        self.body = body


def _message_of(event: ServerSentEvent) -> dict[str, Any] | None:
    if not event.data.strip():
        return None  # a priming event
    try:
        message = json.loads(event.data)
    except ValueError:
        logger.info("malformed SSE data ignored: %.100r", event.data)
        return None
    return message if isinstance(message, dict) else None


async def _drain(chunks: AsyncIterator[bytes]) -> bool:
    """Read a body to its end; True once it ended."""
    while True:
        try:
            await chunks.__anext__()
        except StopAsyncIteration:
            return True


async def _unwind(chunks: AsyncIterator[bytes]) -> None:
    """Give up on a body.  ``aclose()`` on httpx's outer generator would leave its inner ones to the
    garbage collector (a ResourceWarning each, encode/httpx#3686); a read in a cancelled scope unwinds
    the whole chain instead, and httpcore drops the connection on the way."""
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await _drain(chunks)
        except httpx.HTTPError:
            pass
