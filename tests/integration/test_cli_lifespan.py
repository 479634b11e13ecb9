"""``mcp-trio serve`` runs the server's lifespan: the ticker app of docs/lifespan.md
(``docs/examples/ticker_app.py``) served by the command as a user runs it (a subprocess on
127.0.0.1:0, both HTTP servers, and stdio), its app task ticking while it serves and its lifespan left
after a graceful stop; and a lifespan that fails, at start or later, ends the command with one line
saying so and exit status 1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import mcp_types as mt
import pytest
import trio

from mcp_trio import ClientSession, open_client_session, open_stdio_client

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
STARTUP_DEADLINE = 20.0
"""Seconds a server process gets to print its URL (interpreter start, imports and bind, on a busy
machine)."""


def _cli(cwd: Path) -> list[str]:
    """The ``mcp-trio`` command of this interpreter, run in ``cwd`` (MODULE:ATTR is imported from there)."""
    return [
        sys.executable,
        "-c",
        f"import os; os.chdir({str(cwd)!r}); from mcp_trio._cli import main; main()",
    ]


def _env() -> dict[str, str]:
    """The environment of a child: the same mcp_trio as this test run."""
    import mcp_trio

    src = str(Path(mcp_trio.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}


class Served:
    """A ``mcp-trio serve`` process, its output so far."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.changed = trio.Event()

    async def read(self, nursery: trio.Nursery) -> None:
        assert self.process.stdout is not None and self.process.stderr is not None
        nursery.start_soon(self._drain_one, self.process.stdout, self.stdout)
        nursery.start_soon(self._drain_one, self.process.stderr, self.stderr)

    async def _drain_one(self, stream: trio.abc.ReceiveStream, sink: bytearray) -> None:
        while chunk := await stream.receive_some(65536):
            sink += chunk
            self.changed.set()
            self.changed = trio.Event()

    async def url(self) -> str:
        with trio.fail_after(STARTUP_DEADLINE):
            while not (found := re.search(rb"^mcp-trio: serving on (\S+)$", self.stdout, re.MULTILINE)):
                await self.changed.wait()  # (output that ends without the line fails at the deadline)
        return found.group(1).decode()


async def _ticking(session: ClientSession) -> int:
    """Call the ``ticks`` tool until its count grows (the ticker ticks once a second); the count."""
    first = await _ticks(session)
    for _ in range(40):
        await trio.sleep(0.25)
        count = await _ticks(session)
        if count > first:
            return count
    raise AssertionError(f"the ticker did not tick: still {first}")


async def _ticks(session: ClientSession) -> int:
    (block,) = (await session.call_tool("ticks", {})).content
    assert isinstance(block, mt.TextContent)
    return int(block.text)


