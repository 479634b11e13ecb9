"""The stdio server transport: in-memory streams for stdin/stdout, and one real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as mt
import trio
import trio.testing

from mcp_trio import Context, MCPServer, ServerConfig
from mcp_trio._transport.stdio import StdioConnection, serve_stdio
from mcp_trio.demo import build_demo_server

DEADLINE = 10
MODERN = "2026-07-28"


def modern_meta(**capabilities: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


class StdioClient:
    """Writes lines to the server's stdin and reads lines from its stdout."""

    def __init__(self, stdin: trio.abc.SendStream, stdout: trio.abc.ReceiveStream) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.buffer = bytearray()
        self.raw: list[bytes] = []

    async def send_raw(self, data: bytes) -> None:
        await self.stdin.send_all(data)

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_raw(json.dumps(message).encode() + b"\n")

    async def request(self, request_id: int | str, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def receive(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.stdout.receive_some()
            assert chunk, "stdout ended"
            self.buffer += chunk
        end = self.buffer.index(b"\n")
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        self.raw.append(line)
        message: dict[str, Any] = json.loads(line)
        return message

    async def call(self, request_id: int | str, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and return its response (no other message may come first)."""
        await self.request(request_id, method, params)
        response = await self.receive()
        assert response.get("id") == request_id, response
        return response

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.call(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities or {},
                "clientInfo": {"name": "stdio-test", "version": "1"},
            },
        )
        await self.notify("notifications/initialized")
        result: dict[str, Any] = response["result"]
        return result

    async def read_to_eof(self) -> bytes:
        data = bytes(self.buffer)
        while chunk := await self.stdout.receive_some():
            data += chunk
        return data


@asynccontextmanager
async def open_stdio(
    server: MCPServer | None = None, config: ServerConfig | None = None
) -> AsyncIterator[StdioClient]:
    """Run ``serve_stdio`` on in-memory streams; leaving closes stdin and waits for the server to end."""
    client_stdin, server_stdin = trio.testing.memory_stream_one_way_pair()
    server_stdout, client_stdout = trio.testing.memory_stream_one_way_pair()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_stdio(
                    server or build_demo_server(),
                    stdin=server_stdin,
                    stdout=server_stdout,
                    config=config,
                    task_status=task_status,
                )
            )
            client = StdioClient(client_stdin, client_stdout)
            yield client
            await client_stdin.aclose()


# -- 2025 sessions -----------------------------------------------------------------------------


async def test_initialize_list_and_call_with_progress() -> None:
    async with open_stdio() as client:
        result = await client.initialize()
        assert result["protocolVersion"] == "2025-11-25"
        assert result["serverInfo"]["name"] == "mcp-trio-demo"
        assert "tools" in result["capabilities"]

        tools = (await client.call(1, "tools/list"))["result"]["tools"]
        assert {"echo", "count", "test_sampling"} <= {tool["name"] for tool in tools}

        await client.request(
            2, "tools/call", {"name": "count", "arguments": {"steps": 3}, "_meta": {"progressToken": "p"}}
        )
        messages = [await client.receive() for _ in range(7)]
        progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
        logs = [m["params"] for m in messages if m.get("method") == "notifications/message"]
        assert [p["progress"] for p in progress] == [1, 2, 3]
        assert all(p["progressToken"] == "p" and p["total"] == 3 for p in progress)
        assert [log["data"] for log in logs] == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
        assert messages[-1]["id"] == 2
        assert messages[-1]["result"]["content"] == [{"type": "text", "text": "counted to 3"}]
        # a newline in a message is escaped: the line ends only where the message does
        echoed = await client.call(3, "tools/call", {"name": "echo", "arguments": {"text": "a\nb\r\u2028"}})
        assert echoed["result"]["content"][0]["text"] == "a\nb\r\u2028"
        assert b"\\n" in client.raw[-1]


async def test_version_negotiation_and_second_initialize() -> None:
    async with open_stdio() as client:
        response = await client.call(
            1,
            "initialize",
            {
                "protocolVersion": "1999-01-01",
                "capabilities": {},
                "clientInfo": {"name": "x", "version": "1"},
            },
        )
        assert response["result"]["protocolVersion"] == "2025-11-25"
        again = await client.call(
            2,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "x", "version": "1"},
            },
        )
        assert again["error"]["code"] == -32600


async def test_requests_before_initialize() -> None:
    async with open_stdio() as client:
        assert (await client.call(1, "ping"))["result"] == {}
        refused = await client.call(2, "tools/list")
        assert refused["error"]["code"] == -32600
        bad = await client.call(3, "initialize", {"protocolVersion": 5})
        assert bad["error"]["code"] == -32602
        await client.initialize()
        assert "tools" in (await client.call(4, "tools/list"))["result"]


async def test_cancellation_sends_no_response() -> None:
    started = trio.Event()
    finished: list[str] = []
    server = MCPServer("cancel-test")

    @server.tool()
    async def block(ctx: Context) -> str:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            finished.append("cancelled")
        return "never"  # pragma: no cover

    async with open_stdio(server) as client:
        await client.initialize()
        await client.request(7, "tools/call", {"name": "block", "arguments": {}})
        await started.wait()
        await client.notify("notifications/cancelled", {"requestId": 7, "reason": "test"})
        await client.notify("notifications/cancelled", {"requestId": 99})  # unknown: ignored
        # the next message is the ping's answer: request 7 got none
        assert (await client.call(8, "ping"))["result"] == {}
        assert finished == ["cancelled"]
        # the id is free again
        started = trio.Event()
        await client.request(7, "tools/call", {"name": "block", "arguments": {}})
        await started.wait()
        duplicate = await client.call(7, "ping")
        assert duplicate["error"]["code"] == -32600 and "in use" in duplicate["error"]["message"]


async def test_sampling_round_trip() -> None:
    async with open_stdio() as client:
        await client.initialize({"sampling": {}})
        await client.request(1, "tools/call", {"name": "test_sampling", "arguments": {"prompt": "Hi?"}})
        sampling = await client.receive()
        assert sampling["method"] == "sampling/createMessage"
        assert sampling["params"]["messages"][0]["content"]["text"] == "Hi?"
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": sampling["id"],
                "result": {
                    "role": "assistant",
                    "content": {"type": "text", "text": "Hello!"},
                    "model": "test-model",
                    "stopReason": "endTurn",
                },
            }
        )
        answer = await client.receive()
        assert answer["id"] == 1
        assert answer["result"]["content"][0]["text"] == "LLM response: Hello!"

        # an error answer reaches the handler as an RPCError (the call answers an error)
        await client.request(2, "tools/call", {"name": "test_sampling", "arguments": {"prompt": "again"}})
        sampling = await client.receive()
        await client.send(
            {"jsonrpc": "2.0", "id": sampling["id"], "error": {"code": -1, "message": "user declined"}}
        )
        failed = await client.receive()
        assert failed["id"] == 2 and failed["error"] == {"code": -1, "message": "user declined"}

        # a stray response is ignored
        await client.send({"jsonrpc": "2.0", "id": 12345, "result": {}})
        assert (await client.call(3, "ping"))["result"] == {}


async def test_several_inputs_at_once_in_a_2025_session() -> None:
    answers = {
        "elicitation/create": {"action": "accept", "content": {"name": "Ann"}},
        "sampling/createMessage": {
            "role": "assistant",
            "content": {"type": "text", "text": "Hello"},
            "model": "m",
        },
        "roots/list": {"roots": [{"uri": "file:///tmp"}]},
    }
    async with open_stdio() as client:
        await client.initialize({"sampling": {}, "elicitation": {}, "roots": {}})
        params = {"name": "test_input_required_result_multiple_inputs", "arguments": {}}
        await client.request(1, "tools/call", params)
        asked = [await client.receive() for _ in range(3)]
        assert {m["method"] for m in asked} == set(answers)
        for message in reversed(asked):  # answered in any order
            await client.send({"jsonrpc": "2.0", "id": message["id"], "result": answers[message["method"]]})
        result = (await client.receive())["result"]
        assert result["content"][0]["text"] == "Hello Ann (1 roots)"


async def test_a_failing_handler_answers_internal_error() -> None:
    server = MCPServer("failing")

    async def explode(ctx: Context, params: object) -> dict[str, object]:
        raise RuntimeError("boom")

    server._handlers["ping"] = explode  # a bug outside any tool (tool errors become tool results)
    async with open_stdio(server) as client:
        failed = await client.call(1, "ping")
        assert failed["error"] == {"code": -32603, "message": "Internal error"}
        assert (await client.call(2, "initialize", {"bad": 1}))["error"]["code"] == -32602


async def test_cancelling_a_handler_waiting_for_sampling_tells_the_client() -> None:
    async with open_stdio() as client:
        await client.initialize({"sampling": {}})
        await client.request(1, "tools/call", {"name": "test_sampling", "arguments": {"prompt": "Hi?"}})
        sampling = await client.receive()
        await client.notify("notifications/cancelled", {"requestId": 1})
        cancelled = await client.receive()
        assert cancelled == {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": sampling["id"]},
        }
        assert (await client.call(2, "ping"))["result"] == {}


async def test_list_changed_reaches_initialized_session() -> None:
    server = build_demo_server()
    async with open_stdio(server) as client:
        await server.notify_tools_changed()  # before initialize: not sent
        await client.initialize()
        await client.call(9, "ping")  # the server has read notifications/initialized
        await server.notify_tools_changed()
        assert await client.receive() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        await client.call(1, "resources/subscribe", {"uri": "test://watched-resource"})
        await server.notify_resource_updated("test://watched-resource")
        updated = await client.receive()
        assert updated["method"] == "notifications/resources/updated"
        await client.call(2, "logging/setLevel", {"level": "error"})
        response = await client.call(3, "tools/call", {"name": "count", "arguments": {"steps": 1}})
        assert response["result"]["content"][0]["text"] == "counted to 1"  # no log came first


# -- bad input -----------------------------------------------------------------------------------


async def test_malformed_lines_get_errors_and_the_loop_goes_on() -> None:
    async with open_stdio(config=ServerConfig(max_body_size=1000)) as client:
        await client.send_raw(b"this is not json\n")
        assert await client.receive() == {
            "jsonrpc": "2.0",
            "error": {
                "code": -32700,
                "message": "Parse error: body is not valid JSON (Expecting value at character 0)",
            },
        }
        await client.send_raw(b"\xff\xfe{}\n")
        assert (await client.receive())["error"]["code"] == -32700
        await client.send_raw(b'{"jsonrpc": "2.0", "id": 3}\n')
        assert (await client.receive())["error"]["code"] == -32600
        await client.send_raw(b'{"jsonrpc": "2.0", "id": 4, "method": 12}\n')
        error = await client.receive()
        assert error["error"]["code"] == -32600 and error["id"] == 4
        await client.send_raw(b'[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]\n')
        assert (await client.receive())["error"]["code"] == -32600
        await client.send_raw(b'"a string"\n\n   \r\n')  # blank lines are skipped
        assert (await client.receive())["error"]["code"] == -32600
        # too long, whether it arrives in one piece or in many
        await client.send_raw(b'{"x": "' + b"a" * 5000 + b'"}\n')
        too_long = await client.receive()
        assert too_long["error"]["code"] == -32600 and "longer than 1000" in too_long["error"]["message"]
        assert "id" not in too_long
        for _ in range(10):
            await client.send_raw(b"b" * 700)
        assert (await client.receive())["error"]["code"] == -32600
        await client.send_raw(b"bbb\r\n")  # the end of the long line: dropped
        # CRLF works, and the loop still serves
        await client.send_raw(b'{"jsonrpc": "2.0", "id": 6, "method": "ping"}\r\n')
        assert await client.receive() == {"jsonrpc": "2.0", "id": 6, "result": {}}


async def test_eof_ends_the_server_and_cancels_handlers() -> None:
    """End of input: requests in flight get the grace, then are cancelled and answered -32000."""
    started = trio.Event()
    cancelled: list[bool] = []
    server = MCPServer("eof-test")

    @server.tool()
    async def block() -> str:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)
            raise
        return "never"  # pragma: no cover

    client_stdin, server_stdin = trio.testing.memory_stream_one_way_pair()
    server_stdout, client_stdout = trio.testing.memory_stream_one_way_pair()
    connection = StdioConnection(server, server_stdin, server_stdout, config=ServerConfig(shutdown_grace=0.2))
    client = StdioClient(client_stdin, client_stdout)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            await nursery.start(connection.run)
            await client.initialize()
            await client.request(1, "tools/call", {"name": "block", "arguments": {}})
            await client.request(2, "tools/call", {"name": "block", "arguments": {}})
            await started.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert connection.statistics()["tasks"] == 2
            assert server.notifications.subscribers == {connection}
            await client_stdin.aclose()
        await server_stdout.aclose()  # the streams were ours: the server does not close them
        # the server ended on its own: nothing of it is left
        assert not nursery.child_tasks
        assert cancelled == [True, True]
        assert connection.statistics() == {
            "initialized": True, "inflight": 0, "modern_inflight": 0, "tasks": 0, "outgoing": 0,
        }  # fmt: skip
        assert not server.notifications.subscribers
        # cancelled once the grace ran out: each is answered -32000 (the client may still read stdout)
        answers = [json.loads(line) for line in (await client.read_to_eof()).splitlines()]
        error = {"code": -32000, "message": "Server shutting down"}
        assert sorted(answers, key=lambda a: a["id"]) == [
            {"jsonrpc": "2.0", "id": 1, "error": error},
            {"jsonrpc": "2.0", "id": 2, "error": error},
        ]


async def test_last_line_without_newline_and_queued_output_is_flushed() -> None:
    client_stdin, server_stdin = trio.testing.memory_stream_one_way_pair()
    server_stdout, client_stdout = trio.testing.memory_stream_one_way_pair()
    with trio.fail_after(DEADLINE):
        await client_stdin.send_all(b"garbage\n" * 3 + b"more garbage")
        await client_stdin.aclose()
        await serve_stdio(build_demo_server(), stdin=server_stdin, stdout=server_stdout)
        await server_stdout.aclose()
        lines = (await StdioClient(client_stdin, client_stdout).read_to_eof()).splitlines()
    assert len(lines) == 4 and all(json.loads(line)["error"]["code"] == -32700 for line in lines)


async def test_broken_stdout_ends_the_server() -> None:
    client_stdin, server_stdin = trio.testing.memory_stream_one_way_pair()
    server_stdout, client_stdout = trio.testing.memory_stream_one_way_pair()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_stdio(
                    build_demo_server(), stdin=server_stdin, stdout=server_stdout, task_status=task_status
                )
            )
            await client_stdout.aclose()  # the client closed its end of the pipe
            await client_stdin.send_all(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
        assert not nursery.child_tasks


# -- 2026-07-28 requests -----------------------------------------------------------------------


async def test_modern_discover_call_and_input_required_round_trip() -> None:
    async with open_stdio() as client:
        discover = (await client.call(1, "server/discover", {"_meta": modern_meta()}))["result"]
        assert MODERN in discover["supportedVersions"]
        assert discover["resultType"] == "complete"
        assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mcp-trio-demo"

        listed = (await client.call(2, "tools/list", {"_meta": modern_meta()}))["result"]
        assert listed["resultType"] == "complete" and "ttlMs" in listed

        echoed = await client.call(
            3, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": modern_meta()}
        )
        assert echoed["result"]["content"] == [{"type": "text", "text": "hi"}]
        assert echoed["result"]["resultType"] == "complete"

        params = {
            "name": "test_input_required_result_elicitation",
            "arguments": {},
            "_meta": modern_meta(elicitation={}),
        }
        first = (await client.call(4, "tools/call", params))["result"]
        assert first["resultType"] == "input_required"
        assert first["inputRequests"]["user_name"]["method"] == "elicitation/create"
        assert isinstance(first["requestState"], str)
        retry = {
            **params,
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ann"}}},
            "requestState": first["requestState"],
        }
        final = (await client.call(5, "tools/call", retry))["result"]
        assert final["resultType"] == "complete"
        assert final["content"][0]["text"] == "Hello, Ann!"

        tampered = {**retry, "requestState": first["requestState"] + "x"}
        assert (await client.call(6, "tools/call", tampered))["error"]["code"] == -32602

        # no session was ever opened: the server's own notifications are not sent to a 2026 client
        await client.call(
            7, "tools/call", {"name": "test_trigger_tool_change", "arguments": {}, "_meta": modern_meta()}
        )


async def test_modern_errors() -> None:
    async with open_stdio() as client:
        unsupported = await client.call(
            1,
            "tools/list",
            {"_meta": {**modern_meta(), "io.modelcontextprotocol/protocolVersion": "2099-01-01"}},
        )
        assert unsupported["error"]["code"] == -32022
        assert MODERN in unsupported["error"]["data"]["supported"]
        no_caps = await client.call(
            2, "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}
        )
        assert no_caps["error"]["code"] == -32602
        removed = await client.call(3, "initialize", {"_meta": modern_meta()})
        assert removed["error"]["code"] == -32601
        missing = await client.call(
            4,
            "tools/call",
            {"name": "test_input_required_result_elicitation", "arguments": {}, "_meta": modern_meta()},
        )
        assert missing["error"]["code"] == -32021


async def test_modern_progress_logs_and_cancellation() -> None:
    async with open_stdio() as client:
        meta = {**modern_meta(), "progressToken": 9, "io.modelcontextprotocol/logLevel": "info"}
        await client.request(1, "tools/call", {"name": "count", "arguments": {"steps": 2}, "_meta": meta})
        messages = [await client.receive() for _ in range(5)]
        assert [m.get("method") for m in messages[:4]] == [
            "notifications/progress",
            "notifications/message",
        ] * 2
        assert messages[4]["id"] == 1 and messages[4]["result"]["resultType"] == "complete"

        await client.request(
            2, "tools/call", {"name": "sleep", "arguments": {"seconds": 60}, "_meta": modern_meta()}
        )
        await client.notify("notifications/cancelled", {"requestId": 2})
        assert (await client.call(3, "tools/list", {"_meta": modern_meta()}))["result"][
            "resultType"
        ] == "complete"


async def test_modern_subscriptions_listen() -> None:
    server = build_demo_server()
    async with open_stdio(server) as client:
        await client.request(
            1, "subscriptions/listen", {"notifications": {"toolsListChanged": True}, "_meta": modern_meta()}
        )
        ack = await client.receive()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 1
        await server.notify_tools_changed()
        await server.notify_prompts_changed()  # not asked for
        changed = await client.receive()
        assert changed["method"] == "notifications/tools/list_changed"
        assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 1
        await client.notify("notifications/cancelled", {"requestId": 1})
        assert (await client.call(2, "tools/list", {"_meta": modern_meta()}))["result"][
            "resultType"
        ] == "complete"
        await server.notify_tools_changed()  # the subscription is gone
        assert (await client.call(3, "tools/list", {"_meta": modern_meta()}))["id"] == 3
        bad = await client.call(4, "subscriptions/listen", {"_meta": modern_meta()})
        assert bad["error"]["code"] == -32602


# -- a real process ------------------------------------------------------------------------------

SERVER_SCRIPT = (
    "import trio; from mcp_trio import serve_stdio; from mcp_trio.demo import build_demo_server; "
    "trio.run(serve_stdio, build_demo_server())"
)


async def test_real_process() -> None:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", SERVER_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        client = StdioClient(process.stdin, process.stdout)
        with trio.fail_after(30):
            result = await client.initialize()
            assert result["serverInfo"]["name"] == "mcp-trio-demo"
            response = await client.call(1, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
            assert response["result"]["structuredContent"] == {"sum": 5}
            modern = await client.call(
                2, "tools/call", {"name": "echo", "arguments": {"text": "é\nx"}, "_meta": modern_meta()}
            )
            assert modern["result"]["content"][0]["text"] == "é\nx"
            await process.stdin.aclose()
            assert await client.read_to_eof() == b""
            assert await process.wait() == 0
    finally:
        if process.returncode is None:  # pragma: no cover - only when the test failed
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                await stream.aclose()


def containment_server() -> MCPServer:
    """Tools whose handlers fail or ask from several tasks of their own (the review's repros)."""
    server = MCPServer("contained")

    class Misbehaving(BaseException):
        pass

    @server.tool()
    async def group_failure() -> str:
        async def fail() -> None:
            raise Misbehaving("from a child task")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail)
            nursery.start_soon(fail)
        return "unreachable"

    @server.tool()
    async def ask_twice(ctx: Context) -> str:
        schema = {"type": "object", "properties": {"v": {"type": "string"}}}
        answers: dict[str, Any] = {}

        async def ask(key: str) -> None:
            answers[key] = (await ctx.elicit(key, schema, key=key)).content

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "first")
            nursery.start_soon(ask, "second")
        return f"{answers['first']['v']}+{answers['second']['v']}"

    return server


async def test_handler_failures_as_groups_and_input_required_from_two_tasks_do_not_end_stdio() -> None:
    async with open_stdio(containment_server()) as client:
        params = {"name": "group_failure", "arguments": {}, "_meta": modern_meta()}
        answer = await client.call(1, "tools/call", params)
        assert answer["error"]["code"] == mt.INTERNAL_ERROR, answer
        params = {"name": "ask_twice", "arguments": {}, "_meta": modern_meta(elicitation={})}
        result = (await client.call(2, "tools/call", params))["result"]
        assert result["resultType"] == "input_required"
        assert set(result["inputRequests"]) == {"first", "second"}
        params["inputResponses"] = {k: {"action": "accept", "content": {"v": k}} for k in ("first", "second")}
        params["requestState"] = result["requestState"]
        final = (await client.call(3, "tools/call", params))["result"]
        assert final["content"][0]["text"] == "first+second", final
        # 2025 session on the same connection: the group failure is an internal error too.
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        await client.call(4, "initialize", init)
        await client.notify("notifications/initialized")
        answer = await client.call(5, "tools/call", {"name": "group_failure", "arguments": {}})
        assert answer["error"]["code"] == mt.INTERNAL_ERROR, answer
        assert (await client.call(6, "ping"))["result"] == {}


async def test_initialize_with_capabilities_too_deep_to_serialize_is_invalid_params() -> None:
    deep: dict[str, Any] = {}
    for _ in range(400):  # deeper than pydantic serializes, shallower than json.loads refuses
        deep = {"x": deep}
    info = {"name": "t", "version": "1"}
    async with open_stdio() as client:
        params = {"protocolVersion": "2025-11-25", "capabilities": {"experimental": deep}, "clientInfo": info}
        answer = await client.call(1, "initialize", params)
        assert answer["error"]["code"] == mt.INVALID_PARAMS, answer
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}
        assert (await client.call(2, "initialize", params))["result"]["protocolVersion"] == "2025-11-25"


async def test_a_task_over_stdio_with_its_status_on_a_listen_stream() -> None:
    tasks = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    async with open_stdio() as client:
        created = (
            await client.call(
                1,
                "tools/call",
                {"name": "slow_compute", "arguments": {"seconds": 0.3}, "_meta": modern_meta(**tasks)},
            )
        )["result"]
        assert created["resultType"] == "task" and created["status"] == "working", created
        task_id = created["taskId"]
        listen = {"notifications": {"taskIds": [task_id, "not-a-task"]}, "_meta": modern_meta(**tasks)}
        await client.request(2, "subscriptions/listen", listen)
        ack = await client.receive()
        assert ack["method"] == "notifications/subscriptions/acknowledged", ack
        assert ack["params"]["notifications"]["taskIds"] == [task_id]  # only a task of the requester
        done = await client.receive()  # the task's end, pushed
        assert done["method"] == "notifications/tasks", done
        assert done["params"]["taskId"] == task_id and done["params"]["status"] == "completed", done
        assert done["params"]["result"]["content"][0]["text"] == "Computed result after 0.3 s"
        assert done["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 2
        got = await client.call(3, "tasks/get", {"taskId": task_id, "_meta": modern_meta(**tasks)})
        assert got["result"]["status"] == "completed"
        await client.notify("notifications/cancelled", {"requestId": 2})
