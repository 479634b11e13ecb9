"""``MCPServer(lifespan=...)``: the app's state and tasks, run by whatever serves the server.

Real sockets where users meet it: ``serve()`` on 127.0.0.1 with both HTTP servers (Streamable HTTP in
both eras, and WebSocket), an app mounted under Starlette served by hypercorn; in memory for the ASGI
lifespan messages and stdio.  What is checked: the value each kind of handler sees
(``Context[AppState]``), that nothing is served before the lifespan is entered and that it is left after
the drain (a call in flight finishes first), that its code after ``yield`` runs uncancelled after a
graceful stop (and is cancelled, with a warning, when it overstays), and that a failure (entering it
raises, or an app task crashes later) stops the server and is raised as itself, or reported in
``lifespan.startup.failed`` / ``lifespan.shutdown.failed``.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import trio
import trio.testing

from mcp_trio import (
    Context,
    MCPApp,
    MCPServer,
    ServerConfig,
    open_client_session,
    open_websocket_client,
    serve,
    serve_stdio,
)
from mcp_trio._app.lifespan import Phase
from mcp_trio.testing import open_asgi_client

from .conftest import Client

HTTP = ["hypercorn", "h11"]
Http = Literal["hypercorn", "h11"]
TICK = 0.01
"""Seconds between two ticks of the test's ticker."""


@dataclass
class AppState:
    note: Callable[[str], None]
    ticks: int = 0
    exited: bool = False


@dataclass
class Ticker:
    """A server whose lifespan runs a ticker, and what happened to it (``events``, in order)."""

    fail_on_enter: bool = False
    crash_after: int | None = None
    """Ticks after which the ticker raises ``KeyError('tick crashed')``."""
    cancel_after_yield: bool = True
    cleanup: float = 0.0
    """Seconds the code after ``yield`` sleeps (cleanup that takes time)."""
    entered: trio.Event = field(default_factory=trio.Event)
    release: trio.Event | None = None
    """Entering waits for it, if set."""
    events: list[str] = field(default_factory=list)
    state: AppState | None = None
    changed: trio.Event = field(default_factory=trio.Event)
    """Set (and replaced) whenever an event or a tick happens."""

    def note(self, event: str | None = None) -> None:
        if event is not None:
            self.events.append(event)
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, event: str) -> None:
        with trio.fail_after(5):
            while event not in self.events:
                await self.changed.wait()

    async def wait_ticks(self, count: int) -> None:
        with trio.fail_after(5):
            while self.state is None or self.state.ticks < count:
                await self.changed.wait()

    @asynccontextmanager
    async def lifespan(self, server: MCPServer) -> AsyncIterator[AppState]:
        self.note("enter")
        if self.release is not None:
            await self.release.wait()
        if self.fail_on_enter:
            raise ValueError("no database")
        state = self.state = AppState(note=self.note)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._tick, state)
                self.entered.set()
                yield state
                self.note("after yield")
                if self.cancel_after_yield:
                    nursery.cancel_scope.cancel()
            await trio.sleep(self.cleanup)
            self.note("cleaned up")
        except BaseException as exc:
            if isinstance(exc, trio.Cancelled) or (
                isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None
            ):
                self.note("exit cancelled")
            raise
        finally:
            state.exited = True

    async def _tick(self, state: AppState) -> None:
        while True:
            await trio.sleep(TICK)
            state.ticks += 1
            self.note()
            if self.crash_after is not None and state.ticks >= self.crash_after:
                raise KeyError("tick crashed")

    def server(self) -> MCPServer[AppState]:
        server = MCPServer("ticker", lifespan=self.lifespan)

        @server.tool()
        async def ticks(ctx: Context[AppState]) -> str:
            return str(ctx.lifespan_context.ticks)

        @server.tool()
        async def slow(ctx: Context[AppState], seconds: float) -> str:
            ctx.lifespan_context.note("slow call started")
            await trio.sleep(seconds)
            ctx.lifespan_context.note("slow call finished")
            return f"exited: {ctx.lifespan_context.exited}"

        @server.resource("ticker://ticks")
        async def ticks_resource(ctx: Context[AppState]) -> str:
            return str(ctx.lifespan_context.ticks)

        @server.resource("ticker://ticks/{scale}")
        async def scaled(scale: str, ctx: Context[AppState]) -> str:
            return str(ctx.lifespan_context.ticks * int(scale))

        @server.prompt()
        async def about(ctx: Context[AppState], question: str) -> str:
            return f"{ctx.lifespan_context.ticks} ticks. {question}"

        return server


