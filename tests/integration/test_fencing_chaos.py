"""One owner at a time, under randomized moves: a linearizability-style check over a few hundred moves
of a few sessions between two workers (the demo with an epoch recorder, ``fencing_worker.py``) on a
real redis-server behind a real HAProxy (test_fencing.py's ``recording_workers``).

A driver does random things to the workers and to Redis, one at a time: stops a worker (SIGSTOP) for
less or more than the lease, kills one (SIGKILL) and starts it again, stops one gracefully (SIGTERM: it
drains and hands its sessions over; sometimes SIGSTOP in the middle of that) and starts it again,
restarts Redis (no persistence: everything in it is lost; a session then may be unknown, 404, and its
client initializes a new one: allowed), or lets the requests flow.  Meanwhile each session's client
sends requests, through HAProxy or straight to either worker (a stale route), and retries a 503 later.

Each worker records every request it admits to a session it owns, with the session's epoch.  At the
end, session by session, the records ordered by time must show no moment with two owners: each epoch
served by one worker process, and no epoch served after a later one was (``epoch_violations``).  Every
session that served a call must have records (the check cannot pass with nothing to check), and the
sessions must have moved (adoptions counted in the workers' logs) at least :data:`MIN_MOVES` times.

The run is seeded: the seed is printed (and named in a failure, with the driver's timeline and the
workers' log lines of the session); ``MCP_TRIO_CHAOS_SEED=N`` replays its driver's choices (the timings
of the processes are not replayed).  Bounded: :data:`CHAOS_SECONDS` of actions, at most
:data:`MAX_ACTIONS` of them.  Measured on two busy cores: about 165 s in all, 25 to 35 actions (a
worker's start takes seconds, a long pause more than the lease), 96 to 340 adoptions, 2 000 to 3 000
epoch records.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import trio
from mcp_http import POST_HEADERS, DemoServer, MCPClient
from test_deploy_handover import Workers
from test_fencing import LEASE, answer, epoch_violations, recording_workers, served_records

pytestmark = [
    # A request cut off by its deadline (to a stopped worker) or by a killed worker leaves httpx's
    # chain of async generators (its request body's too) to the garbage collector (encode/httpx#3686)
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(httpx|httpcore)\.[A-Za-z0-9_.]+' was garbage collected:ResourceWarning"
    ),
]

SEED_ENV = "MCP_TRIO_CHAOS_SEED"
SESSIONS = 32
CHAOS_SECONDS = 150.0
"""How long the driver acts (its last action may end a few seconds later)."""
MAX_ACTIONS = 100
MIN_MOVES = 50
"""Adoptions the run must have made at least (so that it checked what it claims to)."""
REQUEST_WITHIN = 12.0
"""Deadline of one request (one to a stopped worker waits for its SIGCONT)."""
ADOPTED = "adopted session "
"""What a worker logs when it adopts a session (``mcp_trio._transport.ownership``, INFO)."""


@dataclass
class Tally:
    """What the clients and the driver did."""

    outcomes: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    called: set[str] = field(default_factory=set)
    """Sessions that answered at least one call (each must have epoch records)."""
    sessions: set[str] = field(default_factory=set)
    redis_restarts: list[tuple[float, float]] = field(default_factory=list)
    """When Redis was killed, and when both workers were connected to the new one (``time.time()``)."""
    not_found: list[tuple[str, float, float, str]] = field(default_factory=list)
    """Sessions found unknown (404): id, when made, when found unknown, the route of that request."""

    def unexplained_404(self) -> list[str]:
        """The 404s of sessions that lived through no Redis restart (Redis lost nothing of theirs)."""
        return [
            f"{session}: 404 at {at:.6f} ({route})"
            for session, made, at, route in self.not_found
            if not any(killed < at and back > made for killed, back in self.redis_restarts)
        ]


class Chaos:
    """The driver and the clients of one run."""

    def __init__(self, c: Workers, seed: int) -> None:
        self.c = c
        self.seed = seed
        self.rng = random.Random(seed)
        """The driver's choices (each client has a generator of its own)."""
        self.tally = Tally()
        self.every_server: list[DemoServer] = list(c.servers.values())
        self.stopped_now: set[str] = set()
        self.done = trio.Event()
        self.timeline: list[tuple[float, str]] = []
        """What the driver did, when (``time.time()``, the clock of the epoch records)."""

    # -- the clients ---------------------------------------------------------------------------

    async def new_session(self) -> tuple[MCPClient, float] | None:
        client = MCPClient(self.c.http, self.c.url)
        made = time.time()
        try:
            with trio.move_on_after(REQUEST_WITHIN):
                status, messages = await answer(client, "initialize", INIT_PARAMS)
                if status == 200 and client.session_id and messages and "result" in messages[-1]:
                    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                    await self.c.http.post(
                        client.url, json=initialized, headers=client.headers(**POST_HEADERS)
                    )
                    self.tally.sessions.add(client.session_id)
                    return client, made
        except httpx.HTTPError:
            pass
        self.tally.outcomes["initialize failed"] += 1
        return None

    async def client_loop(self, n: int) -> None:
        rng = random.Random(f"{self.seed} client {n}")
        current: tuple[MCPClient, float] | None = None
        while not self.done.is_set():
            if current is None:
                current = await self.new_session()
                if current is None:
                    await trio.sleep(0.5)
                    continue
            client, made = current
            route = rng.choice(["balancer", "balancer", "a", "b"])
            target = self.direct(client, route, rng)
            call = ("echo", {"text": f"{n}"}) if rng.random() < 0.9 else ("sleep", {"seconds": 0.5})
            outcome = "timeout"
            with trio.move_on_after(REQUEST_WITHIN):
                try:
                    status, messages = await answer(
                        target, "tools/call", {"name": call[0], "arguments": call[1]}
                    )
                    outcome = str(status)
                    if status == 200 and messages and "result" in messages[-1]:
                        self.tally.called.add(str(client.session_id))
                    elif status == 200:
                        outcome = f"200 without a result ({messages[-1:]})"
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
            self.tally.outcomes[f"{route} {outcome}"] += 1
            if outcome == "404":
                self.tally.not_found.append((str(client.session_id), made, time.time(), route))
                current = None
            await trio.sleep(rng.uniform(0.2, 1.0))

    def direct(self, client: MCPClient, route: str, rng: random.Random) -> MCPClient:
        if route == "balancer":
            return client
        direct = MCPClient(self.c.http, self.c.servers[route].url)
        direct.session_id = client.session_id
        direct._next_id = rng.randrange(10**6, 10**9)
        return direct

    # -- the driver ----------------------------------------------------------------------------

    async def drive(self) -> None:
        deadline = trio.current_time() + CHAOS_SECONDS
        actions = [
            (self.pause_short, 2),
            (self.pause_long, 3),
            (self.kill_and_restart, 4),
            (self.terminate_and_restart, 1),
            (self.pause_while_handing_over, 1),
            (self.restart_redis, 1),
            (self.let_it_flow, 1),
        ]
        functions, weights = zip(*actions, strict=True)
        for _ in range(MAX_ACTIONS):
            if trio.current_time() >= deadline:
                break
            action = self.rng.choices(functions, weights)[0]
            worker = self.rng.choice(["a", "b"])
            self.tally.actions[action.__name__] += 1
            pids = {name: server.pid for name, server in self.c.servers.items()}
            self.timeline.append((time.time(), f"{action.__name__} {worker} (pids {pids})"))
            await action(worker)
            self.timeline.append((time.time(), f"done {action.__name__} {worker}"))
        self.done.set()

    def signal(self, name: str, sig: int) -> None:
        try:
            os.kill(self.c.servers[name].pid, sig)
        except ProcessLookupError:  # it exited already (a SIGTERM's end)
            pass

    async def pause(self, name: str, seconds: float) -> None:
        self.signal(name, signal.SIGSTOP)
        self.stopped_now.add(name)
        try:
            await trio.sleep(seconds)
        finally:
            self.signal(name, signal.SIGCONT)
            self.stopped_now.discard(name)

    async def pause_short(self, name: str) -> None:
        await self.pause(name, self.rng.uniform(0.2, LEASE * 0.8))

    async def pause_long(self, name: str) -> None:
        await self.pause(name, self.rng.uniform(LEASE + 0.5, LEASE + 3.0))

    async def kill_and_restart(self, name: str) -> None:
        server = self.c.servers[name]
        server.stopped = True
        server.process.kill()
        with trio.fail_after(5):
            await server.process.wait()  # type: ignore[union-attr]
        await trio.sleep(self.rng.uniform(0.0, 2.0))
        await self.restart(name)

    async def terminate_and_restart(self, name: str) -> None:
        await self.c.servers[name].stop(signal.SIGTERM)
        await self.restart(name)

    async def pause_while_handing_over(self, name: str) -> None:
        """SIGTERM, then SIGSTOP within its drain and hand-over, for less or more than the lease."""
        server = self.c.servers[name]
        server.stopped = True  # stopped here: serve_demo sends no SIGINT of its own
        self.signal(name, signal.SIGTERM)
        await trio.sleep(self.rng.uniform(0.0, server.drain_delay + 1.0))
        await self.pause(name, self.rng.uniform(0.5, LEASE + 2.0))
        with trio.fail_after(server.shutdown_grace + server.drain_delay + 10):
            await server.process.wait()  # type: ignore[union-attr]
        await self.restart(name)

    async def restart(self, name: str) -> None:
        self.every_server.append(await self.c.start(name))

    async def restart_redis(self, name: str) -> None:
        await self.c.redis.kill()
        killed = time.time()
        await trio.sleep(self.rng.uniform(0.2, 2.0))
        await self.c.redis.start()
        with trio.fail_after(20):  # both workers connected again before the next action
            for server in self.c.servers.values():
                while not await connected(server, self.c.http):  # noqa: ASYNC110 - polls a process
                    await trio.sleep(0.1)
        self.tally.redis_restarts.append((killed, time.time()))

    async def let_it_flow(self, name: str) -> None:
        await trio.sleep(self.rng.uniform(0.5, 2.0))

    def logs(self) -> dict[int, str]:
        """What each worker process of the run wrote on stderr, by pid."""
        found = {}
        for server in self.every_server:
            server.stderr.flush()
            server.stderr.seek(0)
            found[server.pid] = server.stderr.read().decode(errors="replace")
        return found

    def moves(self) -> int:
        """Adoptions, as the workers logged them (every process of the run)."""
        return sum(log.count(ADOPTED) for log in self.logs().values())

    def story(self, problem: str) -> str:
        """For a failure's message: what the driver did around the times ``problem`` names, and what
        the workers logged of its session (its id's first 12 characters)."""
        session = problem.removeprefix("session ").partition(":")[0]
        times = [float(t) for t in re.findall(r"at (\d+\.\d+)", problem)]
        lines = [problem]
        if times:
            lines += [
                f"  {t:.3f} {what}" for t, what in self.timeline if min(times) - 20 < t < max(times) + 5
            ]
        for pid, log in self.logs().items():
            told = [line for line in log.splitlines() if session[:12] in line or "lapsed" in line]
            lines += [f"  [{pid}] {line}" for line in told[-30:]]
        return "\n".join(lines)


