"""Interoperability at protocol revision 2026-07-28: the official Python SDK client (``mcp`` 2.3.0)
against an in-process mcp_trio server.

What the SDK client does at 2026-07-28 (read from ``mcp/client/`` of 2.3.0 and seen on the wire here):

* ``mcp.Client(transport, mode=...)`` chooses the era.  ``mode="auto"`` (the default) sends one
  ``server/discover`` (``MCP-Protocol-Version: 2026-07-28``, ``Mcp-Method: server/discover``, and the
  ``_meta`` triple protocolVersion / clientInfo / clientCapabilities) and adopts its result when
  ``supportedVersions`` names 2026-07-28; it falls back to ``initialize`` otherwise.  ``mode="2026-07-28"``
  adopts the version without any probe (a synthesized discover result: no server info, empty
  capabilities).  ``mode="legacy"`` is the 2025 handshake (``tests/integration/test_interop_python_sdk.py``
  covers it with the bare ``ClientSession``).
* Every later request is a self-contained POST: the ``_meta`` triple (plus
  ``io.modelcontextprotocol/logLevel`` when ``Client(log_level=...)`` is set), ``MCP-Protocol-Version``,
  ``Mcp-Method``, ``Mcp-Name`` for tools/call, prompts/get and resources/read, and ``Mcp-Param-*`` for
  ``x-mcp-header`` arguments of tools it has listed.  No ``Mcp-Session-Id``, no GET stream, no DELETE.
* ``Client.call_tool`` / ``get_prompt`` / ``read_resource`` drive ``InputRequiredResult`` themselves
  (``mcp/client/_input_required.py``): each input request goes to the sampling / elicitation / roots
  callback (all keys of a round concurrently, the key as ``ClientRequestContext.request_id``), and the
  request is retried with ``inputResponses`` and the echoed ``requestState`` under a fresh JSON-RPC id,
  up to ``input_required_max_rounds`` (10).  A callback returning ``ErrorData`` aborts with ``MCPError``.
* ``progress_callback`` works: the token goes in ``_meta.progressToken`` and the notifications arrive on
  the request's SSE answer.  Log notifications arrive only with ``log_level`` set (the 2026 opt-in).
* Cancelling a call (a cancel scope around it) aborts that request's POST; the 2026 HTTP wire has no
  ``notifications/cancelled`` and the SDK sends none.
* ``Client.listen(...)`` speaks ``subscriptions/listen``: it waits for
  ``notifications/subscriptions/acknowledged``, yields typed events, ends on the server's final result.
* A ``HEADER_MISMATCH`` (-32020) answer to tools/call makes the SDK re-list the tools and resend once.
* List and read results are cached client-side by their ``ttlMs`` (SEP-2549).
* After the first successful (non-error) result of a tool it has not listed yet, the SDK sends one
  ``tools/list`` of its own, to learn the tool's output schema and validate the result against it
  (``ClientSession.validate_tool_result``); the wire sequences below include that request.

The server runs with ``serve()`` on 127.0.0.1:0; the client is ``mcp.Client`` over
``streamable_http_client`` with our own ``httpx2.AsyncClient``, whose event hooks record every HTTP
exchange so the tests can assert on the wire as well as on the SDK's results.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as mt
import pytest
import trio
from interop_server import add_basic_resources, add_basic_tools, add_greet_prompt, serving, wait_until
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, SubscriptionLost, ToolsListChanged
from mcp.shared.exceptions import MCPError

from mcp_trio import Context, MCPApp, MCPServer
from mcp_trio.demo import build_demo_server

# Same client-side clean-up as in test_interop_python_sdk.py: the SDK's transport leaves httpx2 SSE
# readers unexhausted (it returns out of `async for sse in EventSource(response)` once the answer has
# arrived, and an aborted POST is dropped mid-stream), and Trio's asyncgen finalizer warns about each
# generator left to the garbage collector.  Ignore exactly those generators' warnings, here only.
pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpx2\._(sse|models)\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpcore2\._async\.[A-Za-z_.]+' was garbage collected:ResourceWarning"
    ),
]

MODERN = "2026-07-28"
DEADLINE = 20.0
SERVER_NAME = "interop-2026"
SERVER_VERSION = "2.0.0"
CLIENT_INFO = mt.Implementation(name="python-sdk-interop-2026", version="0.0.1")
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"

# What the test elicitation callback answers, by the (single) required field of the requested schema.
ANSWERS: dict[str, str | bool] = {
    "name": "Ada",
    "color": "blue",
    "context": "interop",
    "password": "hunter2",
    "ok": True,
}
ROOT = mt.Root.model_validate({"uri": "file:///work/project", "name": "project"})


# -- the server -----------------------------------------------------------------------------------


@dataclass
class Probe:
    """Server-side observations shared with the test (server and client run in one Trio run)."""

    blocked: trio.Event = field(default_factory=trio.Event)
    block_cancelled: bool = False


def build_server(probe: Probe, **options: Any) -> MCPServer:
    server = MCPServer(SERVER_NAME, SERVER_VERSION, instructions="a 2026 interop test server", **options)
    add_basic_tools(server)

    @server.tool(description="Ask the client's model a question (sampling)")
    async def ask_model(ctx: Context, question: str) -> str:
        result = await ctx.sample(question, max_tokens=64, systemPrompt="be brief", key="question")
        content = result.content
        assert isinstance(content, mt.TextContent), content
        return f"{result.model}: {content.text}"

    @server.tool(description="Ask the user for their name (elicitation)")
    async def ask_name(ctx: Context) -> str:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        result = await ctx.elicit("What is your name?", schema)
        return f"{result.action}: {(result.content or {}).get('name')}"

    @server.tool(description="Block until cancelled")
    async def block() -> str:
        probe.blocked.set()
        try:
            await trio.sleep_forever()
        finally:
            probe.block_cancelled = True
        return "unreachable"  # pragma: no cover

    @server.tool(
        description="Echo a region mirrored into the Mcp-Param-Region header",
        input_schema={
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            "required": ["region"],
        },
    )
    async def region(region: str) -> str:
        return f"region={region}"

    @server.tool(description="Tell subscribers that the tool list changed")
    async def change_tools() -> str:
        await server.notify_tools_changed()
        return "sent"

    add_basic_resources(server)

    @server.resource("test://secret", name="secret", mime_type="text/plain")
    async def secret(ctx: Context) -> str:
        schema = {"type": "object", "properties": {"password": {"type": "string"}}, "required": ["password"]}
        answer = await ctx.elicit("Password?", schema, key="password")
        return f"the secret behind {(answer.content or {}).get('password')}"

    add_greet_prompt(server)
    return server


@dataclass
class Running:
    app: MCPApp
    url: str
    stop: trio.Event


@asynccontextmanager
async def running_server(server: MCPServer) -> AsyncIterator[Running]:
    """``server`` on 127.0.0.1:0 for the duration of the block; stopped (and joined) after, or when
    ``stop`` is set."""
    stop = trio.Event()
    async with serving(server, stop) as (app, url):
        yield Running(app, url, stop)


async def assert_server_idle(app: MCPApp) -> None:
    """No session was ever opened, and nothing of a modern request (or subscription) is left."""
    await wait_until(
        lambda: app.statistics()["modern_inflight"] == 0 and app.statistics()["listeners"] == 0,
        what=f"no in-flight modern requests ({app.statistics()})",
    )
    stats = app.statistics()
    assert stats["sessions"] == 0, stats
    assert stats["sessions_created"] == 0, stats
    assert (stats["streams"], stats["inflight"]) == (0, 0), stats


# -- the client -------------------------------------------------------------------------------


@dataclass
class Exchange:
    """One HTTP exchange of the SDK, as recorded by httpx2's event hooks."""

    method: str
    headers: dict[str, str]
    body: Any
    status: int | None = None
    content_type: str | None = None

    @property
    def rpc(self) -> str | None:
        return self.body.get("method") if isinstance(self.body, dict) else None

    @property
    def params(self) -> dict[str, Any]:
        return (self.body or {}).get("params") or {}


