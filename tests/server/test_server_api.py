"""The server API end to end over the in-memory transport: resources, prompts, completion,
server-to-client requests, subscriptions and list-changed notifications."""

from __future__ import annotations

import base64
import json
from typing import Any

import mcp_types as mt
import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, RPCError, ServerConfig, ToolError
from mcp_trio.testing import open_asgi_client

from .conftest import Client, call_body, settle


def build() -> MCPServer:
    server = MCPServer("api-test", "1.2.3")

    @server.resource("test://text", mime_type="text/plain", description="Some text")
    async def text() -> str:
        return "hello"

    @server.resource("test://blob", mime_type="image/png")
    async def blob() -> bytes:
        return b"\x89PNG"

    @server.resource("test://items/{item_id}/detail/{part}")
    async def item(item_id: str, part: str, ctx: Context) -> str:
        return f"{item_id}:{part}:{ctx.method}"

    @server.prompt(description="Greets", argument_descriptions={"name": "who"})
    async def greet(name: str, style: str = "plain") -> str:
        return f"Hello {name} ({style})"

    @server.prompt()
    async def rich() -> list[Any]:
        return [
            mt.PromptMessage(role="assistant", content=mt.TextContent(type="text", text="a")),
            mt.ImageContent(type="image", data="AAAA", mime_type="image/png"),
            {"role": "user", "content": {"type": "text", "text": "b"}},
        ]

    @server.completion()
    async def complete(ref: dict, argument: dict, context: dict | None) -> list[str]:
        return [v for v in ("python", "pytorch", "trio") if v.startswith(argument["value"])]

    @server.tool()
    async def ask(ctx: Context, question: str) -> str:
        result = await ctx.sample(question, max_tokens=50)
        return f"model said: {result.content.text}"

    @server.tool()
    async def form(ctx: Context) -> dict[str, Any]:
        result = await ctx.elicit(
            "Your name?", {"type": "object", "properties": {"name": {"type": "string"}}}
        )
        return {"action": result.action, "content": result.content}

    @server.tool()
    async def roots(ctx: Context) -> list[str]:
        return [str(root.uri) for root in (await ctx.list_roots()).roots]

    @server.tool()
    async def failing() -> str:
        raise ToolError("it broke")

    @server.tool()
    async def rpc_failing() -> str:
        raise RPCError(-32001, "custom error", {"why": "because"})

    @server.tool()
    async def touch(uri: str) -> str:
        await server.notify_resource_updated(uri)
        await server.notify_tools_changed()
        return "ok"

    @server.tool()
    async def polled(ctx: Context) -> str:
        await ctx.report_progress(1, 2)
        ctx.close_sse_stream()
        await trio.sleep(0.05)
        await ctx.report_progress(2, 2)
        return "done"

    @server.tool(input_schema={"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})
    async def explicit(x: int) -> mt.CallToolResult:
        return mt.CallToolResult(
            content=[mt.TextContent(type="text", text=str(x * 2))], structured_content={"y": x * 2}
        )

    return server


@pytest.fixture
async def app(config: ServerConfig) -> MCPApp:
    return MCPApp(build(), config)


CAPS = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": True}}


async def initialize_with_caps(client: Client) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": CAPS,
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    response = await client.asgi.request("POST", headers=client.headers(), body=json.dumps(body).encode())
    client.session_id = response.headers["mcp-session-id"]
    message = await client.read_message(response)
    caps = message["result"]["capabilities"]
    assert caps["resources"] == {"subscribe": True, "listChanged": True}
    assert caps["prompts"] == {"listChanged": True} and "completions" in caps and "tools" in caps
    await client.notify("notifications/initialized")


async def test_resources(client: Client) -> None:
    await initialize_with_caps(client)
    listed = (await client.request(2, "resources/list"))["result"]["resources"]
    assert listed == [
        {"uri": "test://text", "name": "text", "description": "Some text", "mimeType": "text/plain"},
        {"uri": "test://blob", "name": "blob", "mimeType": "image/png"},
    ]
    templates = (await client.request(3, "resources/templates/list"))["result"]["resourceTemplates"]
    assert templates == [{"uriTemplate": "test://items/{item_id}/detail/{part}", "name": "item"}]
    text = (await client.request(4, "resources/read", {"uri": "test://text"}))["result"]["contents"]
    assert text == [{"uri": "test://text", "mimeType": "text/plain", "text": "hello"}]
    blob = (await client.request(5, "resources/read", {"uri": "test://blob"}))["result"]["contents"][0]
    assert base64.b64decode(blob["blob"]) == b"\x89PNG" and blob["mimeType"] == "image/png"
    item = (await client.request(6, "resources/read", {"uri": "test://items/42/detail/x"}))["result"]
    assert item["contents"][0]["text"] == "42:x:resources/read"
    missing = await client.request(7, "resources/read", {"uri": "test://items/42"})
    assert missing["error"]["code"] == -32002 and missing["error"]["data"] == {"uri": "test://items/42"}


async def test_prompts(client: Client) -> None:
    await initialize_with_caps(client)
    prompts = {p["name"]: p for p in (await client.request(2, "prompts/list"))["result"]["prompts"]}
    assert prompts["greet"]["arguments"] == [
        {"name": "name", "description": "who", "required": True},
        {"name": "style", "required": False},
    ]
    got = (await client.request(3, "prompts/get", {"name": "greet", "arguments": {"name": "Ann"}}))["result"]
    assert got == {
        "description": "Greets",
        "messages": [{"role": "user", "content": {"type": "text", "text": "Hello Ann (plain)"}}],
    }
    rich = (await client.request(4, "prompts/get", {"name": "rich"}))["result"]["messages"]
    assert [m["role"] for m in rich] == ["assistant", "user", "user"]
    assert rich[1]["content"] == {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    missing_arg = await client.request(5, "prompts/get", {"name": "greet", "arguments": {}})
    assert missing_arg["error"]["code"] == -32602
    unknown = await client.request(6, "prompts/get", {"name": "nope"})
    assert unknown["error"]["code"] == -32602


async def test_completion(client: Client) -> None:
    await initialize_with_caps(client)
    params = {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "py"}}
    completion = (await client.request(2, "completion/complete", params))["result"]["completion"]
    assert completion == {"values": ["python", "pytorch"], "total": 2, "hasMore": False}


async def test_tool_errors_and_structured_results(client: Client) -> None:
    await initialize_with_caps(client)
    failing = (await client.request(2, "tools/call", {"name": "failing", "arguments": {}}))["result"]
    assert failing == {"content": [{"type": "text", "text": "it broke"}], "isError": True}
    rpc = (await client.request(3, "tools/call", {"name": "rpc_failing", "arguments": {}}))["error"]
    assert rpc == {"code": -32001, "message": "custom error", "data": {"why": "because"}}
    explicit = (await client.request(4, "tools/call", {"name": "explicit", "arguments": {"x": 21}}))["result"]
    assert explicit["structuredContent"] == {"y": 42} and explicit["content"][0]["text"] == "42"
    tools = {t["name"]: t for t in (await client.request(5, "tools/list"))["result"]["tools"]}
    assert tools["explicit"]["inputSchema"]["required"] == ["x"]


async def answer_next_request(client: Client, response, result: dict[str, Any]) -> dict[str, Any]:
    """Read the server's request from ``response`` (an SSE stream) and POST the client's answer."""
    request = await response.next_message()
    assert "method" in request and "id" in request
    answer = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    assert (await client.post(json.dumps(answer).encode())).status == 202
    return request


async def test_sampling_round_trip_on_the_request_stream(client: Client, app: MCPApp) -> None:
    await initialize_with_caps(client)
    response = await client.post(call_body(2, "ask", {"question": "2+2?"}))
    request = await answer_next_request(
        client, response, {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}
    )
    assert request["method"] == "sampling/createMessage"
    assert request["params"]["messages"][0]["content"]["text"] == "2+2?"
    assert request["params"]["maxTokens"] == 50
    final = await response.next_message()
    assert final["id"] == 2 and final["result"]["content"][0]["text"] == "model said: 4"


async def test_elicitation_and_roots(client: Client) -> None:
    await initialize_with_caps(client)
    response = await client.post(call_body(2, "form", {}))
    request = await answer_next_request(client, response, {"action": "accept", "content": {"name": "Ann"}})
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    assert (await response.next_message())["result"]["structuredContent"] == {
        "action": "accept",
        "content": {"name": "Ann"},
    }
    response = await client.post(call_body(3, "roots", {}))
    request = await answer_next_request(client, response, {"roots": [{"uri": "file:///tmp", "name": "tmp"}]})
    assert request["method"] == "roots/list"
    assert (await response.next_message())["result"]["content"][0]["text"] == "file:///tmp"


async def test_client_error_answer_reaches_the_handler(client: Client) -> None:
    await initialize_with_caps(client)
    response = await client.post(call_body(2, "ask", {"question": "?"}))
    request = await response.next_message()
    error = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "user rejected"}}
    assert (await client.post(json.dumps(error).encode())).status == 202
    final = await response.next_message()  # the tool did not catch it: a JSON-RPC error answer
    assert final["error"] == {"code": -1, "message": "user rejected"}


