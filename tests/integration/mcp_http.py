"""Helpers for the real-socket tests: the ``mcp-trio demo`` server as a subprocess, a look at its
sockets through ``/proc``, its ``/stats``, and a small MCP client on ``httpx`` (under trio).

Every wait here is bounded in time (a helper that polls gives up after a set time, and the callers put
``trio.fail_after`` around each step), so a hang fails the test in seconds instead of blocking CI.
"""

from __future__ import annotations

import functools
import json
import math
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import httpx
import trio

from mcp_trio import MCPApp, serve
from mcp_trio._protocol.sse import ServerSentEvent, SSEDecoder
from mcp_trio._transport.asgi import STATS_MAX_AGE
from mcp_trio.server import hypercorn_config

__all__ = [
    "HOSTED_SDK_SERVER",
    "POST_HEADERS",
    "STEP",
    "VERSION",
    "Baseline",
    "DemoServer",
    "MCPClient",
    "SSEResponse",
    "assert_back_to_baseline",
    "count_sockets",
    "count_tasks",
    "coverage_paused",
    "end_cleanly",
    "fetch_stats",
    "full_session",
    "http_client",
    "read_until",
    "serve_demo",
    "shared_demo",
    "tasks_named",
    "tcp_states",
    "wait_for",
    "wait_until",
]

VERSION = "2025-11-25"
POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
"""An ``initialize`` request (2025-11-25)."""
STARTUP_DEADLINE = 30.0
"""Seconds the server gets to print its URL (interpreter start + imports + bind): a backstop against a
hang, not a measure (about 1.5 s alone, several times that under coverage on a busy machine)."""
EXIT_MARGIN = 2.0
"""Seconds beyond the shutdown grace the server gets to exit after SIGINT."""
POLL = 0.02
_URL_PREFIX = b"mcp-trio: serving on "
_ADMIN_PREFIX = b"mcp-trio: operations listener on "
STEP = 2.0
"""Deadline of one step of one session (a request, or the end of a stream after DELETE)."""

# The interpreter running the tests, so the server runs the same (editable) mcp_trio; the pid we get
# is the server's own (a console-script shim would exec, but pyenv's is a shell script).
SERVER_COMMAND = [sys.executable, "-c", "from mcp_trio._cli import main; main()", "demo"]
HTTP_SERVER = os.environ.get("MCP_TRIO_TEST_HTTP", "hypercorn")
"""Which HTTP server the demo runs on: ``hypercorn`` (default) or ``h11`` (the embedded server); the
test command runs this directory once with each."""
if HTTP_SERVER != "hypercorn":
    SERVER_COMMAND += ["--http", HTTP_SERVER]
HOSTED_SDK_SERVER = "tests.integration.sdk_servers:build_server"
"""The python-sdk server (``sdk_servers.py``) that ``serve_demo(target=HOSTED_SDK_SERVER)`` hosts in place
of the demo (``mcp-trio serve``, run from the repository's root)."""

TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


# -- the server process -----------------------------------------------------------------------


