"""A client that records its traces and metrics with OpenTelemetry (the ``otel`` extra).

Run it with ``python client_telemetry.py [URL]`` (http://127.0.0.1:8000/mcp by default) while
``mcp-trio demo`` runs.  With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set (``http://127.0.0.1:4318``, say) the
spans and metrics go to that OTLP/HTTP collector; without it they are printed as JSON.
"""

import os
import sys

import trio
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from mcp_trio import open_client_session


def exporters() -> tuple[SpanExporter, MetricExporter]:
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):  # the exporters read the OTEL_* variables
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(), OTLPMetricExporter()
    return ConsoleSpanExporter(), ConsoleMetricExporter()


# start-providers
def set_up_opentelemetry() -> tuple[TracerProvider, MeterProvider]:
    """Set the process's tracer and meter providers: mcp_trio records into whatever they export to."""
    resource = Resource.create({"service.name": "demo-agent"})
    span_exporter, metric_exporter = exporters()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=10_000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider


# end-providers


tracer = trace.get_tracer("demo-agent")


# start-main
async def main(url: str) -> None:
    # The application's own span: each request's CLIENT span is its child, and the server's
    # SERVER span the child of that (the trace context travels in params._meta).
    with tracer.start_as_current_span("answer the user"):
        async with open_client_session(url) as session:
            await session.list_tools()  # listed tools are named in the metrics' gen_ai.tool.name
            result = await session.call_tool("echo", {"text": "traced"})
            print(f"echo: {result.content[0].text}")  # type: ignore[union-attr]


# end-main


if __name__ == "__main__":
    tracer_provider, meter_provider = set_up_opentelemetry()
    try:
        trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/mcp")
    finally:  # export what is left: the last spans, and the metrics
        tracer_provider.shutdown()
        meter_provider.shutdown()
