"""Protocol revision 2026-07-28 on the same endpoint: stateless requests, header validation, results,
input-required results, subscriptions, and the cancel scope of each request."""

from __future__ import annotations

import base64
import json
from typing import Any

import mcp_types as mt
import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig
from mcp_trio.testing import ASGIClient, NoResponse, open_asgi_client

from .conftest import settle

V = "2026-07-28"
CAPS = {"sampling": {}, "elicitation": {}, "roots": {}}
SERVER_INFO = {"name": "modern-test", "version": "2.0.0"}


def meta(**extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": CAPS,
        **extra,
    }


def headers_for(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": V,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    headers.update(extra)
    return headers


class Modern:
    def __init__(self, asgi: ASGIClient) -> None:
        self.asgi = asgi
        self.next_id = 0

    async def post(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        **kw: Any,
    ):
        self.next_id += 1
        params = {**(params or {}), "_meta": {**meta(), **(params or {}).get("_meta", {})}}
        name = params.get("name") or params.get("uri")
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        hdrs = headers if headers is not None else headers_for(method, name)
        return await self.asgi.request("POST", headers=hdrs, body=body.encode(), **kw)

    async def call(
        self, method: str, params: dict[str, Any] | None = None, **kw: Any
    ) -> tuple[int, dict[str, Any]]:
        response = await self.post(method, params, **kw)
        if response.headers.get("content-type") == "text/event-stream":
            last = None
            while (message := await response.next_message()) is not None:
                last = message
            return response.status, last or {}
        return response.status, await response.json()


def build() -> MCPServer:
    server = MCPServer("modern-test", "2.0.0", cache_ttl_ms=5000, cache_scope="public")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def chatty(ctx: Context) -> str:
        await ctx.report_progress(1, 2)
        await ctx.info("working")
        return "done"

    @server.tool()
    async def greet(ctx: Context) -> str:
        answer = await ctx.elicit(
            "Name?", {"type": "object", "properties": {"name": {"type": "string"}}}, key="who"
        )
        return f"Hello, {answer.content['name']}!"

    @server.tool()
    async def two_rounds(ctx: Context) -> str:
        first = await ctx.elicit(
            "First?", {"type": "object", "properties": {"a": {"type": "string"}}}, key="step1"
        )
        second = await ctx.sample("Second?", max_tokens=10, key="step2")
        return f"{first.content['a']} then {second.content.text}"

    @server.tool(
        input_schema={
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "count": {"type": "integer", "x-mcp-header": "Count"},
                "query": {"type": "string"},
            },
            "required": ["query"],
        }
    )
    async def routed(**arguments: Any) -> str:
        return json.dumps(arguments)

    @server.resource("test://doc", mime_type="text/plain")
    async def doc() -> str:
        return "doc"

    @server.prompt(description="p")
    async def hello(name: str) -> str:
        return f"hello {name}"

    return server


@pytest.fixture
async def app(config: ServerConfig) -> MCPApp:
    return MCPApp(build(), config)


@pytest.fixture
async def modern(app: MCPApp):
    async with open_asgi_client(app) as asgi:
        yield Modern(asgi)


async def test_discover(modern: Modern) -> None:
    status, body = await modern.call("server/discover")
    assert status == 200
    result = body["result"]
    assert result["supportedVersions"] == ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]
    assert result["resultType"] == "complete" and result["ttlMs"] == 5000 and result["cacheScope"] == "public"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"] == SERVER_INFO
    assert "tools" in result["capabilities"] and "prompts" in result["capabilities"]


async def test_results_carry_metadata(modern: Modern) -> None:
    status, body = await modern.call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert status == 200
    result = body["result"]
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert result["resultType"] == "complete" and "ttlMs" not in result
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"] == SERVER_INFO
    for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
        result = (await modern.call(method))[1]["result"]
        assert result["ttlMs"] == 5000 and result["cacheScope"] == "public", method
    read = (await modern.call("resources/read", {"uri": "test://doc"}))[1]["result"]
    assert read["ttlMs"] == 5000 and read["contents"][0]["text"] == "doc"


