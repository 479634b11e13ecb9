"""Every code sample of the documentation runs, and does what its page says.

1. The tutorial's files in ``docs/examples/`` (which ``docs/tutorial.md`` shows with ``{literalinclude}``):
   ``tutorial_server.py`` and ``mcp-trio serve tutorial_server:server`` are started as the reader would
   (subprocesses on a free port of 127.0.0.1), ``tutorial_client.py`` talks to each and must print
   exactly ``tutorial_client.txt`` (the output the page shows), each server must stop gracefully on
   SIGINT; and the tests of ``test_tutorial.py`` run here as tests of this module
   (``test_tutorial__*``).  Every ``{literalinclude}`` of the pages must name a file and markers that
   exist.

2. Every fenced ```` ```python ```` block of ``README.md`` and ``docs/**/*.md`` is a test case, its id
   the page and the line of its opening fence (``docs/embedded-server.md:7``).  The block is compiled
   with the page as its file name and its own line numbers (a traceback points into the page), and run
   in a fresh namespace as ``__main__``, with:

   - ``print`` captured, and ``trio.run(fn, *args)`` recorded instead of run: the test runs ``fn`` in
     its own Trio run, under a deadline;
   - port 8000 replaced: a block that builds an ``MCPServer`` or an ``MCPApp`` serves on a free port;
     any other block is a client, pointed at the demo server (``mcp_trio.demo``) served in this process
     on a free port.  A block that names another host than 127.0.0.1 fails.

   A server block's recorded runs are started (they serve), or if it records none its ``MCPApp`` (or
   ``MCPServer``) is served; then mcp_trio's client talks to it in each era (a 2025 session, and
   2026-07-28): the era, the server's name and its tool list are checked.  A client block's runs (or
   its ``main``) run to their end.  ``EXPECTATIONS`` adds what a page promises of a block (a tool's
   result, what it prints), found by page and a marker string of the block.

   A block that imports the python-sdk (``mcp``, the ``sdk`` extra) is skipped where it is not
   installed (the run with the lowest dependencies).

   A block that cannot run on its own is marked on its page by an HTML comment on the line before its
   fence, which MyST and GitHub do not render::

       <!-- fragment: why it cannot run on its own -->

   A fragment must still compile as the body of an ``async def`` (it is dedented first); it is not run.
   Code that is not Python at all (a signature listing) belongs in a ```` ```text ```` block.  Only
   ```` ```python ```` (or ``py``, ``python3``) fences are collected, not MyST directives such as
   ```` ```{code-block} python ````.

3. ``docs/examples/client_telemetry.py`` (a client with OpenTelemetry's SDK set up) runs in its own
   process against the demo served in this one: its spans, printed by the console exporter, are the
   parents of this process's server spans.

Every wait is bounded (``trio.fail_after``), every socket is on 127.0.0.1, and everything started is
stopped by the end of its test.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Literal

import httpx
import mcp_types as mt
import pytest
import trio

import mcp_trio
from mcp_trio import (
    ClientSession,
    MCPApp,
    MCPServer,
    ServerConfig,
    open_client_session,
    serve,
)
from mcp_trio.demo import build_demo_server
from tests.otel import SpanLog

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
SRC = Path(mcp_trio.__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)])
SAMPLE_DEADLINE = 20.0
"""Seconds one sample gets, from its exec to the end of its checks."""
STARTUP_DEADLINE = 15.0
"""Seconds a server subprocess gets to print its URL (an interpreter start and mcp_trio's imports)."""

# The client reads an SSE answer through httpx's chain of async generators and closes only the outer
# one; the inner ones are left to the garbage collector, which warns (encode/httpx#3686; see
# tests/client/conftest.py).  Only those warnings are ignored.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx|httpcore)\.[A-Za-z0-9_.]+' was garbage collected:ResourceWarning"
)


# -- the examples of the tutorial -------------------------------------------------------------


