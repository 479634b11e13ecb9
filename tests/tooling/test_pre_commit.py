"""The pre-commit hooks run the checks of the test command, with the same commands: what passes before a
commit passes in CI, and what CONTRIBUTING.md tells to run is what the hooks run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _hooks() -> dict[str, dict[str, Any]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks: dict[str, dict[str, Any]] = {}
    for repo in config["repos"]:
        assert repo["repo"] == "local", repo  # nothing downloaded: the tools of the environment
        for hook in repo["hooks"]:
            assert hook["language"] == "system", hook
            assert hook["pass_filenames"] is False, hook  # each check covers the whole tree, as in CI
            hooks[hook["id"]] = hook
    return hooks


def _test_command_checks() -> dict[str, str]:
    """The checks scripts/test.sh runs before pytest: ``echo "== name"; command``."""
    text = (ROOT / "scripts" / "test.sh").read_text()
    return dict(re.findall(r'^echo "== ([\w-]+)"; (.+)$', text, re.M))


def test_the_test_command_runs_the_checks_contributing_md_names() -> None:
    assert set(_test_command_checks()) == {"ruff", "mypy", "lint-imports", "docs"}


def test_each_check_of_the_test_command_is_a_hook_with_the_same_command() -> None:
    hooks = _hooks()
    for name, command in _test_command_checks().items():
        assert name in hooks, f"scripts/test.sh runs {name!r}; .pre-commit-config.yaml has no hook for it"
        assert hooks[name]["entry"] == command, name


def test_the_quick_tests_hook_runs_pytest_on_paths_that_exist() -> None:
    entry = shlex.split(_hooks()["quick-tests"]["entry"])
    assert entry[:3] == ["python3", "-m", "pytest"]
    paths = [word.removeprefix("--ignore=") for word in entry[3:] if not word.startswith("-") or "=" in word]
    paths = [path for path in paths if path.startswith("tests")]
    assert paths
    for path in paths:
        assert (ROOT / path).exists(), path
    # the test command runs pytest with the same plugins switched off
    assert "-p no:cacheprovider -p no:benchmark" in (ROOT / "scripts" / "test.sh").read_text()
    assert "-p no:cacheprovider -p no:benchmark" in " ".join(entry)


def test_contributing_md_shows_the_quick_tests_and_every_check() -> None:
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    hooks = _hooks()
    assert hooks["quick-tests"]["entry"] in contributing
    for command in _test_command_checks().values():
        assert f"`{command}`" in contributing, command
