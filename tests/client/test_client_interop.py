"""Interoperability of the client: ``open_client_session`` against the official SDKs' servers.

* **python-sdk** (``mcp`` 2.3.0): an ``mcp.server.mcpserver.MCPServer`` with a tool, a resource, a prompt,
  a tool that samples the client's model and one that elicits, each through the SDK's own API (the
  ``Resolve(Sample)`` / ``Resolve(Elicit)`` resolvers, which the SDK turns into a standalone
  ``sampling/createMessage`` / ``elicitation/create`` request in the 2025 era and into an
  ``input_required`` result in the 2026 era).  Its Streamable HTTP ASGI app runs in this Trio run under
  ``hypercorn.trio.serve`` on 127.0.0.1:0 (hypercorn drives the app's lifespan, which runs the SDK's
  session manager).  The SDK server speaks both eras: its session manager sends a request whose
  ``MCP-Protocol-Version`` is not a handshake version to its 2026-07-28 entry
  (``mcp/server/_streamable_http_modern.py``: ``server/discover``, one self-contained POST per
  request), the rest to the stateful 2025 transport.  So the client runs in ``mode="legacy"``,
  ``"modern"`` and ``"auto"`` (which must pick 2026-07-28 there).
* **TypeScript SDK** (``@modelcontextprotocol/sdk``, the exact version pinned in
  ``ts_server/package.json``): ``ts_server/server.mjs`` (``McpServer`` + ``StreamableHTTPServerTransport``,
  stateful) in a Node 22 subprocess on 127.0.0.1, its port read from its first stdout line.  That SDK
  speaks the 2025 revisions only (newest 2025-11-25), so the client runs in ``"legacy"`` and ``"auto"``
  (which must fall back to ``initialize`` after the server refuses ``server/discover``), and
  ``"modern"`` is shown to fail cleanly.

Every test ends by checking the end: a 2025-era session DELETEd and gone on the server, a 2026-era one
never opened a session, no GET stream and no DELETE; and no client task or pooled connection left
(``assert_no_leaks``).

Node 22 and the npm packages of ``ts_server/`` come from ``scripts/install-node-deps.sh`` (``.node22/``
and ``tests/client/ts_server/node_modules/``).  When they are missing the TypeScript tests skip when
run by hand, and fail under the test command (``tests/required.py``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import hypercorn.config
import hypercorn.trio
import mcp_types as mt
import pydantic
import pytest
import trio
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve, Sample

from mcp_trio import ClientSession, open_client_session
from mcp_trio.errors import TransportError
from tests.required import missing

from .conftest import assert_no_leaks, eventually

# The client leaves httpx's inner body generators to the garbage collector whenever it stops reading an
# SSE answer early (both SDK servers answer 2025-era POSTs with SSE).  That is a known client bug, shown
# by test_client_demo.py::test_no_async_generator_left_to_gc (encode/httpx#3686); here it is ignored,
# exactly as the other client tests do, so that these tests are about interoperability.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx|httpcore)\.[A-Za-z0-9_.]+' was garbage collected:ResourceWarning"
)

ROOT = Path(__file__).resolve().parents[2]
LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"


def text_of(result: mt.CallToolResult) -> str:
    assert not result.is_error, result
    [content] = result.content
    assert isinstance(content, mt.TextContent), content
    return content.text


class Peer:
    """The client-side handlers; they record what the server asked."""

    def __init__(self) -> None:
        self.sampled: list[mt.CreateMessageRequestParams] = []
        self.elicited: list[mt.ElicitRequestParams] = []
        self.notifications: list[dict[str, Any]] = []
        self.progress: list[tuple[float, float | None, str | None]] = []

    async def sampling(self, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        self.sampled.append(params)
        assert isinstance(params.messages[0].content, mt.TextContent)
        return mt.CreateMessageResult(
            role="assistant",
            content=mt.TextContent(type="text", text=f"echo: {params.messages[0].content.text}"),
            model="fake-model",
            stop_reason="endTurn",
        )

    async def elicitation(self, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        self.elicited.append(params)
        return mt.ElicitResult(action="accept", content={"name": "Grace"})

    async def on_notification(self, message: dict[str, Any]) -> None:
        self.notifications.append(message)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    def session(self, url: str, mode: str, http: httpx.AsyncClient) -> Any:
        return open_client_session(
            url,
            mode=mode,  # type: ignore[arg-type]
            http=http,
            client_info={"name": "mcp-trio-interop", "version": "0.0.1"},
            sampling=self.sampling,
            elicitation=self.elicitation,
            on_notification=self.on_notification,
        )


def assert_sampled_once(peer: Peer) -> None:
    [sampled] = peer.sampled
    assert sampled.max_tokens == 64
    assert sampled.system_prompt == "be brief"
    [message] = sampled.messages
    assert message.role == "user"
    assert message.content == mt.TextContent(type="text", text="what is 2+2?")


def assert_elicited_once(peer: Peer) -> None:
    [elicited] = peer.elicited
    assert isinstance(elicited, mt.ElicitRequestFormParams)
    assert elicited.message == "What is your name?"
    schema = elicited.requested_schema
    schema = schema if isinstance(schema, dict) else schema.model_dump(by_alias=True, exclude_none=True)
    assert schema["required"] == ["name"]
    assert schema["properties"]["name"]["type"] == "string"


# -- the python-sdk server ----------------------------------------------------------------------

SDK_NAME = "python-sdk-interop"
SDK_VERSION = "2.3.0-test"
SDK_INSTRUCTIONS = "a python-sdk interop server"


class Name(pydantic.BaseModel):
    name: str


def ask_question(question: str) -> Sample:
    message = mt.SamplingMessage(role="user", content=mt.TextContent(type="text", text=question))
    return Sample([message], max_tokens=64, system_prompt="be brief")


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def build_sdk_server() -> MCPServer:
    server = MCPServer(SDK_NAME, version=SDK_VERSION, instructions=SDK_INSTRUCTIONS, log_level="WARNING")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Count to n, reporting progress.")
    async def count(n: int, ctx: Context) -> str:
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
        return f"counted to {n}"

    @server.tool(description="Ask the client's model a question.")
    async def ask_model(
        question: str, answer: Annotated[mt.CreateMessageResult, Resolve(ask_question)]
    ) -> str:
        assert isinstance(answer.content, mt.TextContent)
        return f"{answer.model}: {answer.content.text}"

    @server.tool(description="Ask the user for their name.")
    async def greet_user(name: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"hello {name.name}"

    @server.resource("test://readme", name="readme", mime_type="text/plain", description="A static text")
    def readme() -> str:
        return "hello from the python-sdk"

    @server.prompt(description="Greet someone.")
    def greet(name: str) -> str:
        return f"Please greet {name} warmly."

    return server


@dataclass
class Exchange:
    method: str
    headers: dict[str, str]
    body: Any
    status: int | None = None


@dataclass
class SdkServer:
    server: MCPServer
    url: str
    exchanges: list[Exchange] = field(default_factory=list)

    def sessions(self) -> int:
        """Sessions the SDK's (2025-era) session manager still holds."""
        return len(self.server.session_manager._server_instances)

    def posts(self, jsonrpc_method: str) -> list[Exchange]:
        return [
            e
            for e in self.exchanges
            if e.method == "POST" and isinstance(e.body, dict) and e.body.get("method") == jsonrpc_method
        ]


