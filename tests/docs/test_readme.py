"""The README's quick start, as a newcomer types it: its commands are the ones that work.

The install itself (a fresh venv, the package without its dev tools) is exercised by
tests/integration/test_wheel.py, which also runs these commands from the installed wheel; here the quick
start's shell lines run against a demo server that ``mcp-trio demo`` started, on a free port instead of
8000."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def _sh_lines(text: str) -> list[str]:
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [line.strip() for line in block.splitlines() if line.strip()]
    return lines


QUICK_START = _sh_lines(_section("Quick start (fresh machine)"))


def _mcp_trio() -> list[str]:
    """``mcp-trio`` as installed beside this interpreter (the README's venv puts it on PATH)."""
    script = Path(sys.executable).parent / "mcp-trio"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from mcp_trio._cli import main; main()"]


@pytest.fixture(scope="module")
def demo_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [*_mcp_trio(), "demo", "--bind", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        match = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", proc.stdout.readline())
        assert match, "the demo did not print its URL"
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=15)
    assert proc.returncode == 0


def test_quick_start_installs_in_a_venv_and_starts_the_demo() -> None:
    first = QUICK_START[0]
    steps = [step.strip() for step in first.split("&&")]
    assert steps[0].startswith("python3 -m venv ")
    assert any(step.startswith(". ") and step.endswith("/bin/activate") for step in steps)
    assert "pip install -e ." in steps  # the runtime dependencies only, no dev group
    assert steps[-1] == "mcp-trio demo"
    wanted = re.search(r"Python 3\.(\d+) or newer", README)
    assert wanted and f">=3.{wanted.group(1)}" in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("line", [line for line in QUICK_START if line.startswith("mcp-trio ")])
def test_quick_start_command_works(line: str, demo_url: str) -> None:
    argv = shlex.split(line.replace("http://127.0.0.1:8000/mcp", demo_url))
    done = subprocess.run([*_mcp_trio(), *argv[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    if argv[1] == "call" and argv[3] == "add":
        assert "5" in done.stdout  # a=2, b=3


def test_readme_names_the_test_command_that_ci_runs() -> None:
    assert _sh_lines(_section("The test suite")) == ["bash scripts/test.sh"]
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def _python_block(title: str) -> str:
    (code,) = re.findall(r"```python\n(.*?)```", _section(title), re.S)
    return str(code)


def test_your_own_server_prints_its_url_and_drains_on_sigterm(tmp_path: Path) -> None:
    """The "Your own server" program as a user runs it (on a free port instead of 8000): it prints where
    it listens; SIGTERM while a call is in flight drains it: a new call is refused, the one in flight
    (shorter than the grace) gets its answer, and the program exits by itself with status 0."""
    import httpx

    script = tmp_path / "weather.py"
    script.write_text(_python_block("Your own server").replace('"127.0.0.1", 8000', '"127.0.0.1", 0'))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        match = re.fullmatch(r"serving on (http://127\.0\.0\.1:\d+)(/mcp)?\n", proc.stdout.readline())
        assert match, "the program did not print its URL"
        url = match.group(1) + "/mcp"
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        info = {"name": "t", "version": "1"}
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}

        def forecast(request_id: int, days: int) -> dict[str, object]:
            params = {"name": "forecast", "arguments": {"city": "Paris", "days": days}}
            return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

        with httpx.Client(timeout=20) as http:
            opened = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                               headers=headers)  # fmt: skip
            assert opened.status_code == 200, opened.text
            headers = {**headers, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}  # fmt: skip
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert http.post(url, json=initialized, headers=headers).status_code == 202
            with http.stream("POST", url, json=forecast(2, 10), headers=headers) as call:  # a 1 s call
                lines = call.iter_lines()
                assert next(lines).startswith(("id:", "data:"))  # its SSE stream has started: in flight
                proc.send_signal(signal.SIGTERM)
                for request_id in range(3, 300):  # refused once the server stops admitting
                    refused = http.post(url, json=forecast(request_id, 0), headers=headers)
                    if refused.status_code == 503:
                        break
                assert refused.headers["retry-after"] == "1"
                assert refused.json()["error"] == {"code": -32000, "message": "Server shutting down"}
                assert "Paris: sunny for 10 days" in "\n".join(lines)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
