"""The README's test command says plainly what it cannot run without, before installing anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _path_without_npm(tmp_path: Path) -> str:
    """A PATH with the tools the script's preflight uses, and no npm."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    for tool in ("bash", "dirname", "id", "sudo", "nginx"):
        found = shutil.which(tool) or (f"/usr/sbin/{tool}" if os.path.exists(f"/usr/sbin/{tool}") else None)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_npm_the_test_command_stops_and_says_so(tmp_path: Path) -> None:
    path = _path_without_npm(tmp_path)
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(ROOT / "scripts" / "test.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": path, "HOME": str(tmp_path)},
    )
    assert done.returncode == 1, done
    assert "cannot run the test suite; missing:" in done.stderr
    assert "npm" in done.stderr
    assert "== install" not in done.stdout  # nothing was installed


def test_install_scripts_fail_loudly(tmp_path: Path) -> None:
    """No install step swallows its failure: every script runs with `set -euo pipefail` and none
    pipes an install into a filter that hides its exit status."""
    for script in ("test.sh", "node22.sh", "install-node-deps.sh", "conformance.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert "set -euo pipefail" in text, script
        assert "|| true" not in text, script


def test_node22_without_npm_says_what_to_install(tmp_path: Path) -> None:
    """In a tree with no Node yet (a copy of the script in an empty checkout), no npm means a plain
    message and exit 1."""
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    script = tmp_path / "repo" / "scripts" / "node22.sh"
    shutil.copy(ROOT / "scripts" / "node22.sh", script)
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": _path_without_npm(tmp_path), "HOME": str(tmp_path)},
    )
    assert done.returncode == 1, done
    assert "npm not found" in done.stderr and "install it first" in done.stderr
    assert not (tmp_path / "repo" / ".node22").exists()


# -- a missing component fails under the test command -------------------------------------------------

SHIM = "#!/bin/sh\n{body}\n"


def _shimmed_path(tmp_path: Path, log: Path) -> str:
    """A PATH on which scripts/test.sh finds every tool it checks for, but where python3 runs nothing:
    it only notes each of its command lines with the two variables that steer the tests (`-c` snippets,
    the script's version check, run for real); the install scripts it runs with bash do nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bash = shutil.which("bash") or "/bin/bash"
    shims = {
        "python3": (
            f'case "$1" in -c) exec {sys.executable} "$@";; esac\n'
            f'echo "$* | REQUIRE_ALL=${{MCP_TRIO_REQUIRE_ALL-}} HTTP=${{MCP_TRIO_TEST_HTTP-}}" >> {log}'
        ),
        "bash": f'case "$1" in scripts/*) exit 0;; esac\nexec {bash} "$@"',
        **{
            tool: "exit 0"
            for tool in (
                "npm",
                "nginx",
                "caddy",
                "haproxy",
                "redis-server",
                "chromium",
                "prometheus",
                "lint-imports",
            )
        },
    }
    for name, body in shims.items():
        (bin_dir / name).write_text(SHIM.format(body=body))
        (bin_dir / name).chmod(0o755)
    for tool in ("dirname", "id", "tail"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def _lowest_venv(tmp_path: Path, log: Path) -> Path:
    """A stand-in for the venv of the lowest dependencies, whose python only notes its command lines."""
    venv = tmp_path / "lowest"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    note = f'echo "lowest: $* | REQUIRE_ALL=${{MCP_TRIO_REQUIRE_ALL-}}" >> {log}'
    python.write_text(SHIM.format(body=note))
    python.chmod(0o755)
    return venv


def test_the_test_command_runs_pytest_requiring_every_component(tmp_path: Path) -> None:
    """Every pytest pass of scripts/test.sh runs with MCP_TRIO_REQUIRE_ALL=1, whoever runs it (no CI
    variable given here): both HTTP servers' passes, and the quick tests with the lowest dependencies."""
    log = tmp_path / "python3.log"
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(ROOT / "scripts" / "test.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": _shimmed_path(tmp_path, log),
            "HOME": str(tmp_path),
            "MCP_TRIO_LOWEST_VENV": str(_lowest_venv(tmp_path, log)),
        },
    )
    assert done.returncode == 0, done
    lines = log.read_text().splitlines()
    runs = [line for line in lines if line.startswith("-m coverage run -m pytest")]
    assert len(runs) == 2, log.read_text()
    assert runs[0].endswith(" REQUIRE_ALL=1 HTTP="), runs
    assert runs[1].endswith(" REQUIRE_ALL=1 HTTP=h11"), runs
    lowest = [line for line in lines if line.startswith("lowest: -m pytest")]
    assert len(lowest) == 1 and lowest[0].endswith(" REQUIRE_ALL=1"), log.read_text()
    # the lowest versions come from pyproject.toml, for the package and every extra
    assert any(line.startswith("scripts/lowest_deps.py") for line in lines), lines
    assert any("--group test" in line and "-e .[auth,redis,otel]" in line for line in lines), lines


