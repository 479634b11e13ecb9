"""One owner at a time, with a paused owner: two workers (the demo with an epoch recorder,
``fencing_worker.py``) on a real redis-server, behind a real HAProxy (the ``workers`` fixture of
test_deploy_handover.py), and SIGSTOP for longer than the lease (the heartbeat's TTL, 5 s).

Each scenario: a session at level ``debug`` on worker P; P is stopped (SIGSTOP: a long GC pause, a frozen
VM); a request for the session at the other worker makes it adopt the session, and the client sets the
log level to ``error`` there; a request for the session is sent straight to P (a stale route: an old
keep-alive connection, a balancer that still sends there) while P is stopped, and P resumes (SIGCONT).
The resumed P must serve nothing from its stale copy: its answer carries no log message below
``error`` (the demo's ``test_tool_with_logging`` logs at ``info``), whether P forwards, answers as a
non-owner (503) or takes the session back as its home (with the record the adopter wrote).  Within a
bound only one worker holds the session, a second request at P is not served from the copy, and the
epochs the workers recorded serving show no moment with two owners (:func:`epoch_violations`).

- away from home: P is the session's home (``a``), the adopter ``b``;
- back home: the session lives on ``b`` (its home ``a`` handed it over on SIGTERM and came back); P is
  ``b``, and the home ``a`` takes it back while ``b`` is stopped;
- during a hand-over: P (``a``, the home) got SIGTERM and is stopped in its drain delay (it still serves
  then), or in the hand-over itself (a call in flight being settled).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp_http import DemoServer, MCPClient, SSEResponse
from test_deploy_handover import (
    RETRY_FOR,
    Workers,
    call_messages,
    described,
    held_sessions,
    owner_of,
    workers,
)
from tests.integration.fencing_worker import EPOCHS_ENV

TARGET = "tests.integration.fencing_worker:build"
LEASE = 5.0
"""The heartbeat's TTL (the Redis bus's default, what ``mcp-trio --redis`` runs with): a worker stopped
longer loses its sessions to the next worker that gets one of their requests."""
LET_GO_WITHIN = 5.0
"""A resumed stale owner holds the session no longer than this after its first request."""
ANSWER_WITHIN = 20.0
"""Deadline of one request to a worker that was stopped (it may wait for a hand-over, bounded)."""
Answer = tuple[int, list[dict[str, Any]]]
"""A request's status and the messages of its answer (for a status other than 200: its body)."""
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


# -- the epochs the workers served -------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """One request admitted to a session by the worker that owned it, under an epoch."""

    t: float
    session: str
    epoch: int
    worker: str
    pid: int


def served_records(directory: Path) -> list[Served]:
    """Every epoch record the worker processes wrote in ``directory`` (``fencing_worker.EpochRecorder``)."""
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                found = json.loads(line)
                records.append(
                    Served(
                        float(found["t"]),
                        str(found["session"]),
                        int(found["epoch"]),
                        str(found["worker"]),
                        int(found["pid"]),
                    )
                )
    return records


def epoch_violations(records: Iterable[Served], sessions: Iterable[str]) -> list[str]:
    """What contradicts one owner at a time, session by session, the records ordered by time: an epoch
    served by two worker processes, an epoch served after a later one was (epochs going backwards), and
    a session of ``sessions`` without any record (so that the check cannot pass with nothing to check).
    """
    by_session: dict[str, list[Served]] = {}
    for record in records:
        by_session.setdefault(record.session, []).append(record)
    problems = [f"session {sid}: no epoch record at all" for sid in sessions if sid not in by_session]
    for sid, served in by_session.items():
        served.sort(key=lambda r: (r.t, r.epoch))
        holder: dict[int, tuple[str, int]] = {}
        latest: Served | None = None
        for record in served:
            process = (record.worker, record.pid)
            first = holder.setdefault(record.epoch, process)
            if first != process:
                problems.append(f"session {sid}: epoch {record.epoch} served by {first} and by {process}")
            if latest is not None and record.epoch < latest.epoch:
                problems.append(
                    f"session {sid}: epoch {record.epoch} served by {process} at {record.t:.6f}, after "
                    f"epoch {latest.epoch} by {(latest.worker, latest.pid)} at {latest.t:.6f}"
                )
            if latest is None or record.epoch >= latest.epoch:
                latest = record
    return problems


