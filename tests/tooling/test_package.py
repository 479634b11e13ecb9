"""The package's metadata and its promises, without building it (tests/integration/test_wheel.py builds
and installs it): ``python -m mcp_trio``, the dependency policy (every bound stated, the lowest ones
tested by scripts/test.sh, the documentation saying the same as pyproject.toml), development tools kept
out of the published extras, and a versioned changelog."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from mcp_trio import __version__
from mcp_trio._http import hypercorn_guard

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]

_spec = importlib.util.spec_from_file_location("lowest_deps", ROOT / "scripts" / "lowest_deps.py")
assert _spec is not None and _spec.loader is not None
lowest_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lowest_deps)


def _python_m(*args: str) -> subprocess.CompletedProcess[str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, "-m", "mcp_trio", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_python_m_mcp_trio_is_the_command() -> None:
    done = _python_m("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"mcp-trio {__version__}"
    assert PROJECT["version"] == __version__
    usage = _python_m()
    assert usage.returncode == 2 and "usage: mcp-trio" in usage.stderr, usage


def test_license_is_an_spdx_expression() -> None:
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    (requires,) = PYPROJECT["build-system"]["requires"]
    assert requires == "setuptools>=77"  # the first setuptools that writes PEP 639 metadata


def test_python_classifiers_start_at_requires_python() -> None:
    lowest = re.fullmatch(r">=3\.(\d+)", PROJECT["requires-python"])
    assert lowest is not None
    minors = sorted(
        int(m.group(1))
        for c in PROJECT["classifiers"]
        if (m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))
    )
    assert minors[0] == int(lowest.group(1)) and minors == list(range(minors[0], minors[-1] + 1))


def test_development_tools_are_groups_not_extras() -> None:
    assert set(PROJECT["optional-dependencies"]) == {"auth", "redis", "otel", "sdk"}
    groups = PYPROJECT["dependency-groups"]
    assert {"dev", "test", "docs", "bench"} <= set(groups)
    assert {"include-group": "test"} in groups["dev"] and {"include-group": "docs"} in groups["dev"]
    dev = " ".join(r for r in groups["dev"] if isinstance(r, str))
    for tool in ("mypy", "ruff", "coverage", "build", "twine", "import-linter"):
        assert re.search(rf"\b{tool}\b", dev), tool
    # the extras' packages are in dev too, for their tests
    for extra in PROJECT["optional-dependencies"].values():
        for requirement in extra:
            assert requirement in groups["dev"], requirement


# -- the dependency policy ---------------------------------------------------------------------------


def test_every_dependency_is_pinned_to_its_lower_bound_for_the_lowest_run() -> None:
    pins = dict(line.split("==") for line in lowest_deps.constraints(PYPROJECT))
    extras = PROJECT["optional-dependencies"].values()
    wanted = [*PROJECT["dependencies"], *(r for extra in extras for r in extra)]
    names = {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in wanted}
    assert set(pins) == names
    assert pins["hypercorn"] == hypercorn_guard.HYPERCORN_VERSION  # the guard's version, exactly
    assert pins["mcp-types"] == "2.2"
    assert pins["trio"] == "0.32"


def test_the_sdk_extra_installs_a_python_sdk_that_hosting_was_tested_with() -> None:
    """``pip install 'mcp-trio[sdk]'`` gets an ``mcp`` release whose seams mcp_trio fingerprints: any
    other is refused at run time (UntestedSDK), so the extra allows only tested releases, and every one."""
    from packaging.requirements import Requirement

    from mcp_trio.sdk._seams import TESTED

    (requirement,) = (Requirement(r) for r in PROJECT["optional-dependencies"]["sdk"])
    assert requirement.name == "mcp"
    assert set(requirement.specifier.filter(TESTED)) == set(TESTED)
    assert lowest_deps.lowest(str(requirement))[1] in TESTED  # the lowest run's pin is a tested one
    for release in ("2.2.0", "2.3.1", "2.4.0", "3.0.0"):  # its neighbours are refused by pip already
        assert release in TESTED or release not in requirement.specifier, release


def test_the_lowest_run_script_prints_the_constraints() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lowest_deps.py")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == lowest_deps.constraints(PYPROJECT)


@pytest.mark.parametrize(
    ("requirement", "pin"),
    [
        ("trio>=0.32", ("trio", "0.32")),
        ("mcp-types>=2.2,<2.4", ("mcp-types", "2.2")),
        ("Hypercorn==0.18.0", ("hypercorn", "0.18.0")),
        ("opentelemetry_sdk[x] ~= 1.30 ; python_version >= '3.11'", ("opentelemetry-sdk", "1.30")),
    ],
)
def test_lower_bounds_are_read(requirement: str, pin: tuple[str, str]) -> None:
    assert lowest_deps.lowest(requirement) == pin


@pytest.mark.parametrize("requirement", ["trio", "trio<1", "trio!=0.31"])
def test_a_dependency_without_a_lower_bound_is_refused(requirement: str) -> None:
    with pytest.raises(ValueError, match="no lower bound"):
        lowest_deps.lowest(requirement)


def test_two_lower_bounds_for_one_package_are_refused() -> None:
    project = {"project": {"dependencies": ["trio>=0.32"], "optional-dependencies": {"x": ["trio>=0.33"]}}}
    with pytest.raises(ValueError, match="two lower bounds"):
        lowest_deps.constraints(project)


def test_the_installation_page_states_the_policy_of_pyproject() -> None:
    page = (ROOT / "docs" / "installation.md").read_text()
    for requirement in PROJECT["dependencies"]:
        name, bound = re.fullmatch(r"([\w-]+)(.*)", requirement).groups()  # type: ignore[union-attr]
        assert name in page, name
        if name in ("hypercorn", "mcp-types", "pydantic", "trio", "jsonschema"):  # the bounds it explains
            assert f"`{bound}`" in page, requirement
    for extra in PROJECT["optional-dependencies"]:
        assert f"| `{extra}` |" in page, extra
    assert "installation\n" in (ROOT / "docs" / "index.md").read_text()  # in the toctree


def test_the_lowest_run_covers_the_quick_tests() -> None:
    """scripts/test.sh runs the quick tests (the pre-commit hook's, CONTRIBUTING.md's) with the lowest
    dependencies, all but tests/tooling (this repository's tools, not the package)."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (hook,) = [h for repo in config["repos"] for h in repo["hooks"] if h["id"] == "quick-tests"]
    quick = [w for w in shlex.split(hook["entry"]) if w.startswith(("tests", "--ignore=tests"))]
    script = (ROOT / "scripts" / "test.sh").read_text()
    command = script[script.index('"$LOWEST/bin/python" -m pytest') :].split("\nfi\n")[0]
    words = shlex.split(command.replace("\\\n", " "))
    lowest = [w for w in words if w.startswith(("tests", "--ignore=tests"))]
    assert lowest == [w for w in quick if w != "tests/tooling"]


# -- the changelog -----------------------------------------------------------------------------------


def test_the_changelog_is_versioned() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\](.*)$", text, re.M)
    assert releases[0] == ("Unreleased", "")
    version, date = releases[1]
    assert version == __version__ and re.fullmatch(r" - \d{4}-\d{2}-\d{2}", date), releases[1]
    sections = set(re.findall(r"^### (.+)$", text, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, sections
    assert not re.search(r"(?<![\w&])#\d+", text)  # no issue numbers: it speaks to users