class Wire:
    """Every HTTP exchange the SDK made, in order (requests without a response have status None)."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self._by_request: dict[int, Exchange] = {}

    async def on_request(self, request: httpx2.Request) -> None:
        body = json.loads(request.content) if request.method == "POST" and request.content else None
        headers = {str(k).lower(): str(v) for k, v in request.headers.items()}
        exchange = Exchange(request.method, headers, body)
        self.exchanges.append(exchange)
        self._by_request[id(request)] = exchange

    async def on_response(self, response: httpx2.Response) -> None:
        exchange = self._by_request.pop(id(response.request))
        exchange.status = response.status_code
        exchange.content_type = response.headers.get("content-type")

    def posts(self, rpc: str | None = None) -> list[Exchange]:
        return [e for e in self.exchanges if e.method == "POST" and (rpc is None or e.rpc == rpc)]

    def rpcs(self) -> list[str | None]:
        return [e.rpc for e in self.posts()]

    def assert_stateless(self) -> None:
        """Only 2026-style requests: POSTs with the metadata headers and ``_meta``, no session."""
        assert {e.method for e in self.exchanges} == {"POST"}, [(e.method, e.rpc) for e in self.exchanges]
        for exchange in self.exchanges:
            assert "mcp-session-id" not in exchange.headers, exchange
            assert exchange.headers.get("mcp-protocol-version") == MODERN, exchange
            assert exchange.headers.get("mcp-method") == exchange.rpc, exchange
            assert "id" in exchange.body, exchange  # requests only: no client notifications at 2026
            meta = exchange.params.get("_meta") or {}
            assert meta.get(META_VERSION) == MODERN, exchange
            assert meta.get(META_CLIENT_INFO) == {"name": CLIENT_INFO.name, "version": CLIENT_INFO.version}
            assert isinstance(meta.get(META_CAPABILITIES), dict), exchange
        assert "initialize" not in self.rpcs()


@asynccontextmanager
async def connect(url: str, wire: Wire, **options: Any) -> AsyncIterator[Client]:
    """An SDK ``Client`` over the streamable HTTP transport, recording its HTTP traffic into ``wire``."""
    hooks: dict[str, list[Callable[..., Any]]] = {
        "request": [wire.on_request],
        "response": [wire.on_response],
    }
    async with (
        httpx2.AsyncClient(timeout=10, event_hooks=hooks) as http,
        Client(streamable_http_client(url, http_client=http), client_info=CLIENT_INFO, **options) as client,
    ):
        yield client


def text_of(result: mt.CallToolResult) -> str:
    assert not result.is_error, result
    assert len(result.content) == 1 and isinstance(result.content[0], mt.TextContent), result
    return result.content[0].text


@dataclass
class Callbacks:
    """Sampling / elicitation / roots callbacks that record what they were asked."""

    sampled: list[tuple[Any, mt.CreateMessageRequestParams]] = field(default_factory=list)
    elicited: list[tuple[Any, Any]] = field(default_factory=list)
    roots_asked: list[Any] = field(default_factory=list)

    async def sampling(
        self, context: ClientRequestContext, params: mt.CreateMessageRequestParams
    ) -> mt.CreateMessageResult:
        self.sampled.append((context.request_id, params))
        message = params.messages[0]
        assert isinstance(message.content, mt.TextContent), message.content
        return mt.CreateMessageResult(
            role="assistant",
            content=mt.TextContent(type="text", text=f"echo: {message.content.text}"),
            model="fake-model",
            stop_reason="endTurn",
        )

    async def elicitation(self, context: ClientRequestContext, params: Any) -> mt.ElicitResult:
        self.elicited.append((context.request_id, params))
        required = params.requested_schema["required"]
        return mt.ElicitResult(action="accept", content={name: ANSWERS[name] for name in required})

    async def roots(self, context: ClientRequestContext) -> mt.ListRootsResult:
        self.roots_asked.append(context.request_id)
        return mt.ListRootsResult(roots=[ROOT])

    def options(self) -> dict[str, Any]:
        return {
            "sampling_callback": self.sampling,
            "elicitation_callback": self.elicitation,
            "list_roots_callback": self.roots,
        }


# -- the tests ----------------------------------------------------------------------------------


async def test_auto_mode_discovers_2026_and_walks_the_features() -> None:
    """``mode="auto"``: ``server/discover`` negotiates 2026-07-28; tools, resources and prompts work
    over stateless POSTs, and the server never opens a session."""
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe())) as srv:
            async with connect(srv.url, wire) as client:
                # -- discovery --
                assert client.protocol_version == MODERN
                assert client.session.discover_result is not None
                assert client.session.initialize_result is None
                assert client.session.discover_result.supported_versions[0] == MODERN
                assert set(client.session.discover_result.supported_versions) >= {MODERN, "2025-11-25"}
                discover = client.session.discover_result
                assert (discover.result_type, discover.ttl_ms, discover.cache_scope) == (
                    "complete",
                    0,
                    "private",
                )
                assert client.server_info is not None
                assert (client.server_info.name, client.server_info.version) == (SERVER_NAME, SERVER_VERSION)
                assert client.instructions == "a 2026 interop test server"
                caps = client.server_capabilities
                assert caps.tools is not None and caps.resources is not None and caps.prompts is not None
                assert wire.rpcs() == ["server/discover"]
                assert wire.exchanges[0].status == 200
                assert wire.exchanges[0].content_type == "application/json"

                # -- tools --
                tools = await client.list_tools()
                assert {t.name for t in tools.tools} == {
                    "add", "count", "ask_model", "ask_name", "block", "region", "change_tools"
                }  # fmt: skip
                assert tools.result_type == "complete"
                add_tool = next(t for t in tools.tools if t.name == "add")
                assert set(add_tool.input_schema["required"]) == {"a", "b"}
                result = await client.call_tool("add", {"a": 2, "b": 40})
                assert text_of(result) == "42"
                assert result.result_type == "complete"
                assert (result.meta or {}).get(mt.SERVER_INFO_META_KEY) == {
                    "name": SERVER_NAME, "version": SERVER_VERSION
                }  # fmt: skip
                assert wire.posts("tools/call")[-1].headers.get("mcp-name") == "add"

                # -- resources --
                resources = await client.list_resources()
                assert [(str(r.uri), r.name) for r in resources.resources] == [
                    ("test://readme", "readme"),
                    ("test://secret", "secret"),
                ]
                templates = await client.list_resource_templates()
                uri_templates = [t.uri_template for t in templates.resource_templates]
                assert uri_templates == ["test://users/{user_id}/profile"]
                read = await client.read_resource("test://readme")
                assert len(read.contents) == 1 and isinstance(read.contents[0], mt.TextResourceContents)
                assert read.contents[0].text == "hello from mcp_trio"
                assert (read.ttl_ms, read.cache_scope) == (0, "private")
                assert wire.posts("resources/read")[-1].headers.get("mcp-name") == "test://readme"
                read = await client.read_resource("test://users/42/profile")
                assert isinstance(read.contents[0], mt.TextResourceContents)
                assert read.contents[0].text == '{"user": "42"}'
                assert read.contents[0].mime_type == "application/json"

                # -- prompts --
                prompts = await client.list_prompts()
                assert [p.name for p in prompts.prompts] == ["greet"]
                prompt = await client.get_prompt("greet", {"name": "Trio"})
                assert prompt.description == "Greet someone"
                assert isinstance(prompt.messages[0].content, mt.TextContent)
                assert prompt.messages[0].content.text == "Please greet Trio warmly."
                assert wire.posts("prompts/get")[-1].headers.get("mcp-name") == "greet"

            # The client's exit sends nothing at 2026 (no session to DELETE).
            assert wire.rpcs() == [
                "server/discover",
                "tools/list",
                "tools/call",
                "resources/list",
                "resources/templates/list",
                "resources/read",
                "resources/read",
                "prompts/list",
                "prompts/get",
            ]
            wire.assert_stateless()
            assert all(e.status == 200 for e in wire.exchanges), [(e.rpc, e.status) for e in wire.exchanges]
            await assert_server_idle(srv.app)


async def test_pinned_mode_skips_discovery() -> None:
    """``mode="2026-07-28"`` adopts the version without a probe: the first request is the caller's."""
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe())) as srv:
            async with connect(srv.url, wire, mode=MODERN) as client:
                assert client.protocol_version == MODERN
                assert client.server_info is None  # the synthesized discover result names no server
                assert wire.exchanges == []
                assert text_of(await client.call_tool("add", {"a": 1, "b": 2})) == "3"
            # the call, then the SDK's own tools/list for the output schema of a tool it had not listed
            assert wire.rpcs() == ["tools/call", "tools/list"]
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_input_required_elicitation_through_the_sdk_retry() -> None:
    """The demo's ``test_input_required_result_elicitation``: the SDK answers the
    ``InputRequiredResult`` through its elicitation callback and retries with ``inputResponses``."""
    wire = Wire()
    callbacks = Callbacks()
    with trio.fail_after(DEADLINE):
        async with running_server(build_demo_server()) as srv:
            async with connect(srv.url, wire, elicitation_callback=callbacks.elicitation) as client:
                result = await client.call_tool("test_input_required_result_elicitation", {})
                assert text_of(result) == "Hello, Ada!"

            assert len(callbacks.elicited) == 1
            key, params = callbacks.elicited[0]
            assert key == "user_name"  # the SDK passes the input request's key as the request id
            assert params.message == "What is your name?"
            assert params.requested_schema["required"] == ["name"]

            first, retry = wire.posts("tools/call")
            assert "inputResponses" not in first.params and "requestState" not in first.params
            assert retry.params["inputResponses"] == {
                "user_name": {"action": "accept", "content": {"name": "Ada"}}
            }
            assert isinstance(retry.params["requestState"], str) and retry.params["requestState"]
            assert retry.params["name"] == "test_input_required_result_elicitation"
            assert first.body["id"] != retry.body["id"]
            assert (first.status, retry.status) == (200, 200)
            meta = first.params["_meta"]
            assert meta[META_CAPABILITIES] == {"elicitation": {"form": {}, "url": {}}}
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_input_required_every_kind_of_input() -> None:
    """The demo's MRTR fixtures through the SDK's driver: sampling, roots, three inputs in one round,
    two rounds one after the other, and an input-required prompt."""
    wire = Wire()
    callbacks = Callbacks()
    with trio.fail_after(DEADLINE):
        async with running_server(build_demo_server()) as srv:
            async with connect(srv.url, wire, **callbacks.options()) as client:
                result = await client.call_tool("test_input_required_result_sampling", {})
                assert text_of(result) == "The model answered: echo: What is the capital of France?"
                assert [key for key, _ in callbacks.sampled] == ["capital_question"]
                assert callbacks.sampled[0][1].max_tokens == 100

                result = await client.call_tool("test_input_required_result_list_roots", {})
                assert text_of(result) == "Roots: file:///work/project"
                assert callbacks.roots_asked == ["client_roots"]

                result = await client.call_tool("test_input_required_result_multiple_inputs", {})
                assert text_of(result) == "echo: Generate a greeting Ada (1 roots)"
                retry = wire.posts("tools/call")[-1]
                assert set(retry.params["inputResponses"]) == {"user_name", "greeting", "client_roots"}
                assert retry.params["inputResponses"]["client_roots"] == {
                    "roots": [{"uri": "file:///work/project", "name": "project"}]
                }

                callbacks.elicited.clear()
                result = await client.call_tool("test_input_required_result_multi_round", {})
                assert text_of(result) == "Ada likes blue"
                assert [key for key, _ in callbacks.elicited] == ["step1", "step2"]
                round1, round2, round3 = wire.posts("tools/call")[-3:]
                assert "requestState" not in round1.params
                assert set(round2.params["inputResponses"]) == {"step1"}
                assert set(round3.params["inputResponses"]) == {"step2"}  # step1 rides in requestState
                assert round2.params["requestState"] != round3.params["requestState"]

                prompt = await client.get_prompt("test_input_required_result_prompt")
                assert isinstance(prompt.messages[0].content, mt.TextContent)
                assert prompt.messages[0].content.text == "Use this context: interop"
                assert len(wire.posts("prompts/get")) == 2
                assert "inputResponses" in wire.posts("prompts/get")[1].params

            wire.assert_stateless()
            capabilities = wire.posts()[-1].params["_meta"][META_CAPABILITIES]
            assert set(capabilities) == {"sampling", "elicitation", "roots"}
            await assert_server_idle(srv.app)