@dataclass
class DemoServer:
    """A running ``mcp-trio demo``.  ``url`` is the MCP endpoint; ``stats_url`` its ``/stats``.

    ``process`` is a ``subprocess.Popen`` for a server shared by the tests of a module (``shared_demo``):
    it outlives each test's Trio run, and no test may stop it.
    """

    url: str
    pid: int
    process: trio.Process | subprocess.Popen[bytes]
    stderr: IO[bytes]
    shutdown_grace: float
    drain_delay: float = 0.0
    """What the server serves on for after a SIGTERM/SIGINT before it hands its sessions over."""
    stopped: bool = False
    returncode: int | None = None
    stdout_tail: bytes = b""
    admin_url: str | None = None
    """The operations listener's URL (``http://127.0.0.1:PORT``), when started with ``--admin-bind``."""

    def __iter__(self) -> Any:  # ``url, pid, process = server``
        return iter((self.url, self.pid, self.process))

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    @property
    def stats_url(self) -> str:
        return self.base + "/stats"

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def log(self) -> str:
        """What the server wrote on stderr so far (for failure messages)."""
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-4000:]

    async def stop(self, sig: int = signal.SIGINT) -> float:
        """Send ``sig`` and wait for the process to exit by itself within shutdown grace + margin.

        Kills it as a last resort (and then fails).  Returns the seconds it took to exit; asserts it
        exited with status 0 and printed ``mcp-trio: stopped``.
        """
        if self.stopped:
            return 0.0
        if not isinstance(self.process, trio.Process):
            raise AssertionError("this demo is shared by the tests of a module: a test may not stop it")
        self.stopped = True
        start = trio.current_time()
        self.process.send_signal(sig)
        allowed = self.shutdown_grace + self.drain_delay + EXIT_MARGIN
        with trio.move_on_after(allowed):
            self.returncode = await self.process.wait()
        took = trio.current_time() - start
        if self.returncode is None:
            self.process.kill()
            with trio.move_on_after(5):
                await self.process.wait()
            raise AssertionError(
                f"mcp-trio did not exit within {allowed} s of "
                f"{signal.Signals(sig).name}; killed it. stderr:\n{self.log()}"
            )
        assert self.process.stdout is not None
        with trio.move_on_after(1):
            while chunk := await self.process.stdout.receive_some(65536):
                self.stdout_tail += chunk
        assert self.returncode == 0, f"exit status {self.returncode}; stderr:\n{self.log()}"
        assert b"mcp-trio: stopped" in self.stdout_tail, self.stdout_tail
        return took


@asynccontextmanager
async def serve_demo(
    *flags: str,
    shutdown_grace: float = 2.0,
    measure_coverage: bool = True,
    environment: Mapping[str, str] | None = None,
    target: str | None = None,
    descriptors: int | None = None,
) -> AsyncIterator[DemoServer]:
    """Run ``mcp-trio demo --bind 127.0.0.1:0 --stats-path /stats --shutdown-grace G *flags`` (with
    ``target``, ``MODULE:ATTR``: ``mcp-trio serve TARGET`` with the same options instead).

    Yields once the server printed its URL.  On exit sends SIGINT (unless the test already stopped
    it) and checks it exits by itself, with status 0, in time.  ``measure_coverage=False``: when the
    tests run under ``coverage run`` (the test command), the server does not measure coverage (for a
    volume test, where it would run several times slower and cover nothing new).  ``environment``:
    variables set for the server besides this process's.  ``descriptors``: the server's
    ``RLIMIT_NOFILE`` (soft and hard), set before it starts.
    """
    command = _demo_command(flags, shutdown_grace, target)
    env = None if measure_coverage else _env_without_coverage()
    if environment is not None:
        env = {**(os.environ if env is None else env), **environment}
    with tempfile.TemporaryFile() as stderr:
        options: dict[str, Any] = {}
        if descriptors is not None:
            options["preexec_fn"] = functools.partial(_limit_descriptors, descriptors)
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, **options
        )
        try:
            admin: list[str] = []
            url = await _read_url(process, stderr, admin)
            server = DemoServer(url, process.pid, process, stderr, shutdown_grace, drain_delay(flags))
            server.admin_url = admin[0] if admin else None
            yield server
            await server.stop()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await process.wait()
            assert process.stdout is not None
            await process.stdout.aclose()


def _limit_descriptors(count: int) -> None:
    """In the child, before it runs the server: at most ``count`` open descriptors."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def drain_delay(flags: tuple[str, ...]) -> float:
    """The ``--drain-delay`` of a demo started with ``flags`` (3 s by default with a worker id and Redis:
    it hands its sessions over)."""
    if "--drain-delay" in flags:
        return float(flags[flags.index("--drain-delay") + 1])
    return 3.0 if "--worker-id" in flags and "--redis" in flags else 0.0


def _env_without_coverage() -> dict[str, str]:
    """This process's environment without the variables through which ``coverage run`` (``patch =
    subprocess``) makes a Python subprocess measure coverage."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")
    }