def test_epoch_violations_finds_two_owners_and_epochs_going_back() -> None:
    a1, a2, b = ("a", 1), ("a", 2), ("b", 3)
    clean = [
        Served(1.0, "s", 1, *a1),
        Served(2.0, "s", 2, *b),
        Served(3.0, "s", 3, *a2),
        Served(4.0, "s", 3, *a2),
    ]
    assert epoch_violations(clean, ["s"]) == []
    two = [Served(1.0, "s", 1, *a1), Served(2.0, "s", 1, *b)]
    assert epoch_violations(two, ["s"]) == ["session s: epoch 1 served by ('a', 1) and by ('b', 3)"]
    restarted = [Served(1.0, "s", 1, *a1), Served(2.0, "s", 1, *a2)]  # the same worker id, another process
    assert len(epoch_violations(restarted, ["s"])) == 1
    back = [Served(1.0, "s", 1, *a1), Served(2.0, "s", 2, *b), Served(3.0, "s", 1, *a1)]
    (problem,) = epoch_violations(back, ["s"])
    assert problem.startswith("session s: epoch 1 served by ('a', 1) at 3.000000, after epoch 2 by ('b', 3)")
    assert epoch_violations([], ["s"]) == ["session s: no epoch record at all"]
    assert epoch_violations(clean, ["s", "t"]) == ["session t: no epoch record at all"]


@asynccontextmanager
async def recording_workers(tmp_path: Path) -> AsyncIterator[tuple[Workers, Path]]:
    """The ``workers`` of test_deploy_handover.py serving ``fencing_worker``, which record the epochs
    they serve in the directory yielded second."""
    epochs = tmp_path / "epochs"
    epochs.mkdir()
    os.environ[EPOCHS_ENV] = str(epochs)  # the workers inherit it (as the fixture's key ring)
    try:
        async with workers(tmp_path, TARGET) as c:
            yield c, epochs
    finally:
        os.environ.pop(EPOCHS_ENV, None)


# -- requests --------------------------------------------------------------------------------------


def at(c: Workers, client: MCPClient, name: str) -> MCPClient:
    """``client``'s session, with requests sent straight to worker ``name`` (not through HAProxy)."""
    direct = MCPClient(c.http, c.servers[name].url)
    direct.session_id = client.session_id
    direct._next_id = client._next_id + 1000 * (1 + list(c.servers).index(name))
    return direct


async def answer(client: MCPClient, method: str, params: dict[str, Any]) -> Answer:
    """POST a request, once (no retry): the status and every message of its answer."""
    message = {"jsonrpc": "2.0", "id": client._request_id(), "method": method, "params": params}
    stream = await client.post_stream(message)
    try:
        if stream.status_code != 200:
            body = await stream.response.aread()
            return stream.status_code, [{"body": body.decode(errors="replace")}]
        if method == "initialize":
            client.session_id = stream.response.headers.get("mcp-session-id")
        messages = []
        while (found := await stream.next_message()) is not None:
            messages.append(found)
            if found.get("id") == message["id"]:
                break
        return 200, messages
    finally:
        await stream.aclose()


LOGGING_CALL = ("tools/call", {"name": "test_tool_with_logging", "arguments": {}})


