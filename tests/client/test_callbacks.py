"""The client's callbacks (progress, sampling, elicitation, roots, on_log, on_notification) may be plain
or async, in both eras, against a real mcp_trio server on 127.0.0.1: each kind works both ways, anything
not callable is refused with a TypeError that says what to pass, and a callback's exception surfaces
where the documentation says (an error answer to the server, the call, or the session block)."""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import (
    Context,
    MCPApp,
    MCPServer,
    RPCError,
    ServerConfig,
    open_client_session,
    open_stdio_client,
    open_websocket_client,
    serve,
)
from mcp_trio._protocol import jsonrpc

from .conftest import IGNORE_HTTPX_ASYNCGEN_WARNINGS, assert_clean

pytestmark = IGNORE_HTTPX_ASYNCGEN_WARNINGS

MODES = ["legacy", "modern"]
STYLES = ["plain", "async", "partial", "object"]
ROOT = mt.Root.model_validate({"uri": "file:///tmp/project", "name": "project"})
DEMO = [  # the demo server over stdio (`mcp-trio demo --stdio` without the CLI)
    sys.executable,
    "-c",
    "import trio; from mcp_trio import serve_stdio; from mcp_trio.demo import build_demo_server; "
    "trio.run(serve_stdio, build_demo_server())",
]


# -- the server -----------------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    app: MCPApp
    work_cancelled: trio.Event  # a handler of `work` was cancelled