def _load(name: str) -> ModuleType:
    """Import ``docs/examples/NAME.py`` as the top-level module ``NAME`` (as it is next to its siblings)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tutorial_server = _load("tutorial_server")
ticker_app = _load("ticker_app")  # docs/lifespan.md's blocks import it, as its directory would let them
tutorial_client = _load("tutorial_client")
_tutorial_tests = _load("test_tutorial")
# The tutorial's own tests (and their fixtures ``url`` and ``mode``) are tests of this module.
for _name, _value in vars(_tutorial_tests).items():
    if _name.startswith("test_"):
        globals()["test_tutorial__" + _name.removeprefix("test_")] = _value
    elif _name in ("url", "mode"):
        globals()[_name] = _value

TUTORIAL_FILES = {"tutorial_server.py", "tutorial_client.py", "test_tutorial.py", "tutorial_client.txt"}
"""The files of docs/examples/ the tutorial shows."""
EXAMPLE_FILES = TUTORIAL_FILES | {"client_telemetry.py", "ticker_app.py"}
"""Every file of docs/examples/, each run (or compared) by a test of this module."""


def test_every_example_file_is_tested() -> None:
    found = {p.name for p in EXAMPLES.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert found == EXAMPLE_FILES, "a new file in docs/examples/ needs a test in tests/docs/test_samples.py"


def _subprocess_env() -> dict[str, str]:
    """The environment of a child: the same mcp_trio as this test run, whether installed or not."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(SRC) + (os.pathsep + path if path else "")}


@dataclass
class ServerProcess:
    process: trio.Process
    stderr: IO[bytes]
    url: str = ""
    stdout: bytes = b""

    def log(self) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]

    async def read_url(self, prefix: bytes) -> None:
        """Read stdout until the line ``PREFIX URL``."""
        assert self.process.stdout is not None
        with trio.move_on_after(STARTUP_DEADLINE):
            while not re.search(re.escape(prefix) + rb"(\S+)\n", self.stdout):
                chunk = await self.process.stdout.receive_some(4096)
                if not chunk:
                    break
                self.stdout += chunk
        found = re.search(re.escape(prefix) + rb"(\S+)\n", self.stdout)
        assert found, f"no {prefix!r} line; stdout {self.stdout!r}; stderr:\n{self.log()}"
        self.url = found.group(1).decode()

    async def stop(self) -> None:
        """SIGINT, then the process must exit by itself with status 0 (a graceful stop)."""
        self.process.send_signal(signal.SIGINT)
        with trio.move_on_after(10):
            await self.process.wait()
        assert self.process.returncode == 0, f"exit status {self.process.returncode}; stderr:\n{self.log()}"
        assert self.process.stdout is not None
        with trio.move_on_after(2):
            while chunk := await self.process.stdout.receive_some(4096):
                self.stdout += chunk


MCP_TRIO = (sys.executable, "-c", "from mcp_trio._cli import main; main()")
"""The ``mcp-trio`` command of this interpreter (the console script may belong to another one)."""


async def _start(command: list[str], stderr: IO[bytes], stack: list[ServerProcess]) -> ServerProcess:
    process = await trio.lowlevel.open_process(
        command, cwd=EXAMPLES, env=_subprocess_env(), stdout=subprocess.PIPE, stderr=stderr
    )
    server = ServerProcess(process, stderr)
    stack.append(server)
    return server


@pytest.mark.deadline(STARTUP_DEADLINE + 45)
async def test_tutorial_scripts_run_as_the_page_says(capsys: pytest.CaptureFixture[str]) -> None:
    """``python tutorial_server.py`` and ``mcp-trio serve tutorial_server:server`` both serve the notes
    server; ``tutorial_client.py`` (as a script against the one, in this process against the other)
    prints what the page shows; both servers stop gracefully on SIGINT."""
    expected = (EXAMPLES / "tutorial_client.txt").read_text()
    servers: list[ServerProcess] = []
    with tempfile.TemporaryFile() as script_log, tempfile.TemporaryFile() as cli_log:
        try:
            await _run_tutorial_scripts(servers, (script_log, cli_log), expected, capsys)
        finally:
            for server in servers:
                if server.process.returncode is None:
                    server.process.kill()
                    with trio.CancelScope(shield=True), trio.move_on_after(5):
                        await server.process.wait()
                if server.process.stdout is not None:
                    await server.process.stdout.aclose()