def text(result: Any) -> str:
    (block,) = result.content
    return str(block.text)


# -- the value, as handlers see it -------------------------------------------------------------


def test_a_subscripted_context_parameter_is_the_context_in_every_kind_of_handler() -> None:
    server = Ticker().server()
    tools = {spec.definition.name: spec for spec in server._tools.values()}
    assert tools["ticks"].context_param == "ctx"
    assert tools["ticks"].definition.input_schema.get("properties", {}) == {}
    assert list(tools["slow"].definition.input_schema["properties"]) == ["seconds"]
    assert server._resources["ticker://ticks"].context_param == "ctx"
    assert server._templates["ticker://ticks/{scale}"].context_param == "ctx"
    prompt = server._prompts["about"]
    assert prompt.context_param == "ctx"
    assert [argument.name for argument in prompt.arguments] == ["question"]


@pytest.mark.parametrize("http", HTTP)
@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_tools_resources_and_prompts_see_the_lifespan_value(http: Http, mode: str) -> None:
    ticker = Ticker()
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            functools.partial(serve, app, "127.0.0.1", 0, http=http, shutdown_trigger=stop.wait)
        )
        assert ticker.state is not None
        await ticker.wait_ticks(2)
        async with open_client_session(urls[0], mode=mode) as session:  # type: ignore[arg-type]
            seen = int(text(await session.call_tool("ticks", {})))
            assert seen >= 2
            await ticker.wait_ticks(seen + 1)  # the app's task goes on between requests
            read = await session.read_resource("ticker://ticks")
            assert int(read.contents[0].text) > seen  # type: ignore[union-attr]
            scaled = await session.read_resource("ticker://ticks/1000")
            assert int(scaled.contents[0].text) >= 1000 * seen  # type: ignore[union-attr]
            prompt = await session.get_prompt("about", {"question": "Alive?"})
            assert prompt.messages[0].content.text.endswith(" ticks. Alive?")  # type: ignore[union-attr]
        stop.set()
    assert ticker.events == ["enter", "after yield", "cleaned up"]


@pytest.mark.parametrize("http", HTTP)
async def test_a_websocket_connection_sees_the_lifespan_value(http: Http) -> None:
    ticker = Ticker()
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            functools.partial(serve, app, "127.0.0.1", 0, http=http, shutdown_trigger=stop.wait)
        )
        assert ticker.state is not None
        await ticker.wait_ticks(1)
        async with open_websocket_client(urls[0]) as session:
            assert int(text(await session.call_tool("ticks", {}))) >= 1
        stop.set()
    assert ticker.events[-1] == "cleaned up"


async def test_without_a_lifespan_the_value_is_none_and_the_server_runs_in_several_apps_at_once() -> None:
    server = MCPServer("plain")
    seen: list[object] = []

    @server.tool()
    async def look(ctx: Context) -> str:
        seen.append(ctx.lifespan_context)
        return "ok"

    third = MCPApp(server)
    async with MCPApp(server).running(), MCPApp(server).running():
        assert server.lifespan_context is None
        async with open_asgi_client(third) as client:
            mcp = Client(client, third)
            await mcp.initialize()
            answer = await mcp.request(2, "tools/call", {"name": "look", "arguments": {}})
    assert answer["result"]["content"] == [{"type": "text", "text": "ok"}]
    assert seen == [None]


