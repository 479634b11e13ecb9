"""The public documents of an app: what any client may fetch, from any origin, before the endpoint's
rules (no ``Host``/``Origin`` check, no authentication).

- With ``ServerConfig.oauth``: the protected resource metadata (RFC 9728), as
  :class:`~mcp_trio.auth.server._resource.BearerGuard` answers it.
- With ``ServerConfig.server_card`` (a draft, SEP-2127): ``GET <endpoint>/server-card`` answers the card
  (``application/mcp-server-card+json``), and ``GET /.well-known/ai-catalog.json`` (also at
  ``/.well-known/mcp/catalog.json``) the domain's catalog linking to it, with CORS for any origin.  The
  card is made from the server's own ``server/discover`` answer (:func:`discover`, the request a client
  of the latest revision sends, answered by the server as any other), so the two cannot disagree; that
  answer is kept for :data:`DISCOVER_MAX_AGE`, so however many requests come, the server answers at
  most one a second for them, and each client address gets ``ServerCard.requests_per_minute`` requests
  a minute (a token bucket of :mod:`.ratelimit`; then 429).  The documents are in :mod:`.._protocol.card`.
"""
from __future__ import annotations

import logging
from typing import Any

import mcp_types as mt
import trio

from .._app.context import Context
from .._protocol import admission, http, versions
from .._protocol.card import (
    CARD_MEDIA_TYPE,
    CARD_SUFFIX,
    CATALOG_MEDIA_TYPE,
    CATALOG_PATHS,
    ServerCard,
    card_document,
    catalog_document,
    endpoint_url,
    public_response,
    refusal_or_preflight,
    too_many,
)
from .._protocol.ratelimits import RateLimit
from .._runtime.contract import CANCELLABLE_SEND
from ..auth.server._resource import BearerGuard
from ..errors import RPCError
from .config import ServerConfig
from .core import ServerCore
from .modern import RequestPeer
from .quotas import client_address
from .ratelimit import LocalBuckets
from .responder import Responder
from .streams import TRANSPORT_ERRORS, GuardedSend, reject
from .wire import Receive, Scope, Send

__all__ = ["PublicDocuments", "discover"]

logger = logging.getLogger(__name__)

DISCOVER_MAX_AGE = 1.0
"""Seconds a ``server/discover`` answer is reused for the card (a server whose tools come and go shows
the change within this)."""
CARD_CLIENT = {"name": "mcp-trio-server-card", "version": "1"}
"""The ``clientInfo`` of the ``server/discover`` request the card is made from."""


async def _nowhere(message: dict[str, Any]) -> None:
    """The ``send`` of the card's ``server/discover``: a JSON-only answer sends no notifications."""


async def discover(server: ServerCore) -> dict[str, Any]:
    """The server's ``server/discover`` result, as a client of the latest revision without a principal
    gets it; RPCError when the server refuses it."""
    revision = versions.LATEST_MODERN
    meta = {
        mt.PROTOCOL_VERSION_META_KEY: revision.name,
        mt.CLIENT_INFO_META_KEY: dict(CARD_CLIENT),
        mt.CLIENT_CAPABILITIES_META_KEY: {},
    }
    peer = RequestPeer(revision, meta, Responder(_nowhere, json_only=True))
    ctx = Context(0, "server/discover", peer, meta, server.telemetry)
    return await server.handle_request(ctx, "server/discover", {"_meta": meta})