def _demo_command(flags: tuple[str, ...], shutdown_grace: float, target: str | None = None) -> list[str]:
    command = list(SERVER_COMMAND)
    if target is not None:
        command[command.index("demo")] = "serve"
        command.insert(command.index("serve") + 1, target)
    return [
        *command,
        "--bind",
        "127.0.0.1:0",
        "--stats-path",
        "/stats",
        "--shutdown-grace",
        str(shutdown_grace),
        *flags,
    ]


@contextmanager
def shared_demo(*flags: str, shutdown_grace: float = 2.0, target: str | None = None) -> Iterator[DemoServer]:
    """``serve_demo`` without a Trio run, for a server that several tests share (a module-scoped
    fixture: each test runs in its own Trio run); ``target`` as for ``serve_demo``.  On exit sends SIGINT
    and checks the server exits by itself, with status 0 and ``mcp-trio: stopped``, within the shutdown
    grace + margin."""
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(
            _demo_command(flags, shutdown_grace, target), stdout=subprocess.PIPE, stderr=stderr
        )
        assert process.stdout is not None
        try:
            output = _read_url_blocking(process.stdout.fileno())
            line = output.partition(_URL_PREFIX)[2].partition(b"\n")[0].decode().strip()
            if not line.startswith("http://127.0.0.1:"):
                stderr.seek(0)
                raise AssertionError(
                    f"mcp-trio did not report its URL within {STARTUP_DEADLINE} s; stdout={output!r} "
                    f"stderr={stderr.read().decode(errors='replace')[-2000:]}"
                )
            server = DemoServer(line, process.pid, process, stderr, shutdown_grace)
            yield server
            assert process.poll() is None, f"the shared demo exited ({process.returncode}):\n{server.log()}"
            process.send_signal(signal.SIGINT)
            try:
                returncode = process.wait(shutdown_grace + EXIT_MARGIN)
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"mcp-trio did not exit within {shutdown_grace + EXIT_MARGIN} s of SIGINT; killed it. "
                    f"stderr:\n{server.log()}"
                ) from None
            tail = process.stdout.read()
            assert returncode == 0, f"exit status {returncode}; stderr:\n{server.log()}"
            assert b"mcp-trio: stopped" in tail, tail
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(5)
            process.stdout.close()


def _read_url_blocking(fd: int) -> bytes:
    """What the server printed on ``fd`` until its URL line, or until ``STARTUP_DEADLINE``."""
    output = b""
    deadline = time.monotonic() + STARTUP_DEADLINE
    while b"\n" not in output.partition(_URL_PREFIX)[2]:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        output += chunk
    return output