async def test_the_value_exists_only_while_the_lifespan_runs() -> None:
    ticker = Ticker()
    server = ticker.server()
    with pytest.raises(RuntimeError, match="lifespan of MCPServer 'ticker' is stopped"):
        server.lifespan_context  # noqa: B018
    async with MCPApp(server).running():
        assert server.lifespan_context is ticker.state
        assert server.lifespan.phase is Phase.RUNNING
    assert server.lifespan.phase is Phase.STOPPED
    with pytest.raises(RuntimeError, match="is stopped"):
        server.lifespan_context  # noqa: B018
    with pytest.raises(RuntimeError, match="not made by an MCPServer"):
        Context(1, "tools/call", None).lifespan_context  # type: ignore[arg-type]  # noqa: B018


# -- order: entered before anything is served, left after the drain ------------------------------


@pytest.mark.parametrize("http", HTTP)
async def test_nothing_is_served_before_the_lifespan_is_entered(http: Http) -> None:
    """``serve`` reports its URLs only once the lifespan is entered; a request sent before (both servers
    listen first) waits, and is answered with the lifespan's value once it is entered."""
    ticker = Ticker(release=trio.Event())
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=1))
    port = _free_port()
    stop, reported, answered = trio.Event(), trio.Event(), trio.Event()
    answers: list[str] = []

    async def run() -> None:
        await nursery.start(
            functools.partial(serve, app, "127.0.0.1", port, http=http, shutdown_trigger=stop.wait)
        )
        reported.set()

    async def early_call() -> None:
        async with open_client_session(f"http://127.0.0.1:{port}/mcp", mode="modern") as session:
            answers.append(text(await session.call_tool("ticks", {})))
        answered.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await ticker.wait_for("enter")
        # both servers listen already (each binds before the app starts, so that an address it cannot
        # listen on fails before anything runs): the kernel accepts the connection, nothing serves it
        nursery.start_soon(early_call)
        await trio.testing.wait_all_tasks_blocked(0.1)
        assert not reported.is_set() and answers == []
        assert ticker.release is not None
        ticker.release.set()
        with trio.fail_after(5):
            await reported.wait()
            await answered.wait()
            assert answers[0].isdigit()
        stop.set()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("http", HTTP)
async def test_the_lifespan_is_left_after_the_drain_and_its_cleanup_is_not_cancelled(http: Http) -> None:
    """A 2026 call in flight at shutdown finishes (the value still there, not exited), then the
    lifespan is left: its code after ``yield`` runs, and its cleanup (a sleep) is not cancelled."""
    ticker = Ticker(cleanup=0.05)
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=5))
    stop = trio.Event()
    answers: list[str] = []
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            functools.partial(serve, app, "127.0.0.1", 0, http=http, shutdown_trigger=stop.wait)
        )

        async def call() -> None:
            async with open_client_session(urls[0], mode="modern") as session:
                answers.append(text(await session.call_tool("slow", {"seconds": 0.5})))

        nursery.start_soon(call)
        await ticker.wait_for("slow call started")
        stop.set()
    assert ticker.events == ["enter", "slow call started", "slow call finished", "after yield", "cleaned up"]
    assert answers in ([], ["exited: False"])  # the answer may be cut with the connection at shutdown


async def test_running_leaves_the_lifespan_after_aclose() -> None:
    ticker = Ticker(cleanup=0.05)
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=1))
    async with app.running():
        assert ticker.events == ["enter"]
    assert ticker.events == ["enter", "after yield", "cleaned up"]


async def test_the_asgi_lifespan_enters_at_startup_and_leaves_at_shutdown() -> None:
    ticker = Ticker(cleanup=0.05)
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=1))
    async with drive_lifespan(app) as lifespan:
        assert await lifespan.startup() == {"type": "lifespan.startup.complete"}
        assert ticker.events == ["enter"]
        assert await lifespan.shutdown() == {"type": "lifespan.shutdown.complete"}
    assert ticker.events == ["enter", "after yield", "cleaned up"]