async def test_same_handlers_as_2025_ask_through_input_required() -> None:
    """``ctx.sample`` / ``ctx.elicit`` (server-to-client requests in a 2025 session) become
    input-required rounds at 2026 for tools and for a resource read alike."""
    wire = Wire()
    callbacks = Callbacks()
    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe())) as srv:
            async with connect(srv.url, wire, **callbacks.options()) as client:
                result = await client.call_tool("ask_model", {"question": "what is 2+2?"})
                assert text_of(result) == "fake-model: echo: what is 2+2?"
                (key, sampled), *_ = callbacks.sampled
                assert key == "question"
                assert (sampled.max_tokens, sampled.system_prompt) == (64, "be brief")

                assert text_of(await client.call_tool("ask_name", {})) == "accept: Ada"

                read = await client.read_resource("test://secret")
                assert isinstance(read.contents[0], mt.TextResourceContents)
                assert read.contents[0].text == "the secret behind hunter2"
                assert [key for key, _ in callbacks.elicited] == ["elicitation-1", "password"]

            assert wire.rpcs() == [
                "server/discover",
                "tools/call",  # ask_model: input_required
                "tools/call",  # ask_model retried with inputResponses: complete
                "tools/list",  # the SDK's output-schema refresh after its first tool result
                "tools/call",
                "tools/call",
                "resources/read",
                "resources/read",
            ]
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_progress_and_opt_in_logging() -> None:
    """Progress notifications reach ``progress_callback`` on the request's SSE answer; log messages
    arrive only when the client opts in with ``log_level``."""
    reported: list[tuple[float, float | None, str | None]] = []
    logs: list[mt.LoggingMessageNotificationParams] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe())) as srv:
            wire = Wire()
            async with connect(srv.url, wire, logging_callback=on_log, log_level="info") as client:
                result = await client.call_tool("count", {"n": 3}, progress_callback=on_progress)
                assert text_of(result) == "counted to 3"
                await wait_until(lambda: len(reported) == 3 and len(logs) == 3, what="3 progress, 3 logs")
            assert sorted(reported) == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
            assert sorted(str(log.data) for log in logs) == [f"step {i} of 3" for i in (1, 2, 3)]
            assert {(log.level, log.logger) for log in logs} == {("info", "count")}
            (call,) = wire.posts("tools/call")
            assert call.params["_meta"][META_LOG_LEVEL] == "info"
            assert "progressToken" in call.params["_meta"]
            assert call.content_type == "text/event-stream"
            wire.assert_stateless()

            # Without log_level: progress still flows, logs do not (2026 logging is opt-in per request).
            reported.clear()
            logs.clear()
            wire = Wire()
            async with connect(srv.url, wire, logging_callback=on_log) as client:
                result = await client.call_tool("count", {"n": 2}, progress_callback=on_progress)
                assert text_of(result) == "counted to 2"
                await wait_until(lambda: len(reported) == 2, what="2 progress notifications")
                await trio.sleep(0.1)
            assert logs == []
            assert META_LOG_LEVEL not in wire.posts("tools/call")[0].params["_meta"]
            await assert_server_idle(srv.app)


