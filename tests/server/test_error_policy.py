"""One error policy for every kind of handler (tool, resource, resource template, prompt, completion,
an extension method, a task), in both eras: what the client gets and what the log shows.

An unexpected exception is logged at ERROR on ``mcp_trio.handlers`` with its traceback and a random
reference; the client gets ``Internal error (reference R)`` (a tool: an ``isError`` result; the others:
-32603 with ``data.reference``), followed by the exception's type and text with ``error_details=True``.
``ToolError`` is a tool's own text and ``RPCError`` a JSON-RPC error, neither logged; cancellation is
never a failure; a flood of failures is rate-limited in the log."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as mt
import pydantic
import pytest
import trio
import trio.testing

from mcp_trio import Context, MCPApp, MCPServer, RPCError, ServerConfig, ToolError
from mcp_trio._app.failures import Failures
from mcp_trio._app.failures import logger as failure_logger
from mcp_trio._runtime.peerlog import RateLimitedLog
from mcp_trio.testing import open_asgi_client

from .conftest import Client, call_body, settle
from .test_modern import Modern
from .test_tasks import TaskClient

REFERENCE = re.compile(r"Internal error \(reference ([0-9a-f]{8})\)")


class Point(pydantic.BaseModel):
    x: int
    y: int


def build(*, details: bool = False) -> MCPServer:
    server = MCPServer("failing", error_details=details)

    @server.tool()
    async def broken() -> str:
        raise KeyError("missing")

    @server.tool()
    async def explicit() -> str:
        raise ToolError("no such city: Atlantis")

    @server.tool()
    async def grouped() -> str:
        async def fail() -> None:
            raise ToolError("one of my tasks gave up")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail)
            await trio.sleep_forever()
        return "unreachable"  # pragma: no cover

    @server.tool()
    async def protocol() -> str:
        raise RPCError(-32001, "custom error", {"why": "because"})

    @server.tool()
    async def mismatch() -> Point:
        return {"x": "not a number", "y": 2}  # type: ignore[return-value]

    @server.tool(task="optional")
    async def broken_task() -> str:
        await trio.lowlevel.checkpoint()
        raise KeyError("missing")

    @server.tool()
    async def sleepy() -> str:
        await trio.sleep_forever()
        return "unreachable"  # pragma: no cover

    @server.resource("test://broken")
    async def broken_resource() -> str:
        raise KeyError("missing")

    @server.resource("test://broken/{part}")
    async def broken_template(part: str) -> str:
        raise KeyError("missing")

    @server.resource("test://fine")
    async def fine(ctx: Context) -> str:
        raise RPCError(mt.INVALID_PARAMS, "not today")

    @server.resource("test://malformed")
    async def malformed() -> dict[str, Any]:
        return {"uri": "test://malformed", "nonsense": True}  # contents without text or blob

    @server.prompt()
    async def broken_prompt() -> str:
        raise KeyError("missing")

    @server.prompt()
    async def malformed_prompt() -> list[Any]:
        return [{"role": "narrator", "content": {"type": "text", "text": "x"}}]

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> list[Any]:
        if argument["name"] == "numbers":
            return [1, 2]  # completion values are strings
        raise KeyError("missing")

    async def broken_method(ctx: Context, params: dict[str, Any] | None) -> dict[str, Any]:
        raise KeyError("missing")

    server.add_method("x/broken", broken_method)
    return server


COMPLETE = {"ref": {"type": "ref/prompt", "name": "broken_prompt"}, "argument": {"name": "a", "value": "x"}}
CASES = {  # a failing handler of each kind: (method, params, what the log line names)
    "tool": ("tools/call", {"name": "broken", "arguments": {}}, "tool broken"),
    "resource": ("resources/read", {"uri": "test://broken"}, "resource test://broken"),
    "template": ("resources/read", {"uri": "test://broken/x"}, "resource template test://broken/{part}"),
    "prompt": ("prompts/get", {"name": "broken_prompt"}, "prompt broken_prompt"),
    "completion": ("completion/complete", COMPLETE, "completion"),
    "method": ("x/broken", {}, "method x/broken"),
}


@pytest.fixture
async def legacy(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    details = getattr(request, "param", False)
    app = MCPApp(build(details=details), ServerConfig())
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        yield client


@pytest.fixture
async def modern(request: pytest.FixtureRequest) -> AsyncIterator[Modern]:
    details = getattr(request, "param", False)
    app = MCPApp(build(details=details), ServerConfig())
    async with app.running(), open_asgi_client(app) as asgi:
        yield Modern(asgi)


async def answer(era: str, client: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The whole JSON-RPC answer to one request in ``era``."""
    if era == "2025":
        message: dict[str, Any] = await client.request(2, method, params)
        return message
    status, body = await client.call(method, params)
    assert status in (200, 500), (status, body)
    return body