async def test_a_lifespan_that_does_not_end_is_cancelled_after_the_grace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lifespan that forgets to cancel its nursery after ``yield``: the server stops
    ``shutdown_grace`` later all the same, and a WARNING says why."""
    ticker = Ticker(cancel_after_yield=False)
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=0.2))
    with trio.fail_after(5):
        async with app.running():
            pass
    assert ticker.events == ["enter", "after yield", "exit cancelled"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "mcp_trio.lifespan"]
    assert len(warnings) == 1 and "did not end within 0.2 s" in warnings[0], warnings


async def test_a_run_cancelled_without_aclose_cancels_the_lifespan_too() -> None:
    ticker = Ticker(cleanup=10)
    app = MCPApp(ticker.server(), ServerConfig(shutdown_grace=30))
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.run)
            nursery.cancel_scope.cancel()
    assert ticker.events == ["enter", "exit cancelled"]


async def test_one_lifespan_runs_once_at_a_time() -> None:
    ticker = Ticker()
    server = ticker.server()
    async with MCPApp(server).running():
        with pytest.raises(RuntimeError, match="already running: one server's lifespan runs once at a time"):
            async with MCPApp(server).running():
                pass  # pragma: no cover
        assert server.lifespan.phase is Phase.RUNNING and ticker.events == ["enter"]
    async with MCPApp(server).running():  # once stopped, it runs again
        pass
    assert ticker.events.count("enter") == 2


# -- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize("http", HTTP)
async def test_serve_raises_the_exception_of_a_lifespan_that_fails_to_start(http: Http) -> None:
    """``serve`` raises the lifespan's own exception, without reporting itself listening first."""
    app = MCPApp(Ticker(fail_on_enter=True).server())
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            with pytest.raises(ValueError, match="no database") as caught:
                await nursery.start(functools.partial(serve, app, "127.0.0.1", 0, http=http))
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize("http", HTTP)
async def test_an_app_task_that_crashes_stops_serve_which_raises_its_exception(http: Http) -> None:
    ticker = Ticker(crash_after=5)
    app = MCPApp(ticker.server())
    with trio.fail_after(5), pytest.raises(KeyError, match="tick crashed"):
        await serve(app, "127.0.0.1", 0, http=http)
    assert ticker.state is not None and ticker.state.exited and ticker.state.ticks == 5


@pytest.mark.parametrize("http", HTTP)
async def test_a_lifespan_failure_stops_serve_with_an_operations_listener(http: Http) -> None:
    app = MCPApp(Ticker(fail_on_enter=True).server())
    with trio.fail_after(5), pytest.raises(ValueError, match="no database"):
        await serve(app, "127.0.0.1", 0, http=http, admin_bind="127.0.0.1:0")


async def test_running_raises_the_lifespan_failure_itself() -> None:
    with pytest.raises(ValueError, match="no database"):
        async with MCPApp(Ticker(fail_on_enter=True).server()).running():
            pass  # pragma: no cover
    ticker = Ticker(crash_after=3)
    body: list[str] = []
    with trio.fail_after(5), pytest.raises(KeyError, match="tick crashed"):
        async with MCPApp(ticker.server()).running():
            try:
                await trio.sleep_forever()
            finally:
                body.append("cancelled")
    assert body == ["cancelled"]


async def test_the_asgi_lifespan_reports_a_failure_to_start() -> None:
    app = MCPApp(Ticker(fail_on_enter=True).server())
    async with drive_lifespan(app) as lifespan:
        assert await lifespan.startup() == {
            "type": "lifespan.startup.failed",
            "message": "the lifespan of MCPServer 'ticker' failed: ValueError: no database",
        }


async def test_the_asgi_lifespan_reports_a_crash_while_serving_and_raises_it() -> None:
    ticker = Ticker(crash_after=3)
    app = MCPApp(ticker.server())
    async with drive_lifespan(app) as lifespan:
        assert await lifespan.startup() == {"type": "lifespan.startup.complete"}
        with trio.fail_after(5):
            failed = await lifespan.sent.receive()
    (raised,) = lifespan.raised
    assert type(raised) is KeyError and raised.args == ("tick crashed",)
    assert failed == {
        "type": "lifespan.shutdown.failed",
        "message": "the lifespan of MCPServer 'ticker' failed: KeyError: 'tick crashed'",
    }


