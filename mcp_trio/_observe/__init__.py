"""Observability: what a request, a session and a connection tell the world about themselves.

The MCP semantic conventions of OpenTelemetry (spans, the four duration histograms, trace context in
``params._meta``) as data (:mod:`.conventions`); the instruments one side of a connection records into
(:mod:`.telemetry`): OpenTelemetry when ``opentelemetry-api`` is installed and a provider is set
(:mod:`.otel`, imported only then), the Prometheus registry of an operations listener
(:mod:`.prometheus`, standard library only) and the structured request log (:mod:`.logs`).

With none of them in use an operation costs one attribute test: :meth:`.Telemetry.operation` returns
None and the caller records nothing.
"""
