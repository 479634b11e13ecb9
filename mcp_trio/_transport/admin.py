"""The operations listener: an ASGI application for a port of its own, beside an :class:`MCPApp`.

- ``GET /metrics``: the Prometheus text format (0.0.4): the MCP duration histograms
  (``mcp_server_operation_duration_seconds`` of the requests and notifications the server receives,
  ``mcp_client_operation_duration_seconds`` of those it sends, ``mcp_server_session_duration_seconds``;
  recorded from the moment the :class:`AdminApp` is made), the transport's own gauges and counters
  (``mcp_trio_*``, built from :meth:`MCPApp.statistics`), ``mcp_trio_build_info``, ``python_info``
  and the ``process_*`` metrics (Linux);
- ``GET /healthz``: 200 ``ok`` while the process serves (liveness);
- ``GET /readyz``: 200 while the app serves; 503 while it is starting (not running yet), draining or
  shutting down, and while a Redis link it was given (notification bus, task store, event store) is
  not connected; the body says why, in JSON;
- ``GET /stats``: :meth:`MCPApp.statistics` as JSON.

Anything else is 404, another method 405.  A request whose ``Host`` is neither the address it
arrived on (``host:port``), nor a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``), nor one the
listener was told to accept (``allowed_hosts``) is 421 before any of that: a web page in a browser on
the same machine cannot read ``/stats`` or ``/metrics`` by DNS rebinding.  Nothing here authenticates:
the listener is for the operator's network (bind it to loopback or a private address).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import trio

from .._observe.process import process_samples, python_info
from .._observe.prometheus import Sample
from .._protocol import http
from .._protocol.versions import supported_versions
from ..errors import RemoteProtocolError
from .streams import TRANSPORT_ERRORS
from .wire import Receive, Scope, Send

if TYPE_CHECKING:
    from .asgi import MCPApp

__all__ = ["METRICS_CONTENT_TYPE", "AdminApp", "build_info", "readiness", "samples"]

logger = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_GAUGES: tuple[tuple[str, str, str], ...] = (
    # (statistics key, metric name, help)
    ("sessions", "mcp_trio_sessions_open", "2025-era sessions open"),
    ("streams", "mcp_trio_streams_open", "SSE streams of the open sessions (the GET stream and each POST's)"),
    ("connections", "mcp_trio_stream_connections_open", "HTTP responses attached to the sessions' streams"),
    ("pending_responses", "mcp_trio_pending_responses", "requests of sessions whose answer is still owed"),
    ("listeners", "mcp_trio_listeners_open", "2026-era subscriptions/listen streams open"),
    ("keepalive_watched", "mcp_trio_keepalive_watched", "2026-era streams watched for keep-alive comments"),
    ("websocket_connections", "mcp_trio_websocket_connections_open", "WebSocket connections open"),
    ("writes_in_progress", "mcp_trio_writes_in_progress", "HTTP sends under way"),
    ("writes_stalled", "mcp_trio_writes_stalled", "HTTP sends under way for more than a second"),
    ("tasks_running", "mcp_trio_tasks_running", "MCP tasks running in this process"),
    ("tasks_stored", "mcp_trio_tasks_stored", "MCP tasks kept by the in-memory task store"),
    ("session_tasks", "mcp_trio_session_trio_tasks", "Trio tasks under the sessions' nursery"),
    ("process_tasks", "mcp_trio_process_trio_tasks", "Trio tasks of the whole process"),
    ("quota_principals", "mcp_trio_quota_principals", "principals holding sessions (quotas)"),
    ("quota_addresses", "mcp_trio_quota_addresses", "client addresses holding sessions (quotas)"),
    ("rate_limit_buckets", "mcp_trio_rate_limit_buckets", "rate limit buckets kept by this process"),
)
_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("sessions_created", "mcp_trio_sessions_created_total", "2025-era sessions created"),
    ("rate_limit_admitted", "mcp_trio_rate_limit_admitted_total", "requests the rate limits admitted"),
    (
        "keepalive_comments",
        "mcp_trio_keepalive_comments_total",
        "keep-alive comments sent on 2026-era streams",
    ),
)
_INFLIGHT: tuple[tuple[str, str, str], ...] = (
    # (statistics key, era, transport)
    ("inflight", "2025", "http"),
    ("modern_inflight", "2026", "http"),
    ("websocket_legacy_requests", "2025", "websocket"),
    ("websocket_modern_requests", "2026", "websocket"),
)
_EVENT_STORE: tuple[tuple[str, str, str, str], ...] = (
    ("events", "gauge", "mcp_trio_event_store_events", "SSE events kept for resumption"),
    ("bytes", "gauge", "mcp_trio_event_store_bytes", "bytes of the SSE events kept for resumption"),
    ("max_bytes", "gauge", "mcp_trio_event_store_max_bytes", "bound on the bytes of the events kept"),
    (
        "evicted_streams",
        "counter",
        "mcp_trio_event_store_evicted_streams_total",
        "streams evicted by the bound",
    ),
    ("evicted_bytes", "counter", "mcp_trio_event_store_evicted_bytes_total", "bytes evicted by the bound"),
)
REDIS_LINKS = ("notifications", "tasks", "events")
"""The ``link`` label of the Redis metrics: the notification bus, the task store, the event store (and
``ratelimits``, the rate limits' store, which readiness does not wait for: local limits apply
without it)."""
_REDIS_COUNTERS: tuple[tuple[str, str], ...] = (
    ("connects", "connections to Redis made"),
    ("failures", "failed connection attempts and lost connections"),
    ("unavailable", "commands that could not reach Redis"),
    ("published", "notifications published to the other workers"),
    ("received", "notifications received from the other workers"),
    ("local_only", "notifications that reached this process's peers only"),
    ("dropped", "messages dropped: the outbox was full"),
    ("malformed", "malformed messages dropped"),
    ("forged", "messages dropped: not signed by the key ring"),
    ("replayed", "signed messages dropped: a copy of one accepted before"),
    ("forwarded", "messages forwarded to the worker owning a session"),
    ("adopted", "sessions of other workers adopted here"),
    ("released", "sessions handed over to other workers"),
    ("stored", "events stored"),
    ("written", "events written to Redis"),
    ("write_errors", "event writes refused by Redis"),
    ("created", "tasks created"),
)
_REDIS_STATES = ("stopped", "connecting", "connected", "disconnected")


def samples(stats: Mapping[str, Any]) -> list[Sample]:
    """The gauges and counters of ``stats`` (an :meth:`MCPApp.statistics`) for the Prometheus text
    format; every label has a bounded set of values."""
    found: list[Sample] = []
    for key, name, help in _GAUGES:
        if _is_number(stats.get(key)):
            found.append((name, "gauge", help, [({}, stats[key])]))
    for key, name, help in _COUNTERS:
        if _is_number(stats.get(key)):
            found.append((name, "counter", help, [({}, stats[key])]))
    inflight = [
        ({"era": era, "transport": transport}, stats[key])
        for key, era, transport in _INFLIGHT
        if _is_number(stats.get(key))
    ]
    if inflight:
        help = "requests being handled, by era (2025: in a session; 2026: stateless) and transport"
        found.append(("mcp_trio_requests_in_flight", "gauge", help, inflight))
    store = stats.get("event_store")
    if isinstance(store, Mapping):
        for key, kind, name, help in _EVENT_STORE:
            if _is_number(store.get(key)):
                found.append((name, kind, help, [({}, store[key])]))
    refused = stats.get("refused")
    if isinstance(refused, Mapping):
        counts = [({"status": status}, count) for status, count in refused.items() if _is_number(count)]
        help = "HTTP requests refused before any handler (admission, framing, unknown sessions), by status"
        found.append(("mcp_trio_http_refused_total", "counter", help, counts))
    limited = stats.get("rate_limited")
    if isinstance(limited, Mapping):
        counts = [({"scope": kind}, count) for kind, count in limited.items() if _is_number(count)]
        help = "requests refused by a rate limit (429, -32023), by the kind of the limit's scope"
        found.append(("mcp_trio_rate_limited_total", "counter", help, counts))
    found.extend(_redis_samples(stats))
    return found


def _redis_samples(stats: Mapping[str, Any]) -> list[Sample]:
    links = dict(_redis_statistics(stats))
    if not links:
        return []
    found: list[Sample] = [
        (
            "mcp_trio_redis_up",
            "gauge",
            "whether the link to Redis is connected (1) or not (0)",
            [
                ({"link": link}, float(link_stats["state"] == "connected"))
                for link, link_stats in links.items()
            ],
        )
    ]
    for key, help in _REDIS_COUNTERS:
        values = [({"link": link}, s[key]) for link, s in links.items() if _is_number(s.get(key))]
        if values:
            found.append((f"mcp_trio_redis_{key}_total", "counter", help, values))
    outbox = [({"link": link}, s["outbox"]) for link, s in links.items() if _is_number(s.get("outbox"))]
    if outbox:
        found.append(("mcp_trio_redis_outbox", "gauge", "entries queued for Redis", outbox))
    return found


def _redis_statistics(stats: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(link, its statistics) of each Redis link in ``stats`` (a link's statistics say its ``state``)."""
    for link, found in zip(
        REDIS_LINKS,
        (stats.get("notification_bus"), stats.get("task_store"), stats.get("event_store")),
        strict=True,
    ):
        if isinstance(found, Mapping) and found.get("state") in _REDIS_STATES:
            yield link, found
    store = stats.get("rate_limit_store")  # not in REDIS_LINKS: readiness does not wait for it
    if isinstance(store, Mapping) and store.get("state") in _REDIS_STATES:
        yield "ratelimits", store


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def build_info(http_server: str | None = None) -> Sample:
    """``mcp_trio_build_info 1``, its labels what this process runs: ``version`` (mcp_trio's),
    ``protocol_versions`` (the MCP revisions it speaks, newest first), ``trio_version``, and when
    known the HTTP server serving the app (``http_server``: ``hypercorn``, or ``h11`` for the
    embedded server) and its ``http_server_version`` (of hypercorn, or of h11)."""
    package = sys.modules[__name__.partition(".")[0]]  # whole by the time a listener is made
    labels = {
        "version": str(getattr(package, "__version__", "unknown")),
        "protocol_versions": ",".join(supported_versions()),
        "trio_version": trio.__version__,
    }
    if http_server is not None:
        labels["http_server"] = http_server
        try:
            labels["http_server_version"] = importlib.metadata.version(http_server)
        except importlib.metadata.PackageNotFoundError:  # an unknown name, or run from a source tree
            pass
    help = "mcp_trio's build: its version, the MCP revisions it speaks, trio's and the HTTP server's"
    return ("mcp_trio_build_info", "gauge", help, [(labels, 1)])


