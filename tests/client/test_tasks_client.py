"""The client side of the tasks extension, against the demo server in-process on a real socket: a call
answered with a task is polled to its end (its result returned, its JSON-RPC error raised), the task's
input requests are answered with the session's callbacks, a cancelled call cancels its task, and the
lower-level ``get_task``/``update_task``/``cancel_task``/``task_result``.  What the client sends is
read from the wire (httpx's request hook on the test's own client)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import MCPApp, RPCError, ServerConfig, open_client_session, open_stdio_client, serve
from mcp_trio._client.session import TaskCancelled, TaskError, TaskInfo
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import TransportError

from .conftest import assert_clean

TASKS = "io.modelcontextprotocol/tasks"
POLL = 0.05


@dataclass
class Wire:
    """The JSON-RPC requests the client POSTed, with their headers."""

    sent: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    async def record(self, request: httpx.Request) -> None:
        if request.method == "POST":
            self.sent.append((dict(request.headers), json.loads(request.content)))

    def requests(self, method: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [(h, m) for h, m in self.sent if m.get("method") == method]


@dataclass
class Server:
    url: str
    wire: Wire
    http: httpx.AsyncClient


@asynccontextmanager
async def _serve(config: ServerConfig) -> AsyncIterator[Server]:
    app = MCPApp(build_demo_server(), config)
    stop = trio.Event()
    wire = Wire()
    async with (
        trio.open_nursery() as nursery,
        httpx.AsyncClient(
            timeout=httpx.Timeout(10.0, read=None), event_hooks={"request": [wire.record]}
        ) as http,
    ):
        urls = await nursery.start(
            lambda task_status: serve(
                app, "127.0.0.1", 0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield Server(urls[0], wire, http)
        stop.set()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with _serve(ServerConfig(shutdown_grace=1, task_poll_interval=POLL)) as served:
        yield served


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


async def status_of(server: Server, task_id: str, wanted: str, within: float = 5.0) -> TaskInfo:
    """The task once it has status ``wanted`` (polled from a session of its own, at most ``within`` s)."""
    async with open_client_session(server.url, mode="modern") as session:
        with trio.fail_after(within):
            for _ in range(int(within / POLL)):
                task = await session.get_task(task_id)
                if task.status == wanted:
                    return task
                await trio.sleep(POLL)
    raise AssertionError(f"task {task_id} is {task.status}, not {wanted}, after {within} s")


class Answers:
    """An elicitation callback answering ``{"confirm": True}`` forms and ``{"name": ...}`` forms."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        assert isinstance(params, mt.ElicitRequestFormParams)
        self.asked.append(params.message)
        wanted = params.requested_schema["properties"]
        content: dict[str, Any] = (
            {"confirm": True} if "confirm" in wanted else {"name": f"N{len(self.asked)}"}
        )
        return mt.ElicitResult(action="accept", content=content)


async def test_a_task_is_polled_to_its_result(server: Server) -> None:
    seen: list[TaskInfo] = []
    async with open_client_session(server.url, http=server.http) as session:
        assert session.modern
        result = await session.call_tool(
            "slow_compute", {"seconds": 0.3, "label": "x"}, on_task_status=seen.append
        )
    assert text_of(result) == "Computed x after 0.3 s"
    assert not result.is_error
    assert [task.status for task in seen] == ["working", "completed"]
    task_id = seen[0].task_id
    assert seen[0].poll_interval_ms == 50 and seen[0].poll_interval == POLL
    assert {task.task_id for task in seen} == {task_id}
    # the call declared the extension; each tasks/get named the task in Mcp-Name
    ((call_headers, call),) = server.wire.requests("tools/call")
    assert call["params"]["_meta"][mt.CLIENT_CAPABILITIES_META_KEY]["extensions"] == {TASKS: {}}
    assert call_headers["mcp-name"] == "slow_compute"
    gets = server.wire.requests("tasks/get")
    assert 2 <= len(gets) <= 0.3 / POLL + 3  # polled at the server's interval, not faster
    for headers, message in gets:
        assert headers["mcp-method"] == "tasks/get"
        assert headers["mcp-name"] == task_id == message["params"]["taskId"]
        assert message["params"]["_meta"][mt.CLIENT_CAPABILITIES_META_KEY]["extensions"] == {TASKS: {}}
    assert server.wire.requests("tasks/cancel") == []
    assert_clean(server.http)


