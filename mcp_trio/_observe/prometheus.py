"""Metrics in the Prometheus text exposition format (version 0.0.4), standard library only.

The operations listener's ``/metrics``: the MCP duration histograms, named as OpenTelemetry's
Prometheus exporter names them (``mcp.server.operation.duration`` in seconds is
``mcp_server_operation_duration_seconds``, an attribute ``mcp.method.name`` the label
``mcp_method_name``), and the gauges and counters a caller passes at render time.  Label sets are
bounded by the caller (see :func:`~.conventions.metric_attributes`) and, as a last resort, here: past
:data:`MAX_SERIES` label sets one histogram records into a single ``_OTHER`` series.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "MAX_SERIES",
    "Histogram",
    "MetricsRegistry",
    "Sample",
    "label_name",
    "render_samples",
    "seconds_name",
]

MAX_SERIES = 2000
"""Most label sets one histogram keeps."""

Sample = tuple[str, str, str, Sequence[tuple[Mapping[str, Any], float]]]
"""A gauge or counter to render: ``(name, kind, help, [(labels, value), ...])``, ``kind`` being
``"gauge"`` or ``"counter"``."""

_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def label_name(attribute: str) -> str:
    """An OpenTelemetry attribute key as a Prometheus label name (``mcp.method.name`` ->
    ``mcp_method_name``)."""
    return _NOT_LABEL.sub("_", attribute)


def seconds_name(instrument: str) -> str:
    """An OpenTelemetry instrument in seconds as OpenTelemetry's Prometheus exporter names it
    (``mcp.server.operation.duration`` -> ``mcp_server_operation_duration_seconds``)."""
    return label_name(instrument) + "_seconds"


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, object]]) -> str:
    text = ",".join(f'{name}="{_escape(value)}"' for name, value in pairs)
    return "{" + text + "}" if text else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class Histogram:
    """One histogram: cumulative buckets, sum and count per label set."""

    __slots__ = ("_series", "buckets", "help", "name")

    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.help = help
        self.buckets = tuple(buckets)
        self._series: dict[tuple[tuple[str, Any], ...], list[float]] = {}
        """attributes (as given) -> [count per bucket (not cumulative; the last one +Inf)..., sum, count]"""

    def observe(self, value: float, attributes: Mapping[str, Any]) -> None:
        key = tuple(attributes.items())  # label names and order are made when rendering
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= MAX_SERIES:
                key = (("overflow", "_OTHER"),)
                series = self._series.get(key)
            if series is None:
                series = self._series[key] = [0.0] * (len(self.buckets) + 3)
        series[bisect_left(self.buckets, value)] += 1
        series[-2] += value
        series[-1] += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        bounds = [*(_number(b) for b in self.buckets), "+Inf"]
        merged: dict[tuple[tuple[str, str], ...], list[float]] = {}
        for attributes, counts in self._series.items():  # one label set may come in several orders
            key = tuple(sorted((label_name(name), str(value)) for name, value in attributes))
            into = merged.get(key)
            if into is None:
                merged[key] = list(counts)
            else:
                for index, count in enumerate(counts):
                    into[index] += count
        for key in sorted(merged):
            series = merged[key]
            running = 0.0
            for bound, count in zip(bounds, series, strict=False):
                running += count
                lines.append(f"{self.name}_bucket{_labels([*key, ('le', bound)])} {_number(running)}")
            lines.append(f"{self.name}_sum{_labels(key)} {_number(series[-2])}")
            lines.append(f"{self.name}_count{_labels(key)} {_number(series[-1])}")
        return lines


def render_samples(samples: Iterable[Sample]) -> list[str]:
    lines: list[str] = []
    for name, kind, help, values in samples:
        lines.append(f"# HELP {name} {help}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in values:
            lines.append(f"{name}{_labels((label_name(k), v) for k, v in labels.items())} {_number(value)}")
    return lines


class MetricsRegistry:
    """The histograms an operations listener serves, by name."""

    def __init__(self) -> None:
        self.histograms: dict[str, Histogram] = {}

    def histogram(self, name: str, help: str, buckets: Sequence[float]) -> Histogram:
        found = self.histograms.get(name)
        if found is None:
            found = self.histograms[name] = Histogram(name, help, buckets)
        return found

    def render(self, samples: Iterable[Sample] = ()) -> str:
        """The text exposition of every histogram, then of ``samples``."""
        lines: list[str] = []
        for name in sorted(self.histograms):
            lines.extend(self.histograms[name].render())
        lines.extend(render_samples(samples))
        return "\n".join(lines) + "\n"