async def test_capabilities_are_checked(client: Client) -> None:
    await client.initialize()  # no client capabilities
    result = (await client.request(2, "tools/call", {"name": "ask", "arguments": {"question": "?"}}))["error"]
    assert result["code"] == -32021 and result["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_cancelled_handler_waiting_for_the_client_tells_the_client(client: Client, app: MCPApp) -> None:
    await initialize_with_caps(client)
    get = await client.get_stream()
    await get.next_event()
    response = await client.post(call_body(2, "ask", {"question": "?"}))
    request = await response.next_message()
    await response.aclose()
    await client.notify("notifications/cancelled", {"requestId": 2})
    await settle()
    stats = app.statistics()
    assert stats["inflight"] == 0 and stats["pending_responses"] == 0
    # a late answer is harmless
    late = {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"},
    }
    assert (await client.post(json.dumps(late).encode())).status == 202


async def test_subscriptions_and_list_changed(client: Client, app: MCPApp) -> None:
    await initialize_with_caps(client)
    get = await client.get_stream()
    await get.next_event()
    assert (await client.request(2, "resources/subscribe", {"uri": "test://text"}))["result"] == {}
    await client.request(3, "tools/call", {"name": "touch", "arguments": {"uri": "test://text"}})
    assert await get.next_message() == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "test://text"},
    }
    assert (await get.next_message())["method"] == "notifications/tools/list_changed"
    await client.request(4, "resources/unsubscribe", {"uri": "test://text"})
    await client.request(5, "tools/call", {"name": "touch", "arguments": {"uri": "test://text"}})
    assert (await get.next_message())["method"] == "notifications/tools/list_changed"  # no update any more