async def test_cancelling_a_call_aborts_its_request() -> None:
    """A cancelled ``call_tool`` aborts its POST (no ``notifications/cancelled`` at 2026); the server
    cancels the handler and has nothing in flight afterwards; the client goes on working."""
    probe = Probe()
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with running_server(build_server(probe)) as srv:
            async with connect(srv.url, wire) as client:
                async with trio.open_nursery() as nursery:

                    async def call() -> None:
                        await client.call_tool("block", {})

                    nursery.start_soon(call)
                    await probe.blocked.wait()
                    assert srv.app.statistics()["modern_inflight"] == 1
                    nursery.cancel_scope.cancel()
                await wait_until(lambda: probe.block_cancelled, what="the handler cancelled")
                await wait_until(
                    lambda: srv.app.statistics()["modern_inflight"] == 0, what="nothing in flight"
                )
                assert text_of(await client.call_tool("add", {"a": 1, "b": 1})) == "2"

            assert wire.rpcs() == ["server/discover", "tools/call", "tools/call", "tools/list"]
            assert wire.posts("tools/call")[0].status in (None, 200)  # aborted before or after the headers
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_concurrent_calls() -> None:
    """Concurrent calls are independent POSTs, each answered on its own."""
    wire = Wire()
    results: dict[int, str] = {}
    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe())) as srv:
            async with connect(srv.url, wire) as client:

                async def call(i: int) -> None:
                    results[i] = text_of(await client.call_tool("add", {"a": i, "b": 100}))

                async with trio.open_nursery() as nursery:
                    for i in range(8):
                        nursery.start_soon(call, i)
            assert results == {i: str(i + 100) for i in range(8)}
            assert len({e.body["id"] for e in wire.posts("tools/call")}) == 8
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_subscriptions_listen() -> None:
    """``Client.listen`` opens ``subscriptions/listen``: the acknowledged filter, a tools list change
    and a resource update arrive as typed events; leaving the block ends the stream on the server."""
    wire = Wire()
    server = build_server(Probe())
    with trio.fail_after(DEADLINE):
        async with running_server(server) as srv:
            async with connect(srv.url, wire) as client:
                async with client.listen(
                    tools_list_changed=True, resource_subscriptions=["test://readme"]
                ) as subscription:
                    assert subscription.honored.tools_list_changed is True
                    assert subscription.honored.resource_subscriptions == ["test://readme"]
                    assert srv.app.statistics()["listeners"] == 1

                    assert text_of(await client.call_tool("change_tools", {})) == "sent"
                    with trio.fail_after(5):
                        assert await subscription.__anext__() == ToolsListChanged()
                    await server.notify_resource_updated("test://readme")
                    with trio.fail_after(5):
                        assert await subscription.__anext__() == ResourceUpdated(uri="test://readme")

                await wait_until(lambda: srv.app.statistics()["listeners"] == 0, what="listener gone")
                # the client still works after the subscription ended
                assert text_of(await client.call_tool("add", {"a": 2, "b": 2})) == "4"

            (listen,) = wire.posts("subscriptions/listen")
            assert listen.params["notifications"] == {
                "toolsListChanged": True,
                "resourceSubscriptions": ["test://readme"],
            }
            assert listen.content_type == "text/event-stream"
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_server_shutdown_ends_a_subscription_gracefully() -> None:
    """Stopping the server sends an open subscription its final result: the SDK's iterator ends
    (no ``SubscriptionLost``)."""
    wire = Wire()
    events: list[Any] = []
    with trio.fail_after(DEADLINE):
        async with (
            running_server(build_server(Probe())) as srv,
            connect(srv.url, wire) as client,
            client.listen(prompts_list_changed=True) as subscription,
        ):
            assert subscription.honored.prompts_list_changed is True
            srv.stop.set()
            try:
                async for event in subscription:
                    events.append(event)  # pragma: no cover - nothing changes
            except SubscriptionLost as exc:  # pragma: no cover - the failure this test guards
                raise AssertionError("the subscription was dropped, not ended") from exc
        assert events == []
        await assert_server_idle(srv.app)