def recording(app: Any, exchanges: list[Exchange]) -> Any:
    """Wrap an ASGI app: every HTTP exchange (method, request headers, JSON body, status) into
    ``exchanges``; the lifespan passes through untouched."""

    async def wrapper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        exchange = Exchange(
            scope["method"], {k.decode().lower(): v.decode() for k, v in scope["headers"]}, None
        )
        exchanges.append(exchange)
        chunks: list[bytes] = []

        async def receive_recorded() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    data = b"".join(chunks)
                    exchange.body = json.loads(data) if data else None
            return message

        async def send_recorded(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
            await send(message)

        await app(scope, receive_recorded, send_recorded)

    return wrapper


@pytest.fixture
async def sdk_server() -> AsyncIterator[SdkServer]:
    server = build_sdk_server()
    # host=127.0.0.1: the SDK's DNS-rebinding protection on, as for any loopback host
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    stop = trio.Event()
    exchanges: list[Exchange] = []
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: hypercorn.trio.serve(
                recording(app, exchanges), config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield SdkServer(server, urls[0] + "/mcp", exchanges)
        stop.set()


async def use_every_feature(s: ClientSession, peer: Peer) -> None:
    """Tools (list, call, progress, sampling, elicitation), a resource and a prompt, as the SDK server
    and the TypeScript server both offer them."""
    tools = {tool.name: tool for tool in (await s.list_tools()).tools}
    assert {"add", "count", "ask_model"} <= tools.keys()
    assert tools["add"].input_schema["properties"].keys() == {"a", "b"}
    assert tools["add"].input_schema["required"] == ["a", "b"]
    assert text_of(await s.call_tool("add", {"a": 40, "b": 2})) == "42"

    assert text_of(await s.call_tool("count", {"n": 3}, progress=peer.on_progress)) == "counted to 3"
    assert peer.progress == [(i, 3, f"step {i}") for i in (1, 2, 3)]

    resources = (await s.list_resources()).resources
    assert [(str(r.uri), r.name, r.mime_type) for r in resources] == [
        ("test://readme", "readme", "text/plain")
    ]

    prompts = (await s.list_prompts()).prompts
    assert [p.name for p in prompts] == ["greet"]
    [argument] = prompts[0].arguments or []
    assert (argument.name, argument.required) == ("name", True)
    prompt = await s.get_prompt("greet", {"name": "Trio"})
    assert [(m.role, m.content) for m in prompt.messages] == [
        ("user", mt.TextContent(type="text", text="Please greet Trio warmly."))
    ]

    assert (
        text_of(await s.call_tool("ask_model", {"question": "what is 2+2?"}))
        == "fake-model: echo: what is 2+2?"
    )
    assert_sampled_once(peer)


async def test_python_sdk_server_legacy(sdk_server: SdkServer, http: httpx.AsyncClient) -> None:
    peer = Peer()
    async with peer.session(sdk_server.url, "legacy", http) as s:
        assert not s.modern
        assert s.protocol_version == LEGACY_VERSION
        assert s.server_info == {"name": SDK_NAME, "version": SDK_VERSION}
        assert s.instructions == SDK_INSTRUCTIONS
        assert s.server_capabilities.keys() >= {"tools", "resources", "prompts"}
        await use_every_feature(s, peer)
        readme = await s.read_resource("test://readme")
        assert [(str(c.uri), c.mime_type, getattr(c, "text", None)) for c in readme.contents] == [
            ("test://readme", "text/plain", "hello from the python-sdk")
        ]
        assert text_of(await s.call_tool("greet_user")) == "hello Grace"
        assert_elicited_once(peer)
        assert sdk_server.sessions() == 1
        session_id = sdk_server.exchanges[0].headers.get("mcp-session-id")

    # -- the 2025 wire: initialize, a session id on every later request, the GET stream, a DELETE --
    [initialize] = sdk_server.posts("initialize")
    assert initialize.body["params"]["protocolVersion"] == LEGACY_VERSION
    assert initialize.body["params"]["clientInfo"] == {"name": "mcp-trio-interop", "version": "0.0.1"}
    assert initialize.body["params"]["capabilities"].keys() == {"sampling", "elicitation"}
    assert session_id is None  # the initialize POST carried none
    later = sdk_server.exchanges[1:]
    ids = {e.headers.get("mcp-session-id") for e in later}
    assert len(ids) == 1 and None not in ids, ids
    assert all(e.headers.get("mcp-protocol-version") == LEGACY_VERSION for e in later)
    assert len(sdk_server.posts("notifications/initialized")) == 1
    assert [e.method for e in later if e.method != "POST"] == ["GET", "DELETE"]
    assert all(e.status is not None and e.status < 400 for e in sdk_server.exchanges), [
        (e.method, e.status) for e in sdk_server.exchanges
    ]
    # the sampling and elicitation answers went back as POSTed JSON-RPC responses
    answers = [e.body for e in later if e.method == "POST" and "method" not in (e.body or {})]
    assert len(answers) == 2
    assert answers[0]["result"]["model"] == "fake-model"
    assert answers[1]["result"] == {"action": "accept", "content": {"name": "Grace"}}

    # -- the end: the DELETE ended the SDK's session (its server task forgets it as it ends); nothing of
    # the client is left --
    await eventually(lambda: sdk_server.sessions() == 0)
    assert_no_leaks(http)


@pytest.mark.parametrize("mode", ["modern", "auto"])
async def test_python_sdk_server_modern(sdk_server: SdkServer, http: httpx.AsyncClient, mode: str) -> None:
    peer = Peer()
    async with peer.session(sdk_server.url, mode, http) as s:
        assert s.modern
        assert s.protocol_version == MODERN_VERSION
        if mode == "auto":  # learnt from server/discover
            assert s.server_info == {"name": SDK_NAME, "version": SDK_VERSION}
            assert s.instructions == SDK_INSTRUCTIONS
            assert s.server_capabilities.keys() >= {"tools", "resources", "prompts"}
        else:  # "modern" adopts the version without asking
            assert s.server_info == {}
        await use_every_feature(s, peer)
        readme = await s.read_resource("test://readme")
        assert [(str(c.uri), c.mime_type, getattr(c, "text", None)) for c in readme.contents] == [
            ("test://readme", "text/plain", "hello from the python-sdk")
        ]
        assert text_of(await s.call_tool("greet_user")) == "hello Grace"
        assert_elicited_once(peer)

    # -- the 2026 wire: no session, no GET stream, no DELETE; every request self-contained --
    assert {e.method for e in sdk_server.exchanges} == {"POST"}
    assert all(e.status == 200 for e in sdk_server.exchanges), [
        (e.body, e.status) for e in sdk_server.exchanges
    ]
    assert all("mcp-session-id" not in e.headers for e in sdk_server.exchanges)
    for e in sdk_server.exchanges:
        assert e.headers["mcp-protocol-version"] == MODERN_VERSION
        assert e.headers["mcp-method"] == e.body["method"]
        meta = e.body["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN_VERSION
        assert meta["io.modelcontextprotocol/clientInfo"] == {"name": "mcp-trio-interop", "version": "0.0.1"}
        capabilities = meta["io.modelcontextprotocol/clientCapabilities"]
        assert capabilities.keys() == {"sampling", "elicitation", "extensions"}
        assert capabilities["extensions"] == {"io.modelcontextprotocol/tasks": {}}
    assert len(sdk_server.posts("server/discover")) == (1 if mode == "auto" else 0)
    assert sdk_server.posts("initialize") == []
    # sampling and elicitation went through input_required: each tool POSTed twice, the retry with
    # inputResponses and the server's requestState echoed
    for tool in ("ask_model", "greet_user"):
        first, retry = [e for e in sdk_server.posts("tools/call") if e.body["params"]["name"] == tool]
        assert first.headers["mcp-name"] == tool
        assert "inputResponses" not in first.body["params"]
        assert retry.body["id"] != first.body["id"]
        assert len(retry.body["params"]["inputResponses"]) == 1
        assert retry.body["params"]["requestState"]
    assert sdk_server.sessions() == 0
    assert_no_leaks(http)


# -- the TypeScript SDK server ------------------------------------------------------------------

NODE = ROOT / ".node22" / "node_modules" / "node" / "bin" / "node"
TS_DIR = Path(__file__).resolve().parent / "ts_server"
TS_SERVER = TS_DIR / "server.mjs"
TS_SDK_PACKAGE = TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
TS_NAME = "typescript-sdk-interop-server"
TS_INSTRUCTIONS = "a TypeScript SDK interop server"
TS_DEADLINE = 45.0  # Node's start-up and module loading included


def pinned_ts_sdk_version() -> str:
    version: str = json.loads((TS_DIR / "package.json").read_text())["dependencies"][
        "@modelcontextprotocol/sdk"
    ]
    return version


@pytest.fixture
def node_server() -> None:
    """Skip (by hand) or fail (under the test command) unless Node 22 and the pinned SDK are installed.

    A plain (sync) fixture, so the skip or failure is reported as such, outside the Trio run."""
    problem = None
    if not NODE.is_file() or not os.access(NODE, os.X_OK):
        problem = f"Node 22 is not installed at {NODE.relative_to(ROOT)}"
    elif not TS_SDK_PACKAGE.is_file():
        problem = f"the npm packages are not installed in {TS_DIR.relative_to(ROOT)}/node_modules"
    else:
        installed, pinned = json.loads(TS_SDK_PACKAGE.read_text())["version"], pinned_ts_sdk_version()
        if installed != pinned:
            problem = f"@modelcontextprotocol/sdk {installed} is installed, package.json pins {pinned}"
    if problem is None:
        return
    missing(f"{problem}: run `bash scripts/install-node-deps.sh`")


@dataclass
class TsServer:
    url: str
    stats_url: str
    info: dict[str, Any]


@asynccontextmanager
async def ts_server() -> AsyncIterator[TsServer]:
    """``server.mjs`` in a Node 22 child; it stops when its stdin closes (and is killed if it does not)."""
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            trio.run_process,
            [str(NODE), str(TS_SERVER)],
            cwd=TS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            check=False,
        )
        proc: trio.Process = await nursery.start(run)
        assert proc.stdout is not None and proc.stdin is not None
        line = b""
        with trio.fail_after(20):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, f"server.mjs exited ({proc.returncode}) before printing its port"
                line += chunk
        info = json.loads(line)
        base = f"http://127.0.0.1:{info['port']}"
        try:
            yield TsServer(base + "/mcp", base + "/stats", info)
        finally:
            await proc.stdin.aclose()  # server.mjs shuts down on EOF; run_process kills it on cancel
            with trio.move_on_after(5):
                await proc.wait()
            nursery.cancel_scope.cancel()


async def ts_stats(server: TsServer, http: httpx.AsyncClient) -> dict[str, Any]:
    stats: dict[str, Any] = (await http.get(server.stats_url)).json()
    return stats


async def ts_stats_when_ended(server: TsServer, http: httpx.AsyncClient) -> dict[str, Any]:
    """The server's stats once no session is open and the session's GET stream and DELETE are recorded
    (Node records an exchange when its response is closed, which for the GET stream may come a moment
    after the DELETE's answer); as they are after 2 s otherwise."""
    for _ in range(200):
        stats = await ts_stats(server, http)
        methods = [method for method, _ in stats["exchanges"]]
        if stats["sessions"] == 0 and {"GET", "DELETE"} <= set(methods):
            break
        await trio.sleep(0.01)
    return stats


@pytest.mark.deadline(TS_DEADLINE + 5)
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_typescript_sdk_server(node_server: None, http: httpx.AsyncClient, mode: str) -> None:
    peer = Peer()
    with trio.fail_after(TS_DEADLINE):
        async with ts_server() as server:
            assert server.info["sdkVersion"] == pinned_ts_sdk_version()
            assert server.info["nodeVersion"].startswith("v22."), server.info
            async with peer.session(server.url, mode, http) as s:
                assert not s.modern
                assert s.protocol_version == LEGACY_VERSION
                assert s.server_info == {"name": TS_NAME, "version": "0.0.1"}
                assert s.instructions == TS_INSTRUCTIONS
                assert s.server_capabilities.keys() >= {"tools", "resources", "prompts", "logging"}
                await use_every_feature(s, peer)
                readme = await s.read_resource("test://readme")
                assert [(str(c.uri), c.mime_type, getattr(c, "text", None)) for c in readme.contents] == [
                    ("test://readme", "text/plain", "hello from the TypeScript SDK")
                ]
                assert text_of(await s.call_tool("ask_name")) == "accept: Grace"
                assert_elicited_once(peer)
                assert (await ts_stats(server, http))["sessions"] == 1
            # the log notifications of `count` reached on_notification (logging is on until setLevel)
            logs = [m["params"] for m in peer.notifications if m["method"] == "notifications/message"]
            assert logs == [{"level": "info", "logger": "count", "data": f"step {i} of 3"} for i in (1, 2, 3)]

            # -- the end: DELETE answered, the SDK closed the session, the GET stream ended --
            stats = await ts_stats_when_ended(server, http)
            assert stats["sessions"] == 0, stats
            assert stats["deletes"] == 1 and len(stats["closed"]) == 1, stats
            methods = [method for method, _ in stats["exchanges"]]
            assert methods.count("GET") == 1 and methods.count("DELETE") == 1, stats
            statuses = [status for _, status in stats["exchanges"]]
            if mode == "auto":  # the server/discover probe: the SDK's 400 for a session-less request
                assert stats["exchanges"][0] == ["POST", 400], stats
                statuses = statuses[1:]
            assert all(status < 400 for status in statuses), stats
        assert_no_leaks(http)


@pytest.mark.deadline(TS_DEADLINE + 5)
async def test_typescript_sdk_server_refuses_modern(node_server: None, http: httpx.AsyncClient) -> None:
    """The TypeScript SDK (1.x) has no 2026-07-28 era: ``mode="modern"`` gets its 400 on the first
    request, as a TransportError, and leaves nothing behind."""
    peer = Peer()
    with trio.fail_after(TS_DEADLINE):
        async with ts_server() as server:
            async with peer.session(server.url, "modern", http) as s:
                assert s.modern
                with pytest.raises(TransportError) as caught:
                    await s.list_tools()
                assert caught.value.status == 400
            stats = await ts_stats(server, http)
            assert stats["exchanges"] == [["POST", 400]], stats
            assert stats["sessions"] == 0
        assert_no_leaks(http)