async def _run_tutorial_scripts(
    servers: list[ServerProcess],
    logs: tuple[IO[bytes], IO[bytes]],
    expected: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with trio.fail_after(STARTUP_DEADLINE + 45):
        script = await _start([sys.executable, "tutorial_server.py", "127.0.0.1:0"], logs[0], servers)
        cli = await _start(
            [*MCP_TRIO, "serve", "tutorial_server:server", "--bind", "127.0.0.1:0"], logs[1], servers
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(script.read_url, b"serving on ")
            nursery.start_soon(cli.read_url, b"mcp-trio: serving on ")
        assert script.url.startswith("http://127.0.0.1:") and script.url.endswith("/mcp")
        assert cli.url.startswith("http://127.0.0.1:") and cli.url.endswith("/mcp")

        async def run_client_script() -> None:
            done = await trio.run_process(
                [sys.executable, "tutorial_client.py", script.url],
                cwd=EXAMPLES,
                env=_subprocess_env(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
            assert done.stdout.decode() == expected

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_client_script)
            await tutorial_client.main(cli.url)
        assert capsys.readouterr().out == expected

        await script.stop()
        await cli.stop()
        assert cli.stdout.endswith(b"mcp-trio: stopped\n")


# -- the ticker app of docs/lifespan.md (docs/examples/ticker_app.py) ----------------------------


@pytest.mark.deadline(STARTUP_DEADLINE + 30)
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
async def test_the_ticker_program_ends_with_its_own_task_on_a_signal(stop: int) -> None:
    """``python ticker_app.py``: its lifespan's ticker counts while it serves, and Ctrl-C or SIGTERM
    end the whole program (the server gracefully, then the program's own task), exit status 0, the
    lifespan's last line printed."""
    servers: list[ServerProcess] = []
    with tempfile.TemporaryFile() as log:
        try:
            with trio.fail_after(STARTUP_DEADLINE + 25):
                program = await _start([sys.executable, "ticker_app.py", "127.0.0.1:0"], log, servers)
                await program.read_url(b"serving on ")
                async with open_client_session(program.url) as session:
                    first = await _ticks(session)
                    for _ in range(40):  # it ticks once a second
                        await trio.sleep(0.25)
                        if await _ticks(session) > first:
                            break
                    else:
                        raise AssertionError(f"the ticker did not tick: still {first}")
                program.process.send_signal(stop)
                with trio.fail_after(10):
                    code = await program.process.wait()
                assert code == 0, program.log()
                assert re.search(r"ticker stopped after [1-9]\d* ticks", program.log()), program.log()
        finally:
            for server in servers:
                if server.process.returncode is None:
                    server.process.kill()
                    with trio.CancelScope(shield=True), trio.move_on_after(5):
                        await server.process.wait()
                if server.process.stdout is not None:
                    await server.process.stdout.aclose()


async def _ticks(session: ClientSession) -> int:
    (block,) = (await session.call_tool("ticks", {})).content
    assert isinstance(block, mt.TextContent)
    return int(block.text)


# -- the client's telemetry (docs/examples/client_telemetry.py) -------------------------------


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects printed one after another (the console exporters' output)."""
    decoder = json.JSONDecoder()
    found, at = [], text.find("{")
    while at != -1:
        value, end = decoder.raw_decode(text, at)
        found.append(value)
        at = text.find("{", end)
    return found


@pytest.mark.deadline(60)
async def test_the_client_telemetry_example_is_the_parent_of_the_servers_spans(
    demo: Demo, spans: SpanLog
) -> None:
    """``client_telemetry.py`` in its own process (no ``OTEL_*`` variable: the console exporters): its
    spans under its own span, and this process's server spans their children (the trace context
    crossed the process boundary in ``params._meta``), and both client histograms exported."""
    env = {k: v for k, v in _subprocess_env().items() if not k.startswith("OTEL_")}
    command = [sys.executable, str(EXAMPLES / "client_telemetry.py"), demo.url]
    done = await trio.run_process(command, capture_stdout=True, capture_stderr=True, env=env)
    out = done.stdout.decode()
    assert out.startswith("echo: traced\n")
    printed = json_objects(out)
    by_name = {item["name"]: item for item in printed if "context" in item}
    root, call = by_name["answer the user"], by_name["tools/call echo"]
    assert call["kind"] == "SpanKind.CLIENT" and call["parent_id"] == root["context"]["span_id"]
    assert call["attributes"]["gen_ai.tool.name"] == "echo"
    from opentelemetry.trace import SpanKind

    (served,) = [s for s in spans.named("tools/call echo") if s.kind is SpanKind.SERVER]
    assert served.parent is not None
    assert f"0x{served.parent.span_id:016x}" == call["context"]["span_id"]
    assert f"0x{served.context.trace_id:032x}" == root["context"]["trace_id"]
    metric_names = {
        metric["name"]
        for item in printed
        for resource in item.get("resource_metrics", ())
        for scope in resource["scope_metrics"]
        for metric in scope["metrics"]
    }
    assert {"mcp.client.operation.duration", "mcp.client.session.duration"} <= metric_names


# -- {literalinclude} ---------------------------------------------------------------------------

INCLUDE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{literalinclude\}\s+(?P<path>\S+)\s*$")
OPTION = re.compile(r"^:(?P<name>[a-z-]+):\s*(?P<value>.*)$")


def _includes() -> Iterator[tuple[str, Path, dict[str, str]]]:
    for page in PAGES:
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            found = INCLUDE.match(line.strip())
            if not found:
                continue
            options = {}
            for option_line in lines[number:]:
                option = OPTION.match(option_line.strip())
                if not option:
                    break
                value = option["value"].strip()
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = ast.literal_eval(value)
                options[option["name"]] = value
            yield f"{page.relative_to(ROOT)}:{number}", page.parent / found["path"], options


INCLUDES = list(_includes())


@pytest.mark.parametrize(("where", "path", "options"), INCLUDES, ids=[where for where, _, _ in INCLUDES])
def test_literalinclude_names_what_exists(where: str, path: Path, options: dict[str, str]) -> None:
    assert path.is_file(), f"{where}: no file {path}"
    lines = path.read_text().splitlines()
    for name in ("start-at", "start-after", "end-at", "end-before"):
        if name in options:
            hits = [line for line in lines if options[name] in line]
            assert len(hits) == 1, (
                f"{where}: :{name}: {options[name]!r} is on {len(hits)} lines of {path.name}"
            )


def test_the_tutorial_shows_the_example_files() -> None:
    shown = {path.name for where, path, _ in INCLUDES if where.startswith("docs/tutorial.md:")}
    assert shown == TUTORIAL_FILES


# -- the fenced python blocks of the pages ----------------------------------------------------

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
FRAGMENT = re.compile(r"^\s*<!--\s*fragment\b:?\s*(?P<why>.*?)\s*-->\s*$")
PYTHON = {"python", "py", "python3"}


@dataclass(frozen=True)
class Sample:
    page: str
    """Relative to the repository root."""
    line: int
    """The line of the opening fence (1-based); the code starts on the next one."""
    code: str
    fragment: str | None
    """Why the block is a fragment (``<!-- fragment: why -->``), or None."""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}" + (":fragment" if self.fragment is not None else "")


def collect(page: Path) -> list[Sample]:
    samples = []
    lines = page.read_text().splitlines()
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        number += 1
        if not opening:
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        start = number
        while number < len(lines) and not re.fullmatch(
            rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*", lines[number]
        ):
            number += 1
        body = lines[start:number]
        number += 1
        words = opening["info"].split()
        if not words or words[0] not in PYTHON:
            continue
        before = next((line for line in reversed(lines[: start - 1]) if line.strip()), "")
        marker = FRAGMENT.match(before)
        code = "\n".join(line[indent:] if not line[:indent].strip() else line.lstrip() for line in body)
        samples.append(
            Sample(str(page.relative_to(ROOT)), start, code + "\n", marker["why"] if marker else None)
        )
    return samples


SAMPLES = [sample for page in PAGES for sample in collect(page)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_listening(port: int) -> None:
    while True:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.02)
        else:
            await stream.aclose()
            return


class Output:
    """What a sample printed."""

    def __init__(self) -> None:
        self.text = ""
        self._printed = trio.Event()

    def print(self, *args: object, sep: str | None = " ", end: str | None = "\n", **_: object) -> None:
        self.text += (" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end)
        self._printed.set()
        self._printed = trio.Event()

    async def wait_for(self, text: str) -> None:
        """Until ``text`` has been printed."""
        while text not in self.text:
            await self._printed.wait()


@dataclass
class Demo:
    """The demo server in this process, stopped gracefully by ``stop``."""

    app: MCPApp
    url: str
    stop: trio.Event


@pytest.fixture
async def demo() -> AsyncIterator[Demo]:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        run = functools.partial(serve, app, "127.0.0.1", 0, shutdown_trigger=stop.wait)
        urls = await nursery.start(run)
        yield Demo(app, urls[0], stop)
        stop.set()


@dataclass
class Run:
    """One sample being run, as its checks see it."""

    sample: Sample
    output: Output
    port: int
    url: str
    namespace: dict[str, Any]
    demo: Demo | None = None
    session: ClientSession | None = None
    """Server samples: a session with the sample's server, in the era being checked."""


Check = Callable[[Run], Awaitable[None]]


@dataclass(frozen=True)
class Expect:
    """What a page promises of one of its blocks (the one whose code contains ``marker``)."""

    page: str
    marker: str
    check: Check | None = None
    """Server blocks: called in each era with ``run.session``.  Client blocks: called once they ran."""
    driver: Check | None = None
    """Client blocks: runs next to the block's own code (to act on the server while it runs)."""

    def matches(self, sample: Sample) -> bool:
        return sample.page == self.page and self.marker in sample.code


def texts(result: mt.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, mt.TextContent)]


async def _forecast(run: Run) -> None:
    """The forecast tool reports its progress and returns the forecast, in both eras."""
    assert run.session is not None
    progress: list[tuple[float, float | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total))

    result = await run.session.call_tool("forecast", {"city": "Paris", "days": 2}, progress=on_progress)
    assert texts(result) == ["Paris: sunny for 2 days"]
    assert progress == [(1, 2), (2, 2)]


async def _readme_client(run: Run) -> None:
    """Prints the demo's tool names and the echo of "hi"."""
    assert run.demo is not None
    names, _, echoed = run.output.text.rstrip("\n").rpartition("] ")
    assert echoed == "hi"
    async with open_client_session(run.demo.url) as session:
        listed = [tool.name for tool in (await session.list_tools()).tools]
    assert ast.literal_eval(names + "]") == listed


async def _task_client(run: Run) -> None:
    """The call became a task: its statuses, then the tool's answer."""
    assert run.output.text == "task working\ntask completed\nComputed the report after 1 s\n", run.output.text


async def _build_report(run: Run) -> None:
    """A 2026 client gets a task, answers the question inside it, and gets the report; a 2025 one the
    same result without a task."""
    assert run.session is not None

    def drafts(params: mt.ElicitRequestParams) -> mt.ElicitResult:
        return mt.ElicitResult(action="accept", content={"drafts": True})

    mode = "modern" if run.session.modern else "legacy"
    async with open_client_session(run.url, elicitation=drafts, mode=mode) as session:
        statuses: list[str] = []
        result = await session.call_tool(
            "build_report", {"month": "May"}, on_task_status=lambda task: statuses.append(task.status)
        )
    assert texts(result) == ["Report for May built (with drafts)"]
    if session.modern:  # created working, or already asking (the task may run ahead of its answer)
        assert statuses[0] in ("working", "input_required") and statuses[-1] == "completed", statuses
        assert "input_required" in statuses, statuses
    else:
        assert statuses == []


async def _embedded(run: Run) -> None:
    """Prints the endpoint it serves (the comment shows it for port 8000)."""
    assert run.output.text == f"serving on ['http://127.0.0.1:{run.port}/mcp']\n"
    assert run.session is not None
    assert (await run.session.list_tools()).tools == []


async def _listening(run: Run) -> None:
    """The port was free: it prints the endpoint clients connect to, and serves it."""
    assert run.output.text == f"clients connect to http://127.0.0.1:{run.port}/mcp\n"
    assert run.session is not None


async def _get(url: str) -> tuple[int, str]:
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    return response.status_code, response.text


async def _starlette_mount(run: Run) -> None:
    """The MCP app answers through the mount (its lifespan started it); the framework's route beside it."""
    assert run.session is not None
    assert texts(await run.session.call_tool("forecast", {"city": "Paris"})) == ["Paris: sunny"]
    assert await _get(f"http://127.0.0.1:{run.port}/health") == (200, "ok")
    assert run.output.text == f"MCP on http://127.0.0.1:{run.port}/mcp\n"


async def _asgi_router(run: Run) -> None:
    """The router sends /mcp (and the lifespan) to the MCP app, the rest elsewhere."""
    assert run.session is not None
    assert texts(await run.session.call_tool("hello", {"name": "Trio"})) == ["hello, Trio"]
    assert await _get(f"http://127.0.0.1:{run.port}/") == (200, "not MCP")
    assert await _get(f"http://127.0.0.1:{run.port}/elsewhere") == (200, "not MCP")


async def _ticker(run: Run) -> None:
    """The ticker app served from a ``trio.run`` of one's own: its lifespan runs, its tool reads the
    value."""
    assert run.session is not None
    assert ticker_app.server.lifespan_context.ticks >= 0
    assert (await _ticks(run.session)) >= 0


async def _listen_driver(run: Run) -> None:
    """Once the subscription is acknowledged, change the demo's tools, then shut the demo down."""
    assert run.demo is not None
    await run.output.wait_for("}\n")
    async with open_client_session(run.demo.url) as session:
        await session.call_tool("test_trigger_tool_change")
    await run.output.wait_for("notifications/tools/list_changed\n")
    run.demo.stop.set()  # a graceful shutdown ends the subscription with its completion result


async def _listen(run: Run) -> None:
    """Prints the filter, the notification, and that the server ended the subscription gracefully."""
    acknowledged, notification, graceful = run.output.text.splitlines()
    assert ast.literal_eval(acknowledged) == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["file:///config.json"],
    }
    assert notification == "notifications/tools/list_changed"
    assert graceful == "True"


EXPECTATIONS = [
    Expect("README.md", "async def forecast", check=_forecast),
    Expect("docs/index.md", "async def forecast", check=_forecast),
    Expect("README.md", "open_client_session(", check=_readme_client),
    Expect("docs/embedded-server.md", 'http="h11"', check=_embedded),
    Expect("docs/embedded-server.md", 'Mount("/", app=mcp)', check=_starlette_mount),
    Expect("docs/embedded-server.md", "except ListenError", check=_listening),
    Expect("docs/embedded-server.md", "async def router", check=_asgi_router),
    Expect("docs/client.md", "session.listen(", check=_listen, driver=_listen_driver),
    Expect("docs/tasks.md", 'on_task_status=lambda task: print("task", task.status)', check=_task_client),
    Expect("docs/tasks.md", "async def build_report", check=_build_report),
    Expect("docs/lifespan.md", "from ticker_app import server", check=_ticker),
    Expect("docs/hosting.md", "async def forecast", check=_forecast),  # a python-sdk server, hosted
]


def test_every_expectation_finds_its_block() -> None:
    for expect in EXPECTATIONS:
        found = [sample.id for sample in SAMPLES if expect.matches(sample)]
        assert len(found) == 1, f"{expect.page} / {expect.marker!r}: {found}"


def _sample_server(namespace: dict[str, Any]) -> tuple[MCPApp | None, MCPServer | None]:
    apps = [value for value in namespace.values() if isinstance(value, MCPApp)]
    servers = [value for value in namespace.values() if isinstance(value, MCPServer)]
    if apps:
        return apps[0], apps[0].server
    return None, servers[0] if servers else None


async def _exercise(run: Run, server: MCPServer, expect: Expect | None) -> None:
    """Talk to a sample's server in each era."""
    tools: dict[str, list[str]] = {}
    eras: tuple[tuple[Literal["legacy", "auto"], str], ...] = (
        ("legacy", "2025-11-25"),
        ("auto", "2026-07-28"),
    )
    for mode, version in eras:
        async with open_client_session(run.url, mode=mode) as session:
            assert session.protocol_version == version
            assert session.server_info.get("name") == server.name
            tools[mode] = [tool.name for tool in (await session.list_tools()).tools]
            if expect is not None and expect.check is not None:
                run.session = session
                await expect.check(run)
                run.session = None
    assert tools["legacy"] == tools["auto"]


@pytest.mark.parametrize("sample", SAMPLES, ids=[sample.id for sample in SAMPLES])
async def test_sample(sample: Sample, demo: Demo, monkeypatch: pytest.MonkeyPatch) -> None:
    if sample.fragment is not None:
        assert sample.fragment, f"{sample.id}: say why it is a fragment: <!-- fragment: why -->"
        body = textwrap.indent(textwrap.dedent(sample.code), "    ")
        compile(f"async def fragment():\n{body}", sample.page, "exec")
        return
    for host in ("0.0.0.0", "[::]", "localhost"):
        assert host not in sample.code, f"{sample.id}: samples are run here, so they use 127.0.0.1 only"
    is_server = "MCPServer(" in sample.code or "MCPApp(" in sample.code
    port = free_port() if is_server else int(demo.url.split(":")[2].split("/")[0])
    code = re.sub(r"\b8000\b", str(port), sample.code)
    output = Output()
    runs: list[tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]] = []

    def record_run(fn: Callable[..., Awaitable[Any]], *args: Any, **_: Any) -> None:
        runs.append((fn, args))

    namespace: dict[str, Any] = {"__name__": "__main__", "print": output.print}
    run = Run(sample, output, port, f"http://127.0.0.1:{port}/mcp", namespace, None if is_server else demo)
    expect = next((expect for expect in EXPECTATIONS if expect.matches(sample)), None)
    with trio.fail_after(SAMPLE_DEADLINE):
        with monkeypatch.context() as patch:
            patch.setattr(trio, "run", record_run)
            exec(compile("\n" * sample.line + code, sample.page, "exec"), namespace)
        main = namespace.get("main")
        if not runs and callable(main):
            runs.append((main, ()))
        app, server = _sample_server(namespace)
        if server is not None:
            async with trio.open_nursery() as nursery:
                if runs:
                    for fn, args in runs:
                        nursery.start_soon(fn, *args)
                    await wait_listening(port)
                else:
                    await nursery.start(functools.partial(serve, app or MCPApp(server), "127.0.0.1", port))
                await _exercise(run, server, expect)
                nursery.cancel_scope.cancel()
        else:
            assert runs, f"{sample.id}: neither a server nor anything to run (mark it as a fragment?)"
            async with trio.open_nursery() as nursery:
                if expect is not None and expect.driver is not None:
                    nursery.start_soon(expect.driver, run)
                for fn, args in runs:
                    await fn(*args)
            if expect is not None and expect.check is not None:
                await expect.check(run)
