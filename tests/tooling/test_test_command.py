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
