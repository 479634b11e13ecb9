"""The client side of Streamable HTTP on httpx: one POST per message, JSON or SSE answers, the 2025-era
standalone GET stream and ``Last-Event-ID`` resumption, the 2026-era request-metadata headers, and
every message sent again after a 503 or 429 (``retry.py``)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import trio

from .._protocol import modern as modern_rules
from .._protocol.sse import SSEDecoder, SSEProtocolError
from ..auth.client._errors import OAuthError
from ..errors import MCPTrioError, SessionExpired, TransportError
from .bodies import MessageStream, WholeBody, drain, read_capped, unwind
from .observe import carrier_of
from .retry import RETRY_STATUSES, Retries, RetryPolicy
from .wire import MAX_MESSAGE_SIZE, OnMessage, decode_json, envelope, peer_log, read_message

__all__ = ["HTTPTransport", "MessageStream", "SessionExpired", "TransportError"]

_WholeBody = WholeBody  # its name before it moved to bodies.py

logger = logging.getLogger(__name__)

ACCEPT = "application/json, text/event-stream"
DRAIN_SECONDS = 1.0
MAX_RETRY_DELAY = 60.0
"""Seconds: the longest wait before a reconnection that a server's SSE ``retry`` can ask for."""
MAX_GET_BACKOFF = 30.0
"""Longest pause between two reconnections of a GET stream that keeps dropping."""
MAX_ERROR_BODY = 64 * 1024
"""How much of an HTTP error answer's body is read (the rest is not: the connection is dropped)."""


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
        self,
        http: httpx.AsyncClient,
        url: str,
        *,
        max_reconnects: int = 3,
        auth: httpx.Auth | None = None,
        max_message_size: int = MAX_MESSAGE_SIZE,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.http = http
        self.url = url
        self.carrier = carrier_of(url, "http")
        """TCP, HTTP, the server's host and port (the telemetry's ``network.*`` and ``server.*``)."""
        # applied to every request (the client's own default otherwise): mcp_trio.auth.OAuth, typically
        self.auth = auth if auth is not None else httpx.USE_CLIENT_DEFAULT
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.client_session_id: str | None = None
        """Sent as ``Mcp-Client-Session-Id`` on every request (the session sets it; SEP-2822)."""
        self.modern = False  # 2026 era: requests carry the Mcp-Method, Mcp-Name and Mcp-Param-* headers
        self.header_params: dict[str, dict[str, tuple[str, ...]]] = {}
        """Per tool: which arguments travel in ``Mcp-Param-*`` headers (the session learns it from
        ``tools/list``)."""
        self.max_reconnects = max_reconnects
        self.max_message_size = max_message_size
        self.retry = retry or RetryPolicy()

    def _headers(self, extra: Mapping[str, str] | None, session_id: str | None) -> dict[str, str]:
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        if session_id is not None:
            headers["mcp-session-id"] = session_id
        if self.protocol_version is not None:
            headers["mcp-protocol-version"] = self.protocol_version
        if self.client_session_id is not None:
            headers["mcp-client-session-id"] = self.client_session_id
        headers.update(extra or {})
        return headers

    async def post(self, message: dict[str, Any], on_message: OnMessage) -> dict[str, Any] | None:
        """POST one message.  For a request, return its response message (notifications and
        server requests met on the way go to ``on_message``); for anything else, None."""
        expect = message.get("id") if "method" in message else None
        session_id = self.session_id  # the session this message belongs to, whatever happens meanwhile
        try:
            response = await self._send(lambda: self._post(message, session_id), session_id)
        except httpx.HTTPError as exc:
            raise TransportError(f"POST {self.url} failed: {_reason(exc)}") from exc
        try:
            if (
                response.status_code < 400
                and "mcp-session-id" in response.headers
                and message.get("method") == "initialize"
            ):
                self.session_id = response.headers["mcp-session-id"]
            if response.status_code == 202:
                return None
            if response.status_code >= 400:
                await self._raise_for(response, session_id, expect)
            kind = response.headers.get("content-type", "")
            if kind.startswith("text/event-stream"):
                return await self._read_sse(response, session_id, expect, on_message)
            data = decode_json(await self._read_body(response), self.max_message_size, "the answer")
            return await self._take_json(data, expect, on_message)
        except (httpx.HTTPError, SSEProtocolError) as exc:
            raise TransportError(f"the answer from {self.url} broke off or was too large: {exc}") from exc
        finally:
            with trio.CancelScope(shield=True):
                await response.aclose()

    async def _send(self, build: Callable[[], httpx.Request], session_id: str | None) -> httpx.Response:
        """Send the request ``build`` makes (streamed) and return the answer; after a 503 or 429 send it
        again, as :attr:`retry` allows (else :class:`~mcp_trio.errors.ServerBusy`).  A message of a
        session that another has replaced meanwhile is not sent: :class:`SessionExpired`."""
        retries = Retries(self.retry)
        while True:
            if session_id is not None and session_id != self.session_id:
                gone = f"session {session_id} expired (a new session replaced it)"
                raise SessionExpired(gone, status=None, session_id=session_id)
            request = build()
            response = await self.http.send(request, stream=True, auth=self.auth)
            if response.status_code not in RETRY_STATUSES:
                return response
            try:
                raw, _whole = await read_capped(response, MAX_ERROR_BODY)
            except httpx.HTTPError:
                raw = b""
            finally:
                with trio.CancelScope(shield=True):
                    await response.aclose()
            after = response.headers.get("retry-after")
            text = raw.decode(errors="replace")
            await retries.wait(f"{request.method} {self.url}", response.status_code, after, text)

    async def _read_body(self, response: httpx.Response) -> bytes:
        """A JSON answer's body, or :class:`TransportError` once it is longer than ``max_message_size``
        (then it is not read further: the connection is dropped when the response is closed)."""
        limit = self.max_message_size
        body, whole = await read_capped(response, limit)
        if not whole:
            raise TransportError(f"the answer from {self.url} is longer than {limit} bytes")
        return body

    async def _raise_for(self, response: httpx.Response, session_id: str | None, expect: Any = None) -> None:
        raw, whole = await read_capped(response, MAX_ERROR_BODY)
        text = raw.decode(errors="replace")
        body: Any = text
        if whole:
            try:
                body = decode_json(raw, MAX_ERROR_BODY, "the error body")
            except TransportError:
                pass
        if (
            isinstance(body, dict)
            and isinstance(body.get("error"), dict)
            and expect is not None
            and body.get("id") == expect
        ):
            raise _ErrorAnswer(body)
        if response.status_code == 404 and session_id is not None:
            raise SessionExpired(
                f"the server does not know session {session_id}", status=404, body=body, session_id=session_id
            )
        raise TransportError(
            f"HTTP {response.status_code} from {self.url}: {text[:300]}",
            status=response.status_code,
            body=body,
        )

    async def _take_json(self, data: Any, expect: Any, on_message: OnMessage) -> dict[str, Any] | None:
        items = data if isinstance(data, list) else [data]
        messages = [message for message in map(envelope, items) if message is not None]
        if not items or len(messages) != len(items):
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
        self, response: httpx.Response, session_id: str | None, expect: Any, on_message: OnMessage
    ) -> dict[str, Any] | None:
        decoder = SSEDecoder(max_event_size=self.max_message_size)
        answer = await self._pump(response.aiter_bytes(), decoder, expect, on_message)
        attempts = 0
        while answer is None and expect is not None:
            # python-sdk #1811: a stream that ends without the response must not hang the caller.
            if not decoder.last_event_id or attempts >= self.max_reconnects:
                raise TransportError("the server closed the stream before sending the response")
            attempts += 1
            await trio.sleep(_retry_delay(decoder))
            answer = await self._resume(decoder, session_id, expect, on_message)
        return answer

    async def _resume(
        self, decoder: SSEDecoder, session_id: str | None, expect: Any, on_message: OnMessage
    ) -> dict[str, Any] | None:
        """GET the rest of a stream (``Last-Event-ID``), from whichever worker answers; None if it ended
        (or broke off) before the response.  A 503 or 429 is retried as any message; a 404 is
        :class:`SessionExpired`."""
        extra = {"accept": "text/event-stream", "last-event-id": decoder.last_event_id}
        try:
            response = await self._send(lambda: self._get(extra, session_id), session_id)
        except httpx.HTTPError as exc:
            logger.info("resuming the stream failed: %r", exc)
            return None
        try:
            if response.status_code >= 400:
                await self._raise_for(response, session_id)
            return await self._pump(response.aiter_bytes(), decoder, expect, on_message)
        except httpx.HTTPError as exc:
            logger.info("the resumed stream broke off: %r", exc)
            return None
        finally:
            with trio.CancelScope(shield=True):
                await response.aclose()

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
                    message = read_message(event.data, self.max_message_size, "an SSE event")
                    if message is None:
                        continue
                    if expect is not None and message.get("id") == expect and "method" not in message:
                        # the response ends its stream: read to the end so the connection is reused
                        # (python-sdk #1274), but do not wait long for a server that keeps it open
                        with trio.move_on_after(DRAIN_SECONDS):
                            exhausted = await drain(chunks)
                        return message
                    await on_message(message)
        finally:
            if not exhausted:
                await unwind(chunks)

    def _get(self, extra: dict[str, str], session_id: str | None) -> httpx.Request:
        return self.http.build_request("GET", self.url, headers=self._headers(extra, session_id))

    def _post(self, message: dict[str, Any], session_id: str | None) -> httpx.Request:
        """A POST of ``message`` (with the 2026-era request headers, in that era) whose body stream is a
        plain iterator (:class:`_WholeBody`)."""
        body = json.dumps(message, separators=(",", ":")).encode()
        extra = None
        if self.modern and "method" in message and "id" in message:  # a request
            params = message.get("params") or {}
            extra = modern_headers(message, self.header_params.get(params.get("name", "")))
        headers = self._headers(extra, session_id)
        request = self.http.build_request("POST", self.url, content=body, headers=headers)
        request.stream = WholeBody(body)  # the request keeps its content (and Content-Length) as built
        return request

    @asynccontextmanager
    async def open_stream(self, message: dict[str, Any]) -> AsyncIterator[MessageStream]:
        """POST a long-lived request (``subscriptions/listen``) and read its SSE answer message by message."""
        session_id = self.session_id
        try:
            response = await self._send(lambda: self._post(message, session_id), session_id)
        except httpx.HTTPError as exc:
            raise TransportError(f"POST {self.url} failed: {_reason(exc)}") from exc
        stream = MessageStream(response, self.max_message_size)
        try:
            if response.status_code >= 400:
                await self._raise_for(response, session_id, message.get("id"))
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                stream.pending.extend(await self._json_messages(response))
            yield stream
        finally:
            await stream.aclose()

    async def _json_messages(self, response: httpx.Response) -> list[dict[str, Any]]:
        try:
            raw = await self._read_body(response)
        except httpx.HTTPError as exc:
            raise TransportError(f"the answer from {self.url} broke off: {exc}") from exc
        data = decode_json(raw, self.max_message_size, "the answer")
        messages = [envelope(item) for item in (data if isinstance(data, list) else [data])]
        return [m for m in messages if m is not None]

    async def listen_get(self, on_message: OnMessage, ready: trio.Event) -> None:
        """The 2025-era standalone GET stream, resumed with ``Last-Event-ID`` after drops.  A 405 (or any
        failure) ends it quietly: the GET stream never harms the POSTs (go-sdk #1175).  Whatever goes
        wrong on it (a broken connection, an event over the size limit, even a bug of ours in handling
        what it carried) is logged and counts as a drop: it never ends the session.  (A notification
        callback that raises on it does, as documented: that is the application's own decision, routed
        by the session.)

        ``ready`` is set once the first attempt has its answer (the stream's headers, a refusal or a
        failure): a server that sends what concerns no request only on an open GET stream (and drops
        it otherwise) loses nothing the session asks for after that.

        Once it has been open, a drop is followed by a reconnection for as long as the session lives,
        the pause doubling (from the server's ``retry``) up to :data:`MAX_GET_BACKOFF` seconds while the
        drops go on; before, it gives up after ``max_reconnects`` failures in a row.  A 503 or 429 is
        retried as any message (:attr:`retry`; then it counts as a drop).  A 404 to a
        reconnection (the stream was open before) raises :class:`SessionExpired`: the session is gone
        (a 404 to the first attempt ends the stream quietly, like any refusal).  So does a session
        replaced meanwhile: the stream belongs to the session that opened it."""
        try:
            await self._listen(on_message, ready)
        finally:
            ready.set()

    async def _listen(self, on_message: OnMessage, ready: trio.Event) -> None:
        session_id = self.session_id
        decoder = SSEDecoder(max_event_size=self.max_message_size)
        failures = 0
        opened = False
        # Until it has opened once, the stream gives up after a few failures in a row (a server without
        # one); once it has, it lives as long as the session (a worker that died or drains: the
        # balancer finds the session's next one), reconnecting less and less often.
        while opened or failures <= self.max_reconnects:
            extra = {"accept": "text/event-stream"}
            if decoder.last_event_id:
                extra["last-event-id"] = decoder.last_event_id
            try:
                response = await self._send(partial(self._get, extra, session_id), session_id)
                try:
                    if response.status_code == 404 and opened and session_id is not None:
                        gone = f"the server does not know session {session_id} (GET stream)"
                        raise SessionExpired(gone, session_id=session_id)
                    if response.status_code == 405:
                        return
                    if response.status_code >= 400:
                        logger.info("GET stream refused: HTTP %s", response.status_code)
                        return
                    failures = 0
                    opened = True
                    ready.set()
                    await self._pump(response.aiter_bytes(), decoder, None, on_message)
                finally:
                    with trio.CancelScope(shield=True):
                        await response.aclose()
            except SessionExpired:
                raise
            except OAuthError as exc:  # no authorization for the stream: never ask again from here
                logger.info("GET stream given up: %s", exc)
                return
            except SSEProtocolError as exc:  # the decoder is unusable now: a new one, same position
                peer_log(logging.INFO, "get-dropped", "GET stream dropped: %s", _reason(exc))
                decoder = _fresh(decoder)
            except (httpx.HTTPError, MCPTrioError) as exc:
                peer_log(logging.INFO, "get-dropped", "GET stream dropped: %s", _reason(exc))
            except Exception:  # our own bug met on this stream: logged with its traceback, the session lives
                logger.exception("GET stream failed")
            ready.set()
            failures += 1
            delay = _retry_delay(decoder)
            if opened:
                delay = min(max(delay, 0.1) * 2 ** min(failures - 1, 8), MAX_GET_BACKOFF)
            await trio.sleep(delay)

    async def delete(self) -> None:
        session_id = self.session_id
        if session_id is None:
            return

        def build() -> httpx.Request:
            return self.http.build_request("DELETE", self.url, headers=self._headers(None, session_id))

        try:
            response = await self._send(build, session_id)
            try:
                await read_capped(response, MAX_ERROR_BODY)
            finally:
                with trio.CancelScope(shield=True):
                    await response.aclose()
        except OAuthError as exc:  # the session ends anyway: no authorization just to say goodbye
            raise TransportError(f"DELETE {self.url} needed an authorization that failed: {exc}") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"DELETE {self.url} failed: {_reason(exc)}") from exc
        if response.status_code not in (200, 202, 204, 404, 405):
            logger.info("DELETE answered %s", response.status_code)


class _ErrorAnswer(Exception):
    """An HTTP error status whose body is the JSON-RPC error response to our request."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("error"))
        self.body = body


def _retry_delay(decoder: SSEDecoder) -> float:
    """Seconds to wait before reconnecting: the server's ``retry`` (1 s without one, or for 0), at most
    :data:`MAX_RETRY_DELAY` (a server cannot make a call wait for days)."""
    return min((decoder.retry or 1000) / 1000, MAX_RETRY_DELAY)


def _fresh(decoder: SSEDecoder) -> SSEDecoder:
    """A new decoder in place of one a limit broke, resuming where it was (last event id, retry)."""
    fresh = SSEDecoder(max_event_size=decoder._max_size)
    fresh._last_event_id = decoder.last_event_id
    fresh._retry = decoder.retry
    return fresh