async def test_a_tool_without_a_task_answers_as_before(server: Server) -> None:
    async with open_client_session(server.url, http=server.http) as session:
        result = await session.call_tool("greet", {"name": "Ann"}, wait_for_task=False)
        assert isinstance(result, mt.CallToolResult)
        assert text_of(result) == "Hello, Ann!"
    assert server.wire.requests("tasks/get") == []


async def test_input_requests_are_answered_with_the_callbacks(server: Server) -> None:
    answers = Answers()
    statuses: list[str] = []

    async def on_status(task: TaskInfo) -> None:  # an async callback
        statuses.append(task.status)

    async with open_client_session(server.url, http=server.http, elicitation=answers) as session:
        deleted = await session.call_tool("confirm_delete", {"filename": "a.txt"}, on_task_status=on_status)
        assert answers.asked == ["Delete a.txt?"]
        assert "input_required" in statuses and statuses[-1] == "completed"
        both = await session.call_tool("multi_input")
    assert text_of(deleted) == "Deleted a.txt"
    assert sorted(answers.asked[1:]) == ["First name?", "Second name?"]  # each asked once
    assert text_of(both) in ("Got N2 and N3", "Got N3 and N2")
    # each key of a task answered exactly once, over every tasks/update
    for task_id in {m["params"]["taskId"] for _h, m in server.wire.requests("tasks/update")}:
        keys = [
            key
            for headers, m in server.wire.requests("tasks/update")
            if m["params"]["taskId"] == task_id and headers["mcp-name"] == task_id
            for key in m["params"]["inputResponses"]
        ]
        assert keys and len(keys) == len(set(keys))
    assert_clean(server.http)


async def test_a_failed_task_raises_its_error_and_a_tool_error_is_a_result(server: Server) -> None:
    async with open_client_session(server.url, http=server.http) as session:
        with pytest.raises(RPCError) as failed:
            await session.call_tool("protocol_error_job")
        tool_error = await session.call_tool("failing_job")
    assert failed.value.code == mt.INTERNAL_ERROR
    assert failed.value.message == "The job broke down: internal error"
    assert tool_error.is_error
    assert text_of(tool_error) == "The job failed: nothing to do"


async def test_cancelling_the_call_cancels_the_task(server: Server) -> None:
    created: list[TaskInfo] = []
    async with open_client_session(server.url, http=server.http) as session:
        with trio.CancelScope() as timeout:

            def on_status(task: TaskInfo) -> None:  # give up a few polls after the task was created
                created.append(task)
                timeout.deadline = trio.current_time() + 4 * POLL

            await session.call_tool("slow_compute", {"seconds": 30}, on_task_status=on_status)
        assert timeout.cancelled_caught
        assert len(server.wire.requests("tasks/get")) >= 1
        ((cancel_headers, cancel),) = server.wire.requests("tasks/cancel")
        task = await session.get_task(created[0].task_id)
    assert [t.status for t in created] == ["working"]
    assert cancel["params"]["taskId"] == created[0].task_id == cancel_headers["mcp-name"]
    assert cancel_headers["mcp-method"] == "tasks/cancel"
    if task.status != "cancelled":  # cancellation is eventually consistent
        task = await status_of(server, created[0].task_id, "cancelled")
    assert task.status_message == "Cancelled: the client cancelled it"
    assert_clean(server.http)