class PublicDocuments:
    """The public documents of one app (all of them answered by :meth:`serve`)."""

    def __init__(
        self, server: ServerCore, config: ServerConfig, oauth: BearerGuard | None, sends: set[GuardedSend]
    ) -> None:
        self.server = server
        self.oauth = oauth
        self.card: ServerCard | None = config.server_card
        self.endpoint = config.path
        self.resource = config.oauth.resource if config.oauth is not None else None
        """The OAuth resource (the endpoint's public URL) when the endpoint needs a token."""
        self.auth_metadata_url: str | None = getattr(config.oauth, "metadata_url", None)
        self._sends = sends
        per_minute = self.card.requests_per_minute if self.card is not None else None
        self._limit = RateLimit("address", per_minute, 60.0) if per_minute else None
        """The card's requests per client address and minute (``ServerCard.requests_per_minute``)."""
        self._buckets = LocalBuckets(10_000)
        self._discovered: tuple[float, dict[str, Any]] | None = None
        """When the last ``server/discover`` answer was had, and what it was."""
        self._discovering = trio.Lock()
        """Held while ``server/discover`` is asked: requests that come meanwhile wait for its answer."""

    def serves(self, scope: Scope) -> bool:
        """Whether an HTTP request is for a public document (the metadata's, the card's, the catalog's)."""
        path = scope.get("path", "/")
        if self.oauth is not None and path.rstrip("/") in self.oauth.paths:
            return True
        return self.card is not None and (path in CATALOG_PATHS or self._endpoint_of(path) is not None)

    def _endpoint_of(self, path: str) -> str | None:
        """The endpoint path a card path belongs to (None: not a card path)."""
        if not path.endswith(CARD_SUFFIX):
            return None
        endpoint = path[: -len(CARD_SUFFIX)]
        if self.endpoint is None:
            return endpoint or "/"
        return endpoint if endpoint.rstrip("/") == self.endpoint.rstrip("/") else None

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a request :meth:`serves`: the document, 304, a preflight's 204, 405, or 429."""
        extensions = scope.get("extensions")
        abortable = isinstance(extensions, dict) and CANCELLABLE_SEND in extensions
        guarded = GuardedSend(send, abortable=abortable, in_progress=self._sends)
        facts = http.RequestFacts.from_headers(scope["method"], scope.get("headers", ()))
        try:
            if facts.ambiguous_framing:  # before anything else: the request's end is in doubt
                await reject(guarded, admission.AMBIGUOUS_FRAMING)
                return
            if self.oauth is not None and scope.get("path", "/").rstrip("/") in self.oauth.paths:
                status, head, body = self.oauth.metadata_response(facts.method, facts.cors_headers)
            else:
                status, head, body = await self._answer(scope, facts.method)
            await guarded({"type": "http.response.start", "status": status, "headers": head})
            await guarded({"type": "http.response.body", "body": body, "more_body": False})
        except TRANSPORT_ERRORS:
            return

    async def _answer(self, scope: Scope, method: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """429 for a client address over the card's limit, else the document, a preflight's 204 or 405."""
        if self._limit is not None:
            bucket = {(self._limit, client_address(scope.get("client")) or "-"): 1}
            refusal = self._buckets.take(bucket, trio.current_time())
            if refusal is not None:
                return too_many(refusal.retry_after_seconds)
        return refusal_or_preflight(method) or await self._document(scope, method)

    async def _document(self, scope: Scope, method: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The card (or the catalog) of the endpoint a request names, as :func:`public_response` sends it."""
        path = scope.get("path", "/")
        endpoint = self._endpoint_of(path)
        if endpoint is None:  # the catalog: the card of the configured endpoint
            endpoint = self.endpoint or "/"
        assert self.card is not None
        url = self.card.url or self.resource or _request_url(scope, endpoint)
        try:
            result = await self._discover()
        except RPCError as exc:
            logger.warning("server card: server/discover was refused: %s", exc.message)
            return _UNAVAILABLE
        except Exception:
            logger.exception("server card: server/discover failed")
            return _UNAVAILABLE
        info = result.get("_meta", {}).get(mt.SERVER_INFO_META_KEY)
        info = info if isinstance(info, dict) else {}
        card = card_document(result, info, self.card, url, self.auth_metadata_url)
        if_none_match = _header(scope, b"if-none-match")
        if path in CATALOG_PATHS:
            catalog = catalog_document(card, url.rstrip("/") + CARD_SUFFIX)
            return public_response(method, catalog, CATALOG_MEDIA_TYPE, if_none_match)
        return public_response(method, card, CARD_MEDIA_TYPE, if_none_match)

    async def _discover(self) -> dict[str, Any]:
        async with self._discovering:  # one at a time, so concurrent requests share one answer
            now = trio.current_time()
            cached = self._discovered
            if cached is not None and now - cached[0] < DISCOVER_MAX_AGE:
                return cached[1]
            result = await discover(self.server)
            self._discovered = (now, result)
            return result


_UNAVAILABLE = (
    503,
    [(b"content-type", b"application/json"), (b"retry-after", b"1")],
    b'{"error":"unavailable"}',
)
"""What a card request gets when the server does not answer ``server/discover`` (logged)."""


def _header(scope: Scope, name: bytes) -> str | None:
    return next((value.decode("latin-1") for key, value in scope.get("headers", ()) if key == name), None)


def _request_url(scope: Scope, endpoint: str) -> str:
    """The endpoint's URL as the request reached it: its scheme, ``Host`` (else the server's own
    address) and the app's root path."""
    server = scope.get("server") or ("localhost", None)
    address = str(server[0])
    if ":" in address:
        address = f"[{address}]"
    fallback = address if server[1] is None else f"{address}:{server[1]}"
    root = scope.get("root_path", "")
    return endpoint_url(scope.get("scheme", "http"), _header(scope, b"host"), fallback, root + endpoint)
