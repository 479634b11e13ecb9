"""Every ``console`` session in the docs runs as shown: each ``$ command`` is run in one shell per
block against a demo server, and what it prints must be what the page shows (a line ``...`` stands for
any number of lines).  Commands that start a server (``mcp-trio demo``/``serve``) are not run here:
starting them is what the fixture does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "@@mcp-trio-docs-command@@"


def _blocks() -> list[tuple[str, list[tuple[str, list[str]]]]]:
    found: list[tuple[str, list[tuple[str, list[str]]]]] = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text()
        for match in re.finditer(r"^```console\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, match.start()) + 1
            commands: list[tuple[str, list[str]]] = []
            for raw in match.group(1).splitlines():
                if raw.startswith("$ "):
                    commands.append((raw[2:], []))
                elif commands:
                    commands[-1][1].append(raw)
            runnable = [c for c in commands if not re.match(r"mcp-trio (demo|serve)\b", c[0])]
            if runnable:
                found.append((f"{page.relative_to(ROOT)}:{line}", runnable))
    return found


BLOCKS = _blocks()


def _matches(expected: list[str], got: list[str]) -> bool:
    """``expected`` with ``...`` lines as wildcards, against ``got``."""
    if not expected:
        return not got
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(_matches(rest, got[i:]) for i in range(len(got) + 1))
    return bool(got) and got[0].rstrip() == head.rstrip() and _matches(rest, got[1:])


@pytest.fixture(scope="module")
def demo_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from mcp_trio._cli import main; main()", "demo", "--bind", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        match = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", proc.stdout.readline())
        assert match, "the demo did not print its URL"
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=15)


def test_the_docs_have_console_sessions() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize(("where", "commands"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_console_session_runs_as_shown(
    where: str, commands: list[tuple[str, list[str]]], demo_url: str, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "mcp-trio"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c "from mcp_trio._cli import main; main()" "$@"\n')
    shim.chmod(0o755)
    script = "\n".join(
        # the marker must not change $? for a shown `echo $?`
        f"_s=$?; echo {MARK}; (exit $_s)\n{command.replace('http://127.0.0.1:8000/mcp', demo_url)}"
        for command, _ in commands
    )
    done = subprocess.run(
        ["bash", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    outputs = done.stdout.split(MARK + "\n")[1:]
    assert len(outputs) == len(commands), done.stdout
    for (command, expected), got in zip(commands, outputs, strict=True):
        lines = got.splitlines()
        assert _matches(expected, lines), f"{where}: $ {command}\nexpected:\n{expected}\ngot:\n{lines}"
