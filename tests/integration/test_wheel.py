"""The package as a user gets it: a wheel built from this tree, installed into a fresh virtual
environment (no dev tools, no source tree on the path), runs ``mcp-trio demo`` and answers a client."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*cmd: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
    env.pop("PYTHONPATH", None)
    # Under the test command's `coverage run`, a Python subprocess measures coverage: not pip's.
    env.pop("COVERAGE_PROCESS_CONFIG", None)
    env.pop("COVERAGE_PROCESS_START", None)
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, cwd="/"
    )
    assert done.returncode == 0, f"{cmd}: {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's bin directory, with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", tmp / "dist", ROOT)
    (wheel,) = (tmp / "dist").glob("mcp_trio-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "mcp_trio/py.typed" in names
    # The hypercorn guard's expected fingerprints are package data: without them no server starts.
    assert "mcp_trio/_http/hypercorn_0_18_0.json" in names
    assert any(re.fullmatch(r"mcp_trio-[^/]+\.dist-info/(licenses/)?LICENSE", n) for n in names), names
    assert not any(n.startswith("tests/") for n in names)
    # No pip of its own (seconds to set up): this interpreter's pip installs into it (--python).
    venv.create(tmp / "venv", with_pip=False, clear=True)
    bin_dir = tmp / "venv" / "bin"
    run(sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--quiet", wheel)
    return bin_dir


def test_wheel_installs_with_only_runtime_dependencies(installed: Path) -> None:
    freeze = run(sys.executable, "-m", "pip", "--python", installed / "python", "freeze").stdout.lower()
    names = {re.split(r"==| @ ", line)[0].replace("_", "-") for line in freeze.splitlines()}
    assert {"mcp-trio", "trio", "hypercorn", "mcp-types", "httpx", "pydantic"} <= names, names
    assert not names & {"pytest", "mypy", "ruff", "hypothesis", "sphinx", "mcp"}, names
    where = run(installed / "python", "-c", "import mcp_trio; print(mcp_trio.__file__)").stdout
    assert str(ROOT) not in where and "site-packages" in where
    guard = "from mcp_trio._http.hypercorn_guard import check; print(check())"
    assert run(installed / "python", "-c", guard).stdout.strip() == "None"


def test_demo_runs_from_the_wheel(installed: Path) -> None:
    assert "demo" in run(installed / "mcp-trio", "--help").stdout
    proc = subprocess.Popen(
        [installed / "mcp-trio", "demo", "--bind", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert match, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "wheel-test", "version": "1"},
            },
        }
        response = httpx.post(
            match.group(1),
            content=json.dumps(body),
            headers={"accept": "application/json, text/event-stream", "content-type": "application/json"},
            timeout=10,
        )
        assert response.status_code == 200
        assert '"serverInfo"' in response.text and "mcp-session-id" in response.headers
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0
    assert "stopped" in out
