"""Every trio test runs under a deadline: a deadlock fails fast instead of hanging CI.

The default is 30 s (virtual seconds under the autojump clock); ``@pytest.mark.deadline(S)`` changes it.

Under the test command (``MCP_TRIO_REQUIRE_ALL``, see ``tests/required.py``) a skip is a failure unless
its reason says the test does not apply here (``tests.required.not_applicable``): a component that is
missing, or a skip nobody meant to keep, cannot leave a guarantee untested with the run still green.

The OpenTelemetry fixtures ``spans`` and ``metric_points`` (tests/otel.py) are registered here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import trio

import mcp_trio  # noqa: F401 - xdist's controlling process too: else coverage warns it saw no mcp_trio
from tests import otel
from tests.otel import metric_points, spans  # noqa: F401 - the OpenTelemetry fixtures (tests/otel.py)
from tests.required import NOT_APPLICABLE, REQUIRE_ALL, required

DEFAULT_DEADLINE = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "deadline(seconds): fail the trio test after this many seconds")
    otel.install()  # every test runs traced and measured (see tests/otel.py)


def _with_deadline(fn: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        with trio.fail_after(seconds):
            return await fn(*args, **kwargs)

    return run


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fn = getattr(item, "obj", None)
        if isinstance(item, pytest.Function) and fn is not None and inspect.iscoroutinefunction(fn):
            marker = item.get_closest_marker("deadline")
            item.obj = _with_deadline(fn, marker.args[0] if marker else DEFAULT_DEADLINE)


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _fail_unless_applicable(report: pytest.CollectReport | pytest.TestReport) -> None:
    """Under the test command, a skip whose reason is not ``not_applicable(...)`` becomes a failure."""
    if not report.skipped or hasattr(report, "wasxfail") or not required():
        return
    reason = _skip_reason(report)
    if reason.startswith(NOT_APPLICABLE):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under the test command ({REQUIRE_ALL} or CI is set), where every test must run: {reason}"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report: pytest.TestReport = yield
    _fail_unless_applicable(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report: pytest.CollectReport = yield
    _fail_unless_applicable(report)
    return report
