"""One OpenTelemetry SDK for the whole test process, and fixtures that read what it recorded.

OpenTelemetry's global providers can be set once per process, so ``tests/conftest.py`` installs them
when the session starts (with the ``otel`` extra installed): every test then runs with tracing and
metrics on, which exercises the instrumentation under everything the suite does.  Spans are kept only
while a test holds the :func:`spans` fixture; :func:`metric_points` reads the measurements made since
it was taken (delta temporality).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

__all__ = ["MetricPoint", "install", "metric_points", "spans"]


class _Capture(SpanExporter):
    """Keeps the spans that end while a test captures; drops the rest."""

    def __init__(self) -> None:
        self.active = False
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.active:
            self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.active = False


_CAPTURE = _Capture()
_READER = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
_installed = False


def install() -> None:
    """Set the process's tracer and meter providers (once)."""
    global _installed
    if _installed:
        return
    _installed = True
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_CAPTURE))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))


@dataclass
class MetricPoint:
    name: str
    unit: str
    attributes: dict[str, Any]
    count: int
    sum: float
    bounds: tuple[float, ...]


def _collect() -> list[MetricPoint]:
    data = _READER.get_metrics_data()
    points: list[MetricPoint] = []
    if data is None:
        return points
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points.append(
                        MetricPoint(
                            metric.name,
                            metric.unit or "",
                            dict(point.attributes or {}),
                            getattr(point, "count", 0),
                            getattr(point, "sum", 0.0),
                            tuple(getattr(point, "explicit_bounds", ())),
                        )
                    )
    return points


@pytest.fixture
def spans() -> Iterator[list[ReadableSpan]]:
    """The spans ended during the test (in the order they ended)."""
    install()
    _CAPTURE.spans.clear()
    _CAPTURE.active = True
    try:
        yield _CAPTURE.spans
    finally:
        _CAPTURE.active = False
        _CAPTURE.spans.clear()


@pytest.fixture
def metric_points() -> Iterator[Any]:
    """A function returning the measurements made since the fixture was taken (or last called)."""
    install()
    _collect()  # what earlier tests measured
    yield _collect
