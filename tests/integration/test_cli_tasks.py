"""``mcp-trio call`` on a tool the server runs as a task (the tasks extension, 2026 era), as a process,
against the demo server in-process on 127.0.0.1: the task's status on stderr (lines, or one line
redrawn on a terminal), its result or error as for any call, and Ctrl-C cancelling the task."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
import trio
from tests.required import not_applicable

from mcp_trio import MCPApp, ServerConfig, open_client_session, serve
from mcp_trio.demo import build_demo_server

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]
TASK_LINE = re.compile(r"task ([0-9a-f]+) (\w+)(: .*)?")


@pytest.fixture
async def url() -> AsyncIterator[str]:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1, task_poll_interval=0.1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield urls[0]
        stop.set()


async def run_all(*commands: list[str]) -> list[subprocess.CompletedProcess[bytes]]:
    """Run the CLI once per command, concurrently (each process spends most of its time importing)."""
    done: dict[int, subprocess.CompletedProcess[bytes]] = {}

    async def one(index: int, args: list[str]) -> None:
        done[index] = await trio.run_process(
            [*CLI, *args], capture_stdout=True, capture_stderr=True, check=False
        )

    async with trio.open_nursery() as nursery:
        for index, args in enumerate(commands):
            nursery.start_soon(one, index, args)
    return [done[index] for index in range(len(commands))]


def task_lines(stderr: bytes) -> tuple[str, list[str]]:
    """The task id of the ``task ID STATUS`` lines of ``stderr``, and the lines with the id left out."""
    lines = stderr.decode().splitlines()
    found = [TASK_LINE.fullmatch(line) for line in lines]
    ids = {match.group(1) for match in found if match is not None}
    assert len(ids) == 1, lines
    task_id = ids.pop()
    return task_id, [line.replace(f" {task_id}", "", 1) for line in lines]


@pytest.mark.deadline(60)
async def test_task_status_lines_and_outcomes(url: str) -> None:
    computed, tool_error, failed, plain = await run_all(
        ["call", url, "slow_compute", "--arg", "seconds=0.3", "--arg", "label=pi"],
        ["call", url, "failing_job"],
        ["call", url, "protocol_error_job"],
        ["call", url, "greet", "--arg", "name=Ann"],
    )
    assert computed.returncode == 0, computed.stderr
    assert computed.stdout.decode() == "Computed pi after 0.3 s\n"
    _id, lines = task_lines(computed.stderr)
    assert lines == ["task working", "task completed"]

    assert tool_error.returncode == 1, tool_error.stderr
    assert tool_error.stdout.decode() == "The job failed: nothing to do\n"
    assert task_lines(tool_error.stderr)[1] == ["task working", "task completed"]

    assert failed.returncode == 4, failed.stderr
    assert failed.stdout == b""
    assert task_lines(failed.stderr)[1] == [
        "task working",
        "task failed: The job broke down: internal error",
        "mcp-trio: error -32603: The job broke down: internal error",
    ]

    assert plain.returncode == 0 and plain.stdout.decode() == "Hello, Ann!\n"
    assert plain.stderr == b""  # no task: no task line


def _read_all(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every writer of the pty is gone
            return data
        if not chunk:
            return data
        data += chunk


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=not_applicable("a pty for stderr"))
async def test_task_status_line_on_a_terminal(url: str) -> None:
    controller, terminal = os.openpty()
    args = ["call", url, "slow_compute", "--arg", "seconds=0.3"]
    try:
        process = await trio.lowlevel.open_process([*CLI, *args], stdout=subprocess.PIPE, stderr=terminal)
    finally:
        os.close(terminal)  # the child has its own copy: EOF (EIO) on the controller once it exits
    assert process.stdout is not None
    try:
        with trio.fail_after(30):
            screen = await trio.to_thread.run_sync(_read_all, controller, abandon_on_cancel=True)
            stdout = b""
            while chunk := await process.stdout.receive_some(4096):
                stdout += chunk
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        await process.stdout.aclose()
        os.close(controller)
    assert stdout == b"Computed result after 0.3 s\n"
    text = screen.decode()
    assert re.search(r"\r\[task working\] [0-9a-f]{32}", text), text
    assert "\r[task completed]" in text
    assert "\n" not in text.replace("\r\n", "")  # all on the one line, redrawn in place
    assert text.endswith("\r")  # erased before the result is printed


async def test_ctrl_c_cancels_the_task(url: str) -> None:
    process = await trio.lowlevel.open_process(
        [*CLI, "call", url, "slow_compute", "--arg", "seconds=60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr = b""
    try:
        with trio.fail_after(20):
            while b"\n" not in stderr:  # "task ID working": the task runs on the server
                chunk = await process.stderr.receive_some(4096)
                assert chunk, stderr
                stderr += chunk
        match = TASK_LINE.fullmatch(stderr.decode().splitlines()[0])
        assert match is not None and match.group(2) == "working", stderr
        process.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await process.wait() == 130
            while chunk := await process.stderr.receive_some(4096):
                stderr += chunk
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()
    assert stderr.decode().splitlines()[1:] == ["mcp-trio: interrupted"]
    # the command cancelled the task on its way out (tasks/cancel is acknowledged before the task
    # has ended: its status follows soon after)
    async with open_client_session(url, mode="modern") as session:
        with trio.fail_after(5):
            for _ in range(50):
                task = await session.get_task(match.group(1))
                if task.terminal:
                    break
                await trio.sleep(0.1)
    assert task.status == "cancelled"
    assert task.status_message == "Cancelled: the client cancelled it"