async def test_a_failing_callback_cancels_the_task_and_is_raised(server: Server) -> None:
    def refuse(params: mt.ElicitRequestParams) -> mt.ElicitResult:
        raise ValueError("no, thanks")

    created: list[str] = []
    async with open_client_session(server.url, http=server.http, elicitation=refuse) as session:
        with pytest.raises(ValueError, match="no, thanks"):
            await session.call_tool(
                "confirm_delete", {"filename": "b"}, on_task_status=lambda t: created.append(t.task_id)
            )
    await status_of(server, created[0], "cancelled")
    assert len(server.wire.requests("tasks/cancel")) == 1


async def test_a_task_cancelled_elsewhere_raises_task_cancelled(server: Server) -> None:
    async with (
        open_client_session(server.url, http=server.http) as session,
        open_client_session(server.url) as other,
    ):

        async def cancel_it(task: TaskInfo) -> None:
            if task.status == "working":
                await other.cancel_task(task.task_id)

        with pytest.raises(TaskCancelled) as cancelled:
            await session.call_tool("slow_compute", {"seconds": 30}, on_task_status=cancel_it)
    assert cancelled.value.task.status == "cancelled"
    assert (
        str(cancelled.value)
        == f"task {cancelled.value.task_id} was cancelled: Cancelled: the client cancelled it"
    )
    assert server.wire.requests("tasks/cancel") == []  # the waiting call did not send one


async def test_unknown_task(server: Server) -> None:
    async with open_client_session(server.url, http=server.http) as session:
        for call in (session.get_task, session.cancel_task, session.task_result):
            with pytest.raises(RPCError) as unknown:
                await call("no-such-task")
            assert unknown.value.code == mt.INVALID_PARAMS
        with pytest.raises(RPCError) as update:
            await session.update_task("no-such-task", {"k": {"action": "decline"}})
        assert update.value.code == mt.INVALID_PARAMS


async def test_an_expired_task_raises_task_error() -> None:
    config = ServerConfig(shutdown_grace=1, task_poll_interval=POLL, task_ttl=0.4)
    async with _serve(config) as server, open_client_session(server.url, http=server.http) as session:
        with pytest.raises(TaskError) as lost:
            await session.call_tool("slow_compute", {"seconds": 30})
    assert not isinstance(lost.value, TaskCancelled)
    assert isinstance(lost.value.__cause__, RPCError) and lost.value.__cause__.code == mt.INVALID_PARAMS
    assert str(lost.value).startswith(f"task {lost.value.task_id} is gone: the server no longer knows it")
    assert lost.value.task.ttl_ms == 400


async def test_managing_a_task_by_hand(server: Server) -> None:
    answers = Answers()  # declares elicitation; the test answers by hand, so it is never called
    async with open_client_session(server.url, http=server.http, elicitation=answers) as session:
        task = await session.call_tool("confirm_delete", {"filename": "c"}, wait_for_task=False)
        assert isinstance(task, TaskInfo) and not task.terminal
        with trio.fail_after(5):
            for _ in range(100):
                task = await session.get_task(task.task_id)
                if task.input_requests:
                    break
                await trio.sleep(POLL)
        assert task.status == "input_required"
        ((key, request),) = task.input_requests.items()
        assert request["method"] == "elicitation/create"
        await session.update_task(
            task.task_id, {key: mt.ElicitResult(action="accept", content={"confirm": False})}
        )
        result = await session.task_result(task.task_id)
        assert text_of(result) == "Kept c"
        assert answers.asked == []
        # task_result only watches: giving up on the wait leaves the task running
        slow = await session.call_tool("slow_compute", {"seconds": 30}, wait_for_task=False)
        assert isinstance(slow, TaskInfo)
        with trio.move_on_after(0.2):
            await session.task_result(slow)
        assert (await session.get_task(slow.task_id)).status == "working"
        assert server.wire.requests("tasks/cancel") == []
        await session.cancel_task(slow.task_id)
    await status_of(server, slow.task_id, "cancelled")