async def test_no_session_is_minted_and_session_headers_are_ignored(modern: Modern, app: MCPApp) -> None:
    extra = {"mcp-session-id": "whatever", "last-event-id": "1-1"}
    response = await modern.post("tools/list", headers=headers_for("tools/list", **extra))
    assert response.status == 200 and "mcp-session-id" not in response.headers
    assert app.statistics()["sessions"] == 0


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"mcp-protocol-version": None}, 400, -32020),
        ({"mcp-protocol-version": "2025-11-25"}, 400, -32020),
        ({"mcp-method": None}, 400, -32020),
        ({"mcp-method": "tools/list"}, 400, -32020),
        ({"mcp-name": None}, 400, -32020),
        ({"mcp-name": "other"}, 400, -32020),
        ({"mcp-name": "=?base64?ZWNobw==?="}, 200, None),  # "echo"
        ({"mcp-name": "=?base64?not base64?="}, 400, -32020),
    ],
)
async def test_header_validation(
    modern: Modern, change: dict[str, str | None], status: int, code: int | None
) -> None:
    headers = headers_for("tools/call", "echo")
    for key, value in change.items():
        if value is None:
            headers.pop(key)
        else:
            headers[key] = value
    response = await modern.post("tools/call", {"name": "echo", "arguments": {"text": "x"}}, headers=headers)
    assert response.status == status
    body = await response.json()
    if code is not None:
        assert body["error"]["code"] == code and body["id"] == modern.next_id
        assert "mcp-session-id" not in response.headers
    else:
        assert body["result"]["content"][0]["text"] == "x"


async def test_unsupported_version(modern: Modern) -> None:
    headers = headers_for("tools/list", **{"mcp-protocol-version": "2099-01-01"})
    response = await modern.post(
        "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}, headers=headers
    )
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["code"] == -32022
    assert error["data"] == {
        "supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"],
        "requested": "2099-01-01",
    }


@pytest.mark.parametrize(
    "drop", ["io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/protocolVersion"]
)
async def test_incomplete_meta_is_invalid_params(modern: Modern, drop: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {"_meta": {k: v for k, v in meta().items() if k != drop}},
    }
    response = await modern.asgi.request(
        "POST", headers=headers_for("tools/list"), body=json.dumps(body).encode()
    )
    assert response.status == 400
    assert (await response.json())["error"]["code"] == -32602


@pytest.mark.parametrize(
    "method", ["ping", "logging/setLevel", "resources/subscribe", "initialize", "no/such"]
)
async def test_unknown_and_removed_methods_are_404(modern: Modern, method: str) -> None:
    response = await modern.post(method, {"uri": "test://doc"} if "subscribe" in method else None)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == -32601


async def test_get_and_delete_are_405(modern: Modern) -> None:
    for method in ("GET", "DELETE"):
        response = await modern.asgi.request(
            method, headers={"accept": "text/event-stream", "mcp-protocol-version": V}
        )
        assert response.status == 405 and response.headers["allow"] == "POST"


async def test_notifications_are_accepted(modern: Modern) -> None:
    body = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 1, "_meta": meta()},
    }
    headers = headers_for("notifications/cancelled")
    response = await modern.asgi.request("POST", headers=headers, body=json.dumps(body).encode())
    assert response.status == 202 and await response.read() == b""


async def test_logs_only_with_a_log_level(modern: Modern) -> None:
    params = {"name": "chatty", "arguments": {}, "_meta": {"progressToken": "p"}}
    response = await modern.post("tools/call", params)
    assert response.headers["content-type"] == "text/event-stream"
    methods = [m.get("method") async for m in _messages(response)]
    assert methods == ["notifications/progress", None]  # no notifications/message without a level
    params["_meta"]["io.modelcontextprotocol/logLevel"] = "info"
    response = await modern.post("tools/call", params)
    methods = [m.get("method") async for m in _messages(response)]
    assert methods == ["notifications/progress", "notifications/message", None]


