"""The instruments one side of MCP connections records into, and one operation's record.

A :class:`Telemetry` belongs to a server (:attr:`mcp_trio.MCPServer.telemetry`) or to a client's
sessions.  It records into what is in use, and only that:

- OpenTelemetry, when ``opentelemetry-api`` is installed: spans while a tracer provider is set, the
  operation and session duration histograms while a meter provider is set;
- a Prometheus :class:`~.prometheus.MetricsRegistry`, once :meth:`Telemetry.enable_metrics` was
  called (an operations listener does);
- the request log (:attr:`Telemetry.request_log`): one record per request on the
  ``mcp_trio.requests`` logger (see :mod:`.logs`).

With none in use :meth:`Telemetry.operation` and :meth:`Telemetry.session` return None: the caller
records nothing, and the cost is that test.

Both keep the conventions' histograms the same way: an operation this side received is in
``mcp.server.operation.duration`` (its span is a SERVER span), one it sent in
``mcp.client.operation.duration`` (a CLIENT span), whichever side this is
(:func:`~.conventions.operation_histogram`): a server's progress notifications never count as requests
it served.  A session is in ``mcp.{side}.session.duration``.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import trio

from .._protocol import clientsession
from .._runtime.peerlog import printable
from .conventions import (
    Histogram,
    bounded_error,
    describe,
    metric_attributes,
    operation_histogram,
    outcome,
    session_histogram,
    span_name,
)
from .prometheus import MetricsRegistry, seconds_name

__all__ = ["HTTP", "PIPE", "WEBSOCKET", "Carrier", "Operation", "SessionClock", "Telemetry", "identity_hash"]

CLIENT_SESSION_ATTRIBUTE = "mcp.client.session.id"
"""The span attribute of a request's client session id (``Mcp-Client-Session-Id``, SEP-2822)."""

request_logger = logging.getLogger("mcp_trio.requests")
logger = logging.getLogger(__name__)
_told = False


def _broken(what: str) -> None:
    """Telemetry failed (an SDK's span processor or exporter that raises, say): the operation goes on
    unrecorded, and the first failure of the process is logged with its traceback (later ones at
    DEBUG: a broken exporter must not flood the log)."""
    global _told
    if _told:
        logger.debug("telemetry failed %s", what, exc_info=True)
        return
    _told = True
    logger.exception("telemetry failed %s; the operation goes on unrecorded (logged once)", what)


class Carrier(NamedTuple):
    """How a connection carries MCP messages: ``network.transport`` (``tcp``, ``pipe``, ``unix``),
    ``network.protocol.name`` (``http``, ``websocket``); on a client, the server it reaches
    (``server.address``, ``server.port``: from its URL)."""

    transport: str
    protocol: str | None = None
    address: str | None = None
    port: int | None = None

    def attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = {"network.transport": self.transport}
        if self.protocol is not None:
            out["network.protocol.name"] = self.protocol
        if self.address is not None:
            out["server.address"] = self.address
            if self.port is not None:
                out["server.port"] = self.port
        return out


PIPE = Carrier("pipe")
"""stdio."""
HTTP = Carrier("tcp", "http")
"""Streamable HTTP."""
WEBSOCKET = Carrier("tcp", "websocket")
"""MCP over WebSocket."""


def identity_hash(value: str | bytes) -> str:
    """A short, stable stand-in for a session id or principal in a log (the first 16 hex digits of its
    SHA-256): records of one session correlate, and the log holds no credential."""
    data = value.encode() if isinstance(value, str) else value
    return hashlib.sha256(data).hexdigest()[:16]


_INSTRUMENTS: list[Any] = []


def _load_otel() -> Any:
    """The OpenTelemetry instruments, made once per process (a client makes a :class:`Telemetry` per
    session, a process may hold both sides: they share them)."""
    if _INSTRUMENTS:
        return _INSTRUMENTS[0]
    try:
        from .otel import OtelInstruments
    except ImportError:  # the otel extra is not installed: nothing of OpenTelemetry is imported
        return None
    _INSTRUMENTS.append(OtelInstruments())
    return _INSTRUMENTS[0]


