"""The OpenTelemetry API, as one side of an MCP connection uses it.  Imported only when
``opentelemetry-api`` is installed (the ``otel`` extra); see :mod:`.telemetry`.

Spans and the duration histograms go to the global providers, so whatever the application (or
``opentelemetry-instrument``, or ``mcp-trio serve`` with ``OTEL_EXPORTER_OTLP_ENDPOINT``) set up
receives them.  While no tracer provider is set, no span is made at all (the API's proxy provider would
only make non-recording ones).  Trace context travels in ``params._meta`` through the global
propagator (W3C ``traceparent``/``tracestate``, and ``baggage``, by default).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, NoOpTracerProvider, ProxyTracerProvider, SpanKind, Status, StatusCode

from .conventions import Histogram, operation_histogram, session_histogram

__all__ = ["OtelInstruments", "inject"]

_SCOPE = "mcp_trio"
_VERSION = "1"
_NOT_SET = (ProxyTracerProvider, NoOpTracerProvider)
_PROXY_METERS: tuple[type, ...] = (metrics.NoOpMeterProvider,)
try:  # the API's stand-in while no meter provider is set: recording into it goes nowhere
    from opentelemetry.metrics._internal import _ProxyMeterProvider

    _PROXY_METERS += (_ProxyMeterProvider,)
except ImportError:  # pragma: no cover - another API release: measurements are then always made
    pass
_GLOBALS = hasattr(trace, "_TRACER_PROVIDER") and hasattr(_metrics_api, "_METER_PROVIDER")
"""Whether the API keeps its providers where :meth:`OtelInstruments.live` looks first."""


def _get(carrier: Mapping[str, Any], key: str) -> list[str] | None:
    value = carrier.get(key)
    return [value] if isinstance(value, str) else None


class _MetaGetter(Getter[Mapping[str, Any]]):
    """Reads trace context from a ``_meta`` object (strings only: anything else a peer sends there is
    not a header value)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        return _get(carrier, key)

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [key for key, value in carrier.items() if isinstance(value, str)]


_GETTER = _MetaGetter()


def inject(meta: MutableMapping[str, Any], span: Any = None) -> None:
    """Write the trace context of ``span`` (else the current one) into ``meta`` (``traceparent``,
    ``tracestate``, ``baggage``)."""
    propagate.inject(meta, context=None if span is None else trace.set_span_in_context(span))


class OtelInstruments:
    """The tracer and the conventions' four duration histograms, made once per process and shared by
    both sides: ``operation_duration[incoming]`` is the receiver's (``mcp.server.operation.duration``)
    for an operation this side received, the sender's (``mcp.client.operation.duration``) for one it
    sent (:func:`~.conventions.operation_histogram`); ``session_duration[side]`` is
    ``mcp.{side}.session.duration``."""

    def __init__(self) -> None:
        trace.get_tracer_provider()  # a provider named by OTEL_PYTHON_TRACER_PROVIDER is made now
        metrics.get_meter_provider()
        self.tracer = trace.get_tracer(_SCOPE, _VERSION)
        meter = metrics.get_meter(_SCOPE, _VERSION)

        def histogram(made: Histogram) -> Any:
            return meter.create_histogram(
                made.name,
                unit="s",
                description=made.description,
                explicit_bucket_boundaries_advisory=list(made.buckets),
            )

        self.operation_duration = {
            incoming: histogram(operation_histogram(incoming)) for incoming in (True, False)
        }
        self.session_duration = {side: histogram(session_histogram(side)) for side in ("server", "client")}

    @staticmethod
    def live() -> tuple[bool, bool]:
        """Whether spans and measurements go anywhere: ``(tracing, metering)``.  While neither
        provider is set (the API's globals still None: nothing set one, nor named one in
        ``OTEL_PYTHON_*_PROVIDER``, which :class:`OtelInstruments` resolved when made) this costs two
        attribute reads; a later API without those globals takes the public functions' way."""
        if _GLOBALS and trace._TRACER_PROVIDER is None and _metrics_api._METER_PROVIDER is None:
            return False, False
        return OtelInstruments.tracing(), OtelInstruments.metering()

    @staticmethod
    def tracing() -> bool:
        """Whether spans go anywhere: a tracer provider is set."""
        return not isinstance(trace.get_tracer_provider(), _NOT_SET)

    @staticmethod
    def metering() -> bool:
        """Whether measurements go anywhere: a meter provider is set."""
        return not isinstance(metrics.get_meter_provider(), _PROXY_METERS)

    def start(
        self,
        name: str,
        incoming: bool,
        attributes: dict[str, Any],
        meta: Mapping[str, Any] | None,
        current: bool = True,
    ) -> tuple[Any, object]:
        """Start the span of one operation and make it current (unless not ``current``); returns it
        and the token that :meth:`end` gives back (None if it was not made current).  ``incoming``: a
        SERVER span whose parent is the trace context in ``meta`` (the peer's CLIENT span), linked to
        the ambient context if there is one; else a CLIENT span under the ambient context."""
        links = None
        if incoming:
            parent = propagate.extract(meta, getter=_GETTER) if meta else otel_context.Context()
            ambient = trace.get_current_span().get_span_context()
            if ambient.is_valid:
                links = [Link(ambient)]
            kind = SpanKind.SERVER
        else:
            parent = None
            kind = SpanKind.CLIENT
        span = self.tracer.start_span(name, parent, kind, attributes, links)
        if not current:
            return span, None
        token = otel_context.attach(trace.set_span_in_context(span))
        return span, token

    @staticmethod
    def end(
        span: Any,
        token: object,
        error_type: str | None,
        status_code: str | None,
        description: str | None,
    ) -> None:
        try:
            if error_type is not None:
                span.set_attribute("error.type", error_type)
                span.set_status(Status(StatusCode.ERROR, description))
            if status_code is not None:
                span.set_attribute("rpc.response.status_code", status_code)
            span.end()
        finally:  # the task's context is given back whatever the span processors did
            if token is not None:
                otel_context.detach(token)  # type: ignore[arg-type]

    @staticmethod
    def trace_ids(span: Any = None) -> tuple[str, str] | None:
        """The trace and span ids (hex) of ``span`` (else the current one), for a log record; None
        without a valid span."""
        context = (trace.get_current_span() if span is None else span).get_span_context()
        if not context.is_valid:
            return None
        return format(context.trace_id, "032x"), format(context.span_id, "016x")