INIT_PARAMS = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "chaos", "version": "1"},
}


async def connected(server: DemoServer, http: httpx.AsyncClient) -> bool:
    response = await http.get(server.stats_url)
    return bool(response.json()["notification_bus"]["state"] == "connected")


@pytest.mark.deadline(300)
async def test_no_two_workers_serve_one_session_under_random_moves(tmp_path: Path) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    print(f"chaos seed: {seed} (replay its choices with {SEED_ENV}={seed})")
    async with recording_workers(tmp_path) as (c, epochs):
        chaos = Chaos(c, seed)
        started = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                for n in range(SESSIONS):
                    nursery.start_soon(chaos.client_loop, n)
                await chaos.drive()
        finally:
            for name in list(chaos.stopped_now):
                os.kill(c.servers[name].pid, signal.SIGCONT)
        took = trio.current_time() - started
        moves = chaos.moves()
        records = served_records(epochs)
        tally = chaos.tally
        summary = (
            f"seed {seed}: {took:.0f} s, actions {dict(tally.actions)}, moves {moves}, "
            f"sessions {len(tally.sessions)} ({len(tally.called)} served a call), "
            f"epoch records {len(records)}, outcomes {dict(tally.outcomes)}, "
            f"redis restarts {len(tally.redis_restarts)}, unexplained 404 {tally.unexplained_404()}"
        )
        print(summary)
        problems = epoch_violations(records, sorted(tally.called))
        assert problems == [], f"{summary}\n" + "\n".join([*problems[:20], *map(chaos.story, problems[:3])])
        assert moves >= MIN_MOVES, summary
        unexplained = tally.unexplained_404()
        lost = "\n".join(map(chaos.story, unexplained[:3]))
        assert unexplained == [], f"sessions lost without a Redis restart: {summary}\n{lost}"