async def test_closed_sessions_stop_listening(app: MCPApp) -> None:
    server = app.server
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await initialize_with_caps(client)
        assert len(server.notifications.subscribers) == 1
        await client.delete()
        await settle()
        assert len(server.notifications.subscribers) == 0


async def test_sse_polling_close_and_resume(client: Client, app: MCPApp) -> None:
    await initialize_with_caps(client)
    response = await client.post(call_body(2, "polled", {}, progressToken="p"))
    events = []
    while (event := await response.next_event()) is not None:
        events.append(event)
    # the server closed the connection after the first progress notification: no response yet
    assert events[0].retry == 1000 and json.loads(events[1].data)["params"]["progress"] == 1
    assert len(events) == 2 and response.complete
    resumed = await client.get_stream(**{"last-event-id": events[1].id})
    progress = await resumed.next_message()
    assert progress["params"]["progress"] == 2
    final = await resumed.next_message()
    assert final["id"] == 2 and final["result"]["content"][0]["text"] == "done"
    assert await resumed.next_event() is None


def test_sync_handlers_are_refused() -> None:
    server = MCPServer("x")
    with pytest.raises(TypeError, match="async"):
        server.add_tool(lambda: 1)
    with pytest.raises(TypeError, match="async"):
        server.add_prompt(lambda: 1)
    with pytest.raises(TypeError, match="async"):
        server.add_resource("test://x", lambda: 1)


def test_template_parameters_must_exist() -> None:
    server = MCPServer("x")

    async def reader(a: str) -> str:
        return a

    with pytest.raises(TypeError, match="lacks parameters"):
        server.add_resource("test://{a}/{b}", reader)
