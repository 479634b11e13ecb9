"""An address that cannot be listened on: ``serve()`` raises one :class:`ListenError` (an ``OSError``),
bare, on both HTTP servers and for the operations listener, before anything is served; ``mcp-trio
serve`` says so in one line and exits with status 3.  And what ``serve()`` reports when it does listen:
the endpoint."""

from __future__ import annotations

import errno
import functools
import gc
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from mcp_trio import MCPApp, MCPServer, ServerConfig, serve
from mcp_trio.errors import ListenError, MCPTrioError
from mcp_trio.server import hypercorn_config

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]
SERVERS = ["hypercorn", "h11"]


@pytest.fixture
def taken() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a port this test holds (listening), so nobody else can listen there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def check_in_use(error: ListenError, address: str, listener: str = "") -> None:
    assert isinstance(error, OSError) and isinstance(error, MCPTrioError)
    assert error.errno == errno.EADDRINUSE
    assert error.address == error.filename == address
    assert error.listener == listener
    suffix = f" ({listener})" if listener else ""
    assert str(error) == f"cannot listen on {address}: {error.strerror}{suffix}"
    assert error.strerror == "Address already in use"
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.EADDRINUSE


@pytest.mark.parametrize("http", SERVERS)
async def test_a_port_in_use_is_one_listen_error_on_both_servers(http: str, taken: str) -> None:
    host, port = taken.rsplit(":", 1)
    app = MCPApp(MCPServer("busy"))
    async with trio.open_nursery() as nursery:
        with pytest.raises(ListenError) as started:  # bare out of serve(), then out of nursery.start()
            await nursery.start(functools.partial(serve, app, host, int(port), http=http))
    check_in_use(started.value, taken)
    with pytest.raises(ListenError) as awaited:
        await serve(app, host, int(port), http=http)
    check_in_use(awaited.value, taken)


async def test_a_hypercorn_config_names_its_binds(taken: str) -> None:
    with pytest.raises(ListenError) as caught:
        await serve(MCPApp(MCPServer("busy")), config=hypercorn_config([taken]))
    check_in_use(caught.value, taken)
    # the same free port twice: both binds succeed (SO_REUSEADDR), the second listen fails; the
    # sockets made are closed (an unclosed one would be a ResourceWarning, an error here)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(ListenError) as twice:
        await serve(MCPApp(MCPServer("busy")), config=hypercorn_config([free, free]))
    check_in_use(twice.value, f"{free}, {free}")
    gc.collect()
    with pytest.raises(ListenError) as unknown:
        await serve(MCPApp(MCPServer("busy")), "no-such-host.invalid", 0, http="h11")
    assert unknown.value.address == "no-such-host.invalid:0"
    assert str(unknown.value).startswith("cannot listen on no-such-host.invalid:0: ")


@pytest.mark.parametrize("http", SERVERS)
async def test_an_operations_listener_in_use_is_a_listen_error_too(http: str, taken: str) -> None:
    app = MCPApp(MCPServer("busy"))
    reported: list[str] = []
    with pytest.raises(ListenError) as caught:
        await serve(app, "127.0.0.1", 0, http=http, admin_bind=taken, admin_started=reported.extend)
    check_in_use(caught.value, taken, "operations listener")
    assert reported == []  # nothing was served


def test_a_listen_error_survives_pickling() -> None:
    error = ListenError(errno.EACCES, "Permission denied", "0.0.0.0:80", "operations listener")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.errno, copy.strerror, copy.address, copy.listener) == (
        errno.EACCES,
        "Permission denied",
        "0.0.0.0:80",
        "operations listener",
    )
    assert str(copy) == str(error) == "cannot listen on 0.0.0.0:80: Permission denied (operations listener)"


@pytest.mark.parametrize("http", SERVERS)
async def test_task_status_reports_the_endpoint(http: str) -> None:
    """The URLs ``serve()`` reports are the endpoint a client uses, ``config.path`` included."""
    for path, expected in (("/mcp", "/mcp"), ("/api/v1/mcp", "/api/v1/mcp"), (None, "/")):
        app = MCPApp(MCPServer("where"), ServerConfig(path=path))
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            run = functools.partial(serve, app, "127.0.0.1", 0, http=http, shutdown_trigger=stop.wait)
            (url,) = await nursery.start(run)
            assert url.startswith("http://127.0.0.1:") and url.endswith(f"{expected}"), url
            assert url.count("/") == 2 + expected.count("/")
            async with httpx.AsyncClient(timeout=5) as http_client:
                # the endpoint itself answers MCP (a GET without a session is refused in JSON-RPC)...
                response = await http_client.get(url)
                assert response.json()["jsonrpc"] == "2.0", (path, response.status_code, response.text)
                if path is not None:  # ...and the address alone is not it
                    assert (await http_client.get(url.removesuffix(path))).status_code == 404
            stop.set()


# -- mcp-trio serve ----------------------------------------------------------------------------------

SERVER_MODULE = "from mcp_trio import MCPServer\nserver = MCPServer('busy')\n"


@pytest.mark.deadline(60)
async def test_mcp_trio_serve_says_which_address_in_one_line(tmp_path: Path, taken: str) -> None:
    (tmp_path / "busy_server.py").write_text(SERVER_MODULE)
    commands = [
        ["serve", "busy_server:server", "--bind", taken],
        ["serve", "busy_server:server", "--bind", taken, "--http", "h11"],
        ["serve", "busy_server:server", "--bind", "127.0.0.1:0", "--admin-bind", taken],
        ["serve", "busy_server:server", "--bind", "127.0.0.1:0", "--admin-bind", taken, "--http", "h11"],
    ]
    results: dict[int, subprocess.CompletedProcess[bytes]] = {}

    async def run(index: int) -> None:
        results[index] = await trio.run_process(
            [*CLI, *commands[index]], cwd=tmp_path, capture_stdout=True, capture_stderr=True, check=False
        )

    async with trio.open_nursery() as nursery:
        for index in range(len(commands)):
            nursery.start_soon(run, index)
    for index, command in enumerate(commands):
        result = results[index]
        listener = " (operations listener)" if "--admin-bind" in command else ""
        assert result.returncode == 3, (command, result.stderr)
        assert result.stderr.decode() == (
            f"mcp-trio: cannot listen on {taken}: Address already in use{listener}\n"
        ), command
        assert result.stdout == b"", command
