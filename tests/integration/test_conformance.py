"""The official MCP conformance suite, server mode, against one running ``mcp-trio demo``.

Three runs against the same server process (scripts/conformance.sh): 0.1.16 with ``--suite all`` (32
scenarios, pending ones included), 0.2.0-alpha.12 with ``--suite all --spec-version 2025-11-25`` (33)
and 0.2.0-alpha.12 with ``--suite all --spec-version 2026-07-28`` (40).  No expected-failures list:
every check must pass and no warning may appear.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import trio
from mcp_http import DemoServer, fetch_stats
from tests.required import missing

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "conformance.sh"
SUMMARY = re.compile(
    r"conformance (?P<version>\S+): (?P<clean>\d+)/(?P<total>\d+) scenarios clean; "
    r"checks ok=(?P<ok>\d+) failed=(?P<failed>\d+) warnings=(?P<warnings>\d+)"
)
RUNS = [
    ([], {"0.1.16": 32, "0.2.0-alpha.12": 33}),
    (["--version", "0.2.0-alpha.12", "--spec-version", "2026-07-28"], {"0.2.0-alpha.12": 40}),
    # every scenario of the alpha (no --spec-version filter): the extension ones (tasks-*) too
    (["--version", "0.2.0-alpha.12", "--every-spec-version"], {"0.2.0-alpha.12": 65}),
]
TASK_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
SKIPPED_BY_THE_SUITE = {"tasks-status-notifications"}
"""Scenarios the suite itself always reports as skipped (one SKIPPED check, nothing run)."""
SCENARIO_LINE = re.compile(
    r"^(?P<mark>ok  |warn|FAIL) (?P<name>\S+)  \((?P<ok>\d+) ok, (?P<failed>\d+) failed, "
    r"(?P<warnings>\d+) warnings(?:, (?P<skipped>\d+) skipped)?\)$",
    re.MULTILINE,
)


def suite_installed() -> bool:
    installed = (ROOT / ".node22").is_dir() and (ROOT / ".conformance").is_dir()
    return installed and shutil.which("npm") is not None


async def run_clean(url: str, extra: list[str], expected: dict[str, int]) -> str:
    """Run the suite (``scripts/conformance.sh server URL *extra``): every version in ``expected`` ran
    its number of scenarios, each clean (every check passed, no warning).  Returns the output."""
    result = await trio.run_process(
        ["bash", str(SCRIPT), "server", url, *extra],
        capture_stdout=True,
        stderr=subprocess.STDOUT,
        check=False,
    )
    output = result.stdout.decode(errors="replace")
    summaries = {m["version"]: m for m in SUMMARY.finditer(output)}
    tail = output[-4000:]
    assert set(summaries) == set(expected), tail
    for version, found in summaries.items():
        assert int(found["total"]) == expected[version], (version, tail)
        assert found["clean"] == found["total"], (version, tail)
        assert found["failed"] == "0" and found["warnings"] == "0", (version, tail)
        assert int(found["ok"]) > 0
    assert result.returncode == 0, tail
    return output


async def assert_idle(server: DemoServer) -> None:
    """No stream left open, no handler left running."""
    with trio.fail_after(5):
        while True:
            stats = await fetch_stats(server)
            if stats["connections"] == 0 and stats["inflight"] == 0:
                break
            await trio.sleep(0.05)


@pytest.mark.deadline(300)
async def test_conformance_suite_both_eras_one_server(demo_server: DemoServer) -> None:
    if not suite_installed():
        missing("the conformance suite is not installed: run scripts/conformance.sh install")
    for extra, expected in RUNS:
        output = await run_clean(demo_server.url, extra, expected)
        tail = output[-4000:]
        if "--every-spec-version" in extra:
            lines = {m["name"]: m for m in SCENARIO_LINE.finditer(output)}
            for name in TASK_SCENARIOS:
                found = lines.get(name)
                assert found is not None and found["mark"] == "ok  ", (name, tail)
                if name in SKIPPED_BY_THE_SUITE:
                    assert found["ok"] == "0" and found["skipped"] == "1", (name, tail)
                else:
                    assert int(found["ok"]) > 0 and found["skipped"] is None, (name, tail)
    await assert_idle(demo_server)  # the server is healthy afterwards