class Telemetry:
    """What one side (``"server"`` or ``"client"``) records.

    ``known(kind, name)`` says whether a tool (``kind == "tool"``) or prompt is registered: only those
    names become a span name's target or a metric attribute.  ``identify(principal)`` gives the bytes
    identifying a principal (hashed in the request log).  ``trusted_targets``: the tool and prompt
    names in this side's requests are its own application's (a client's), so span names carry any of
    them; metric attributes still carry only those ``known`` says.
    """

    def __init__(
        self,
        side: str,
        known: Callable[[str, str], bool] | None = None,
        identify: Callable[[object], bytes] | None = None,
        *,
        opentelemetry: bool = True,
        trusted_targets: bool = False,
    ) -> None:
        self.side = side
        self.known = known
        self.trusted_targets = trusted_targets
        self.identify = identify
        self.otel: Any = _load_otel() if opentelemetry else None
        """The OpenTelemetry instruments (None without the ``otel`` extra)."""
        self.registry: MetricsRegistry | None = None
        """The Prometheus registry (None until :meth:`enable_metrics`)."""
        self.request_log = False
        """Whether each request is logged (INFO on ``mcp_trio.requests``) when its answer is sent."""
        self._operations: dict[bool, Any] = {}
        """The Prometheus operation histograms by ``incoming`` (once :meth:`enable_metrics` was called)."""
        self._sessions: Any = None

    def enable_metrics(self) -> MetricsRegistry:
        """Record the duration histograms in a Prometheus registry too (idempotent); returns it: the
        receiver's and the sender's operation histograms, and this side's session histogram."""
        if self.registry is None:
            registry = MetricsRegistry()

            def made(made: Histogram) -> Any:
                return registry.histogram(seconds_name(made.name), made.description, made.buckets)

            self._operations = {incoming: made(operation_histogram(incoming)) for incoming in (True, False)}
            self._sessions = made(session_histogram(self.side))
            self.registry = registry
        return self.registry

    def operation(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        request_id: object,
        *,
        incoming: bool,
        carrier: Carrier,
        protocol_version: str | None = None,
        session_id: str | None = None,
        principal: object = None,
        current: bool = True,
    ) -> Operation | None:
        """Begin recording one request (``request_id`` not None) or notification; None when nothing
        records.  ``incoming``: the peer sent it (a SERVER span, its parent the trace context in
        ``params._meta``); else this side sends it (a CLIENT span: call ``Operation.inject`` to put
        its context into the message).  The span is the current one until the operation finishes
        (call ``Operation.finish`` in the same task), unless not ``current`` (an operation that
        outlives the block that began it, such as a subscription a context manager yields).  Call
        ``Operation.finish`` with the answer."""
        otel = self.otel
        tracing, metering = (False, False) if otel is None else otel.live()
        if not (tracing or metering or self.registry is not None or self.request_log):
            return None
        try:
            return Operation(
                self, method, params, request_id, incoming, carrier, protocol_version, session_id,
                principal, tracing, metering, current,
            )  # fmt: skip
        except Exception:
            _broken(f"starting {method[:64]!r}")
            return None

    def session(self, carrier: Carrier) -> SessionClock | None:
        """Begin timing a session; None when no histogram records it."""
        otel = self.otel
        metering = otel is not None and otel.live()[1]
        if not metering and self.registry is None:
            return None
        return SessionClock(self, carrier, metering)


