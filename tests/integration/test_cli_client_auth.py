"""``mcp-trio tools`` and ``mcp-trio call`` with credentials, run as processes as users run them:
``--header`` against a server (on a real hypercorn on 127.0.0.1) that records the headers of every
request, and ``--oauth`` against mcp_trio's protected server and a real authorization server
(``tests/oauth_as``), the test playing the user at the browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from mcp_http import serve_in_process

import oauth_as
from mcp_trio import Context, MCPApp, MCPServer, ServerConfig
from mcp_trio._cli import main
from mcp_trio._cli.client.connection import HEADLESS_REDIRECT_URI
from mcp_trio._transport.config import HTTPRequestInfo
from mcp_trio.errors import RemoteProtocolError
from oauth_as import (
    AuthorizationServer,
    Browser,
    browser_command,
    serve_protected,
)

# The shared fixtures (tests use them by name).
oauth_as_installed = oauth_as.oauth_as_installed
authorization_server = oauth_as.authorization_server
browser = oauth_as.browser

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]
RUN = 30.0
"""Deadline of one CLI run (most of it is the interpreter starting and importing)."""
STEP = 10.0


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI run: no browser to open, unless ``extra`` names one."""
    env = {k: v for k, v in os.environ.items() if k not in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY")}
    env.update(extra)
    return env


async def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    """One CLI run with an empty stdin, and no browser it could open."""
    with trio.fail_after(RUN):
        return await trio.run_process(
            [*CLI, *args],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=cli_env(),
        )


# -- --header ---------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """A server that wants ``Authorization: Bearer s3cret`` and records the headers of every request."""

    url: str = ""
    requests: list[HTTPRequestInfo] = field(default_factory=list)

    async def authenticate(self, request: HTTPRequestInfo) -> object:
        self.requests.append(request)
        if request.header("authorization") != "Bearer s3cret":
            raise RemoteProtocolError(
                "a bearer token is required",
                http_status=401,
                headers=(("www-authenticate", "Bearer"),),
            )
        return "the holder of s3cret"


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    state = Recorder()
    server = MCPServer("headers", "1.0.0")

    @server.tool(description="Who the server says sent the request.")
    async def whoami(ctx: Context) -> str:
        return str(ctx.principal)

    app = MCPApp(server, ServerConfig(authenticate=state.authenticate, shutdown_grace=1))
    async with serve_in_process(app, "hypercorn", stop_within=5) as (url, _port, _stop):
        state.url = url
        yield state


@pytest.mark.deadline(90)
@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_headers_reach_the_server_with_every_request(recorder: Recorder, mode: str) -> None:
    headers = ["--header", "Authorization: Bearer s3cret", "--header", "X-Trace:abc"]
    headers += ["--header", "X-Trace: def"]
    called = await run_cli("call", recorder.url, "whoami", "--mode", mode, *headers)
    assert called.returncode == 0, called.stderr
    assert called.stdout.decode() == "the holder of s3cret\n"
    listed = await run_cli("tools", recorder.url, "--mode", mode, *headers)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.decode().startswith("whoami: Who the server says sent the request.")
    methods = [request.method for request in recorder.requests]
    assert methods.count("POST") >= 2, methods  # the call and the list at least
    if mode == "legacy":  # a session: initialize, initialized, the standalone GET stream, DELETE
        assert methods.count("POST") >= 6 and "GET" in methods and "DELETE" in methods, methods
    for request in recorder.requests:
        assert request.header("authorization") == "Bearer s3cret", request
        traces = [value for key, value in request.headers if key == b"x-trace"]
        assert traces == [b"abc", b"def"], request.headers


@pytest.mark.deadline(60)
async def test_without_the_header_the_server_refuses(recorder: Recorder) -> None:
    refused = await run_cli("call", recorder.url, "whoami", "--header", "Authorization: Bearer wrong")
    assert refused.returncode == 3, refused.stderr
    assert b"401" in refused.stderr, refused.stderr
    assert refused.stdout == b""


BAD_HEADERS = [
    ("Authorization Bearer x", "expected NAME:VALUE"),
    (": x", "expected NAME:VALUE"),
    ("Bad Name: x", "expected NAME:VALUE"),
    ("X-Thing : x", "expected NAME:VALUE"),
    ("X-Line: a\r\nX-Injected: b", "must be printable ASCII"),
    ("X-Nul: a\x01b", "must be printable ASCII"),
    ("X-Accent: caf\u00e9", "must be printable ASCII"),
    ("Content-Type: text/plain", "is set by the client itself"),
    ("accept: */*", "is set by the client itself"),
    ("Mcp-Session-Id: x", "is set by the client itself"),
    ("Host: example.com", "is set by the client itself"),
]


UNREACHABLE = "http://127.0.0.1:9/mcp"
"""Nothing listens there: a command that tried to connect would exit 3, not 2."""


@pytest.mark.parametrize(("header", "complaint"), BAD_HEADERS)
def test_a_bad_header_is_a_usage_error(
    header: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["call", UNREACHABLE, "whoami", "--header", header])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --header: " in err and complaint in err, err


# -- --oauth ----------------------------------------------------------------------------------------


async def read_stderr_until(process: trio.Process, seen: bytearray, marker: bytes) -> None:
    assert process.stderr is not None
    while marker not in seen:
        chunk = await process.stderr.receive_some(4096)
        if not chunk:
            raise AssertionError(f"stderr ended before {marker!r}: {bytes(seen)!r}")
        seen += chunk


@pytest.mark.deadline(90)
async def test_oauth_headless_then_the_stored_token(
    authorization_server: AuthorizationServer, browser: Browser, tmp_path: Path
) -> None:
    """``mcp-trio call URL TOOL --oauth --oauth-headless --oauth-store F``: the CLI prints the
    authorization URL on stderr; the test, as the user, logs in with it at the authorization server
    and types the URL it was redirected to into the CLI's stdin; the tool runs.  A second run uses the
    stored token without asking anything (its stdin is empty: a question would fail it).  Before
    all that, a run whose user types nothing fails with exit status 3 and says why."""
    server = authorization_server
    store = tmp_path / "config" / "tokens.json"
    async with serve_protected(server.issuer) as protected:
        abandoned = await run_cli(
            "call", protected.url, "whoami", "--oauth", "--oauth-headless", "--oauth-store", str(store)
        )
        assert abandoned.returncode == 3, abandoned.stderr
        assert b"mcp-trio: no redirected URL was entered" in abandoned.stderr, abandoned.stderr
        assert abandoned.stdout == b""
        assert protected.principals == []
        command = [
            *CLI,
            "call",
            protected.url,
            "whoami",
            "--oauth",
            "--oauth-headless",
            "--oauth-store",
            str(store),
        ]
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env()
        )
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        stdout = bytearray()
        stderr = bytearray()
        try:
            with trio.fail_after(RUN):
                await read_stderr_until(process, stderr, b"(it starts with ")
                [url] = re.findall(rb"^    (http://\S+)$", bytes(stderr), re.MULTILINE)
                authorization_url = url.decode()
                assert authorization_url.startswith(server.issuer + "/auth?"), authorization_url
                redirected = await browser.authorize(authorization_url, HEADLESS_REDIRECT_URI)
                assert redirected.startswith(HEADLESS_REDIRECT_URI + "?code="), redirected
                await process.stdin.send_all(redirected.encode() + b"\n")
                await process.stdin.aclose()
                async with trio.open_nursery() as nursery:

                    async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
                        while chunk := await stream.receive_some(65536):
                            into += chunk

                    nursery.start_soon(drain, process.stdout, stdout)
                    nursery.start_soon(drain, process.stderr, stderr)
                    await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await process.wait()
        assert process.returncode == 0, stderr.decode(errors="replace")
        assert stdout.decode() == "alice mcp:tools\n"
        assert store.stat().st_mode & 0o077 == 0, oct(store.stat().st_mode)
        with trio.fail_after(STEP):
            before = await server.events()
        assert [
            e["event"] for e in before if e["event"] in ("registration_create.success", "grant.success")
        ] == [
            "registration_create.success",
            "grant.success",
        ], before

        # A second run: the stored token, no question asked (stdin is empty), nothing asked of the AS.
        again = await run_cli(
            "call", protected.url, "whoami", "--oauth", "--oauth-headless", "--oauth-store", str(store)
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.decode() == "alice mcp:tools\n"
        assert b"Open this URL" not in again.stderr, again.stderr
        listed = await run_cli(
            "tools", protected.url, "--oauth", "--oauth-headless", "--oauth-store", str(store)
        )
        assert listed.returncode == 0, listed.stderr
        assert "admin_task: Needs mcp:admin." in listed.stdout.decode()
        with trio.fail_after(STEP):
            assert await server.events() == before
    tokens = {p.token for p in protected.principals}
    assert len(tokens) == 1, "every run sent the one token"


@pytest.mark.deadline(90)
async def test_oauth_with_a_browser_and_the_loopback_redirect(
    authorization_server: AuthorizationServer, tmp_path: Path
) -> None:
    """``--oauth`` where a browser can be opened (``BROWSER`` names a program that logs in as the user
    and loads the page it is redirected to): the CLI catches the redirect on its loopback port."""
    server = authorization_server
    store = tmp_path / "tokens.json"
    env = cli_env(BROWSER=str(browser_command(tmp_path, login="bob")))
    async with serve_protected(server.issuer) as protected:
        with trio.fail_after(RUN):
            done = await trio.run_process(
                [*CLI, "call", protected.url, "whoami", "--oauth", "--oauth-store", str(store)],
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode() == "bob mcp:tools\n"
        assert b"Opening the authorization page in your browser" in done.stderr, done.stderr
        with trio.fail_after(STEP):
            events = await server.events()
    [registered] = [e for e in events if e["event"] == "registration_create.success"]
    assert registered["application_type"] == "native"
    [accepted] = [e for e in events if e["event"] == "authorization.accepted"]
    assert accepted["resource"] == protected.url


@pytest.mark.deadline(60)
async def test_oauth_with_a_store_that_cannot_be_written(
    authorization_server: AuthorizationServer, tmp_path: Path
) -> None:
    """A token store under a regular file: the command says which file, not that the server is down."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    store = blocker / "tokens.json"
    async with serve_protected(authorization_server.issuer) as protected:
        done = await run_cli(
            "call", protected.url, "whoami", "--oauth", "--oauth-headless", "--oauth-store", str(store)
        )
    assert done.returncode == 3, done.stderr
    assert f"Not a directory: '{blocker}" in done.stderr.decode(), done.stderr
    assert b"cannot reach" not in done.stderr, done.stderr


OAUTH_USAGE_ERRORS = [
    (["--oauth-headless"], "--oauth-headless goes with --oauth"),
    (["--oauth-store", "x.json"], "--oauth-store goes with --oauth"),
    (["--oauth", "--header", "Authorization: Bearer x"], "give --oauth or that --header, not both"),
    (["--oauth", "--oauth-client-secret", "s"], "--oauth-client-secret goes with --oauth-client-id"),
    (["--oauth", "--oauth-scope", " "], "--oauth-scope wants at least one scope"),
    (
        ["--oauth", "--oauth-redirect-uri", "http://example.com:8/cb"],
        "must be http://127.0.0.1:PORT/PATH",
    ),
    (["--oauth", "--oauth-redirect-uri", "http://127.0.0.1/cb"], "must be http://127.0.0.1:PORT/PATH"),
    (["--oauth", "--oauth-store", "/"], "--oauth-store / is a directory"),
]


@pytest.mark.parametrize(("options", "complaint"), OAUTH_USAGE_ERRORS)
def test_oauth_usage_errors(options: list[str], complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["call", UNREACHABLE, "whoami", *options])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-trio: ") and complaint in err, err
