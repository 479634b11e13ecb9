"""``mcp-trio demo`` with OpenTelemetry on or without it, for ``bench_callgrind.py``'s cost of telemetry.

    python3 benchmarks/otel_demo.py traced|absent demo --bind 127.0.0.1:0

``traced``: a tracer provider with a batch span processor and a meter provider with a reader (both
keep what they are given in memory and export nowhere: the cost measured is the instrumentation's and
the SDK's, not a network's).  ``absent``: ``opentelemetry`` cannot be imported in this process (as
without the ``otel`` extra).  Then the CLI runs with the remaining arguments.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


class _NoOpenTelemetry:
    """A meta path finder refusing ``opentelemetry`` and its submodules."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is blocked (benchmarks/otel_demo.py absent)")
        return None


def _traced() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def main() -> None:
    mode, *rest = sys.argv[1:]
    if mode == "traced":
        _traced()
    elif mode == "absent":
        sys.meta_path.insert(0, _NoOpenTelemetry())  # type: ignore[arg-type]
    else:
        raise SystemExit(f"mode must be traced or absent, not {mode!r}")
    from mcp_trio._cli import main as cli

    cli(rest)


if __name__ == "__main__":
    main()