async def _messages(response):
    while (message := await response.next_message()) is not None:
        yield message


async def test_plain_requests_are_answered_with_json(modern: Modern) -> None:
    response = await modern.post("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize("config", [ServerConfig(json_response=True)])
async def test_json_mode_drops_notifications(modern: Modern) -> None:
    params = {
        "name": "chatty",
        "arguments": {},
        "_meta": {"progressToken": "p", "io.modelcontextprotocol/logLevel": "debug"},
    }
    response = await modern.post("tools/call", params)
    assert response.headers["content-type"] == "application/json"
    assert (await response.json())["result"]["content"][0]["text"] == "done"


async def test_input_required_round_trip(modern: Modern) -> None:
    status, body = await modern.call("tools/call", {"name": "greet", "arguments": {}})
    result = body["result"]
    assert status == 200 and result["resultType"] == "input_required"
    assert result["inputRequests"]["who"]["method"] == "elicitation/create"
    assert result["inputRequests"]["who"]["params"]["mode"] == "form"
    assert isinstance(result["requestState"], str)
    retry = {
        "name": "greet",
        "arguments": {},
        "inputResponses": {"who": {"action": "accept", "content": {"name": "Ann"}}},
        "requestState": result["requestState"],
    }
    final = (await modern.call("tools/call", retry))[1]["result"]
    assert final["resultType"] == "complete" and final["content"][0]["text"] == "Hello, Ann!"
    # without requestState the input responses alone are enough
    retry.pop("requestState")
    assert (await modern.call("tools/call", retry))[1]["result"]["content"][0]["text"] == "Hello, Ann!"


async def test_multi_round_keeps_earlier_answers_in_the_state(modern: Modern) -> None:
    first = (await modern.call("tools/call", {"name": "two_rounds", "arguments": {}}))[1]["result"]
    assert list(first["inputRequests"]) == ["step1"]
    answers = {"step1": {"action": "accept", "content": {"a": "A"}}}
    second = (
        await modern.call(
            "tools/call",
            {
                "name": "two_rounds",
                "arguments": {},
                "inputResponses": answers,
                "requestState": first["requestState"],
            },
        )
    )[1]["result"]
    assert (
        list(second["inputRequests"]) == ["step2"]
        and second["inputRequests"]["step2"]["method"] == "sampling/createMessage"
    )
    sampled = {"step2": {"role": "assistant", "content": {"type": "text", "text": "B"}, "model": "m"}}
    third = (
        await modern.call(
            "tools/call",
            {
                "name": "two_rounds",
                "arguments": {},
                "inputResponses": sampled,
                "requestState": second["requestState"],
            },
        )
    )[1]["result"]
    assert third["content"][0]["text"] == "A then B"


async def test_tampered_or_foreign_state_is_rejected(modern: Modern) -> None:
    first = (await modern.call("tools/call", {"name": "two_rounds", "arguments": {}}))[1]["result"]
    answers = {"step1": {"action": "accept", "content": {"a": "A"}}}
    second = (
        await modern.call(
            "tools/call",
            {
                "name": "two_rounds",
                "arguments": {},
                "inputResponses": answers,
                "requestState": first["requestState"],
            },
        )
    )[1]["result"]
    state = second["requestState"]
    body, sig = state.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["r"]["step1"]["content"]["a"] = "FORGED"
    forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=") + "." + sig
    for bad in (state + "-TAMPERED", forged, "garbage"):
        error = (
            await modern.call("tools/call", {"name": "two_rounds", "arguments": {}, "requestState": bad})
        )[1]["error"]
        assert error["code"] == -32602
    # a state minted for one tool is no good for another
    error = (await modern.call("tools/call", {"name": "greet", "arguments": {}, "requestState": state}))[1][
        "error"
    ]
    assert error["code"] == -32602


@pytest.mark.parametrize("config", [ServerConfig(request_state_ttl=60)])
async def test_state_expires(modern: Modern, app: MCPApp) -> None:
    now = [1_000_000.0]
    app._modern.clock = lambda: now[0]
    first = (await modern.call("tools/call", {"name": "two_rounds", "arguments": {}}))[1]["result"]
    now[0] += 61
    error = (
        await modern.call(
            "tools/call", {"name": "two_rounds", "arguments": {}, "requestState": first["requestState"]}
        )
    )[1]["error"]
    assert error["code"] == -32602 and "expired" in error["message"]


async def test_invalid_input_responses(modern: Modern) -> None:
    bad = await modern.call(
        "tools/call", {"name": "greet", "arguments": {}, "inputResponses": {"who": 12345}}
    )
    assert bad[1]["error"]["code"] == -32602
    missing = await modern.call(
        "tools/call",
        {
            "name": "greet",
            "arguments": {},
            "inputResponses": {"other": {"action": "accept", "content": {"x": "y"}}},
        },
    )
    assert missing[1]["result"]["resultType"] == "input_required"  # asked again


async def test_missing_capability_is_32021_and_400(modern: Modern) -> None:
    params = {"name": "greet", "arguments": {}, "_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}
    status, body = await modern.call("tools/call", params)
    assert status == 400
    assert body["error"]["code"] == -32021
    assert body["error"]["data"] == {"requiredCapabilities": {"elicitation": {}}}


@pytest.mark.parametrize(
    ("arguments", "extra", "ok"),
    [
        ({"query": "q"}, {}, True),
        ({"query": "q", "region": "eu"}, {"mcp-param-region": "eu"}, True),
        ({"query": "q", "region": "eu"}, {}, False),
        ({"query": "q", "region": "eu"}, {"mcp-param-region": "us"}, False),
        ({"query": "q", "region": "Grüße"}, {"mcp-param-region": "=?base64?R3LDvMOfZQ==?="}, True),
        ({"query": "q", "count": 42}, {"mcp-param-count": "42.0"}, True),
        ({"query": "q", "count": 42}, {"mcp-param-count": "41"}, False),
        ({"query": "q", "region": None}, {}, True),
    ],
)
async def test_x_mcp_header_parameters(modern: Modern, arguments: dict, extra: dict, ok: bool) -> None:
    headers = headers_for("tools/call", "routed", **extra)
    status, body = await modern.call(
        "tools/call", {"name": "routed", "arguments": arguments}, headers=headers
    )
    if ok:
        assert status == 200 and "result" in body, body
    else:
        assert status == 400 and body["error"]["code"] == -32020


def blocking_server(cancelled: trio.Event) -> MCPServer:
    server = MCPServer("blocking")

    @server.tool()
    async def block(ctx: Context) -> str:
        await ctx.report_progress(0, 1)
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        return "never"  # pragma: no cover

    return server


@pytest.mark.parametrize("json_response", [True, False])
async def test_disconnect_cancels_the_handler_within_100ms(
    json_response: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """In virtual time (the in-memory ASGI client, autojump): the 100 ms are the app's, not the machine's."""
    cancelled = trio.Event()
    app = MCPApp(blocking_server(cancelled), ServerConfig(json_response=json_response))
    async with open_asgi_client(app) as asgi:
        client = Modern(asgi)
        gone = trio.Event()
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                params = {"name": "block", "arguments": {}, "_meta": {"progressToken": 1}}
                try:
                    response = await client.post("tools/call", params, disconnect=gone)
                except NoResponse:
                    assert json_response  # JSON mode: no head was ever sent
                    return
                assert response.headers["content-type"] == "text/event-stream"
                assert (await response.next_message())["method"] == "notifications/progress"
                assert await response.next_message() is None  # nothing after the disconnect

            nursery.start_soon(call)
            await settle()
            assert app.statistics()["modern_inflight"] == 1 and not cancelled.is_set()
            start = trio.current_time()
            gone.set()
            with trio.fail_after(0.1):
                await cancelled.wait()
            assert trio.current_time() - start < 0.1
        await settle()
        assert app.statistics()["modern_inflight"] == 0


async def test_listen_acknowledges_filters_and_tags(modern: Modern, app: MCPApp) -> None:
    wanted = {"notifications": {"toolsListChanged": True, "resourceSubscriptions": ["test://doc"]}}
    stream = await modern.post("subscriptions/listen", wanted)
    assert stream.headers["content-type"] == "text/event-stream"
    ack = await stream.next_message()
    listen_id = modern.next_id
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": listen_id}
    assert ack["params"]["notifications"] == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["test://doc"],
    }
    server = app.server
    await server.notify_prompts_changed()  # not asked for
    await server.notify_resource_updated("test://other")  # not subscribed
    await server.notify_tools_changed()
    await server.notify_resource_updated("test://doc")
    tools = await stream.next_message()
    assert tools["method"] == "notifications/tools/list_changed"
    assert tools["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == listen_id
    updated = await stream.next_message()
    assert updated["method"] == "notifications/resources/updated" and updated["params"]["uri"] == "test://doc"
    assert app.statistics()["listeners"] == 1
    await stream.aclose()
    await settle()
    assert app.statistics()["listeners"] == 0 and not server.notifications.subscribers


async def test_listen_ends_gracefully_on_shutdown(app: MCPApp) -> None:
    async with open_asgi_client(app) as asgi:
        modern = Modern(asgi)
        stream = await modern.post("subscriptions/listen", {"notifications": {"promptsListChanged": True}})
        await stream.next_message()
        with trio.fail_after(1):
            await app.aclose()
        final = await stream.next_message()
        assert final == {
            "jsonrpc": "2.0",
            "id": modern.next_id,
            "result": {
                "resultType": "complete",
                "_meta": {"io.modelcontextprotocol/subscriptionId": modern.next_id},
            },
        }
        # then its last words: when to listen again (elsewhere, for a worker that drains)
        assert await stream.read() == b"retry: 1000\n\n" and stream.complete
        response = await modern.post("subscriptions/listen", {"notifications": {}})
        assert response.status == 503


async def test_many_requests_leave_nothing_behind(modern: Modern, app: MCPApp) -> None:
    await settle()
    baseline = app.statistics()["process_tasks"]
    for n in range(50):
        await modern.call("tools/call", {"name": "echo", "arguments": {"text": str(n)}})
        await modern.call("tools/call", {"name": "greet", "arguments": {}})
    await settle()
    stats = app.statistics()
    assert stats["process_tasks"] == baseline and stats["modern_inflight"] == 0 and stats["sessions"] == 0


async def test_both_eras_side_by_side(modern: Modern, app: MCPApp) -> None:
    from .conftest import POST_HEADERS, init_body

    legacy = await modern.asgi.request("POST", headers=POST_HEADERS, body=init_body())
    assert legacy.status == 200 and legacy.headers["mcp-session-id"]
    assert (await modern.call("tools/list"))[0] == 200
    assert app.statistics()["sessions"] == 1


def test_input_request_wire_shapes() -> None:
    from mcp_trio._app.inputs import InputRequest
    from mcp_trio._protocol import versions

    url = InputRequest.elicitation_url("go", "https://x.example", "e1")
    assert url.wire(versions.REVISIONS["2025-11-25"])["params"]["elicitationId"] == "e1"
    assert "elicitationId" not in url.wire(versions.REVISIONS["2026-07-28"])["params"]
    assert "mode" not in InputRequest.elicitation("m", {}).wire(versions.REVISIONS["2025-06-18"])["params"]
    assert InputRequest.roots().wire(None) == {"method": "roots/list", "params": {}}
    assert isinstance(InputRequest.roots().parse("k", {"roots": []}), mt.ListRootsResult)