async def test_without_the_extension_nothing_is_a_task(server: Server) -> None:
    async with open_client_session(server.url, http=server.http, tasks=False) as session:
        result = await session.call_tool("slow_compute", {"seconds": 0.01})
        with pytest.raises(RPCError) as required:
            await session.call_tool("failing_job")
    assert text_of(result) == "Computed result after 0.01 s"
    assert required.value.code == -32021
    assert required.value.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    for _headers, message in server.wire.sent:
        assert "extensions" not in message["params"]["_meta"][mt.CLIENT_CAPABILITIES_META_KEY]


async def test_a_legacy_session_never_sees_tasks(server: Server) -> None:
    async with open_client_session(server.url, http=server.http, mode="legacy") as session:
        result = await session.call_tool("slow_compute", {"seconds": 0.01})
    assert text_of(result) == "Computed result after 0.01 s"
    ((_headers, initialize),) = server.wire.requests("initialize")
    assert "extensions" not in initialize["params"]["capabilities"]
    assert server.wire.requests("tasks/get") == []
    assert_clean(server.http)


async def test_the_session_ending_ends_the_wait(server: Server) -> None:
    created = trio.Event()
    failures: list[BaseException] = []

    async def wait_in_another_task(session: Any) -> None:
        try:
            await session.call_tool("slow_compute", {"seconds": 30}, on_task_status=lambda t: created.set())
        except TransportError as exc:
            failures.append(exc)

    with trio.fail_after(5):
        async with (
            trio.open_nursery() as nursery,
            open_client_session(server.url, http=server.http) as session,
        ):
            nursery.start_soon(wait_in_another_task, session)
            await created.wait()
    assert len(failures) == 1
    assert server.wire.requests("tasks/cancel") == []  # the session is gone: nothing more is sent


async def test_tasks_over_stdio() -> None:
    demo = [sys.executable, "-c", "from mcp_trio._cli import main; main()", "demo", "--stdio"]
    statuses: list[str] = []
    with trio.fail_after(20):
        async with open_stdio_client(demo, mode="modern", elicitation=Answers()) as session:
            result = await session.call_tool(
                "confirm_delete", {"filename": "d"}, on_task_status=lambda t: statuses.append(t.status)
            )
    assert text_of(result) == "Deleted d"
    assert statuses[-1] == "completed" and "input_required" in statuses


async def test_callbacks_are_checked_at_once(server: Server) -> None:
    async with open_client_session(server.url, http=server.http) as session:
        with pytest.raises(TypeError, match=r"on_task_status= takes a function \(TaskInfo\) -> None"):
            await session.call_tool("greet", {"name": "x"}, on_task_status="print")  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="goes with waiting for the task"):
            await session.call_tool("greet", {"name": "x"}, on_task_status=print, wait_for_task=False)
    assert server.wire.requests("tools/call") == []


def test_task_info_from_the_wire() -> None:
    wire = {
        "taskId": "t1",
        "status": "input_required",
        "ttlMs": None,
        "pollIntervalMs": 10,
        "inputRequests": {"k": {"method": "roots/list"}, "bad": 3},
        "result": "not an object",
    }
    task = TaskInfo.from_wire(wire)
    assert task.input_requests == {"k": {"method": "roots/list"}}
    assert task.result is None and task.ttl_ms is None and not task.terminal
    assert task.poll_interval == 0.05  # clamped
    assert (
        TaskInfo.from_wire({"taskId": "t", "status": "working", "pollIntervalMs": 10**9}).poll_interval == 60
    )
    assert TaskInfo.from_wire({"taskId": "t", "status": "working", "pollIntervalMs": True}).poll_interval == 1
    assert task.raw == wire
    with pytest.raises(TransportError, match="no taskId or status"):
        TaskInfo.from_wire({"status": "working"})