async def test_the_asgi_lifespan_reports_a_second_run_of_the_same_server() -> None:
    ticker = Ticker()
    server = ticker.server()
    async with MCPApp(server).running(), drive_lifespan(MCPApp(server)) as lifespan:
        reply = await lifespan.startup()
    assert reply["type"] == "lifespan.startup.failed"
    assert reply["message"].startswith("MCPServer 'ticker' could not start: RuntimeError: the lifespan of ")


@dataclass
class LifespanDriver:
    to_app: trio.MemorySendChannel[dict[str, Any]]
    sent: trio.MemoryReceiveChannel[dict[str, Any]]
    raised: list[BaseException] = field(default_factory=list)
    """What the app raised out of the lifespan scope (as the ASGI server sees it)."""

    async def startup(self) -> dict[str, Any]:
        await self.to_app.send({"type": "lifespan.startup"})
        with trio.fail_after(5):
            return await self.sent.receive()

    async def shutdown(self) -> dict[str, Any]:
        await self.to_app.send({"type": "lifespan.shutdown"})
        with trio.fail_after(5):
            return await self.sent.receive()


@asynccontextmanager
async def drive_lifespan(app: MCPApp) -> AsyncIterator[LifespanDriver]:
    """The ASGI lifespan scope of ``app``, driven message by message as an ASGI server does."""
    to_app, app_receives = trio.open_memory_channel[dict[str, Any]](1)
    app_sends, sent = trio.open_memory_channel[dict[str, Any]](1)
    driver = LifespanDriver(to_app, sent)

    async def run_app() -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        try:
            await app(scope, app_receives.receive, app_sends.send)
        except Exception as exc:
            driver.raised.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_app)
        yield driver


# -- stdio -----------------------------------------------------------------------------------


@asynccontextmanager
async def stdio(server: MCPServer) -> AsyncIterator[tuple[trio.abc.SendStream, trio.abc.ReceiveStream]]:
    client_stdin, server_stdin = trio.testing.memory_stream_one_way_pair()
    server_stdout, client_stdout = trio.testing.memory_stream_one_way_pair()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(
                serve_stdio,
                server,
                stdin=server_stdin,
                stdout=server_stdout,
                config=ServerConfig(shutdown_grace=1),
            )
        )
        yield client_stdin, client_stdout


async def _read_line(stream: trio.abc.ReceiveStream) -> dict[str, Any]:
    line = b""
    with trio.fail_after(5):
        while not line.endswith(b"\n"):
            line += await stream.receive_some(1)
    message: dict[str, Any] = json.loads(line)
    return message


async def test_stdio_enters_the_lifespan_before_reading_and_leaves_it_at_the_end_of_input() -> None:
    ticker = Ticker(cleanup=0.05)
    async with stdio(ticker.server()) as (stdin, stdout):
        assert ticker.events == ["enter"] and ticker.state is not None
        await ticker.wait_ticks(2)
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "ticks", "arguments": {}, "_meta": meta},
        }
        await stdin.send_all(json.dumps(request).encode() + b"\n")
        answer = await _read_line(stdout)
        assert int(answer["result"]["content"][0]["text"]) >= 2
        await stdin.aclose()  # the client's way to end the server
    assert ticker.events == ["enter", "after yield", "cleaned up"]


async def test_stdio_raises_the_lifespan_failure() -> None:
    for ticker, expected in ((Ticker(fail_on_enter=True), ValueError), (Ticker(crash_after=3), KeyError)):
        _client_stdin, server_stdin = trio.testing.memory_stream_one_way_pair()
        server_stdout, _client_stdout = trio.testing.memory_stream_one_way_pair()
        with trio.fail_after(5), pytest.raises(expected, match=r"no database|tick crashed"):
            await serve_stdio(ticker.server(), stdin=server_stdin, stdout=server_stdout)


# -- mounted under Starlette, served by hypercorn -----------------------------------------------


def _starlette(mcp: MCPApp) -> Any:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    @asynccontextmanager
    async def start_mcp(web: Starlette) -> AsyncIterator[None]:
        async with mcp.running():
            yield

    return Starlette(routes=[Mount("/", app=mcp)], lifespan=start_mcp)


