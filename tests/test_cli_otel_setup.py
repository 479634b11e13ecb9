"""What ``mcp-trio serve|demo`` makes of the ``OTEL_*`` variables (``otel_setup.otlp_plan``: which signals
to export, or the usage error of an export it cannot do), and the bounded shutdown of the providers.
The export itself, against a receiver, is tests/integration/test_cli_otel.py."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pytest

from mcp_trio._cli.otel_setup import ENDPOINT, OtelConfigError, OtlpPlan, otlp_plan, shut_down

COLLECTOR = "http://127.0.0.1:4318"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"


@pytest.mark.parametrize(
    ("environ", "plan"),
    [
        ({}, None),
        ({ENDPOINT: ""}, None),
        ({ENDPOINT: "  "}, None),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, None),  # nothing asked: nothing checked
        ({ENDPOINT: COLLECTOR}, OtlpPlan(True, True, ENDPOINT)),
        (
            {ENDPOINT: COLLECTOR, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            OtlpPlan(True, True, ENDPOINT),
        ),
        (
            {ENDPOINT: COLLECTOR, "OTEL_EXPORTER_OTLP_PROTOCOL": "HTTP/Protobuf"},
            OtlpPlan(True, True, ENDPOINT),
        ),
        ({TRACES_ENDPOINT: COLLECTOR + "/v1/traces"}, OtlpPlan(True, False, TRACES_ENDPOINT)),
        ({METRICS_ENDPOINT: COLLECTOR + "/v1/metrics"}, OtlpPlan(False, True, METRICS_ENDPOINT)),
        ({ENDPOINT: COLLECTOR, "OTEL_TRACES_EXPORTER": "none"}, OtlpPlan(False, True, ENDPOINT)),
        ({ENDPOINT: COLLECTOR, "OTEL_METRICS_EXPORTER": "none"}, OtlpPlan(True, False, ENDPOINT)),
        ({ENDPOINT: COLLECTOR, "OTEL_METRICS_EXPORTER": "otlp"}, OtlpPlan(True, True, ENDPOINT)),
        ({ENDPOINT: COLLECTOR, "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "None"}, None),
        ({ENDPOINT: COLLECTOR, "OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, None),
        ({ENDPOINT: COLLECTOR, "OTEL_SDK_DISABLED": "false"}, OtlpPlan(True, True, ENDPOINT)),
        # a signal's own protocol wins over the general one, and a signal not exported is not checked
        (
            {
                ENDPOINT: COLLECTOR,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                "OTEL_METRICS_EXPORTER": "none",
            },
            OtlpPlan(True, False, ENDPOINT),
        ),
        (
            {TRACES_ENDPOINT: COLLECTOR, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
            OtlpPlan(True, False, TRACES_ENDPOINT),
        ),
    ],
)
def test_what_the_variables_ask_to_export(environ: dict[str, str], plan: OtlpPlan | None) -> None:
    assert otlp_plan(environ) == plan


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: mcp-trio exports over OTLP/HTTP",
        ),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json: "),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=grpc: ",
        ),
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER=jaeger: mcp-trio exports over OTLP only"),
        ({"OTEL_METRICS_EXPORTER": "otlp,prometheus"}, "OTEL_METRICS_EXPORTER=otlp,prometheus: "),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER=console: "),
    ],
)
def test_an_export_that_cannot_be_done_is_an_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(OtelConfigError) as raised:
        otlp_plan({ENDPOINT: COLLECTOR, **environ})
    assert str(raised.value).startswith(message), raised.value


def test_shutdown_waits_for_the_providers_in_parallel() -> None:
    finished: list[str] = []

    def slow(name: str) -> None:
        time.sleep(0.3)
        finished.append(name)

    started = time.monotonic()
    assert shut_down([lambda: slow("traces"), lambda: slow("metrics")], 5.0) is True
    assert sorted(finished) == ["metrics", "traces"]
    assert time.monotonic() - started < 0.6 + 0.5  # in parallel: about 0.3 s, not 0.6


def test_shutdown_gives_up_on_a_stuck_exporter_after_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="mcp_trio.cli"):
            assert shut_down([lambda: release.wait(30), lambda: None], 0.3) is False
        took = time.monotonic() - started
        assert 0.3 <= took < 2.0, took
        assert "were not exported within 0.3 s of shutdown" in caplog.text
    finally:
        release.set()  # the daemon thread ends


def test_nothing_of_the_sdk_is_imported_without_the_variables() -> None:
    code = (
        "import sys\n"
        "from mcp_trio._cli.otel_setup import start_otlp\n"
        "assert start_otlp({'OTEL_EXPORTER_OTLP_PROTOCOL': 'grpc'}) is None\n"
        "sdk = ('opentelemetry.sdk', 'opentelemetry.exporter')\n"
        "print(sorted(m for m in sys.modules if m.startswith(sdk)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