def failure_of(answer: dict[str, Any], kind: str) -> str:
    """The client's message of a failed handler: a tool's ``isError`` text, else a -32603 error's."""
    if kind == "tool":
        result = answer["result"]
        assert result["isError"] is True and len(result["content"]) == 1, answer
        text: str = result["content"][0]["text"]
        return text
    error = answer["error"]
    assert error["code"] == mt.INTERNAL_ERROR, answer
    assert error["data"] == {"reference": REFERENCE.match(error["message"])[1]}  # type: ignore[index]
    message: str = error["message"]
    return message


def the_failure_record(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """The one ERROR record of the request: on ``mcp_trio.handlers``, with the traceback (and no
    other ERROR anywhere, such as a transport's "handler failed")."""
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1, [record.getMessage() for record in errors]
    record = errors[0]
    assert record.name == "mcp_trio.handlers" and record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[2] is not None  # the traceback
    return record


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("era", ["2025", "2026"])
@pytest.mark.parametrize("details", [False, True])
async def test_an_unexpected_exception_is_logged_and_answered_with_a_reference(
    kind: str, era: str, details: bool, caplog: pytest.LogCaptureFixture
) -> None:
    method, params, what = CASES[kind]
    app = MCPApp(build(details=details), ServerConfig())
    caplog.set_level(logging.INFO, logger="mcp_trio")
    with trio.fail_after(10):
        async with app.running(), open_asgi_client(app) as asgi:
            if era == "2025":
                client: Any = Client(asgi, app)
                await client.initialize()
            else:
                client = Modern(asgi)
            caplog.clear()
            message = failure_of(await answer(era, client, method, params), kind)
    found = REFERENCE.match(message)
    assert found is not None, message
    reference = found[1]
    assert message == (f"{found[0]}: KeyError: 'missing'" if details else found[0])
    record = the_failure_record(caplog)
    assert record.getMessage() == f"{what} failed (reference {reference})"
    assert record.exc_info is not None and repr(record.exc_info[1]) == "KeyError('missing')"


async def test_every_failure_has_its_own_reference(
    legacy: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    texts = [failure_of(await legacy.request(n, "tools/call", {"name": "broken"}), "tool") for n in (2, 3)]
    references = [REFERENCE.fullmatch(text)[1] for text in texts]  # type: ignore[index]
    assert references[0] != references[1]
    expected = [f"tool broken failed (reference {r})" for r in references]
    assert [r.getMessage() for r in caplog.records] == expected


@pytest.mark.parametrize("era", ["2025", "2026"])
async def test_a_tool_error_is_the_tools_own_text_and_not_logged(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = MCPApp(build(), ServerConfig())
    caplog.set_level(logging.DEBUG, logger="mcp_trio.handlers")
    async with app.running(), open_asgi_client(app) as asgi:
        client: Any = Client(asgi, app) if era == "2025" else Modern(asgi)
        if era == "2025":
            await client.initialize()
        for name, text in [("explicit", "no such city: Atlantis"), ("grouped", "one of my tasks gave up")]:
            result = (await answer(era, client, "tools/call", {"name": name, "arguments": {}}))["result"]
            assert result["isError"] is True and result["content"] == [{"type": "text", "text": text}]
            assert "structuredContent" not in result  # an error result owes no structured content
        rpc = await answer(era, client, "tools/call", {"name": "protocol", "arguments": {}})
        assert rpc["error"] == {"code": -32001, "message": "custom error", "data": {"why": "because"}}
        resource = await answer(era, client, "resources/read", {"uri": "test://fine"})
        assert resource["error"] == {"code": mt.INVALID_PARAMS, "message": "not today"}
    assert caplog.records == []


@pytest.mark.parametrize("legacy", [False, True], indirect=True, ids=["generic", "details"])
async def test_a_return_value_the_output_schema_refuses_is_a_server_failure(
    legacy: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    text = failure_of(await legacy.request(2, "tools/call", {"name": "mismatch"}), "tool")
    found = REFERENCE.match(text)
    assert found is not None, text
    record = the_failure_record(caplog)
    assert record.getMessage() == f"tool mismatch failed (reference {found[1]})"
    refused = "tool mismatch returned a value its output schema refuses: x: Input should be a valid integer"
    assert str(record.exc_info[1]).startswith(refused)  # type: ignore[index]
    details = legacy.app.server.failures.details
    assert record.exc_info is not None
    assert text == (f"{found[0]}: OutputMismatch: {record.exc_info[1]}" if details else found[0])


async def test_a_cancelled_call_is_not_a_failure(legacy: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp_trio")
    response = await legacy.post(call_body(7, "sleepy", {}))
    await settle()
    assert legacy.app.statistics()["inflight"] == 1
    await legacy.notify("notifications/cancelled", {"requestId": 7})
    assert await response.next_message() is None  # no answer at all, no error
    await settle()
    assert legacy.app.statistics()["inflight"] == 0
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_2026_request_cut_short_is_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    app = MCPApp(build(), ServerConfig())
    caplog.set_level(logging.DEBUG, logger="mcp_trio")
    async with app.running(), open_asgi_client(app) as asgi:
        with trio.move_on_after(0.2) as waited:  # the client gives up: its request is cancelled
            await Modern(asgi).call("tools/call", {"name": "sleepy", "arguments": {}})
        assert waited.cancelled_caught
        with trio.fail_after(5):
            while app.statistics()["inflight"]:  # noqa: ASYNC110 - the statistics have no event
                await trio.sleep(0.01)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_failing_task_completes_with_the_reference(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = MCPApp(build(), ServerConfig())
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    async with app.running(), open_asgi_client(app) as asgi:
        tasks = TaskClient(asgi)
        task_id = (await tasks.start("broken_task"))["taskId"]
        task = await tasks.wait(task_id, "completed", "failed")
    assert task["status"] == "completed" and "error" not in task  # a tool's failure is a result
    text = failure_of({"result": task["result"]}, "tool")
    found = REFERENCE.fullmatch(text)
    assert found is not None, text
    record = the_failure_record(caplog)
    assert record.getMessage() == f"tool broken_task failed (reference {found[1]})"


async def test_a_flood_of_failures_is_rate_limited_in_the_log(
    legacy: Client, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    failures = legacy.app.server.failures
    failures.log = RateLimitedLog(failure_logger, burst=3, interval=60.0, clock=lambda: now[0])
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    broken = {"uri": "test://broken"}
    texts = [failure_of(await legacy.request(10 + n, "resources/read", broken), "x") for n in range(5)]
    logged = [record.getMessage() for record in caplog.records]
    assert logged == [f"resource test://broken failed (reference {t[-9:-1]})" for t in texts[:3]]
    assert all(record.exc_info is not None for record in caplog.records)
    assert len({text for text in texts}) == 5  # each answer still has its own reference
    now[0] = 60.0  # the next minute: the next failure is logged, and says how many were left out
    caplog.clear()
    text = failure_of(await legacy.request(20, "resources/read", broken), "x")
    [record] = caplog.records
    reference = text[-9:-1]
    left_out = "(and 2 more lines like it left out before this one)"
    assert record.getMessage() == f"resource test://broken failed (reference {reference}) {left_out}"


MALFORMED = {  # a handler's result the protocol has no room for: (method, params, what the log names)
    "resource": ("resources/read", {"uri": "test://malformed"}, "resource test://malformed"),
    "prompt": ("prompts/get", {"name": "malformed_prompt"}, "prompt malformed_prompt"),
    "completion": (
        "completion/complete",
        {**COMPLETE, "argument": {"name": "numbers", "value": ""}},
        "the result of completion/complete",
    ),
}


@pytest.mark.parametrize("kind", MALFORMED)
@pytest.mark.parametrize("era", ["2025", "2026"])
async def test_a_result_the_protocol_cannot_carry_is_a_failure_too(
    kind: str, era: str, caplog: pytest.LogCaptureFixture
) -> None:
    method, params, what = MALFORMED[kind]
    app = MCPApp(build(), ServerConfig())
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    async with app.running(), open_asgi_client(app) as asgi:
        client: Any = Client(asgi, app) if era == "2025" else Modern(asgi)
        if era == "2025":
            await client.initialize()
        reply = await answer(era, client, method, params)
    reference = REFERENCE.fullmatch(failure_of(reply, kind))[1]  # type: ignore[index]
    record = the_failure_record(caplog)
    assert record.getMessage() == f"{what} failed (reference {reference})"
    assert isinstance(record.exc_info[1], pydantic.ValidationError)  # type: ignore[index]


def test_the_details_option_defaults_to_off() -> None:
    assert MCPServer("x").failures.details is False
    assert MCPServer("x", error_details=True).failures.details is True


async def test_both_eras_over_a_pipe_follow_the_same_policy(caplog: pytest.LogCaptureFixture) -> None:
    from .test_message_connection import ChannelConnection
    from .test_stdio_server import modern_meta

    server = build()
    send, receive = trio.open_memory_channel[bytes](100)
    connection = ChannelConnection(server, receive)
    caplog.set_level(logging.ERROR, logger="mcp_trio")

    async def call(request: dict[str, Any]) -> dict[str, Any]:
        await send.send(json.dumps(request).encode())
        reply: dict[str, Any] = json.loads(await connection.out_receive.receive())
        return reply

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(connection.run)
            info = {"name": "t", "version": "1"}
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}
            await call({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
            legacy = await call(
                {"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "broken_prompt"}}
            )
            params = {"name": "broken_prompt", "_meta": modern_meta()}
            modern = await call({"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": params})
            await send.aclose()
    texts = [failure_of(reply, "prompt") for reply in (legacy, modern)]
    references = [REFERENCE.fullmatch(text)[1] for text in texts]  # type: ignore[index]
    assert [r.getMessage() for r in caplog.records] == [
        f"prompt broken_prompt failed (reference {r})" for r in references
    ]


def test_exception_groups_and_long_texts() -> None:
    from mcp_trio._app.failures import MAX_DETAIL, Failures, leaf

    assert leaf(ExceptionGroup("g", [ExceptionGroup("h", [ToolError("deep")])]), ToolError) is not None
    assert leaf(ExceptionGroup("g", [ToolError("a"), KeyError("b")]), ToolError) is None  # not only those
    assert leaf(KeyError("b"), ToolError) is None
    failures = Failures(details=True, log=RateLimitedLog(logging.getLogger("test.failures")))
    with pytest.raises(RPCError) as raised:  # an RPCError from a tool's own nursery stays one
        failures.tool_result("t", ExceptionGroup("g", [RPCError(-32001, "mine")]))
    assert raised.value.message == "mine"
    result = failures.tool_result("t", ValueError("x" * 5000))
    text = result["content"][0]["text"]
    assert text.endswith("\u2026") and len(text) < MAX_DETAIL + 40


def test_the_failure_line_escapes_and_bounds_the_name(caplog: pytest.LogCaptureFixture) -> None:
    """``tool NAME failed (reference R)`` stays one line whatever the name holds, cut at 256 characters."""
    caplog.set_level(logging.ERROR, logger="test.failures")
    failures = Failures(log=RateLimitedLog(logging.getLogger("test.failures")))
    failures.tool_result("t\r\nERROR mcp_trio.handlers: tool x failed\x1b[2J\x85", ValueError("boom"))
    failures.tool_result("n" * 5000, ValueError("boom"))
    first, second = (record.getMessage() for record in caplog.records)
    name = r"t\\r\\nERROR mcp_trio\.handlers: tool x failed\\x1b\[2J\\u0085"
    assert re.fullmatch(rf"tool {name} failed \(reference [0-9a-f]{{8}}\)", first), first
    assert re.fullmatch(r"tool n{250}\u2026 failed \(reference [0-9a-f]{8}\)", second), second  # 256 in all


def test_a_peer_log_line_is_one_line_whatever_its_arguments_hold(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.peers")
    log = RateLimitedLog(logging.getLogger("test.peers"))

    class Odd:
        def __str__(self) -> str:
            return "a\nb\u2028c"

    log.log(logging.INFO, "dropped %s: %s (%d)", "x\x00y\x7f", Odd(), 3)
    log.log(logging.INFO, "100% literal\n")  # no arguments: not %-formatted
    log.log(logging.INFO, "%d of them", "x\ny")  # arguments that do not fit: appended, not raised
    assert [record.getMessage() for record in caplog.records] == [
        "dropped x\\x00y\\x7f: a\\nb\\u2028c (3)",
        "100% literal\\n",
        "%d of them ('x\\ny',)",
    ]