async def test_a_starlette_mount_runs_the_lifespan_and_its_tools_see_the_value() -> None:
    from mcp_trio._http.hypercorn_server import hypercorn_config, serve_hypercorn

    ticker = Ticker(cleanup=0.05)
    mcp = MCPApp(ticker.server(), ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            serve_hypercorn, _starlette(mcp), hypercorn_config(["127.0.0.1:0"]), shutdown_trigger=stop.wait
        )
        urls = await nursery.start(run)
        assert ticker.events == ["enter"] and ticker.state is not None
        await ticker.wait_ticks(1)
        async with open_client_session(urls[0] + "/mcp") as session:
            assert int(text(await session.call_tool("ticks", {}))) >= 1
        stop.set()
    assert ticker.events == ["enter", "after yield", "cleaned up"]


async def test_a_starlette_mount_whose_lifespan_fails_stops_hypercorn_with_its_message() -> None:
    from hypercorn.utils import LifespanFailureError

    from mcp_trio._http.hypercorn_server import hypercorn_config, serve_hypercorn

    mcp = MCPApp(Ticker(fail_on_enter=True).server())
    with trio.fail_after(5), pytest.raises(BaseException) as caught:
        await serve_hypercorn(_starlette(mcp), hypercorn_config(["127.0.0.1:0"]))
    failures, _ = (
        caught.value.split(LifespanFailureError)
        if isinstance(caught.value, BaseExceptionGroup)
        else (None, None)
    )
    assert failures is not None, caught.value
    assert "ValueError: no database" in str(failures.exceptions[0])  # Starlette sends the traceback
    assert mcp.server.lifespan.failure_in(caught.value) is not None


async def test_the_failure_of_a_lifespan_is_logged_by_no_one_but_its_runner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``serve`` raises the exception; nothing of mcp_trio logs it besides (no double report)."""
    caplog.set_level(logging.DEBUG, logger="mcp_trio")
    with pytest.raises(ValueError):
        await serve(MCPApp(Ticker(fail_on_enter=True).server()), "127.0.0.1", 0, http="h11")
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_what_the_body_raises_is_not_a_lifespan_failure() -> None:
    """An exception of what runs inside the lifespan (the runner's own) leaves it as itself, out of
    the lifespan's nursery, and is not taken for the lifespan's failure."""
    ticker = Ticker()
    server = ticker.server()
    with pytest.raises(ZeroDivisionError):
        async with server.open_lifespan(grace=1):
            raise ZeroDivisionError
    assert server.lifespan.failure is None and ticker.state is not None and ticker.state.exited
    assert server.lifespan.phase is Phase.STOPPED


async def test_two_app_tasks_that_crash_together_are_raised_as_their_group() -> None:
    @asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[None]:
        async def crash(exc: Exception) -> None:
            raise exc  # at once: both raise before either can be cancelled

        async with trio.open_nursery() as nursery:
            nursery.start_soon(crash, KeyError("one"))
            nursery.start_soon(crash, ValueError("two"))
            yield

    server = MCPServer("two", lifespan=lifespan)
    with trio.fail_after(5), pytest.RaisesGroup(KeyError, ValueError, flatten_subgroups=True):
        async with server.open_lifespan(grace=1):
            await trio.sleep_forever()
    assert server.lifespan.failure is None


async def test_a_failure_is_found_only_where_it_is() -> None:
    ticker = Ticker(fail_on_enter=True)
    server = ticker.server()
    with pytest.raises(ValueError) as caught:
        async with server.open_lifespan(grace=1):
            pass  # pragma: no cover
    failure = caught.value
    assert server.lifespan.failure is failure
    assert server.lifespan.failure_in(failure) is failure
    assert server.lifespan.failure_in(ExceptionGroup("wrapped", [failure])) is failure
    try:  # raised while handling it: found as the context
        try:
            raise failure
        except ValueError:
            raise RuntimeError("reported") from None
    except RuntimeError as reported:
        assert server.lifespan.failure_in(reported) is failure
    cycle = OSError("elsewhere")
    cycle.__context__ = ExceptionGroup("loop", [cycle])
    assert server.lifespan.failure_in(cycle) is None
