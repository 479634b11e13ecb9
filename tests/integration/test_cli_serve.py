"""``mcp-trio demo`` and ``mcp-trio serve`` as users run them: the startup line, printed once, and the
exit status of what goes wrong before serving.  Also ``mcp-trio --help`` as a process."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
import trio

from mcp_trio._cli import main

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]
STARTUP_DEADLINE = 20.0
"""Seconds a server process gets to print its URL (interpreter start, imports and bind, on a busy
machine)."""


async def _drain(
    stream: trio.abc.ReceiveStream, sink: bytearray, marker: bytes = b"", seen: trio.Event | None = None
) -> None:
    while chunk := await stream.receive_some(65536):
        sink += chunk
        if seen is not None and marker in sink:
            seen.set()


async def _serve_and_stop(*flags: str, settle: float = 0.2) -> tuple[int, str, str]:
    """Run ``mcp-trio demo --bind 127.0.0.1:0 *flags`` until it printed its URL, then (``settle``
    seconds later) SIGINT it; its exit status, stdout and stderr."""
    command = [*CLI, "demo", "--bind", "127.0.0.1:0", "--shutdown-grace", "1", *flags]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = bytearray(), bytearray()
    try:
        async with trio.open_nursery() as nursery:
            listening = trio.Event()
            nursery.start_soon(_drain, process.stdout, stdout, b"mcp-trio: serving on ", listening)
            nursery.start_soon(_drain, process.stderr, stderr)
            with trio.fail_after(STARTUP_DEADLINE):
                await listening.wait()
            await trio.sleep(settle)  # anything else it would print at startup
            process.send_signal(signal.SIGINT)
            with trio.fail_after(10):
                code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        await process.stdout.aclose()
        await process.stderr.aclose()
    return code, stdout.decode(), stderr.decode()


@pytest.mark.deadline(60)
@pytest.mark.parametrize("flags", [(), ("--http", "h11")], ids=["hypercorn", "h11"])
async def test_sigint_right_after_the_startup_line_is_a_clean_stop(flags: tuple[str, ...]) -> None:
    code, stdout, stderr = await _serve_and_stop(*flags, settle=0)
    assert code == 0, stderr
    assert stdout.rstrip().endswith("mcp-trio: stopped"), stdout
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


@pytest.mark.deadline(60)
@pytest.mark.parametrize(
    "flags",
    [(), ("--log-level", "info"), ("--http", "h11", "--log-level", "info")],
    ids=["hypercorn", "hypercorn-info", "h11-info"],
)
async def test_the_startup_line_is_printed_once(flags: tuple[str, ...]) -> None:
    code, stdout, stderr = await _serve_and_stop(*flags)
    assert code == 0, stderr
    found = re.search(r"^mcp-trio: serving on (http://127\.0\.0\.1:(\d+)/mcp)$", stdout, re.MULTILINE)
    assert found, stdout
    port = found.group(2)
    mentions = [line for line in (stdout + stderr).splitlines() if f":{port}" in line]
    assert mentions == [f"mcp-trio: serving on {found.group(1)}"], stdout + stderr
    assert stdout.splitlines() == [mentions[0], "mcp-trio: stopped"]
    assert "Running on" not in stderr  # hypercorn's banner (twice, without /mcp) is gone


@pytest.mark.deadline(60)
async def test_what_fails_before_serving_exits_with_a_message() -> None:
    taken = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = taken.socket.getsockname()[1]
    commands = [
        ["demo", "--bind", f"127.0.0.1:{port}"],
        ["demo", "--bind", f"127.0.0.1:{port}", "--http", "h11"],
        ["demo", "--bind", "127.0.0.1:0", "--admin-bind", f"127.0.0.1:{port}"],  # the operations listener's
        ["demo", "--bind", "127.0.0.1:0", "--admin-bind", f"127.0.0.1:{port}", "--http", "h11"],
        ["serve", "no_such_module_of_mcp_trio:server"],
    ]
    results: list[subprocess.CompletedProcess[bytes]] = []

    async def run(command: list[str]) -> None:
        results.append(
            await trio.run_process([*CLI, *command], capture_stdout=True, capture_stderr=True, check=False)
        )

    async with taken, trio.open_nursery() as nursery:
        for command in commands:
            nursery.start_soon(run, command)
    by_command = {tuple(result.args[len(CLI) :]): result for result in results}
    for command in commands[:4]:
        result = by_command[tuple(command)]
        assert result.returncode == 3, result.stderr
        assert result.stderr.decode().startswith(f"mcp-trio: cannot listen on 127.0.0.1:{port}: ")
        assert result.stderr.decode().count("\n") == 1  # one line, no traceback
        assert result.stdout == b""
    missing = by_command[tuple(commands[4])]
    assert missing.returncode == 2
    assert missing.stderr.decode() == (
        "mcp-trio: cannot import 'no_such_module_of_mcp_trio': No module named 'no_such_module_of_mcp_trio'\n"
    )


async def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["no-such-command"])
    assert exited.value.code == 2
    choices = re.search(r"invalid choice: 'no-such-command' \(choose from (.*)\)", capsys.readouterr().err)
    assert choices, "argparse names the commands"
    commands = re.findall(r"'([a-z-]+)'", choices.group(1))
    assert set(commands) >= {"serve", "demo", "tools", "call"}
    shown = await trio.run_process([*CLI, "--help"], capture_stdout=True, capture_stderr=True)
    text = shown.stdout.decode()
    for command in commands:  # each with its one-line description
        assert re.search(rf"^    {command} +[a-z]+ .+$", text, re.MULTILINE), (command, text)
    assert "exit status:" in text and "  130  interrupted" in text