async def test_header_mismatch_makes_the_sdk_relist_and_resend() -> None:
    """Calling an ``x-mcp-header`` tool the client has not listed: the server answers -32020 (HTTP
    400) for the missing ``Mcp-Param-Region``; the SDK re-lists the tools and resends with it."""
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe())) as srv:
            async with connect(srv.url, wire, mode=MODERN) as client:
                assert text_of(await client.call_tool("region", {"region": "eu-west"})) == "region=eu-west"
            assert wire.rpcs() == ["tools/call", "tools/list", "tools/call"]
            rejected, listed, resent = wire.posts()
            assert (rejected.status, rejected.content_type) == (400, "application/json")
            assert "mcp-param-region" not in rejected.headers
            assert listed.status == 200
            assert resent.status == 200 and resent.headers.get("mcp-param-region") == "eu-west"
            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_errors_reach_the_sdk_as_mcp_errors() -> None:
    """JSON-RPC errors of 2026 requests, including those sent with an HTTP 400, surface as
    ``MCPError`` with the server's code and data; a declined input stops the retry loop."""
    wire = Wire()

    async def refuse(context: ClientRequestContext, params: Any) -> mt.ErrorData:
        return mt.ErrorData(code=mt.INVALID_REQUEST, message="the user walked away")

    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe())) as srv:
            async with connect(srv.url, wire, elicitation_callback=refuse) as client:
                # no sampling callback -> no sampling capability -> -32021 (HTTP 400)
                with pytest.raises(MCPError) as missing:
                    await client.call_tool("ask_model", {"question": "?"})
                assert missing.value.code == -32021
                assert missing.value.data == {"requiredCapabilities": {"sampling": {}}}
                assert wire.posts("tools/call")[-1].status == 400

                with pytest.raises(MCPError) as unknown_tool:
                    await client.call_tool("nope", {})
                assert unknown_tool.value.code == mt.INVALID_PARAMS

                with pytest.raises(MCPError) as unknown_resource:
                    await client.read_resource("test://nope")
                assert unknown_resource.value.code == mt.INVALID_PARAMS  # -32602 at 2026 (not -32002)

                # the elicitation callback refuses: the SDK raises instead of retrying
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("ask_name", {})
                assert refused.value.code == mt.INVALID_REQUEST
                assert refused.value.message == "the user walked away"
                assert [e.params.get("name") for e in wire.posts("tools/call")].count("ask_name") == 1

            wire.assert_stateless()
            await assert_server_idle(srv.app)


async def test_the_sdk_caches_by_ttl() -> None:
    """With ``ttlMs`` set on the server, the SDK serves repeated lists and reads from its cache."""
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with running_server(build_server(Probe(), cache_ttl_ms=60_000)) as srv:
            async with connect(srv.url, wire) as client:
                first = await client.list_tools()
                assert first.ttl_ms == 60_000
                again = await client.list_tools()
                assert [t.name for t in again.tools] == [t.name for t in first.tools]
                await client.read_resource("test://readme")
                read = await client.read_resource("test://readme")
                assert isinstance(read.contents[0], mt.TextResourceContents)
                assert read.contents[0].text == "hello from mcp_trio"
                assert wire.rpcs() == ["server/discover", "tools/list", "resources/read"]
                await client.list_tools(cache_mode="refresh")
                assert wire.rpcs()[-1] == "tools/list"
            wire.assert_stateless()
            await assert_server_idle(srv.app)