class Operation:
    """One request or notification being recorded (see :meth:`Telemetry.operation`)."""

    __slots__ = (
        "_incoming", "_logged", "_metering", "_span", "_started", "_token", "attributes", "carrier",
        "client_session_id", "principal", "session_id", "telemetry",
    )  # fmt: skip

    def __init__(
        self,
        telemetry: Telemetry,
        method: str,
        params: Mapping[str, Any] | None,
        request_id: object,
        incoming: bool,
        carrier: Carrier,
        protocol_version: str | None,
        session_id: str | None,
        principal: object,
        tracing: bool,
        metering: bool,
        current: bool = True,
    ) -> None:
        self.telemetry = telemetry
        self.carrier = carrier
        self.session_id = session_id
        self.principal = principal
        self._metering = metering
        self._incoming = incoming
        self._logged = (
            telemetry.request_log and request_id is not None and incoming is (telemetry.side == "server")
        )
        """The request log has a record of each request a server receives, or a client sends (not of
        notifications, nor of the requests a server sends or a client answers)."""
        attributes = self.attributes = describe(method, params, request_id)
        if protocol_version is not None:
            attributes["mcp.protocol.version"] = protocol_version
        attributes.update(carrier.attributes())
        meta = params.get("_meta") if params else None
        self.client_session_id = clientsession.from_meta(meta) if isinstance(meta, Mapping) else None
        """The client's session id (``Mcp-Client-Session-Id``, SEP-2822): a span attribute and a field
        of the request log, never a metric attribute (one value per conversation)."""
        self._span: Any = None
        self._token: object = None
        if tracing:
            span_attributes = dict(attributes)
            if session_id is not None:
                span_attributes["mcp.session.id"] = session_id
            if self.client_session_id is not None:
                span_attributes[CLIENT_SESSION_ATTRIBUTE] = self.client_session_id
            self._span, self._token = telemetry.otel.start(
                span_name(attributes, None if telemetry.trusted_targets else telemetry.known),
                incoming,
                span_attributes,
                meta if isinstance(meta, Mapping) else None,
                current,
            )
        self._started = time.perf_counter()

    def inject(self, message: dict[str, Any]) -> dict[str, Any]:
        """Put this operation's trace context into ``message``'s ``params._meta`` (a copy of params
        and ``_meta``: the caller's dicts are not changed); returns the message.  The message's id
        becomes the operation's ``jsonrpc.request.id`` if it had none."""
        request_id = message.get("id")
        if request_id is not None and "jsonrpc.request.id" not in self.attributes:
            self.attributes["jsonrpc.request.id"] = str(request_id)
            if self._span is not None:
                self._span.set_attribute("jsonrpc.request.id", str(request_id))
        if self._span is None:
            return message
        from .otel import inject

        params = dict(message.get("params") or {})
        meta = params.get("_meta")
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        try:
            inject(meta, self._span)
        except Exception:  # a propagator that raises: the message goes without trace context
            _broken("writing trace context")
            return message
        params["_meta"] = meta
        message = dict(message)
        message["params"] = params
        return message

    def set_session(self, session_id: str | None, protocol_version: str | None = None) -> None:
        """What ``initialize`` decided, for a span begun before it was known."""
        if session_id is not None:
            self.session_id = session_id
            if self._span is not None:
                self._span.set_attribute("mcp.session.id", session_id)
        if protocol_version is not None:
            self.attributes["mcp.protocol.version"] = protocol_version
            if self._span is not None:
                self._span.set_attribute("mcp.protocol.version", protocol_version)

    def finish(
        self, message: Mapping[str, Any] | None = None, error: str | None = None, why: str | None = None
    ) -> None:
        """The operation ended: ``message`` is the JSON-RPC answer (None for a notification); ``error``
        an ``error.type`` of an operation that ended without one (``cancelled``, ``timeout``, an
        exception's class name), ``why`` the span status's description then (the exception's text).
        Never raises: a failure of telemetry is logged, not the caller's."""
        try:
            self._finish(message, error, why)
        except Exception:
            _broken(f"ending {self.attributes.get('mcp.method.name')!r}")

    def _finish(self, message: Mapping[str, Any] | None, error: str | None, why: str | None) -> None:
        duration = time.perf_counter() - self._started
        telemetry = self.telemetry
        error_type, status_code, description = outcome(message)
        if error_type is None and error is not None:
            error_type = error
            description = why[:256] if why else None
        ids = None
        if self._span is not None:
            if self._logged:
                ids = telemetry.otel.trace_ids(self._span)
            telemetry.otel.end(self._span, self._token, error_type, status_code, description)
            self._span = None
        histogram = telemetry._operations.get(self._incoming)
        if self._metering or histogram is not None:
            attributes = metric_attributes(self.attributes, error_type, status_code, telemetry.known)
            for key in ("mcp.protocol.version", "network.transport", "network.protocol.name",
                        "server.address", "server.port"):  # fmt: skip
                if key in self.attributes:
                    attributes[key] = self.attributes[key]
            if self._metering:
                telemetry.otel.operation_duration[self._incoming].record(duration, attributes)
            if histogram is not None:
                histogram.observe(duration, attributes)
        if self._logged:
            self._log(duration, error_type, ids)

    def _log(self, duration: float, error_type: str | None, ids: tuple[str, str] | None) -> None:
        attributes = self.attributes
        record: dict[str, Any] = {
            "method": attributes["mcp.method.name"],
            "status": error_type or "ok",
            "duration_ms": round(duration * 1000, 3),
        }
        target = (
            attributes.get("gen_ai.tool.name")
            or attributes.get("gen_ai.prompt.name")
            or attributes.get("mcp.resource.uri")
        )
        if target is not None:
            record["target"] = target
        if "jsonrpc.request.id" in attributes:
            record["request_id"] = attributes["jsonrpc.request.id"]
        if "mcp.protocol.version" in attributes:
            record["protocol_version"] = attributes["mcp.protocol.version"]
        record["transport"] = self.carrier.protocol or self.carrier.transport
        if self.session_id is not None:
            record["session"] = identity_hash(self.session_id)
        identify = self.telemetry.identify
        if self.principal is not None and identify is not None:
            record["principal"] = identity_hash(identify(self.principal))
        if self.client_session_id is not None:
            record["client_session_id"] = self.client_session_id
        if ids is not None:
            record["trace_id"], record["span_id"] = ids
        request_logger.info(  # the names as text lines can carry them; the JSON fields keep them as sent
            "%s %s %s %.1f ms%s",
            printable(record["method"]),
            printable(target) if target else "-",
            record["status"],
            duration * 1000,
            "" if self.client_session_id is None else f" client_session={printable(self.client_session_id)}",
            extra={"mcp": record},
        )

    def fail(self, exc: BaseException) -> None:
        """The operation ended by ``exc`` (cancelled, or a failure the caller did not answer)."""
        name = "cancelled" if isinstance(exc, trio.Cancelled) else type(exc).__qualname__
        self.finish(None, name)


class SessionClock:
    """One session being timed (see :meth:`Telemetry.session`)."""

    __slots__ = ("_metering", "_started", "attributes", "telemetry")

    def __init__(self, telemetry: Telemetry, carrier: Carrier, metering: bool) -> None:
        self.telemetry = telemetry
        self._metering = metering
        self.attributes: dict[str, Any] = carrier.attributes()
        self._started = time.perf_counter()

    def end(self, protocol_version: str | None, error_type: str | None = None) -> None:
        """The session ended (``error_type``: it ended by a failure, not by its peer or its expiry).
        Never raises."""
        try:
            self._end(protocol_version, error_type)
        except Exception:
            _broken("ending a session")

    def _end(self, protocol_version: str | None, error_type: str | None) -> None:
        duration = time.perf_counter() - self._started
        attributes = dict(self.attributes)
        if protocol_version is not None:
            attributes["mcp.protocol.version"] = protocol_version
        if error_type is not None:
            attributes["error.type"] = bounded_error(error_type)
        if self._metering:
            self.telemetry.otel.session_duration[self.telemetry.side].record(duration, attributes)
        if self.telemetry._sessions is not None:
            self.telemetry._sessions.observe(duration, attributes)