@asynccontextmanager
async def serve_in_process(
    app: MCPApp, kind: str, *, stop_within: float, port: int = 0
) -> AsyncIterator[tuple[str, int, trio.Event]]:
    """``app`` served in this process on 127.0.0.1:``port`` (default 0: any free one) by ``kind``:
    ``hypercorn`` (with the fast path), ``hypercorn-as-shipped-path`` (without it) or ``h11``; yields
    (url, port, stop) and on exit checks that the server returned within ``stop_within`` seconds (no
    task left behind)."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        if kind == "h11":
            urls = await nursery.start(
                lambda task_status: serve(
                    app, "127.0.0.1", port, http="h11", shutdown_trigger=stop.wait, task_status=task_status
                )
            )
        else:
            config = hypercorn_config([f"127.0.0.1:{port}"], graceful_timeout=1.0)
            urls = await nursery.start(
                lambda task_status: serve(
                    app,
                    config=config,
                    shutdown_trigger=stop.wait,
                    task_status=task_status,
                    hypercorn_fast_path=kind == "hypercorn",
                )
            )
        try:
            yield urls[0], int(urls[0].removesuffix("/mcp").rsplit(":", 1)[1]), stop
        finally:
            stop.set()
            with trio.fail_after(stop_within):
                while nursery.child_tasks:  # noqa: ASYNC110 - waits for the server task to return
                    await trio.sleep(0.01)


async def _read_url(process: trio.Process, stderr: IO[bytes], admin: list[str] | None = None) -> str:
    """The MCP endpoint's URL the server printed; ``admin`` gets the operations listener's, printed
    before it (``--admin-bind``)."""
    assert process.stdout is not None
    output = b""
    prefix = _URL_PREFIX
    with trio.move_on_after(STARTUP_DEADLINE):
        while b"\n" not in output.partition(prefix)[2]:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                break
            output += chunk
    line = output.partition(prefix)[2].partition(b"\n")[0].decode().strip()
    if admin is not None and _ADMIN_PREFIX in output:
        admin.append(output.partition(_ADMIN_PREFIX)[2].partition(b"\n")[0].decode().strip())
    if not line.startswith(("http://127.0.0.1:", "https://127.0.0.1:")):
        stderr.seek(0)
        raise AssertionError(
            f"mcp-trio did not report its URL within {STARTUP_DEADLINE} s; stdout={output!r} "
            f"stderr={stderr.read().decode(errors='replace')[-2000:]}"
        )
    return line


# -- /proc and /stats -------------------------------------------------------------------------


def _socket_inodes(pid: int) -> list[str]:
    inodes = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.append(target[len("socket:[") : -1])
    return inodes


def count_sockets(pid: int) -> int:
    """How many sockets process ``pid`` holds (listener, trio's wakeup pair and every connection)."""
    return len(_socket_inodes(pid))


def tcp_states(pid: int) -> list[str]:
    """``local-port state`` of each TCP socket of ``pid`` (for failure messages)."""
    inodes = set(_socket_inodes(pid))
    found = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    if fields[9] in inodes:
                        port = int(fields[1].split(":")[1], 16)
                        peer = int(fields[2].split(":")[1], 16)
                        found.append(f"{port}<->{peer} {TCP_STATES.get(fields[3], fields[3])}")
        except FileNotFoundError:
            continue
    return sorted(found)


_last_stats: dict[str, float] = {}
"""When each server's statistics were last fetched (``time.monotonic()``), by stats URL."""


async def fetch_stats(server: DemoServer) -> dict[str, Any]:
    """``GET /stats`` on a fresh connection that is closed right after (``Connection: close``).

    The server answers statistics computed at most ``STATS_MAX_AGE`` ago, so a fetch that follows the
    last one sooner waits out the rest of that age first: what it returns was computed after it was
    asked for (a test comparing two snapshots taken a few milliseconds apart would otherwise get the
    same one twice)."""
    since = time.monotonic() - _last_stats.get(server.stats_url, -math.inf)
    if since < STATS_MAX_AGE:
        await trio.sleep(STATS_MAX_AGE - since)
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(server.stats_url, headers={"connection": "close"})
    _last_stats[server.stats_url] = time.monotonic()  # after the answer: after the server computed it
    assert response.status_code == 200, response.text
    stats: dict[str, Any] = response.json()
    return stats


async def wait_for(
    server: DemoServer, predicate: Callable[[dict[str, Any]], bool], within: float, what: str = ""
) -> dict[str, Any]:
    """Poll ``/stats`` until ``predicate(stats)`` holds; fail after ``within`` seconds."""
    stats: dict[str, Any] = {}
    with trio.move_on_after(within):
        while True:
            stats = await fetch_stats(server)
            if predicate(stats):
                return stats
            await trio.sleep(POLL)
    raise AssertionError(f"{what or 'condition'} not met within {within} s; last stats: {stats}")


@dataclass(frozen=True)
class Baseline:
    """What an idle server looks like: its socket count and its task counts in ``/stats``."""

    sockets: int
    process_tasks: int
    session_tasks: int

    @classmethod
    async def measure(cls, server: DemoServer, samples: int = 10) -> Baseline:
        """Measure the quiet server: no session, no connection but the one asking for ``/stats``.

        Takes the least of several samples: the ``/stats`` request itself adds a task or two that come
        and go (hypercorn's keep-alive timer of its connection), and the previous sample's connection
        may still be closing when the sockets are counted.  ``assert_back_to_baseline`` polls until
        it sees these least values again.
        """
        sockets: list[int] = []
        process_tasks: list[int] = []
        session_tasks: list[int] = []
        for _ in range(samples):
            await trio.sleep(POLL)
            sockets.append(count_sockets(server.pid))
            stats = await fetch_stats(server)
            assert stats["sessions"] == 0, stats
            process_tasks.append(stats["process_tasks"])
            session_tasks.append(stats["session_tasks"])
        return cls(min(sockets), min(process_tasks), min(session_tasks))


async def assert_back_to_baseline(
    server: DemoServer, baseline: Baseline, within: float = 3.0
) -> tuple[int, dict[str, Any]]:
    """Within ``within`` seconds (a bounded settle loop): no session, stream, connection, request or
    session task left; the server holds as many sockets and runs as many tasks as at ``baseline``.

    Close every client connection to the server first: an idle keep-alive connection is a socket.
    Returns the last socket count and stats.
    """
    stats: dict[str, Any] = {}
    sockets = -1

    def settled() -> bool:
        return (
            sockets == baseline.sockets
            and stats["sessions"] == 0
            and stats["streams"] == 0
            and stats["connections"] == 0
            and stats["inflight"] == 0
            and stats["pending_responses"] == 0
            and stats["session_tasks"] == 0
            and stats.get("modern_inflight", 0) == 0
            and stats.get("listeners", 0) == 0
            and stats["process_tasks"] == baseline.process_tasks
        )

    with trio.move_on_after(within):
        while True:
            # Count first: the previous /stats connection has had the sleep to be released.
            await trio.sleep(POLL)
            sockets = count_sockets(server.pid)
            stats = await fetch_stats(server)
            if settled():
                return sockets, stats
    raise AssertionError(
        f"not back to baseline within {within} s: sockets {sockets} (baseline {baseline.sockets}, "
        f"tcp {tcp_states(server.pid)}), stats {stats}, baseline {baseline}\n"
        f"server stderr:\n{server.log()}"
    )


# -- an MCP client ----------------------------------------------------------------------------


@dataclass(eq=False)
class SSEResponse:
    """A streamed ``httpx`` response read as Server-Sent Events."""

    response: httpx.Response
    _chunks: AsyncIterator[bytes] | None = None
    _decoder: SSEDecoder = field(default_factory=SSEDecoder)
    _events: list[ServerSentEvent] = field(default_factory=list)
    ended: bool = False
    """The server ended the body cleanly (a protocol error raises instead)."""
    closed: bool = False
    """The client closed the response (:meth:`aclose`); nothing more can be read."""

    @property
    def status_code(self) -> int:
        return self.response.status_code

    async def next_event(self) -> ServerSentEvent | None:
        """The next event, or None once the server ended the body.  A body that ends without its
        proper end (a cut connection) raises ``httpx.RemoteProtocolError``."""
        if self.closed:
            raise RuntimeError("the response was closed by the client")
        if self._chunks is None:
            self._chunks = self.response.aiter_raw()
        while not self._events:
            if self.ended:
                return None
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self.ended = True
                self._events.extend(self._decoder.close())
                continue
            self._events.extend(self._decoder.feed(chunk))
        return self._events.pop(0)

    async def next_message(self) -> dict[str, Any] | None:
        """The next event with data, as JSON (None at the end of the body)."""
        while (event := await self.next_event()) is not None:
            if event.data:
                message: dict[str, Any] = json.loads(event.data)
                return message
        return None

    async def rest(self) -> list[ServerSentEvent]:
        """Every remaining event, until the server ends the body."""
        events = []
        while (event := await self.next_event()) is not None:
            events.append(event)
        return events

    async def aclose(self) -> None:
        """Close the response (if the body has not ended: drop the connection: a client disconnect)."""
        if self._chunks is not None and not self.ended:
            # httpx reads through a chain of async generators; ``aclose()`` on the outer one leaves the
            # inner ones to the garbage collector (a ResourceWarning each, encode/httpx#3686).  A read
            # in a cancelled scope instead unwinds the whole chain through its own exception handling
            # (httpcore closes the connection on the way).
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    while True:
                        await self._chunks.__anext__()
                except StopAsyncIteration:
                    self.ended = True
                except httpx.HTTPError:
                    pass
            self._chunks = None
        self.closed = True
        await self.response.aclose()


class MCPClient:
    """One MCP session over Streamable HTTP (2025-11-25), on an ``httpx.AsyncClient``.

    The ``httpx`` client (and its pool of keep-alive connections) is the caller's, so that a test can
    share one across sessions or give each its own.
    """

    def __init__(self, http: httpx.AsyncClient, url: str, *, host: str | None = None) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self._next_id = 1
        self._extra = {"host": host} if host else {}

    def headers(self, **more: str) -> dict[str, str]:
        headers = dict(self._extra)
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
            headers["mcp-protocol-version"] = VERSION
        headers.update(more)
        return headers

    def _request_id(self) -> int:
        request_id = self._next_id
        self._next_id += 1
        return request_id

    async def post_stream(self, message: dict[str, Any]) -> SSEResponse:
        request = self.http.build_request(
            "POST", self.url, content=json.dumps(message).encode(), headers=self.headers(**POST_HEADERS)
        )
        return SSEResponse(await self.http.send(request, stream=True))

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request; return its response message.  The SSE body must end right after it."""
        request_id = self._request_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        stream = await self.post_stream(message)
        try:
            assert stream.status_code == 200, (stream.status_code, await stream.response.aread())
            assert stream.response.headers["content-type"].startswith("text/event-stream")
            if method == "initialize":
                self.session_id = stream.response.headers["mcp-session-id"]
            while (answer := await stream.next_message()) is not None:
                if answer.get("id") == request_id and "method" not in answer:
                    break
            assert answer is not None, f"the stream of {method} ended without a response"
            assert await stream.rest() == [], "events after the response"
            assert stream.ended
        finally:
            await stream.aclose()
        return answer

    async def initialize(self) -> dict[str, Any]:
        params = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        answer = await self.request("initialize", params)
        assert answer["result"]["protocolVersion"] == VERSION, answer
        assert self.session_id
        return answer

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        response = await self.http.post(
            self.url, content=json.dumps(message).encode(), headers=self.headers(**POST_HEADERS)
        )
        assert response.status_code == 202, (response.status_code, response.text)

    async def initialized(self) -> None:
        await self.notify("notifications/initialized")

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await self.request("tools/call", {"name": name, "arguments": arguments})
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    async def echo(self, text: str) -> str:
        """Call the demo's ``echo`` tool; return the text it echoed."""
        result = await self.call_tool("echo", {"text": text})
        echoed: str = result["content"][0]["text"]
        return echoed

    async def start_tool_call(self, name: str, arguments: dict[str, Any]) -> SSEResponse:
        """Start a ``tools/call`` and return its open SSE stream (the caller reads and closes it)."""
        message = {
            "jsonrpc": "2.0",
            "id": self._request_id(),
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        stream = await self.post_stream(message)
        assert stream.status_code == 200, (stream.status_code, await stream.response.aread())
        return stream

    async def open_get(self, **headers: str) -> SSEResponse:
        """Open the standalone SSE stream and read its priming event (``id: 0-N``, empty data)."""
        request = self.http.build_request(
            "GET", self.url, headers=self.headers(accept="text/event-stream", **headers)
        )
        stream = SSEResponse(await self.http.send(request, stream=True))
        try:
            assert stream.status_code == 200, (stream.status_code, await stream.response.aread())
            priming = await stream.next_event()
            assert priming is not None and priming.data == "", priming
            assert priming.id is not None and priming.id.startswith("0-"), priming
        except BaseException:
            await stream.aclose()
            raise
        return stream

    async def delete(self) -> httpx.Response:
        response = await self.http.delete(self.url, headers=self.headers())
        assert response.status_code == 200, (response.status_code, response.text)
        return response

    async def status_of(self, method: str = "GET") -> int:
        """The status a plain request with this session's id gets now (404 once the session ended)."""
        headers = self.headers(accept="text/event-stream") if method == "GET" else self.headers()
        async with self.http.stream(method, self.url, headers=headers) as response:
            if response.status_code == 200 and method == "GET":
                return 200  # a live stream: leave it (closing it is a client disconnect)
            # Read the (short) body: closing with unread bytes makes the kernel reset the connection,
            # see test_leaks.test_client_reset_during_a_response_is_released.
            await response.aread()
            return response.status_code


@asynccontextmanager
async def http_client(**options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An ``httpx.AsyncClient`` for the tests: generous pool, a read timeout as a backstop only (the
    tests' own deadlines are much shorter)."""
    options.setdefault("timeout", httpx.Timeout(30.0))
    options.setdefault("limits", httpx.Limits(max_connections=200, max_keepalive_connections=50))
    async with httpx.AsyncClient(**options) as client:
        yield client


# -- scenarios ---------------------------------------------------------------------------------


@contextmanager
def coverage_paused() -> Iterator[None]:
    """Under ``coverage run`` (the test command), stop measuring coverage in this process for the
    block: for a volume loop of requests to a server in another process, where tracing the client's
    own code (httpx, h11, Trio) measures nothing and made the loop twice as slow.  Without coverage,
    does nothing."""
    try:
        import coverage
    except ImportError:  # pragma: no cover - coverage is a dev dependency
        yield
        return
    current = coverage.Coverage.current()
    if current is None:
        yield
        return
    current.stop()
    try:
        yield
    finally:
        current.start()


async def full_session(http: httpx.AsyncClient, url: str, n: int) -> None:
    """initialize, initialized, GET (kept open), tools/call, DELETE; the GET must then end cleanly."""
    client = MCPClient(http, url)
    with trio.fail_after(STEP):
        await client.initialize()
        await client.initialized()
        get = await client.open_get()
    try:
        with trio.fail_after(STEP):
            result = await client.call_tool("echo", {"text": f"hello {n}"})
        assert result["content"][0]["text"] == f"hello {n}", result
        with trio.fail_after(STEP):
            await client.delete()
        with trio.fail_after(STEP):
            leftover = await get.rest()  # raises httpx.RemoteProtocolError if the body is cut
        assert get.ended and leftover == [], leftover
    finally:
        await get.aclose()


async def end_cleanly(stream: SSEResponse, within: float) -> list[str]:
    """Read ``stream`` to its end within ``within`` seconds; return the data of the events on the way."""
    with trio.fail_after(within):
        events = await stream.rest()
    assert stream.ended
    return [event.data for event in events]


# -- in-process servers: tasks and raw sockets -------------------------------------------------


def tasks_named(name_suffix: str) -> list[trio.lowlevel.Task]:
    """Every live task of this Trio run whose name ends with ``name_suffix``."""
    found = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None:
            continue
        if task.name.endswith(name_suffix):
            found.append(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


def count_tasks(name_suffix: str) -> int:
    return len(tasks_named(name_suffix))


def fast_path_idle_timers() -> tuple[int, int]:
    """(connections reading, of which idle) under the hypercorn fast path of the servers of this
    process: each connection's idle timer is the deadline of its read loop (no task of its own), and
    each server's ``WorkerContext.terminated`` holds the timers of its connections while they read."""
    import gc

    from mcp_trio._http.hypercorn_fast_path import Terminated

    timers = [t for o in gc.get_objects() if isinstance(o, Terminated) for t in o.timers]
    return len(timers), sum(t.deadline != math.inf for t in timers)


async def wait_until(predicate: Callable[[], bool], within: float, poll: float = 0.005) -> float:
    """Poll ``predicate`` (bounded in time and count); return how long it took to become true."""
    start = trio.current_time()
    for _ in range(int(within / poll) + 1):
        if predicate():
            return trio.current_time() - start
        await trio.sleep(poll)
    raise AssertionError(f"condition not met within {within} s")


async def read_until(stream: trio.SocketStream, buffer: bytearray, end: bytes) -> bytes:
    """Read until ``end`` is in ``buffer``; return and consume everything up to and including it."""
    for _ in range(1000):
        index = buffer.find(end)
        if index >= 0:
            message = bytes(buffer[: index + len(end)])
            del buffer[: index + len(end)]
            return message
        data = await stream.receive_some(65536)
        if not data:
            raise AssertionError(f"connection closed before {end!r}; got {bytes(buffer)!r}")
        buffer += data
    raise AssertionError("response too long")