def readiness(app: MCPApp) -> dict[str, Any]:
    """Whether ``app`` is ready to serve (``ready``) and, if not, why (``reasons``: ``starting``,
    ``draining``, ``stopped``, ``redis unreachable``); ``redis``: each link's state, if any.

    A Redis link is any of the app's notification bus, task store and event store with a ``link_up``
    attribute (:class:`mcp_trio.redis.RedisNotificationBus`, ``RedisTaskStore``, ``RedisEventStore``
    have one); it is not up while it connects for the first time, nor while Redis is unreachable."""
    reasons: list[str] = []
    manager = app._manager
    if app._draining:
        reasons.append("draining")
    elif not manager.started:
        reasons.append("starting")
    elif not manager.running:
        reasons.append("stopped")
    links: dict[str, str] = {}
    components = (app.server.notifications, app._modern.tasks.store, manager.event_store)
    for link, component in zip(REDIS_LINKS, components, strict=True):
        up = getattr(component, "link_up", None)
        if isinstance(up, bool):
            state = getattr(component, "state", None)
            links[link] = state if isinstance(state, str) else ("connected" if up else "disconnected")
            if not up and "redis unreachable" not in reasons:
                reasons.append("redis unreachable")
    found: dict[str, Any] = {"ready": not reasons, "reasons": reasons}
    if links:
        found["redis"] = links
    return found


