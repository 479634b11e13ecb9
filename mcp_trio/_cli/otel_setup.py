"""OpenTelemetry for ``mcp-trio serve|demo``: when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces' or
metrics' own endpoint variable) is set, the SDK exports the server's spans and duration histograms over
OTLP/HTTP, as ``opentelemetry-instrument`` would set it up.

:func:`otlp_plan` reads the environment (no import of OpenTelemetry): which signals to export, or a
:class:`OtelConfigError` for what cannot be done (a protocol other than ``http/protobuf``, an exporter
other than ``otlp`` or ``none``).  :func:`start_otlp` sets up the global tracer and meter providers and
returns what flushes and shuts them down at exit, within :data:`SHUTDOWN_TIMEOUT`; without the ``otel``
extra it logs a WARNING and exports nothing.  The SDK reads every other standard variable itself
(endpoints, headers, timeouts, compression, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``,
``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``, ...).

OpenTelemetry's SDK is imported here only inside :func:`start_otlp`, and only when a plan says so.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["SHUTDOWN_TIMEOUT", "OtelConfigError", "OtlpPlan", "otlp_plan", "start_otlp"]

logger = logging.getLogger("mcp_trio.cli")

SHUTDOWN_TIMEOUT = 5.0
"""Seconds the last spans and measurements get to be exported at exit (together, traces and metrics
in parallel); past that the process exits without them."""

DEFAULT_SERVICE_NAME = "mcp-trio"
"""``service.name`` when neither ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` names one."""

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_SIGNALS = ("traces", "metrics")
_PROTOCOL = "http/protobuf"
EXTRA_MISSING = (
    "{variable} is set, but the OpenTelemetry SDK and OTLP/HTTP exporter are not installed: no traces or "
    "metrics are exported (pip install 'mcp-trio[otel]')"
)


class OtelConfigError(Exception):
    """The ``OTEL_*`` variables ask for an export mcp-trio cannot do: a usage error (exit status 2)."""


@dataclass(frozen=True)
class OtlpPlan:
    """What to export: traces, metrics, or both; ``variable`` names the variable that asked for it."""

    traces: bool
    metrics: bool
    variable: str


def _value(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def _exporters(environ: Mapping[str, str], signal: str) -> set[str]:
    """The names in ``OTEL_{SIGNAL}_EXPORTER`` (a comma-separated list, ``otlp`` when unset)."""
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    names = {name.strip().lower() for name in _value(environ, variable).split(",") if name.strip()}
    names = names or {"otlp"}
    unknown = names - {"otlp", "none"}
    if unknown:
        raise OtelConfigError(
            f"{variable}={_value(environ, variable)}: mcp-trio exports over OTLP only (otlp, or none to "
            f"export no {signal})"
        )
    return set() if "none" in names else names


def _protocol(environ: Mapping[str, str], signal: str) -> None:
    """``OTEL_EXPORTER_OTLP_{SIGNAL}_PROTOCOL`` (else ``OTEL_EXPORTER_OTLP_PROTOCOL``) is http/protobuf
    or unset: mcp-trio ships the OTLP/HTTP exporter, not the gRPC one."""
    for variable in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = _value(environ, variable)
        if value:
            if value.lower() != _PROTOCOL:
                raise OtelConfigError(
                    f"{variable}={value}: mcp-trio exports over OTLP/HTTP with protobuf only: set it "
                    f"to {_PROTOCOL} (the endpoint to the collector's HTTP port, 4318 by default) or unset it"
                )
            return


def otlp_plan(environ: Mapping[str, str]) -> OtlpPlan | None:
    """What the ``OTEL_*`` variables of ``environ`` ask to export; None for nothing (no endpoint variable
    set, ``OTEL_SDK_DISABLED=true``, or both signals' exporters ``none``).  :class:`OtelConfigError` for
    a protocol or exporter that mcp-trio does not ship."""
    if _value(environ, "OTEL_SDK_DISABLED").lower() == "true":
        return None
    general = bool(_value(environ, ENDPOINT))
    wanted: dict[str, bool] = {}
    variable = ENDPOINT
    for signal in _SIGNALS:
        own = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        asked = general or bool(_value(environ, own))
        if asked and not general:
            variable = own
        wanted[signal] = asked and bool(_exporters(environ, signal))
        if wanted[signal]:
            _protocol(environ, signal)
    if not any(wanted.values()):
        return None
    return OtlpPlan(wanted["traces"], wanted["metrics"], variable)


def start_otlp(environ: Mapping[str, str]) -> Callable[[], object] | None:
    """Set up the global tracer and meter providers that :func:`otlp_plan` asks for; return the
    function that flushes and shuts them down (call it once, at exit), or None when nothing was set up
    (nothing asked; the ``otel`` extra missing: then a WARNING says so; or providers set before, which
    are left as they are).  :class:`OtelConfigError` as :func:`otlp_plan`.

    ``environ`` decides the plan; the SDK reads its own variables from ``os.environ`` (the command
    passes ``os.environ``)."""
    plan = otlp_plan(environ)
    if plan is None:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        logger.warning(EXTRA_MISSING.format(variable=plan.variable))
        return None
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME and the SDK's own
    if str(resource.attributes.get(SERVICE_NAME, "unknown_service")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    shutdowns: list[Callable[[], object]] = []
    exported = []
    traces, metered = _providers_set()
    for signal, already in (("traces", traces), ("metrics", metered)):
        if getattr(plan, signal) and already:
            logger.info(
                "%s: a provider is set already (opentelemetry-instrument?): it is left as it is", signal
            )
    if plan.traces and not traces:
        exported.append("traces")
        tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(tracer_provider)
        shutdowns.append(tracer_provider.shutdown)  # its batch processor exports what it holds
    if plan.metrics and not metered:
        exported.append("metrics")
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        meter_provider = MeterProvider(metric_readers=[reader], resource=resource, shutdown_on_exit=False)
        metrics.set_meter_provider(meter_provider)
        # its reader collects and exports once more
        shutdowns.append(functools.partial(meter_provider.shutdown, timeout_millis=SHUTDOWN_TIMEOUT * 1000))
    if not exported:
        return None
    logger.info("exporting %s over OTLP/HTTP (%s)", " and ".join(exported), plan.variable)
    return functools.partial(shut_down, shutdowns, SHUTDOWN_TIMEOUT)


def _providers_set() -> tuple[bool, bool]:
    """Whether a tracer provider, and a meter provider, were set before mcp-trio's (by
    ``opentelemetry-instrument``'s distro, or a ``sitecustomize``): the API lets the first one stay."""
    from opentelemetry import metrics, trace

    try:
        from opentelemetry.metrics._internal import _ProxyMeterProvider as ProxyMeterProvider
    except ImportError:  # pragma: no cover - another API release: take the meter provider as unset
        return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider), False
    return (
        not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider),
        not isinstance(metrics.get_meter_provider(), ProxyMeterProvider),
    )


def shut_down(shutdowns: list[Callable[[], object]], timeout: float) -> bool:
    """Run ``shutdowns`` (the providers' shutdown: each exports what it holds) in parallel, each in a
    daemon thread of its own, waiting at most ``timeout`` seconds in all: an exporter stuck on an
    unreachable collector does not hold the process (the SDK's own shutdown may wait 30 s and more).
    Whether all finished in time (else a WARNING says what was given up)."""
    threads = [
        threading.Thread(target=shutdown, name="mcp-trio OpenTelemetry shutdown", daemon=True)
        for shutdown in shutdowns
    ]
    end = time.monotonic() + timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    if any(thread.is_alive() for thread in threads):
        logger.warning(
            "OpenTelemetry: the last spans or measurements were not exported within %g s of shutdown "
            "(is the collector reachable?); exiting without them",
            timeout,
        )
        return False
    return True