@pytest.mark.deadline(60)
@pytest.mark.parametrize(
    ("flags", "stop"),
    [((), signal.SIGINT), (("--http", "h11"), signal.SIGTERM)],
    ids=["hypercorn-sigint", "h11-sigterm"],
)
async def test_mcp_trio_serve_runs_the_ticker_apps_lifespan(flags: tuple[str, ...], stop: int) -> None:
    command = [
        *_cli(EXAMPLES),
        "serve",
        "ticker_app:server",
        "--bind",
        "127.0.0.1:0",
        "--shutdown-grace",
        "1",
    ]
    process = await trio.lowlevel.open_process(
        [*command, *flags], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    served = Served(process)
    try:
        async with trio.open_nursery() as nursery:
            await served.read(nursery)
            url = await served.url()
            async with open_client_session(url) as session:
                later = await _ticking(session)  # the ticker counts seconds while the server serves
                read = await session.read_resource("ticker://ticks")
                assert int(read.contents[0].text) >= later  # type: ignore[union-attr]
            process.send_signal(stop)
            with trio.fail_after(15):
                code = await process.wait()
    finally:
        await _reap(process)
    assert code == 0, served.stderr.decode()
    assert served.stdout.decode().endswith("mcp-trio: stopped\n"), served.stdout
    found = re.search(r"ticker stopped after (\d+) ticks", served.stderr.decode())
    assert found and int(found.group(1)) >= later, served.stderr.decode()


@pytest.mark.deadline(60)
async def test_mcp_trio_serve_stdio_runs_the_ticker_apps_lifespan() -> None:
    command = [*_cli(EXAMPLES), "serve", "ticker_app:server", "--stdio"]
    async with open_stdio_client(command, env=_env()) as session:
        await _ticking(session)
        prompt = await session.get_prompt("about_ticks", {})
        assert "The ticker has counted" in prompt.messages[0].content.text  # type: ignore[union-attr]


FAILING_APP = """\
from contextlib import asynccontextmanager

import trio

from mcp_trio import MCPServer


@asynccontextmanager
async def fails_to_start(server):
    raise RuntimeError("DATABASE_URL is not set")
    yield


async def crash_soon():
    await trio.sleep(0.5)
    raise KeyError("the feed went away")


@asynccontextmanager
async def crashes_later(server):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(crash_soon)
        yield
        nursery.cancel_scope.cancel()


at_start = MCPServer("at-start", lifespan=fails_to_start)
later = MCPServer("later", lifespan=crashes_later)
"""


@pytest.mark.deadline(60)
async def test_a_lifespan_that_fails_to_start_ends_the_command_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "failing_app.py").write_text(FAILING_APP)
    commands = {
        "hypercorn": ["serve", "failing_app:at_start", "--bind", "127.0.0.1:0"],
        "h11": ["serve", "failing_app:at_start", "--bind", "127.0.0.1:0", "--http", "h11"],
        "stdio": ["serve", "failing_app:at_start", "--stdio"],
    }
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(name: str, args: list[str]) -> None:
        results[name] = await trio.run_process(
            [*_cli(tmp_path), *args], env=_env(), capture_stdout=True, capture_stderr=True, check=False
        )

    with trio.fail_after(45):
        async with trio.open_nursery() as nursery:
            for name, args in commands.items():
                nursery.start_soon(run, name, args)
    for name, result in results.items():
        stderr = result.stderr.decode()
        assert result.returncode == 1, (name, stderr)
        assert stderr.splitlines()[-1] == (
            "mcp-trio: the lifespan of MCPServer 'at-start' failed: RuntimeError: DATABASE_URL is not set"
        ), (name, stderr)
        assert "ExceptionGroup" not in stderr and "LifespanFailureError" not in stderr, (name, stderr)
        assert 'raise RuntimeError("DATABASE_URL is not set")' in stderr  # the traceback says where
        assert result.stdout == b"", (name, result.stdout)


@pytest.mark.deadline(60)
@pytest.mark.parametrize("flags", [(), ("--http", "h11")], ids=["hypercorn", "h11"])
async def test_an_app_task_that_crashes_stops_the_command(tmp_path: Path, flags: tuple[str, ...]) -> None:
    (tmp_path / "failing_app.py").write_text(FAILING_APP)
    command = [*_cli(tmp_path), "serve", "failing_app:later", "--bind", "127.0.0.1:0", *flags]
    process = await trio.lowlevel.open_process(
        command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    served = Served(process)
    try:
        async with trio.open_nursery() as nursery:
            await served.read(nursery)
            await served.url()
            with trio.fail_after(15):
                code = await process.wait()
    finally:
        await _reap(process)
    stderr = served.stderr.decode()
    assert code == 1, stderr
    assert stderr.splitlines()[-1] == (
        "mcp-trio: the lifespan of MCPServer 'later' failed: KeyError: 'the feed went away'"
    ), stderr
    assert "ExceptionGroup" not in stderr, stderr
    assert "mcp-trio: stopped" not in served.stdout.decode()


async def _reap(process: trio.Process) -> None:
    if process.returncode is None:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()
