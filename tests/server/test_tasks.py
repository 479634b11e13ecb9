"""The server side of the tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28 era), through the
in-process ASGI client: task-capable tools, ``server/discover``, the task lifecycle (``tasks/get``,
``tasks/update``, ``tasks/cancel``), ``-32021`` gating, input requests, ``task_status.started()``,
ownership, TTL and the store's size cap, shutdown, client disconnects and ``notifications/tasks``.

Virtual time (MockClock, autojump) wherever a tool sleeps or a TTL runs out.  Two clocks matter: a
task's cancel deadline is ``trio.current_time()`` + TTL, while its record's ``createdAt``/expiry is
``time.time()``; TTL tests give the :class:`MemoryTaskStore` a clock that is wall time plus the virtual
time elapsed, so both run out together.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import mcp_types as mt
import pytest
import trio
import trio.testing

from mcp_trio import Context, MCPApp, MCPServer, RPCError, ServerConfig
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import TaskStoreFull
from mcp_trio.server import HTTPRequestInfo, MemoryTaskStore, TaskRecord, TaskStarter
from mcp_trio.testing import ASGIClient, NoResponse, open_asgi_client

from .conftest import Client, settle
from .test_modern import CAPS, Modern, headers_for

TASKS = "io.modelcontextprotocol/tasks"
CLIENT_CAPS = "io.modelcontextprotocol/clientCapabilities"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
WITH_TASKS = {**CAPS, "extensions": {TASKS: {}}}
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
NOT_FOUND = {"code": -32602, "message": "Failed to retrieve task: Task not found"}
SCHEMA = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


# -- a client of the extension ---------------------------------------------------------------


class TaskClient(Modern):
    """2026 requests that declare the tasks extension (``tasks=False``: that do not); ``Mcp-Name`` is
    the ``taskId`` of ``tasks/*``; ``user`` goes in an ``x-user`` header (see :func:`by_header`)."""

    def __init__(self, asgi: ASGIClient, user: str | None = None) -> None:
        super().__init__(asgi)
        self.user = user

    async def post(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        tasks: bool = True,
        **kw: Any,
    ):
        params = dict(params or {})
        if tasks:
            params["_meta"] = {CLIENT_CAPS: WITH_TASKS, **params.get("_meta", {})}
        if headers is None:
            name = params.get("name") or params.get("uri") or params.get("taskId")
            headers = headers_for(method, name if isinstance(name, str) else None)
        if self.user is not None:
            headers = {**headers, "x-user": self.user}
        return await super().post(method, params, headers=headers, **kw)

    async def tool(self, name: str, arguments: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """The answer (whole JSON-RPC message) to ``tools/call``."""
        status, body = await self.call("tools/call", {"name": name, "arguments": arguments or {}}, **kw)
        assert status == 200, (status, body)
        return body

    async def start(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ``tools/call`` that must be answered with a ``CreateTaskResult``; returns it."""
        body = await self.tool(name, arguments)
        result: dict[str, Any] = body["result"]
        assert result["resultType"] == "task", body
        return result

    async def task(self, method: str, task_id: str, **params: Any) -> tuple[int, dict[str, Any]]:
        return await self.call(method, {"taskId": task_id, **params})

    async def get(self, task_id: str) -> dict[str, Any]:
        status, body = await self.task("tasks/get", task_id)
        assert status == 200 and "result" in body, (status, body)
        result: dict[str, Any] = body["result"]
        assert result["resultType"] == "complete" and result["taskId"] == task_id, result
        return result

    async def wait(
        self,
        task_id: str,
        *statuses: str,
        until: Callable[[dict[str, Any]], bool] | None = None,
        poll: float = 0.05,
    ) -> dict[str, Any]:
        """Poll ``tasks/get`` until the task is in one of ``statuses`` (and ``until(task)`` holds), as a
        client does; the test's deadline bounds it."""
        while True:
            task = await self.get(task_id)
            if task["status"] in statuses and (until is None or until(task)):
                return task
            await trio.sleep(poll)


def ack_of(body: dict[str, Any]) -> dict[str, Any]:
    """An empty acknowledgement's result without its ``_meta`` (the server info every 2026 result has)."""
    result = dict(body["result"])
    result.pop("_meta")
    return result


# -- tools under test -------------------------------------------------------------------------


@dataclass
class Probe:
    """What the test tools report, and what lets them go on."""

    entered: trio.Event = field(default_factory=trio.Event)
    release: trio.Event = field(default_factory=trio.Event)
    cancelled: trio.Event = field(default_factory=trio.Event)
    finished: trio.Event = field(default_factory=trio.Event)
    runs: int = 0

    async def hold(self) -> None:
        self.runs += 1
        self.entered.set()
        try:
            await self.release.wait()
        except trio.Cancelled:
            self.cancelled.set()
            raise
        self.finished.set()


def add_test_tools(server: MCPServer, probe: Probe) -> MCPServer:
    @server.tool(task="optional")
    async def hold() -> str:
        """A task from the start; waits for ``probe.release``."""
        await probe.hold()
        return "released"

    @server.tool(task="required")
    async def must_be_task() -> str:
        probe.runs += 1
        return "ran"

    @server.tool(task="optional")
    async def hold_then_start(task_status: TaskStarter) -> str:
        """Waits for ``probe.release`` in the request, then becomes a task."""
        await probe.hold()
        task_status.started()
        return "started late"

    @server.tool(task="optional")
    async def start_then_hold(task_status: TaskStarter) -> str:
        task_status.started()
        await probe.hold()
        return "finished"

    @server.tool(task="optional")
    async def never_starts(task_status: TaskStarter) -> str:
        probe.runs += 1
        return f"plain answer (is_task={task_status.is_task})"

    @server.tool(task="optional")
    async def refuses(task_status: TaskStarter) -> str:
        raise RPCError(mt.INVALID_PARAMS, "Refused before the task", {"why": "test"})

    @server.tool(task="optional")
    async def fails_with_data() -> str:
        raise RPCError(-32001, "Backend down", {"retryAfter": 5})

    @server.tool(task="optional")
    async def ask_same_key_twice(ctx: Context) -> str:
        first = await ctx.elicit("First?", SCHEMA, key="k")
        second = await ctx.elicit("Second?", SCHEMA, key="k")
        return f"{(first.content or {})['v']} then {(second.content or {})['v']}"

    return server


async def by_header(request: HTTPRequestInfo) -> str | None:
    """The principal is the ``x-user`` header (anonymous without one)."""
    return request.header("x-user")


def virtual_wall_clock() -> Callable[[], float]:
    """Wall time plus the virtual time elapsed since (for a store whose TTLs MockClock runs out)."""
    wall, start = time.time(), trio.current_time()
    return lambda: wall + trio.current_time() - start


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
async def app(config: ServerConfig, probe: Probe) -> MCPApp:
    return MCPApp(add_test_tools(build_demo_server(), probe), config)


@pytest.fixture
async def asgi(app: MCPApp) -> AsyncIterator[ASGIClient]:
    async with open_asgi_client(app) as asgi:
        yield asgi


@pytest.fixture
async def tc(asgi: ASGIClient) -> TaskClient:
    return TaskClient(asgi)


def stats(app: MCPApp) -> tuple[int, int]:
    """(tasks running, tasks stored)."""
    numbers = app.statistics()
    return numbers["tasks_running"], numbers["tasks_stored"]


# -- 1. registration --------------------------------------------------------------------------


def test_tool_registration_checks_the_task_option() -> None:
    server = MCPServer("reg")

    async def tool(task_status: TaskStarter) -> str:
        return "x"

    async def plain(x: int) -> str:
        return "x"

    with pytest.raises(ValueError, match="task must be"):
        server.tool(task="bogus")(plain)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="task_status needs task="):
        server.tool()(tool)
    with pytest.raises(TypeError, match="task_status needs task="):
        server.add_tool(tool, task="forbidden")
    assert not server.has_tasks()
    server.tool(task="optional")(tool)
    server.tool(name="plain2", task="required")(plain)
    assert server.has_tasks()
    schemas = {spec["name"]: spec["inputSchema"] for spec in (s.wire() for s in server._tools.values())}
    assert "task_status" not in schemas["tool"].get("properties", {})
    assert "task_status" not in schemas["tool"].get("required", [])
    assert list(schemas["plain2"]["properties"]) == ["x"]


async def test_task_status_is_not_in_the_listed_schema(tc: TaskClient) -> None:
    status, body = await tc.call("tools/list")
    assert status == 200, (status, body)
    tools = {tool["name"]: tool for tool in body["result"]["tools"]}
    for name in ("hold_then_start", "start_then_hold", "test_tool_with_task", "never_starts"):
        schema = tools[name]["inputSchema"]
        assert "task_status" not in schema.get("properties", {}) and "task_status" not in schema.get(
            "required", []
        ), (name, schema)


# -- 2. discovery -----------------------------------------------------------------------------


async def test_discover_advertises_the_extension_only_with_a_task_tool() -> None:
    plain = MCPServer("plain")

    @plain.tool()
    async def echo(text: str) -> str:
        return text

    for server, advertised in ((plain, False), (add_test_tools(build_demo_server(), Probe()), True)):
        async with open_asgi_client(MCPApp(server)) as asgi:
            for client in (TaskClient(asgi), Modern(asgi)):  # declaring the extension or not
                status, body = await client.call("server/discover")
                assert status == 200, body
                capabilities = body["result"]["capabilities"]
                assert "tasks" not in capabilities, capabilities
                if advertised:
                    assert capabilities["extensions"] == {TASKS: {}}, capabilities
                else:
                    assert TASKS not in capabilities.get("extensions", {}), capabilities


# -- 3. lifecycle -----------------------------------------------------------------------------


async def test_create_task_result_shape_and_immediate_get(tc: TaskClient, app: MCPApp) -> None:
    before = time.time()
    body = await tc.tool("hold")
    result = body["result"]
    assert set(result) == {
        "resultType",
        "taskId",
        "status",
        "createdAt",
        "lastUpdatedAt",
        "ttlMs",
        "pollIntervalMs",
        "_meta",
    }, result
    assert result["resultType"] == "task" and result["status"] == "working"
    assert "task" not in result and "result" not in result  # flat, not nested
    task_id = result["taskId"]
    assert isinstance(task_id, str) and len(task_id) >= 32
    for stamp in ("createdAt", "lastUpdatedAt"):
        assert ISO.fullmatch(result[stamp]), result[stamp]
        seconds = datetime.fromisoformat(result[stamp].replace("Z", "+00:00")).timestamp()
        assert before - 1 <= seconds <= time.time() + 1
    assert type(result["ttlMs"]) is int and result["ttlMs"] == 3_600_000
    assert type(result["pollIntervalMs"]) is int and result["pollIntervalMs"] == 1000
    # durably created: the very next tasks/get resolves it
    task = await tc.get(task_id)
    assert task["status"] == "working"
    assert {k: task[k] for k in ("createdAt", "ttlMs", "pollIntervalMs")} == {
        k: result[k] for k in ("createdAt", "ttlMs", "pollIntervalMs")
    }
    assert not {"result", "error", "inputRequests"} & set(task)
    assert stats(app) == (1, 1)


class SlowStore(MemoryTaskStore):
    """A store on the network, under load: each write takes a second.  ``on_create`` runs once a new
    record is in (before the call returns)."""

    def __init__(self, on_create: Callable[[], None]) -> None:
        super().__init__()
        self.on_create = on_create

    async def create(self, record: TaskRecord) -> None:
        await super().create(record)
        self.on_create()
        await trio.sleep(1)

    async def put(self, record: TaskRecord) -> None:
        await trio.sleep(1)
        await super().put(record)


async def test_the_create_task_result_is_the_state_stored(
    probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    # The task ends while its record is being created (the store lets it go on once the record is in):
    # the CreateTaskResult still shows it as created, as tasks/get does until the write of its end lands
    # (not completed, then working).
    config = ServerConfig(task_store_factory=lambda: SlowStore(probe.release.set))
    async with open_asgi_client(MCPApp(add_test_tools(build_demo_server(), probe), config)) as asgi:
        tc = TaskClient(asgi)
        created = await tc.start("hold")
        assert probe.finished.is_set()
        polled = await tc.get(created["taskId"])  # before the write of its end lands
        assert created["status"] == polled["status"] == "working", (created, polled)
        assert created["lastUpdatedAt"] == polled["lastUpdatedAt"]
        assert (await tc.wait(created["taskId"], "completed"))["result"]["content"][0]["text"] == "released"


class SlowGetStore(MemoryTaskStore):
    """A store whose reads take a second (the answer is the record as it was when asked)."""

    def __init__(self, on_get: Callable[[], None]) -> None:
        super().__init__()
        self.on_get = on_get

    async def get(self, task_id: str) -> TaskRecord | None:
        record = await super().get(task_id)
        self.on_get()
        await trio.sleep(1)
        return record


async def test_a_task_that_ends_during_a_tasks_get_stays_completed(
    probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    # The task ends while a tasks/get is reading its record (the store lets it go on once the read
    # has its answer): that poll may show it working, but its result must not be lost.
    config = ServerConfig(task_store_factory=lambda: SlowGetStore(probe.release.set))
    async with open_asgi_client(MCPApp(add_test_tools(build_demo_server(), probe), config)) as asgi:
        tc = TaskClient(asgi)
        task_id = (await tc.start("hold"))["taskId"]
        assert not probe.release.is_set()
        polled = await tc.get(task_id)
        assert probe.finished.is_set()
        assert polled["status"] in ("working", "completed"), polled
        task = await tc.get(task_id)
        assert task["status"] == "completed", task
        assert task["result"]["content"] == [{"type": "text", "text": "released"}]


async def test_a_cancel_that_crosses_the_end_of_the_task_is_acknowledged(
    probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    config = ServerConfig(task_store_factory=lambda: SlowGetStore(probe.release.set))
    async with open_asgi_client(MCPApp(add_test_tools(build_demo_server(), probe), config)) as asgi:
        tc = TaskClient(asgi)
        task_id = (await tc.start("hold"))["taskId"]
        status, body = await tc.task("tasks/cancel", task_id)
        assert probe.finished.is_set()
        assert status == 200 and ack_of(body) == {"resultType": "complete"}, body
        assert (await tc.get(task_id))["status"] == "completed"


@pytest.mark.parametrize("config", [ServerConfig(task_ttl=30, task_poll_interval=0.25)])
async def test_ttl_and_poll_interval_come_from_the_config(tc: TaskClient) -> None:
    result = await tc.start("slow_compute", {"seconds": 0})
    assert result["ttlMs"] == 30_000 and result["pollIntervalMs"] == 250


@pytest.mark.deadline(10_000)  # virtual seconds
@pytest.mark.parametrize("config", [ServerConfig(task_ttl=None)])
async def test_without_a_ttl_a_task_is_kept_and_runs_on(
    tc: TaskClient, app: MCPApp, probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    created = await tc.start("hold")
    assert "ttlMs" in created and created["ttlMs"] is None, created
    await trio.sleep(7200)  # twice the default TTL
    assert not probe.cancelled.is_set()
    probe.release.set()
    task = await tc.wait(created["taskId"], "completed")
    assert task["ttlMs"] is None and stats(app) == (0, 1)


async def test_working_then_completed_with_the_result_inlined(
    tc: TaskClient, app: MCPApp, autojump_clock: trio.testing.MockClock
) -> None:
    created = await tc.start("slow_compute", {"seconds": 5, "label": "answer"})
    task_id = created["taskId"]
    assert (await tc.get(task_id))["status"] == "working"
    task = await tc.wait(task_id, "completed")
    assert task["result"]["content"] == [{"type": "text", "text": "Computed answer after 5 s"}]
    assert not task["result"].get("isError")
    assert "error" not in task and "inputRequests" not in task
    assert task["createdAt"] == created["createdAt"] and task["lastUpdatedAt"] >= created["lastUpdatedAt"]
    assert stats(app) == (0, 1)  # finished, still kept for its TTL
    assert (await tc.get(task_id)) == task  # and stays so


async def test_a_tool_error_completes_the_task_with_is_error(
    tc: TaskClient, autojump_clock: trio.testing.MockClock
) -> None:
    task_id = (await tc.start("failing_job"))["taskId"]
    task = await tc.wait(task_id, "completed", "failed")
    assert task["status"] == "completed" and "error" not in task
    assert task["result"]["isError"] is True
    assert task["result"]["content"][0]["text"] == "The job failed: nothing to do"


async def test_a_json_rpc_error_fails_the_task(
    tc: TaskClient, autojump_clock: trio.testing.MockClock
) -> None:
    task_id = (await tc.start("protocol_error_job"))["taskId"]
    task = await tc.wait(task_id, "completed", "failed")
    assert task["status"] == "failed" and "result" not in task
    assert task["error"] == {"code": mt.INTERNAL_ERROR, "message": "The job broke down: internal error"}
    assert task["statusMessage"]
    # the error's data is kept
    task_id = (await tc.start("fails_with_data"))["taskId"]
    task = await tc.wait(task_id, "failed")
    assert task["error"] == {"code": -32001, "message": "Backend down", "data": {"retryAfter": 5}}


async def test_cancel_acks_then_the_task_is_cancelled(tc: TaskClient, app: MCPApp, probe: Probe) -> None:
    task_id = (await tc.start("hold"))["taskId"]
    await probe.entered.wait()
    status, body = await tc.task("tasks/cancel", task_id)
    assert status == 200 and ack_of(body) == {"resultType": "complete"}, body
    with trio.fail_after(1):
        await probe.cancelled.wait()
    task = await tc.wait(task_id, "cancelled")
    assert "cancel" in task["statusMessage"].lower() and "client" in task["statusMessage"], task
    assert not {"result", "error", "inputRequests"} & set(task)
    assert stats(app) == (0, 1)
    # cancelling a terminal task again is an idempotent ack, and changes nothing
    status, body = await tc.task("tasks/cancel", task_id)
    assert status == 200 and ack_of(body) == {"resultType": "complete"}, body
    assert await tc.get(task_id) == task
    assert not probe.finished.is_set()


async def test_cancel_of_a_completed_task_is_an_ack_and_it_stays_completed(tc: TaskClient) -> None:
    task_id = (await tc.start("slow_compute", {"seconds": 0}))["taskId"]
    done = await tc.wait(task_id, "completed")
    status, body = await tc.task("tasks/cancel", task_id)
    assert status == 200 and ack_of(body) == {"resultType": "complete"}
    assert await tc.get(task_id) == done


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list"])
async def test_methods_not_in_the_extension_are_32601(tc: TaskClient, method: str) -> None:
    task_id = (await tc.start("slow_compute", {"seconds": 0}))["taskId"]
    status, body = await tc.call(method, {"taskId": task_id}, headers=headers_for(method))
    assert status == 404 and body["error"]["code"] == mt.METHOD_NOT_FOUND, body


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_task_methods_without_the_extension_are_32021(
    tc: TaskClient, app: MCPApp, probe: Probe, method: str
) -> None:
    task_id = (await tc.start("hold"))["taskId"]
    params = {"taskId": task_id, "inputResponses": {}}
    for caps in (CAPS, {**CAPS, "extensions": {}}, {**CAPS, "extensions": {"other/ext": {}}}):
        status, body = await tc.call(method, {**params, "_meta": {CLIENT_CAPS: caps}})
        assert status == 400, body
        assert body["error"]["code"] == -32021, body
        assert body["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    assert (await tc.get(task_id))["status"] == "working" and not probe.cancelled.is_set()


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_unknown_task_is_32602(tc: TaskClient, method: str) -> None:
    for task_id in ("0" * 32, "no-such-task", "x" * 300):
        status, body = await tc.task(method, task_id, inputResponses={})
        assert status == 200 and body["error"] == NOT_FOUND, body
    # a taskId that is not a string cannot match its Mcp-Name
    status, body = await tc.call(method, {"taskId": 5}, headers=headers_for(method, "5"))
    assert status == 400 and body["error"]["code"] == -32020, body


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_mcp_name_must_be_the_task_id(tc: TaskClient, probe: Probe, method: str) -> None:
    task_id = (await tc.start("hold"))["taskId"]
    params = {"taskId": task_id, "inputResponses": {}}
    for name in (None, "other", task_id.upper()):
        response = await tc.post(method, params, headers=headers_for(method, name))
        assert response.status == 400, name
        assert (await response.json())["error"]["code"] == -32020, name
    assert (await tc.get(task_id))["status"] == "working" and not probe.cancelled.is_set()


# -- 4. -32021 gating and the 2025 era --------------------------------------------------------


async def test_optional_tool_without_the_extension_is_an_ordinary_call(tc: TaskClient, app: MCPApp) -> None:
    status, body = await tc.call(
        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0}}, tasks=False
    )
    assert status == 200
    result = body["result"]
    assert result["resultType"] == "complete" and "taskId" not in result
    assert result["content"] == [{"type": "text", "text": "Computed result after 0 s"}]
    status, body = await tc.call("tools/call", {"name": "never_starts", "arguments": {}}, tasks=False)
    assert body["result"]["content"][0]["text"] == "plain answer (is_task=False)"
    assert stats(app) == (0, 0)


async def test_required_tool_without_the_extension_is_32021_before_it_runs(
    tc: TaskClient, probe: Probe, app: MCPApp
) -> None:
    for caps in (CAPS, {**CAPS, "extensions": {}}):
        params = {"name": "must_be_task", "arguments": {}, "_meta": {CLIENT_CAPS: caps}}
        status, body = await tc.call("tools/call", params, tasks=False)
        assert status == 400, body
        assert body["error"]["code"] == -32021
        assert body["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    assert probe.runs == 0  # the handler never ran
    assert stats(app) == (0, 0)
    # with the extension it runs, as a task
    task = await tc.wait((await tc.start("must_be_task"))["taskId"], "completed")
    assert task["result"]["content"][0]["text"] == "ran" and probe.runs == 1


def str_result(text: str) -> dict[str, Any]:
    """The result of a tool annotated ``-> str`` that returned ``text``."""
    return {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}}


async def test_a_2025_session_runs_a_required_task_tool_normally(
    asgi: ASGIClient, app: MCPApp, probe: Probe
) -> None:
    client = Client(asgi, app)
    await client.initialize()
    answer = await client.request(2, "tools/call", {"name": "must_be_task", "arguments": {}})
    assert answer["result"] == str_result("ran"), answer
    assert probe.runs == 1
    # params.task (the 2025-11-25 tasks) is ignored: an ordinary result
    params = {"name": "slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": 60_000}}
    answer = await client.request(3, "tools/call", params)
    text = "Computed result after 0 s"
    assert answer["result"] == str_result(text), answer
    # a tool that takes task_status runs through it (started() does nothing)
    answer = await client.request(4, "tools/call", {"name": "never_starts", "arguments": {}})
    assert answer["result"]["content"][0]["text"] == "plain answer (is_task=False)"
    assert stats(app) == (0, 0)


async def test_tasks_methods_are_not_served_to_a_2025_session(asgi: ASGIClient, app: MCPApp) -> None:
    client = Client(asgi, app)
    await client.initialize()
    answer = await client.request(2, "tasks/get", {"taskId": "0" * 32})
    assert answer["error"]["code"] == mt.METHOD_NOT_FOUND, answer


# -- 5. input requests ------------------------------------------------------------------------


async def test_input_required_and_tasks_update(tc: TaskClient, app: MCPApp) -> None:
    task_id = (await tc.start("confirm_delete", {"filename": "a.txt"}))["taskId"]
    task = await tc.wait(task_id, "input_required")
    assert list(task["inputRequests"]) == ["confirm"], task
    request = task["inputRequests"]["confirm"]
    assert request["method"] == "elicitation/create"
    assert request["params"]["mode"] == "form" and "a.txt" in request["params"]["message"]
    assert request["params"]["requestedSchema"]["properties"] == {"confirm": {"type": "boolean"}}
    # a wrong-shape answer: -32602, and the task is unharmed
    for bad in ({"action": "bogus"}, 12, {"content": {"confirm": True}}):
        status, body = await tc.task("tasks/update", task_id, inputResponses={"confirm": bad})
        assert status == 200 and body["error"]["code"] == -32602, body
        assert await tc.get(task_id) == task
    # answers to keys it did not ask: an ack, and nothing changes
    status, body = await tc.task("tasks/update", task_id, inputResponses={"other": accept(confirm=True)})
    assert status == 200 and ack_of(body) == {"resultType": "complete"}, body
    status, body = await tc.task("tasks/update", task_id, inputResponses={})
    assert status == 200 and ack_of(body) == {"resultType": "complete"}, body
    assert await tc.get(task_id) == task
    # inputResponses that are not an object
    status, body = await tc.task("tasks/update", task_id, inputResponses=["x"])
    assert body["error"]["code"] == -32602, body
    status, body = await tc.task("tasks/update", task_id)
    assert body["error"]["code"] == -32602, body
    # the right answer
    status, body = await tc.task("tasks/update", task_id, inputResponses={"confirm": accept(confirm=True)})
    assert status == 200 and ack_of(body) == {"resultType": "complete"}, body
    done = await tc.wait(task_id, "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "Deleted a.txt"}]
    assert "inputRequests" not in done
    # tasks/update on a terminal task: a clear -32602
    status, body = await tc.task("tasks/update", task_id, inputResponses={"confirm": accept(confirm=True)})
    assert body["error"]["code"] == -32602 and "not waiting for input" in body["error"]["message"], body
    assert stats(app) == (0, 1)


async def test_tasks_update_on_a_working_task_is_32602(tc: TaskClient, probe: Probe) -> None:
    task_id = (await tc.start("hold"))["taskId"]
    await probe.entered.wait()
    status, body = await tc.task("tasks/update", task_id, inputResponses={"x": accept(v="1")})
    assert status == 200 and body["error"]["code"] == -32602, body
    assert task_id in body["error"]["message"] and "not waiting for input" in body["error"]["message"]
    assert (await tc.get(task_id))["status"] == "working" and not probe.cancelled.is_set()


async def test_partial_update_keeps_input_required_for_the_rest(tc: TaskClient) -> None:
    task_id = (await tc.start("multi_input"))["taskId"]
    await tc.wait(task_id, "input_required", until=lambda t: set(t["inputRequests"]) == {"first", "second"})
    status, body = await tc.task("tasks/update", task_id, inputResponses={"first": accept(name="Ann")})
    assert status == 200, (status, body)
    assert ack_of(body) == {"resultType": "complete"}, body
    task = await tc.get(task_id)
    assert task["status"] == "input_required" and list(task["inputRequests"]) == ["second"], task
    # an answer to the key already answered is ignored
    await tc.task("tasks/update", task_id, inputResponses={"first": accept(name="Eve")})
    assert list((await tc.get(task_id))["inputRequests"]) == ["second"]
    await tc.task("tasks/update", task_id, inputResponses={"second": accept(name="Bob")})
    done = await tc.wait(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Got Ann and Bob"


async def test_a_key_is_never_reused_over_a_task_s_life(tc: TaskClient) -> None:
    task_id = (await tc.start("ask_same_key_twice"))["taskId"]
    first = await tc.wait(task_id, "input_required")
    assert list(first["inputRequests"]) == ["k"]
    assert first["inputRequests"]["k"]["params"]["message"] == "First?"
    await tc.task("tasks/update", task_id, inputResponses={"k": accept(v="one")})
    # the first request, until its answer is applied; then the second one
    second = await tc.wait(task_id, "input_required", until=lambda t: "k" not in t["inputRequests"])
    [key] = second["inputRequests"]
    assert key != "k" and second["inputRequests"][key]["params"]["message"] == "Second?", second
    # the old key again is ignored: the task still waits for the new one
    await tc.task("tasks/update", task_id, inputResponses={"k": accept(v="stale")})
    assert (await tc.get(task_id))["inputRequests"] == second["inputRequests"]
    await tc.task("tasks/update", task_id, inputResponses={key: accept(v="two")})
    done = await tc.wait(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "one then two"


async def test_cancel_while_input_required(tc: TaskClient) -> None:
    task_id = (await tc.start("confirm_delete", {"filename": "b.txt"}))["taskId"]
    await tc.wait(task_id, "input_required")
    await tc.task("tasks/cancel", task_id)
    task = await tc.wait(task_id, "cancelled")
    assert "inputRequests" not in task
    status, body = await tc.task("tasks/update", task_id, inputResponses={"confirm": accept(confirm=True)})
    assert status == 200, (status, body)
    assert body["error"]["code"] == -32602, body


# -- 6. task_status.started() -----------------------------------------------------------------


async def test_input_before_the_task_is_gathered_with_input_required_results(
    tc: TaskClient, app: MCPApp, autojump_clock: trio.testing.MockClock
) -> None:
    status, body = await tc.call("tools/call", {"name": "test_tool_with_task", "arguments": {}})
    first = body["result"]
    assert status == 200 and first["resultType"] == "input_required", body
    assert "taskId" not in first and isinstance(first["requestState"], str)
    assert first["inputRequests"]["user_name"]["method"] == "elicitation/create"
    assert stats(app) == (0, 0)  # no task yet
    retry = {
        "name": "test_tool_with_task",
        "arguments": {},
        "inputResponses": {"user_name": accept(name="Luca")},
        "requestState": first["requestState"],
    }
    status, body = await tc.call("tools/call", retry)
    created = body["result"]
    assert created["resultType"] == "task" and created["status"] == "working", body
    assert "inputRequests" not in created and "requestState" not in created
    task = await tc.wait(created["taskId"], "completed")
    assert task["result"]["content"] == [{"type": "text", "text": "Hello, Luca, from a task!"}]


async def test_a_tool_that_returns_before_started_answers_plainly(
    tc: TaskClient, app: MCPApp, probe: Probe
) -> None:
    body = await tc.tool("never_starts")
    result = body["result"]
    assert result["resultType"] == "complete" and "taskId" not in result, result
    assert result["content"] == [{"type": "text", "text": "plain answer (is_task=True)"}]
    assert probe.runs == 1 and stats(app) == (0, 0)


async def test_an_rpc_error_before_started_is_a_json_rpc_error(tc: TaskClient, app: MCPApp) -> None:
    status, body = await tc.call("tools/call", {"name": "refuses", "arguments": {}})
    assert status == 200, (status, body)
    assert "result" not in body, body
    assert body["error"] == {"code": -32602, "message": "Refused before the task", "data": {"why": "test"}}
    assert stats(app) == (0, 0)


async def test_invalid_arguments_are_a_plain_tool_error(tc: TaskClient, app: MCPApp) -> None:
    body = await tc.tool("slow_compute", {"seconds": "soon"})
    result = body["result"]
    assert result["resultType"] == "complete" and result["isError"] is True, result
    assert stats(app) == (0, 0)


# -- 7. ownership -----------------------------------------------------------------------------


@pytest.mark.parametrize("config", [ServerConfig(authenticate=by_header)])
async def test_another_principal_s_task_is_not_found(asgi: ASGIClient, probe: Probe) -> None:
    alice, bob, anonymous = TaskClient(asgi, "alice"), TaskClient(asgi, "bob"), TaskClient(asgi)
    task_id = (await alice.start("confirm_delete", {"filename": "c.txt"}))["taskId"]
    before = await alice.wait(task_id, "input_required")
    unknown = "f" * 32
    for intruder in (bob, anonymous):
        for method, extra in (
            ("tasks/get", {}),
            ("tasks/update", {"inputResponses": {"confirm": accept(confirm=True)}}),
            ("tasks/cancel", {}),
        ):
            theirs = await intruder.task(method, task_id, **extra)
            none = await intruder.task(method, unknown, **extra)
            assert theirs[0] == none[0] == 200
            assert theirs[1]["error"] == none[1]["error"] == NOT_FOUND, (theirs, none)
    assert await alice.get(task_id) == before  # untouched
    await alice.task("tasks/update", task_id, inputResponses={"confirm": accept(confirm=False)})
    done = await alice.wait(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Kept c.txt"
    status, body = await alice.task("tasks/cancel", task_id)
    assert status == 200, (status, body)
    assert ack_of(body) == {"resultType": "complete"}


# -- 8. TTL and the store's size cap ----------------------------------------------------------


@pytest.mark.deadline(300)  # virtual seconds
async def test_a_finished_task_is_forgotten_after_its_ttl(
    probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    config = ServerConfig(task_ttl=60, task_store_factory=lambda: MemoryTaskStore(clock=virtual_wall_clock()))
    app = MCPApp(add_test_tools(build_demo_server(), probe), config)
    async with open_asgi_client(app) as asgi:
        tc = TaskClient(asgi)
        created = await tc.start("slow_compute", {"seconds": 10})
        assert created["ttlMs"] == 60_000
        await tc.wait(created["taskId"], "completed")
        await trio.sleep(40)  # 50 s after creation: still there
        assert (await tc.get(created["taskId"]))["status"] == "completed"
        assert stats(app) == (0, 1)
        await trio.sleep(11)  # 61 s
        status, body = await tc.task("tasks/get", created["taskId"])
        assert status == 200, (status, body)
        assert body["error"] == NOT_FOUND, body
        assert stats(app) == (0, 0)


@pytest.mark.deadline(300)  # virtual seconds
async def test_a_running_task_past_its_ttl_is_cancelled_and_forgotten(
    probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    # The store keeps wall time (hardly moves here): the record goes because the task ran out, not
    # because the store expired it.
    app = MCPApp(add_test_tools(build_demo_server(), probe), ServerConfig(task_ttl=60))
    async with open_asgi_client(app) as asgi:
        tc = TaskClient(asgi)
        task_id = (await tc.start("hold"))["taskId"]
        start = trio.current_time()
        await probe.cancelled.wait()
        assert 60 <= trio.current_time() - start < 61
        await settle()
        status, body = await tc.task("tasks/get", task_id)
        assert status == 200, (status, body)
        assert body["error"] == NOT_FOUND, body
        assert stats(app) == (0, 0)
        assert not probe.finished.is_set()


@pytest.mark.deadline(300)  # virtual seconds
async def test_a_tool_slower_than_the_ttl_to_start_is_never_a_500(
    probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    # The tool waits 120 s (virtual) in the request before task_status.started(), past the 60 s TTL.
    # Either answer is fine: a JSON-RPC error (the TTL bounds that part too) or the task (it does not);
    # an HTTP 500 with a RuntimeError logged is not.
    app = MCPApp(add_test_tools(build_demo_server(), probe), ServerConfig(task_ttl=60))
    async with open_asgi_client(app) as asgi, trio.open_nursery() as nursery:
        tc = TaskClient(asgi)

        async def release_later() -> None:
            await trio.sleep(120)
            probe.release.set()

        nursery.start_soon(release_later)
        status, body = await tc.call("tools/call", {"name": "hold_then_start", "arguments": {}})
        assert status == 200, (status, body)
        if "error" in body:
            assert body["error"]["code"] == mt.INTERNAL_ERROR and body["error"]["message"] != "Internal error"
            assert probe.cancelled.is_set() and stats(app) == (0, 0)
        else:
            assert body["result"]["resultType"] == "task", body
        nursery.cancel_scope.cancel()


async def test_memory_store_evicts_the_terminal_task_that_expires_first() -> None:
    now = [1000.0]
    store = MemoryTaskStore(max_tasks=3, clock=lambda: now[0])

    def record(task_id: str, ttl_ms: int | None, status: str) -> TaskRecord:
        return TaskRecord(task_id, "", now[0], now[0], ttl_ms, status=status)

    await store.create(record("late", 100_000, "completed"))
    await store.create(record("soon", 50_000, "failed"))
    await store.create(record("running", 10_000, "working"))
    await store.create(record("new", 100_000, "working"))  # full: "soon" goes (terminal, expires first)
    assert await store.get("soon") is None
    assert [await store.get(t) is not None for t in ("late", "running", "new")] == [True, True, True]
    await store.create(record("newer", None, "working"))  # "late" is the only terminal one left
    assert await store.get("late") is None and len(store) == 3
    with pytest.raises(TaskStoreFull):
        await store.create(record("one-too-many", 1000, "working"))
    assert await store.get("one-too-many") is None and len(store) == 3
    # expired records make room before anything else (the running one's TTL, 10 s, ran out)
    now[0] += 11
    await store.create(record("after", 1000, "working"))
    assert await store.get("running") is None and await store.get("after") is not None
    # put does not resurrect a forgotten task; delete forgets
    await store.put(record("soon", 50_000, "completed"))
    assert await store.get("soon") is None
    await store.delete("after")
    assert await store.get("after") is None and len(store) == 2
    with pytest.raises(ValueError):
        MemoryTaskStore(max_tasks=0)


@pytest.mark.parametrize("config", [ServerConfig(task_store_factory=lambda: MemoryTaskStore(max_tasks=2))])
async def test_a_full_store_evicts_finished_tasks_then_answers_32603(
    tc: TaskClient, app: MCPApp, probe: Probe
) -> None:
    done = (await tc.start("slow_compute", {"seconds": 0}))["taskId"]
    await tc.wait(done, "completed")
    running = (await tc.start("hold"))["taskId"]
    newer = (await tc.start("hold"))["taskId"]  # the store is full: the finished task makes room
    status, body = await tc.task("tasks/get", done)
    assert body["error"] == NOT_FOUND
    assert (await tc.get(running))["status"] == (await tc.get(newer))["status"] == "working"
    assert stats(app) == (2, 2)
    # every stored task is running: the call is refused, as an error, not a 500
    status, body = await tc.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0}})
    assert status == 200, (status, body)
    assert body["error"]["code"] == mt.INTERNAL_ERROR and "Too many tasks" in body["error"]["message"], body
    await settle()
    assert stats(app) == (2, 2)
    probe.release.set()
    await tc.wait(running, "completed")
    await tc.wait(newer, "completed")
    assert stats(app) == (0, 2)


# -- 9. shutdown ------------------------------------------------------------------------------


async def test_shutdown_gives_tasks_the_grace_then_records_them_failed(
    app: MCPApp, tc: TaskClient, probe: Probe, autojump_clock: trio.testing.MockClock
) -> None:
    """aclose: a task that ends within ``shutdown_grace`` (5 s) completes as it would; the ones still
    running then (one holding, one waiting for input) are cancelled and recorded ``failed``, saying the
    server shut down; no task starts meanwhile."""
    held = (await tc.start("hold"))["taskId"]
    waiting = (await tc.start("confirm_delete", {"filename": "d.txt"}))["taskId"]
    quick = (await tc.start("slow_compute", {"seconds": 3, "label": "q"}))["taskId"]
    await probe.entered.wait()
    await tc.wait(waiting, "input_required")
    assert stats(app) == (3, 3)
    start = trio.current_time()
    with trio.fail_after(app.config.shutdown_grace + 1):
        await app.aclose()
    assert trio.current_time() - start >= app.config.shutdown_grace  # the grace was given in full
    assert probe.cancelled.is_set()
    assert app.statistics()["tasks_running"] == 0
    store = app._modern.tasks.store
    done = await store.get(quick)
    assert done is not None and done.status == "completed", done
    assert done.result is not None and done.result["content"][0]["text"] == "Computed q after 3 s"
    for task_id in (held, waiting):
        record = await store.get(task_id)
        assert record is not None and record.status == "failed", record
        assert record.status_message == "The server shut down before this task ended", record
        assert record.error == {"code": mt.INTERNAL_ERROR, "message": record.status_message}
        assert record.input_requests == {}
    # no new task starts once shut down: the request is refused (503, -32000)
    status, body = await tc.call("tools/call", {"name": "hold", "arguments": {}})
    assert status == 503 and body["error"]["code"] == mt.CONNECTION_CLOSED, body
    assert "shutting down" in body["error"]["message"] and probe.runs == 1


async def test_a_cancelled_app_records_its_running_tasks_failed() -> None:
    # Cancelling MCPApp.run (no aclose: what open_asgi_client does on exit, or a crash next to it) ends
    # the tasks too; their records (in a shared store, what other workers answer from) must say so.
    # Trio wakes the cancelled tasks in a random order, so this runs ten times.
    outcomes = []
    for _ in range(10):
        probe = Probe()
        app = MCPApp(add_test_tools(build_demo_server(), probe))
        async with open_asgi_client(app) as asgi:
            task_id = (await TaskClient(asgi).start("hold"))["taskId"]
            await probe.entered.wait()
        assert probe.cancelled.is_set() and app.statistics()["tasks_running"] == 0
        record = await app._modern.tasks.store.get(task_id)
        outcomes.append(None if record is None else (record.status, record.status_message))
    assert outcomes == [("failed", "The server shut down before this task ended")] * 10, outcomes


async def test_a_task_of_this_worker_id_not_running_here_is_recorded_failed() -> None:
    """A record that names this worker (its id) as running a task that does not run here (an earlier
    process under the same id stopped, or the last write was lost): the next tasks/get records it
    failed, says the worker stopped, and publishes the change."""
    app = MCPApp(build_demo_server(), ServerConfig(worker_id="a"))
    tasks = app._modern.tasks
    published: list[dict[str, Any]] = []
    async with open_asgi_client(app) as asgi:

        async def publish(message: dict[str, Any]) -> None:
            published.append(message)

        tasks.publish = publish
        now = time.time()
        owner = tasks.principals.key(None)
        orphan = TaskRecord("f" * 32, owner, now, now, 60_000, worker="a", instance="an-earlier-run")
        await tasks.store.create(orphan)
        task = await TaskClient(asgi).get(orphan.task_id)
        assert task["status"] == "failed", task
        assert task["statusMessage"] == "The worker running this task stopped before it ended"
        assert task["error"] == {"code": mt.INTERNAL_ERROR, "message": task["statusMessage"]}
        stored = await tasks.store.get(orphan.task_id)
        assert stored is not None and stored.status == "failed"
        assert [m["params"]["status"] for m in published] == ["failed"]
        assert published[0]["method"] == "notifications/tasks"


# -- 10. client disconnects -------------------------------------------------------------------


async def test_a_disconnect_before_started_cancels_the_handler(
    asgi: ASGIClient, app: MCPApp, probe: Probe
) -> None:
    tc = TaskClient(asgi)
    gone = trio.Event()
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            with pytest.raises(NoResponse):
                await tc.post("tools/call", {"name": "hold_then_start", "arguments": {}}, disconnect=gone)

        nursery.start_soon(call)
        await probe.entered.wait()
        assert app.statistics()["modern_inflight"] == 1
        gone.set()
        with trio.fail_after(1):
            await probe.cancelled.wait()
    await settle()
    assert stats(app) == (0, 0) and app.statistics()["modern_inflight"] == 0


async def test_after_started_a_disconnect_does_not_end_the_task(
    asgi: ASGIClient, app: MCPApp, probe: Probe
) -> None:
    tc = TaskClient(asgi)
    gone = trio.Event()
    response = await tc.post("tools/call", {"name": "start_then_hold", "arguments": {}}, disconnect=gone)
    created = (await response.json())["result"]
    assert created["resultType"] == "task", created
    await probe.entered.wait()
    gone.set()  # the client goes away
    await settle()
    assert not probe.cancelled.is_set() and app.statistics()["modern_inflight"] == 0
    assert stats(app) == (1, 1)
    probe.release.set()
    task = await tc.wait(created["taskId"], "completed")
    assert task["result"]["content"][0]["text"] == "finished"


# -- 11. notifications/tasks ------------------------------------------------------------------


async def listen(tc: TaskClient, task_ids: list[str], **kw: Any):
    return await tc.post("subscriptions/listen", {"notifications": {"taskIds": task_ids}}, **kw)


@pytest.mark.parametrize("config", [ServerConfig(authenticate=by_header)])
async def test_listen_for_own_tasks_only(asgi: ASGIClient, app: MCPApp, probe: Probe) -> None:
    alice, bob = TaskClient(asgi, "alice"), TaskClient(asgi, "bob")
    mine = (await alice.start("confirm_delete", {"filename": "e.txt"}))["taskId"]
    theirs = (await bob.start("hold"))["taskId"]
    await alice.wait(mine, "input_required")
    stream = await listen(alice, [mine, theirs, "0" * 32])
    listen_id = alice.next_id
    assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
    ack = await stream.next_message()
    assert ack["method"] == "notifications/subscriptions/acknowledged", ack
    assert ack["params"]["notifications"]["taskIds"] == [mine], ack
    assert ack["params"]["_meta"] == {SUBSCRIPTION_ID: listen_id}
    # bob's task changing status is not told to alice
    await bob.task("tasks/cancel", theirs)
    await bob.wait(theirs, "cancelled")
    await alice.task("tasks/update", mine, inputResponses={"confirm": accept(confirm=True)})
    seen = []
    with trio.fail_after(2):
        while not seen or seen[-1]["params"]["status"] != "completed":
            message = await stream.next_message()
            assert message["method"] == "notifications/tasks", message
            seen.append(message)
    for message in seen:
        assert message["params"]["taskId"] == mine
        assert message["params"]["_meta"] == {SUBSCRIPTION_ID: listen_id}, message
        assert ISO.fullmatch(message["params"]["lastUpdatedAt"]) and "resultType" not in message["params"]
    # each carries the whole task as tasks/get shows it (the result inlined); the task may be written
    # (and told) once more with the same status, so tasks/get may show a later lastUpdatedAt
    final = seen[-1]["params"]
    polled = await alice.get(mine)
    assert final["result"] == polled["result"] == str_result("Deleted e.txt")
    assert final["createdAt"] == polled["createdAt"] and final["lastUpdatedAt"] <= polled["lastUpdatedAt"]
    await stream.aclose()
    await settle()
    assert app.statistics()["listeners"] == 0


async def test_listen_for_tasks_without_the_extension_is_32021(tc: TaskClient, app: MCPApp) -> None:
    task_id = (await tc.start("slow_compute", {"seconds": 0}))["taskId"]
    response = await listen(tc, [task_id], tasks=False)
    assert response.status == 400
    body = await response.json()
    assert body["error"]["code"] == -32021, body
    assert body["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    assert app.statistics()["listeners"] == 0


async def test_a_2025_get_stream_never_sees_notifications_tasks(
    asgi: ASGIClient, app: MCPApp, tc: TaskClient
) -> None:
    client = Client(asgi, app)
    await client.initialize()
    stream = await client.get_stream()
    await stream.next_event()  # priming
    task_id = (await tc.start("confirm_delete", {"filename": "f.txt"}))["taskId"]
    await tc.wait(task_id, "input_required")
    await tc.task("tasks/update", task_id, inputResponses={"confirm": accept(confirm=True)})
    await tc.wait(task_id, "completed")
    await settle()
    await app.server.notify_tools_changed()
    with trio.fail_after(1):
        message = await stream.next_message()
    assert message == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, message


async def test_many_tasks_leave_nothing_behind(tc: TaskClient, app: MCPApp) -> None:
    await settle()
    baseline = app.statistics()["process_tasks"]
    ids = [(await tc.start("slow_compute", {"seconds": 0}))["taskId"] for _ in range(30)]
    for task_id in ids[:10]:
        await tc.task("tasks/cancel", task_id)
    for task_id in ids:
        await tc.wait(task_id, "completed", "cancelled")
    await settle()
    numbers = app.statistics()
    assert numbers["process_tasks"] == baseline and numbers["tasks_running"] == 0, numbers
    assert numbers["modern_inflight"] == 0 and numbers["tasks_stored"] == 30