class AdminApp:
    """The operations listener's ASGI application for ``app`` (serve it on a port of its own, beside
    the app's): ``/metrics``, ``/healthz``, ``/readyz`` and ``/stats`` (see the module's docstring).

    Making it turns on the app server's Prometheus histograms
    (:meth:`~mcp_trio.server.Telemetry.enable_metrics`).  It answers the ASGI lifespan
    protocol (there is nothing to start: the :class:`MCPApp` runs on its own), so any ASGI server
    serves it; :func:`mcp_trio.serve` does with ``admin_bind="HOST:PORT"``.  ``http_server``: the
    HTTP server serving ``app`` (``"hypercorn"`` or ``"h11"``), for ``mcp_trio_build_info``.

    ``allowed_hosts``: the ``Host`` values it answers besides the address a request arrived on and the
    loopback names (``host`` for any port, or ``host:port``; the name a Prometheus server or a probe
    scrapes it by, when that is not its address); any other is 421.  ValueError for an entry that is
    not a host."""

    def __init__(
        self, app: MCPApp, *, http_server: str | None = None, allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.hosts = http.OriginPolicy.protecting(allowed_hosts)
        self.registry = app.server.telemetry.enable_metrics()
        self.build_info = build_info(http_server)

    def metrics(self) -> str:
        """The Prometheus text exposition: the histograms, then the transport's gauges and counters
        (:meth:`MCPApp.recent_statistics`: however often the listener is asked, they are computed at
        most 20 times a second), the build, Python and process metrics."""
        found = samples(self.app.recent_statistics())
        found += [self.build_info, python_info(), *process_samples()]
        return self.registry.render(found)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "http":
            try:
                await self._http(scope, send)
            except TRANSPORT_ERRORS:
                return  # the client went: nothing more to say
        elif kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "websocket":
            if (await receive()).get("type") == "websocket.connect":
                await send({"type": "websocket.close", "code": 1008})  # refused (403 where the server can)
        else:
            raise RuntimeError(f"the operations listener does not serve ASGI {kind!r} scopes")

    async def _http(self, scope: Scope, send: Send) -> None:
        path = scope.get("path")
        method = scope.get("method")
        facts = http.RequestFacts.from_headers(str(method), scope.get("headers", ()))
        try:
            http.check_listener_host(facts, self.hosts, http.local_host(scope.get("server")))
        except RemoteProtocolError as exc:
            await _respond(send, exc.http_status, exc.message.encode() + b"\n")
            return
        if path not in ("/metrics", "/healthz", "/readyz", "/stats"):
            await _respond(send, 404, b"not found\n")
        elif method != "GET":
            await _respond(send, 405, b"method not allowed\n", extra=[(b"allow", b"GET")])
        elif path == "/healthz":
            await _respond(send, 200, b"ok\n")
        elif path == "/readyz":
            state = readiness(self.app)
            await _respond(send, 200 if state["ready"] else 503, _json(state), "application/json")
        elif path == "/stats":
            await _respond(send, 200, _json(self.app.recent_statistics()), "application/json")
        else:
            await _respond(send, 200, self.metrics().encode(), METRICS_CONTENT_TYPE)


def _json(value: object) -> bytes:
    return json.dumps(value, default=str).encode() + b"\n"


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *(extra or ()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message.get("type") == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message.get("type") == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