SAMPLE_TESTS = {
    "test_missing.py": """
from tests.required import missing

def test_missing():
    missing("frobnicator is not installed")
""",
    "test_plain_skip.py": """
import pytest

def test_plain_skip():
    pytest.skip("frobnicator is not installed")

@pytest.mark.skipif(True, reason="no frobnicator")
def test_skipif():
    pass
""",
    "test_module_skip.py": """
import pytest

pytest.skip("no frobnicator at all", allow_module_level=True)

def test_never():
    pass
""",
    "test_not_applicable.py": """
import pytest
from tests.required import not_applicable

@pytest.mark.skipif(True, reason=not_applicable("another platform"))
def test_elsewhere():
    pass

def test_other_pass():
    pytest.skip(not_applicable("the other pass"))
""",
}


def _run_sample(tmp_path: Path, **variables: str) -> tuple[dict[str, str], list[str]]:
    """The sample tests above under the suite's own hooks (tests/conftest.py): the outcome of each test
    or module that did not skip, and the reasons of the skips."""
    for name, text in SAMPLE_TESTS.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MCP_TRIO_REQUIRE_ALL", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    options = ["-p", "no:cacheprovider", "-p", "no:xdist", "-rA", "--continue-on-collection-errors"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**env, **variables},
    )
    outcomes: dict[str, str] = {}
    skipped: list[str] = []
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            outcomes[rest.split(" ")[0]] = word
        elif word == "SKIPPED":  # SKIPPED [1] where:line: reason
            skipped.append(rest.split(": ", 1)[1])
    return outcomes, sorted(skipped)


def test_a_missing_component_fails_under_the_test_command(tmp_path: Path) -> None:
    """Under MCP_TRIO_REQUIRE_ALL a missing component, a plain skip, a skipif and a module-level skip all
    fail; only the reasons made with not_applicable() still skip."""
    outcomes, skipped = _run_sample(tmp_path, MCP_TRIO_REQUIRE_ALL="1")
    assert outcomes == {
        "test_missing.py::test_missing": "FAILED",
        "test_plain_skip.py::test_plain_skip": "FAILED",
        "test_plain_skip.py::test_skipif": "ERROR",  # in its setup
        "test_module_skip.py": "ERROR",  # in collection
    }, outcomes
    assert skipped == ["not applicable here: another platform", "not applicable here: the other pass"]


def test_by_hand_a_missing_component_skips(tmp_path: Path) -> None:
    outcomes, skipped = _run_sample(tmp_path)
    assert outcomes == {}
    assert skipped == [
        "frobnicator is not installed",
        "frobnicator is not installed",
        "no frobnicator",
        "no frobnicator at all",
        "not applicable here: another platform",
        "not applicable here: the other pass",
    ]


def test_no_test_decides_by_itself_to_skip_for_a_missing_component() -> None:
    """No importorskip (the dev group is installed, or the install is broken) and no CI checks of their
    own: a missing component goes through tests/required.py."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name == "required.py" or path == Path(__file__).resolve():
            continue
        text = path.read_text()
        for needle in ("importorskip", 'environ.get("CI"', "environ['CI']", 'environ["CI"]'):
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert offenders == []