def below(level: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log messages among ``messages`` below ``level`` (those a client at ``level`` turned off)."""
    return [
        m
        for m in messages
        if m.get("method") == "notifications/message"
        and LEVELS.index(m["params"]["level"]) < LEVELS.index(level)
    ]


def logged(messages: list[dict[str, Any]]) -> int:
    return sum(m.get("method") == "notifications/message" for m in messages)


async def set_level(client: MCPClient, level: str) -> None:
    """``logging/setLevel`` (a 503 retried, as the spec lets a client)."""
    with trio.fail_after(RETRY_FOR):
        while (outcome := await answer(client, "logging/setLevel", {"level": level}))[0] == 503:  # noqa: ASYNC110
            await trio.sleep(0.2)
    assert outcome[0] == 200 and "result" in outcome[1][-1], outcome


async def session_at(c: Workers, home: str) -> MCPClient:
    """A new initialized session (through HAProxy) whose home is ``home``, at log level ``debug``, and
    its logging tool logs there (the control)."""
    with trio.fail_after(10):
        while True:
            client = MCPClient(c.http, c.url)
            await client.initialize()
            await client.initialized()
            if owner_of(client) == home:
                break
            await client.delete()
    await set_level(client, "debug")
    assert logged(await call_messages(client, "test_tool_with_logging", {}, [])) == 3
    return client


async def adopted_at_level_error(c: Workers, client: MCPClient, adopter: str) -> None:
    """A request for the session at ``adopter`` (retried while it answers 503) makes it adopt the
    session; the client sets level ``error`` there; the logging tool then says nothing there."""
    there = at(c, client, adopter)
    assert (await call_messages(there, "echo", {"text": "adopted"}, []))[-1]["result"]["content"][0][
        "text"
    ] == "adopted"
    await set_level(there, "error")
    assert logged(await call_messages(there, "test_tool_with_logging", {}, [])) == 0


def stop(server: DemoServer) -> None:
    os.kill(server.pid, signal.SIGSTOP)


def resume(server: DemoServer) -> None:
    os.kill(server.pid, signal.SIGCONT)


async def stale_request_on_resume(c: Workers, client: MCPClient, stale: str) -> Answer:
    """A logging call for the session sent straight to the stopped worker ``stale`` (the request waits
    in its socket), then SIGCONT: the answer it gives at once."""
    got: list[Answer] = []
    there = at(c, client, stale)

    async def send() -> None:
        got.append(await answer(there, *LOGGING_CALL))

    try:
        with trio.fail_after(ANSWER_WITHIN):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await trio.sleep(0.3)  # connected (the kernel accepts for a stopped process) and sent
                resume(c.servers[stale])
                resumed = trio.current_time()
    finally:
        resume(c.servers[stale])
    print(f"{stale} answered {trio.current_time() - resumed:.1f} s after its SIGCONT")
    return got[0]


async def served_nothing_stale(c: Workers, client: MCPClient, stale: str, outcome: Answer) -> None:
    """The resumed ``stale`` worker's answer had nothing below ``error``; within a bound no two workers
    hold the session; a second request at ``stale`` gets nothing below ``error`` either; and the session
    goes on (through HAProxy, a 503 retried) with the level its client set at the adopter."""
    status, messages = outcome
    print(f"the resumed worker {stale} answered {status}: {messages}")
    assert status in (200, 503), outcome
    assert below("error", messages) == [], (
        f"the resumed worker {stale} served the session from its stale copy (level debug): {messages}"
    )
    if status == 200:
        assert "result" in messages[-1], messages
    with trio.move_on_after(LET_GO_WITHIN):
        while sum((await held_sessions(c)).values()) > 1:  # noqa: ASYNC110 - polls two processes
            await trio.sleep(0.1)
    held = await held_sessions(c)
    assert sum(held.values()) <= 1, f"the session held by both workers {LET_GO_WITHIN} s on: {held}"
    try:
        with trio.fail_after(ANSWER_WITHIN):
            again = await answer(at(c, client, stale), *LOGGING_CALL)
    except httpx.ConnectError:
        assert c.servers[stale].stopped  # a worker that was told to stop is gone: it serves nothing
    else:
        print(f"then {stale} answered {again[0]}: {again[1]}")
        assert again[0] in (200, 503) and below("error", again[1]) == [], again
    messages = await call_messages(client, "test_tool_with_logging", {}, [])
    assert logged(messages) == 0, f"the session lost the level its client set at the adopter: {messages}"


def epochs_hold(epochs: Path, client: MCPClient) -> None:
    assert client.session_id is not None
    problems = epoch_violations(served_records(epochs), [client.session_id])
    assert problems == [], problems


# -- the scenarios ---------------------------------------------------------------------------------


@pytest.mark.deadline(120)
async def test_a_paused_home_worker_serves_nothing_stale_after_its_session_was_adopted(
    tmp_path: Path,
) -> None:
    async with recording_workers(tmp_path) as (c, epochs):
        client = await session_at(c, "a")
        stop(c.servers["a"])
        try:
            await adopted_at_level_error(c, client, "b")  # once a's heartbeat expired (LEASE)
            outcome = await stale_request_on_resume(c, client, "a")
        finally:
            resume(c.servers["a"])
        try:
            await served_nothing_stale(c, client, "a", outcome)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await described(c)}") from None
        epochs_hold(epochs, client)


@pytest.mark.deadline(150)
async def test_a_paused_adopter_serves_nothing_stale_after_the_home_took_its_session_back(
    tmp_path: Path,
) -> None:
    async with recording_workers(tmp_path) as (c, epochs):
        client = await session_at(c, "a")
        await c.servers["a"].stop(signal.SIGTERM)  # a hands its session over; b adopts it at level debug
        there = at(c, client, "b")
        assert logged(await call_messages(there, "test_tool_with_logging", {}, [])) == 3
        await c.start("a")
        stop(c.servers["b"])
        try:
            await adopted_at_level_error(c, client, "a")  # the home takes it back once b's heartbeat expired
            outcome = await stale_request_on_resume(c, client, "b")
        finally:
            resume(c.servers["b"])
        try:
            await served_nothing_stale(c, client, "b", outcome)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await described(c)}") from None
        epochs_hold(epochs, client)


async def draining(server: DemoServer, http: httpx.AsyncClient) -> None:
    """Until ``server`` says it drains (a GET without a session: 503, what the balancer checks)."""
    with trio.fail_after(10):
        while (await http.get(server.url, headers={"accept": "text/event-stream"})).status_code != 503:  # noqa: ASYNC110
            await trio.sleep(0.05)


@pytest.mark.deadline(150)
@pytest.mark.parametrize("phase", ["drain-delay", "settling"])
async def test_a_worker_paused_while_handing_over_serves_nothing_stale(tmp_path: Path, phase: str) -> None:
    """SIGTERM, then SIGSTOP: in the drain delay (the worker still serves, its heartbeat says it
    drains), or in the hand-over itself (the session's call in flight being settled)."""
    async with recording_workers(tmp_path) as (c, epochs):
        client = await session_at(c, "a")
        server = c.servers["a"]
        in_flight: SSEResponse | None = None
        if phase == "settling":
            in_flight = await client.start_tool_call("sleep", {"seconds": 4.0})
        server.stopped = True  # stopped here: serve_demo does not send its own SIGINT
        assert isinstance(server.process, trio.Process)
        server.process.send_signal(signal.SIGTERM)
        await draining(server, c.http)
        if phase == "settling":  # after the drain delay (2.5 s) the session is moving: 503 there
            with trio.fail_after(10):
                while (await answer(at(c, client, "a"), "ping", {}))[0] != 503:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        else:
            await trio.sleep(1.2)  # a heartbeat (every second) that says "draining"
        stop(server)
        try:
            await adopted_at_level_error(c, client, "b")
            outcome = await stale_request_on_resume(c, client, "a")
        finally:
            resume(server)
        try:
            await served_nothing_stale(c, client, "a", outcome)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await described(c)}") from None
        if in_flight is not None:
            await in_flight.aclose()
        with trio.fail_after(server.shutdown_grace + server.drain_delay + 5):
            returncode = await server.process.wait()
        assert returncode == 0, server.log()
        epochs_hold(epochs, client)