def build_server(work_cancelled: trio.Event) -> MCPServer:
    server = MCPServer("callbacks", "1")

    @server.tool(description="Report progress and log at each step, then wait `linger` seconds.")
    async def work(ctx: Context, steps: int = 3, linger: float = 0) -> str:
        try:
            for step in range(1, steps + 1):
                await ctx.report_progress(step, steps, f"step {step}")
                await ctx.info(f"log {step}")
            await trio.sleep(linger)
        except trio.Cancelled:
            work_cancelled.set()
            raise
        return "worked"

    @server.tool(description="Ask the client's model.")
    async def ask_model(ctx: Context, prompt: str) -> str:
        try:
            answer = await ctx.sample(prompt, max_tokens=10)
        except RPCError as exc:
            return f"sampling failed: {exc.code} {exc.message}"
        assert isinstance(answer.content, mt.TextContent)
        return f"model said {answer.content.text}"

    @server.tool(description="Ask the user their name.")
    async def ask_user(ctx: Context) -> str:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        answer = await ctx.elicit("Your name?", schema)
        return f"{answer.action} {(answer.content or {}).get('name')}"

    @server.tool(description="List the client's roots.")
    async def roots(ctx: Context) -> str:
        listed = await ctx.list_roots()
        return ",".join(str(root.uri) for root in listed.roots)

    @server.tool(description="2025 era: a log message related to no request (the GET stream).")
    async def announce(ctx: Context) -> str:
        note = jsonrpc.notification("notifications/message", {"level": "info", "data": "unrelated"})
        await ctx.peer.send_message(note, None)
        return "announced"

    return server


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    cancelled = trio.Event()
    app = MCPApp(build_server(cancelled), ServerConfig(shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield Server(urls[0], app, cancelled)
        stop.set()


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


# -- one callback in four styles ------------------------------------------------------------------


class _AsyncCallable:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    async def __call__(self, *args: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return self.fn(*args)


def styled(style: str, fn: Callable[..., Any]) -> Any:
    """``fn`` (a plain function) as a callback of the given style."""
    if style == "plain":
        return fn

    async def run(*args: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return fn(*args)

    if style == "async":
        return run
    if style == "partial":

        async def first(fn: Callable[..., Any], *args: Any) -> Any:
            await trio.lowlevel.checkpoint()
            return fn(*args)

        return functools.partial(first, fn)
    assert style == "object"
    return _AsyncCallable(fn)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=STYLES)
def style(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- every kind, both ways, both eras ---------------------------------------------------------------


async def test_progress(server: Server, mode: Any, style: str, http: httpx.AsyncClient) -> None:
    seen: list[tuple[float, float | None, str | None]] = []
    progress = styled(style, lambda value, total, message: seen.append((value, total, message)))
    async with open_client_session(server.url, mode=mode, http=http) as s:
        assert s.modern is (mode == "modern")
        with trio.fail_after(5):
            result = await s.call_tool("work", {"steps": 3}, progress=progress)
        assert text_of(result) == "worked"
        assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert_clean(http)


async def test_log_and_notifications(server: Server, mode: Any, style: str, http: httpx.AsyncClient) -> None:
    logs: list[mt.LoggingMessageNotificationParams] = []
    methods: list[str] = []
    on_log = styled(style, logs.append)
    on_notification = styled(style, lambda message: methods.append(message["method"]))
    async with open_client_session(
        server.url, mode=mode, http=http, on_log=on_log, on_notification=on_notification, log_level="info"
    ) as s:
        with trio.fail_after(5):
            await s.call_tool("work", {"steps": 2})
    assert all(isinstance(log, mt.LoggingMessageNotificationParams) for log in logs)
    assert [(log.level, log.data) for log in logs] == [("info", "log 1"), ("info", "log 2")]
    assert methods == ["notifications/message", "notifications/message"]  # no progress: no token sent
    assert_clean(http)


def model_answer(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
    message = params.messages[0].content
    assert isinstance(message, mt.TextContent)
    text = "four" if message.text == "2+2" else "?"
    return mt.CreateMessageResult(role="assistant", content=mt.TextContent(type="text", text=text), model="m")


def user_answer(params: mt.ElicitRequestParams) -> mt.ElicitResult:
    assert isinstance(params, mt.ElicitRequestFormParams)
    assert params.message == "Your name?"
    return mt.ElicitResult(action="accept", content={"name": "Ann"})


async def test_server_requests(server: Server, mode: Any, style: str, http: httpx.AsyncClient) -> None:
    """sampling, elicitation and roots (2025: requests from the server; 2026: input requests)."""
    asked: list[str] = []

    def listed() -> mt.ListRootsResult:
        asked.append("roots")
        return mt.ListRootsResult(roots=[ROOT])

    async with open_client_session(
        server.url,
        mode=mode,
        http=http,
        sampling=styled(style, model_answer),
        elicitation=styled(style, user_answer),
        roots=styled(style, listed),
    ) as s:
        with trio.fail_after(5):
            assert text_of(await s.call_tool("ask_model", {"prompt": "2+2"})) == "model said four"
            assert text_of(await s.call_tool("ask_user")) == "accept Ann"
            assert text_of(await s.call_tool("roots")) == "file:///tmp/project"
        assert asked == ["roots"]
    assert_clean(http)


# -- what is not callable is refused --------------------------------------------------------------

SESSION_CALLBACKS = {
    "sampling": "(CreateMessageRequestParams) -> CreateMessageResult",
    "elicitation": "(ElicitRequestParams) -> ElicitResult",
    "roots": "() -> ListRootsResult",
    "on_log": "(LoggingMessageNotificationParams) -> None",
    "on_notification": "(message: dict) -> None",
}


@pytest.mark.parametrize("name", sorted(SESSION_CALLBACKS))
async def test_a_non_callable_is_refused_before_anything_starts(name: str) -> None:
    """Refused before any connection (nothing listens on the URL: trying would be a TransportError)
    and before any process is started (the command does not exist)."""
    expected = f"{name}= takes a function {SESSION_CALLBACKS[name]}, plain or async; got 42"
    not_callable: dict[str, Any] = {name: 42}
    with pytest.raises(TypeError) as excinfo:
        async with open_client_session("http://127.0.0.1:9/mcp", **not_callable):
            pytest.fail("the session opened")
    assert str(excinfo.value) == expected
    with pytest.raises(TypeError) as excinfo:
        async with open_stdio_client(["/nonexistent/mcp-server"], **not_callable):
            pytest.fail("the session opened")
    assert str(excinfo.value) == expected


async def test_an_unknown_keyword_is_refused_by_every_opener_before_anything_starts() -> None:
    """The openers take their shared options as ``**options``: a misspelt one is still a TypeError, as
    it was when each opener listed them, and before any connection or process."""
    misspelt: dict[str, Any] = {"sampleing": None}
    openers: list[tuple[str, Any]] = [
        ("open_client_session", open_client_session("http://127.0.0.1:9/mcp", **misspelt)),
        ("open_stdio_client", open_stdio_client(["/nonexistent/mcp-server"], **misspelt)),
        ("open_websocket_client", open_websocket_client("ws://127.0.0.1:9/mcp", **misspelt)),
    ]
    for name, opener in openers:
        with pytest.raises(TypeError) as excinfo:
            async with opener:
                pytest.fail("the session opened")
        assert str(excinfo.value) == f"{name}() got an unexpected keyword argument 'sampleing'"


async def test_a_non_callable_progress_is_refused_by_call_tool(
    server: Server, http: httpx.AsyncClient
) -> None:
    async with open_client_session(server.url, mode="legacy", http=http) as s:
        with pytest.raises(TypeError) as excinfo:
            await s.call_tool("work", {"steps": 1}, progress=42)  # type: ignore[arg-type]
        assert str(excinfo.value) == (
            "progress= takes a function (progress, total, message) -> None, plain or async; got 42"
        )

        async def progress(value: float, total: float | None, message: str | None) -> None:
            pass

        called = progress(1, None, None)
        with pytest.raises(TypeError, match=r"pass the function itself, not the result of calling it"):
            await s.call_tool("work", {"steps": 1}, progress=called)  # type: ignore[arg-type]
        called.close()
        with pytest.raises(TypeError, match=r"^progress= takes a function"):
            await s.request("tools/call", {"name": "work"}, progress="print")  # type: ignore[arg-type]
        assert text_of(await s.call_tool("work", {"steps": 1}, progress=progress)) == "worked"
    assert_clean(http)


# -- exceptions -----------------------------------------------------------------------------------


class Boom(ValueError):
    """A ValueError on purpose: the transport must not mistake it for a malformed answer."""


def boom(*args: Any) -> None:
    raise Boom("the callback failed")


async def test_a_failing_progress_callback_fails_its_call(
    server: Server, mode: Any, style: str, http: httpx.AsyncClient
) -> None:
    """The call raises the callback's own exception at once; the request is abandoned (the server's
    handler is cancelled); the session lives on."""
    async with open_client_session(server.url, mode=mode, http=http) as s:
        with trio.fail_after(3), pytest.raises(Boom, match="the callback failed"):
            await s.call_tool("work", {"steps": 1, "linger": 60}, progress=styled(style, boom))
        with trio.fail_after(3):
            await server.work_cancelled.wait()  # the server learns it (2025: notifications/cancelled)
            assert text_of(await s.call_tool("work", {"steps": 1})) == "worked"
    assert_clean(http)


@pytest.mark.parametrize("callback", ["on_log", "on_notification"])
async def test_a_failing_notification_callback_fails_the_call_that_carried_it(
    server: Server, mode: Any, callback: str, http: httpx.AsyncClient
) -> None:
    armed = [True]

    def maybe_boom(arg: Any) -> None:
        if armed[0]:
            boom()

    callbacks: dict[str, Any] = {callback: maybe_boom}
    async with open_client_session(server.url, mode=mode, http=http, log_level="info", **callbacks) as s:
        with trio.fail_after(3), pytest.raises(Boom):
            await s.call_tool("work", {"steps": 2, "linger": 60})
        armed[0] = False
        with trio.fail_after(3):
            assert text_of(await s.call_tool("work", {"steps": 2})) == "worked"
    assert_clean(http)


async def test_a_failing_log_callback_outside_any_call_ends_the_session(
    server: Server, style: str, http: httpx.AsyncClient
) -> None:
    """2025 era: a log message on the standalone GET stream belongs to no call; the session ends and
    its block raises the callback's exception (the body is cancelled)."""
    seen: list[Any] = []

    def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        seen.append(params.data)
        if params.data == "unrelated":
            boom()

    with trio.fail_after(5), pytest.raises(Boom):
        async with open_client_session(
            server.url, mode="legacy", http=http, on_log=styled(style, on_log)
        ) as s:
            for _attempt in range(100):  # until the GET stream is up and carries it
                assert text_of(await s.call_tool("announce")) == "announced"
                await trio.sleep(0.05)
            pytest.fail("the failing callback did not end the session")
    assert seen[-1] == "unrelated"
    assert_clean(http)


@dataclass
class Failing:
    """Server-request callbacks that raise (``error``) or return something that is not a result."""

    error: Exception | None

    def __call__(self, *args: Any) -> Any:
        if self.error is not None:
            raise self.error
        return None


async def test_failing_sampling_legacy_is_an_error_answer_to_the_server(
    server: Server, style: str, http: httpx.AsyncClient
) -> None:
    """2025 era: the server's request gets an error answer (RPCError: its code; anything else: -32603)
    and the session lives on."""
    cases = [
        (RPCError(-32001, "no model here"), "sampling failed: -32001 no model here"),
        (Boom("the callback failed"), "sampling failed: -32603 the callback failed"),
        (None, "sampling failed: -32603 the sampling= callback returned None, not a CreateMessageResult"),
    ]
    for error, expected in cases:
        sampling = styled(style, Failing(error))
        async with open_client_session(server.url, mode="legacy", http=http, sampling=sampling) as s:
            with trio.fail_after(5):
                assert text_of(await s.call_tool("ask_model", {"prompt": "2+2"})) == expected
                assert text_of(await s.call_tool("work", {"steps": 1})) == "worked"
    assert_clean(http)


async def test_failing_input_callbacks_modern_are_raised_out_of_the_call(
    server: Server, style: str, http: httpx.AsyncClient
) -> None:
    """2026 era: an input request has no error answer; the call raises the callback's exception as
    itself (not in an exception group), and the session lives on."""
    callbacks = {
        "sampling": ("ask_model", {"prompt": "2+2"}),
        "elicitation": ("ask_user", {}),
        "roots": ("roots", {}),
    }
    for name, (tool, arguments) in callbacks.items():
        for error, raised in [(Boom(name), Boom), (None, TypeError)]:
            failing = {name: styled(style, Failing(error))}
            async with open_client_session(server.url, mode="modern", http=http, **failing) as s:
                with trio.fail_after(5), pytest.raises(raised) as excinfo:
                    await s.call_tool(tool, arguments)
                if error is None:
                    assert str(excinfo.value) == f"the {name}= callback returned None, not a " + (
                        {"sampling": "CreateMessageResult", "elicitation": "ElicitResult"}.get(
                            name, "ListRootsResult"
                        )
                    )
                else:
                    assert excinfo.value is error
                assert text_of(await s.call_tool("work", {"steps": 1})) == "worked"
    assert_clean(http)


# -- stdio: everything arrives on the reader task -------------------------------------------------


@pytest.mark.deadline(20)
async def test_stdio_plain_callbacks_and_failures() -> None:
    """Over stdio the progress callback's failure still fails its own call (the notification is read
    by the session's reader task); a log callback's failure ends the session."""
    seen: list[float] = []
    logs: list[Any] = []
    armed = [False]

    def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)
        if armed[0]:
            boom()

    with pytest.raises(Boom):
        async with open_stdio_client(DEMO, mode="legacy", on_log=on_log) as s:
            with trio.fail_after(10):
                result = await s.call_tool(
                    "count", {"steps": 2, "delay": 0}, progress=lambda v, t, m: seen.append(v)
                )
            assert text_of(result) == "counted to 2"
            assert seen == [1, 2]
            assert logs == ["step 1 of 2", "step 2 of 2"]
            with trio.fail_after(5), pytest.raises(Boom):
                await s.call_tool("count", {"steps": 2, "delay": 0}, progress=boom)
            assert text_of(await s.call_tool("echo", {"text": "still here"})) == "still here"
            armed[0] = True
            with trio.fail_after(5):
                await s.call_tool("count", {"steps": 1, "delay": 0})
                await trio.sleep_forever()  # cancelled when the session ends


# -- the types: both kinds type-check ---------------------------------------------------------------


def test_the_callback_types_accept_plain_and_async_functions() -> None:
    """Checked by mypy when it checks this file; at run time, the aliases are what the API names."""
    from mcp_trio._client.session import LogHandler, ProgressHandler, RootsHandler

    def plain(value: float, total: float | None, message: str | None) -> None:
        pass

    async def asynchronous(value: float, total: float | None, message: str | None) -> None:
        pass

    def plain_roots() -> mt.ListRootsResult:
        return mt.ListRootsResult(roots=[])

    async def async_log(params: mt.LoggingMessageNotificationParams) -> None:
        pass

    handlers: list[ProgressHandler] = [plain, asynchronous]
    roots: RootsHandler = plain_roots
    log: LogHandler = async_log
    assert handlers == [plain, asynchronous] and roots is plain_roots and log is async_log
