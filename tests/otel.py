"""OpenTelemetry for the tests: the SDK's in-memory exporters behind the fixtures ``spans`` and
``metric_points`` (registered in ``tests/conftest.py``).

A process can set OpenTelemetry's global providers once, so one ``TracerProvider`` (a
``SimpleSpanProcessor`` into an ``InMemorySpanExporter``) and one ``MeterProvider`` (an
``InMemoryMetricReader`` with delta temporality) serve the whole test process.  ``tests/conftest.py``
sets them when the session starts (:func:`install`), so every test runs traced and measured: the
instrumentation is exercised under everything the suite does (hostile peers included), the same way in
every test process whatever order the tests run in.  Only the tests that ask keep anything: spans are
exported only while such a test runs, and each fixture starts empty (what was recorded before the test
is dropped).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.required import missing

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["MetricLog", "Point", "SpanLog", "install", "metric_points", "spans"]


@dataclass
class _Providers:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    keeping: list[bool]  # [True] while a test that asked for spans runs


_providers: _Providers | None = None


def install() -> None:
    """Set the process's providers now (``tests/conftest.py`` does, when the session starts)."""
    _install()


def _install() -> _Providers:
    """Set the process's global tracer and meter providers (once)."""
    global _providers
    if _providers is not None:
        return _providers
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import Histogram, MeterProvider
        from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        missing("the OpenTelemetry SDK is not installed (pip install -e '.[otel]')")
    keeping = [False]

    class Gated(SimpleSpanProcessor):
        """Exports only while a test that asked for spans runs (the others would only fill memory)."""

        def on_end(self, span: ReadableSpan) -> None:
            if keeping[0]:
                super().on_end(span)

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(Gated(exporter))
    reader = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    _providers = _Providers(exporter, reader, keeping)
    return _providers


class SpanLog:
    """The spans finished since the test began."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    def finished(self) -> list[ReadableSpan]:
        return list(self._exporter.get_finished_spans())

    def __iter__(self) -> Iterator[ReadableSpan]:
        return iter(self.finished())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.finished() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        """The one span called ``name`` (an assertion error if there are none or several)."""
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r} among {[s.name for s in self.finished()]}"
        return found[0]

    def clear(self) -> None:
        self._exporter.clear()


@dataclass(frozen=True)
class Point:
    """One histogram data point: its metric, its attributes, how many measurements and their sum."""

    metric: str
    attributes: Mapping[str, Any]
    count: int
    sum: float
    bounds: tuple[float, ...]
    unit: str = ""

    @property
    def name(self) -> str:
        return self.metric


class MetricLog:
    """The histogram points recorded since the test began (the reader's delta points, accumulated:
    each collection adds what was recorded since the one before)."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader
        self._points: list[Point] = []

    def _collect(self) -> None:
        data = self._reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in getattr(metric.data, "data_points", ()):
                        if not hasattr(point, "bucket_counts"):
                            continue  # only histograms are recorded
                        self._points.append(
                            Point(
                                metric.name,
                                dict(point.attributes or {}),
                                point.count,
                                point.sum,
                                tuple(point.explicit_bounds),
                                metric.unit or "",
                            )
                        )

    def __call__(self, metric: str | None = None) -> list[Point]:
        """The points of ``metric`` (every metric's if None) recorded since the test began."""
        self._collect()
        return [point for point in self._points if metric is None or point.metric == metric]

    def drop(self) -> None:
        """Forget what was recorded so far."""
        self._collect()
        self._points.clear()


@pytest.fixture
def spans() -> Iterator[SpanLog]:
    """The spans finished during the test (a tracer provider is set for the process)."""
    providers = _install()
    providers.exporter.clear()
    providers.keeping[0] = True
    try:
        yield SpanLog(providers.exporter)
    finally:
        providers.keeping[0] = False
        providers.exporter.clear()


@pytest.fixture
def metric_points() -> MetricLog:
    """The histogram points recorded during the test (a meter provider is set for the process); call it
    with a metric's name."""
    log = MetricLog(_install().reader)
    log.drop()
    return log
