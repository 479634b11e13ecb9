"""Bounds for the whole process, not only for one session: the bytes of SSE events kept for resumption
(all sessions together), and the live sessions one principal or one client address may hold.

In memory here (the in-process ASGI client); tests/server/test_process_bounds_sockets.py runs the same
floods on real sockets, on both HTTP servers.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import trio
import trio.testing

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._transport.quotas import Quotas, client_address
from mcp_trio.demo import build_demo_server
from mcp_trio.server import HTTPRequestInfo, InMemoryEventStore, StoredEvent
from mcp_trio.testing import ASGIClient, Response, open_asgi_client

from .conftest import POST_HEADERS, VERSION, call_body, init_body, settle

MiB = 1024 * 1024


# -- the store's process-wide bound ----------------------------------------------------------------


def event(stream_id: int, seq: int, size: int = 10) -> StoredEvent:
    return StoredEvent(stream_id, seq, b"x" * size)


async def kept(store: InMemoryEventStore, session: str) -> dict[int, list[int]]:
    """The seqs kept of each of the session's streams 0..9 (only the non-empty ones)."""
    found = {s: [e.seq for e in await store.replay_after(session, s, -1)] for s in range(10)}
    return {s: seqs for s, seqs in found.items() if seqs}


async def test_the_sessions_idle_the_longest_lose_their_least_recent_streams_first() -> None:
    store = InMemoryEventStore(max_bytes=100)
    await store.store("a", event(0, 0, 20))  # a: GET stream, then two POST streams
    await store.store("a", event(1, 0, 20))
    await store.store("b", event(1, 0, 20))
    await store.store("a", event(2, 0, 10))  # a is now written more recently than b
    await store.store("c", event(1, 0, 30))
    assert store.statistics()["bytes"] == 100
    await store.store("c", event(2, 0, 15))  # 115: b is idle the longest, and goes whole
    assert await kept(store, "b") == {} and await kept(store, "a") == {0: [0], 1: [0], 2: [0]}
    await store.store("c", event(3, 0, 25))  # 120: then a's least recently written stream (the GET one)
    assert await kept(store, "a") == {1: [0], 2: [0]}
    assert await kept(store, "c") == {1: [0], 2: [0], 3: [0]}
    stats = store.statistics()
    assert stats["bytes"] == 100 and stats["sessions"] == 2 and stats["streams"] == 5
    assert stats["evicted_streams"] == 2 and stats["evicted_bytes"] == 40 and stats["max_bytes"] == 100
    await store.store("c", event(3, 1, 60))  # 160: a goes (its record too), then c's oldest events
    assert await kept(store, "a") == {} and await kept(store, "c") == {2: [0], 3: [0, 1]}
    assert store.statistics()["sessions"] == 1
    await store.store("c", event(3, 2, 90))  # c is the one left: its oldest events go, the new one stays
    assert await kept(store, "c") == {3: [2]}
    await store.store("c", event(4, 0, 101))  # larger than the bound by itself: not kept
    assert await kept(store, "c") == {3: [2]} and store.statistics()["bytes"] == 90


async def test_counts_follow_every_bound() -> None:
    """The O(1) counts of statistics() agree with a recount after a random mix of every bound."""
    rng = random.Random(25)
    store = InMemoryEventStore(
        max_events_per_stream=4,
        max_streams_per_session=3,
        max_bytes_per_session=300,
        max_sessions=5,
        max_bytes=700,
    )
    names = [f"s{n}" for n in range(8)]
    for seq in range(3000):
        name = rng.choice(names)
        if rng.random() < 0.03:
            await store.forget_session(name)
        else:
            await store.store(name, event(rng.randrange(5), seq, rng.randrange(1, 160)))
        if seq % 97 == 0 or seq == 2999:
            streams = events = size = sessions = 0
            for name in names:
                found = await kept(store, name)
                sessions += bool(found)
                streams += len(found)
                for stream_id in found:
                    kept_events = await store.replay_after(name, stream_id, -1)
                    events += len(kept_events)
                    size += sum(len(e.data) for e in kept_events)
            stats = store.statistics()
            assert (stats["sessions"], stats["streams"], stats["events"], stats["bytes"]) == (
                sessions,
                streams,
                events,
                size,
            )
            assert size <= 700
    assert store.statistics()["evicted_bytes"] > 0


def test_the_config_bounds_the_default_store_only() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(max_event_store_bytes=5 * MiB))
    store = app._manager.event_store
    assert isinstance(store, InMemoryEventStore) and store.max_bytes == 5 * MiB
    default = MCPApp(build_demo_server())._manager.event_store
    assert isinstance(default, InMemoryEventStore) and default.max_bytes == 128 * MiB
    own = ServerConfig(event_store_factory=lambda: InMemoryEventStore(max_bytes=7), max_event_store_bytes=MiB)
    custom = MCPApp(build_demo_server(), own)._manager.event_store
    assert isinstance(custom, InMemoryEventStore) and custom.max_bytes == 7
    with pytest.raises(ValueError, match="max_event_store_bytes"):
        ServerConfig(max_event_store_bytes=0)


# -- the flood over HTTP ------------------------------------------------------------------------------


class Session:
    """A 2025 session driven through the in-memory ASGI client."""

    def __init__(self, asgi: ASGIClient, client: tuple[str, int] = ("127.0.0.1", 50000), **headers: str):
        self.asgi, self.client, self.extra = asgi, client, headers
        self.session_id: str | None = None

    def headers(self) -> dict[str, str]:
        headers = {**POST_HEADERS, "mcp-protocol-version": VERSION, **self.extra}
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        return headers

    async def open(self) -> Response:
        """``initialize`` (and ``notifications/initialized`` if it is accepted); its response."""
        headers, client = self.headers(), self.client
        response = await self.asgi.request("POST", headers=headers, body=init_body(), client=client)
        if response.status == 200:
            self.session_id = response.headers["mcp-session-id"]
            await response.next_message()
            await response.aclose()
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
            done = await self.asgi.request("POST", headers=self.headers(), body=note, client=self.client)
            assert done.status == 202
        return response

    async def echo(self, request_id: int, text: str) -> str:
        """A tools/call of ``echo``, read whole; the id of its stream's priming event."""
        body = call_body(request_id, "echo", {"text": text})
        response = await self.asgi.request("POST", headers=self.headers(), body=body, client=self.client)
        assert response.status == 200
        priming = await response.next_event()
        assert priming is not None and priming.id
        message = await response.next_message()
        assert message is not None and message["result"]["content"][0]["text"] == text
        assert await response.next_event() is None
        return priming.id

    async def resume(self, last_event_id: str) -> tuple[int, list[dict[str, Any]]]:
        """GET with ``Last-Event-ID``: its status and the messages replayed (the stream is finished)."""
        headers = {"accept": "text/event-stream", "mcp-protocol-version": VERSION, **self.extra}
        assert self.session_id is not None
        headers["mcp-session-id"] = self.session_id
        headers["last-event-id"] = last_event_id
        response = await self.asgi.request("GET", headers=headers, client=self.client)
        messages = []
        with trio.fail_after(5):
            while (message := await response.next_message()) is not None:
                messages.append(message)
        return response.status, messages

    async def delete(self) -> None:
        assert self.session_id is not None
        headers = {"mcp-session-id": self.session_id, **self.extra}
        response = await self.asgi.request("DELETE", headers=headers, client=self.client)
        assert response.status == 200


async def test_idle_sessions_flooded_with_large_results_stay_under_the_cap() -> None:
    """Several idle sessions, each given several large ``echo`` results: the events kept stay under
    ``max_event_store_bytes`` at every step; resuming an evicted stream gets what resuming a stream
    past the per-session bound gets (200, nothing replayed); the newest results are still there."""
    cap, size = 3 * MiB, MiB // 2
    app = MCPApp(build_demo_server(), ServerConfig(max_event_store_bytes=cap))
    async with open_asgi_client(app) as asgi:
        sessions = [Session(asgi) for _ in range(4)]
        ids: list[list[str]] = []
        for session in sessions:
            assert (await session.open()).status == 200
            ids.append([])
            for n in range(4):
                ids[-1].append(await session.echo(n + 2, chr(97 + n) * size))
                await settle()
                assert app.statistics()["event_store"]["bytes"] <= cap
        stats = app.statistics()
        assert stats["sessions"] == 4  # eviction forgets events, never a session
        store = stats["event_store"]
        assert 0 < store["bytes"] <= cap and store["evicted_bytes"] >= 16 * size - cap, store
        # the newest result is kept; the oldest session's first one is not
        status, replayed = await sessions[-1].resume(ids[-1][-1])
        assert status == 200 and [m["id"] for m in replayed] == [5]
        evicted = await sessions[0].resume(ids[0][0])
        assert evicted == (200, [])

    per_session = ServerConfig(
        event_store_factory=lambda: InMemoryEventStore(max_bytes_per_session=size // 2)
    )
    async with open_asgi_client(MCPApp(build_demo_server(), per_session)) as asgi:
        session = Session(asgi)
        await session.open()
        past_the_session_bound = await session.resume(await session.echo(2, "z" * size))
        assert past_the_session_bound == evicted


# -- quotas ---------------------------------------------------------------------------------------


def test_client_addresses() -> None:
    assert client_address(("192.0.2.7", 5000)) == "192.0.2.7"
    assert client_address(("2001:db8:1:2:3:4:5:6", 1)) == client_address(("2001:db8:1:2::9", 2))
    assert client_address(("2001:db8:1:2::9", 1)) == "2001:db8:1:2::/64"
    assert client_address(("2001:db8:1:3::9", 1)) != client_address(("2001:db8:1:2::9", 1))
    assert client_address(("::ffff:192.0.2.7", 1)) == "192.0.2.7"
    assert client_address(("fe80::1%eth0", 1)) == "fe80::/64"
    for nothing in (None, (), ("/run/mcp.sock", 0), ("not an address", 1), "127.0.0.1"):
        assert client_address(nothing) is None


def test_quotas_count_live_sessions_and_forget_the_empty_keys() -> None:
    quotas = Quotas(per_principal=2, per_address=3)
    taken = [quotas.take("alice", "192.0.2.1"), quotas.take("alice", "192.0.2.2")]
    with pytest.raises(Exception, match="principal"):
        quotas.take("alice", "192.0.2.3")
    taken += [quotas.take("", "192.0.2.1"), quotas.take("bob", "192.0.2.1")]
    with pytest.raises(Exception, match="client address"):
        quotas.take("", "192.0.2.1")
    assert quotas.statistics() == {"quota_principals": 2, "quota_addresses": 2}
    for ticket in taken:
        quotas.give_back(ticket)
    assert quotas.statistics() == {"quota_principals": 0, "quota_addresses": 0}
    off = Quotas(per_principal=0, per_address=None)
    for _ in range(50):
        assert off.take("alice", "192.0.2.1") == (None, None)


def assert_over_quota(response_status: int, headers: dict[str, str], body: bytes, what: str) -> None:
    assert response_status == 429, body
    assert headers["retry-after"] == "5"
    error = json.loads(body)
    assert error["jsonrpc"] == "2.0" and error["id"] == 1, error
    assert error["error"]["code"] == -32603 and what in error["error"]["message"], error


async def test_per_address_quota_over_http() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(max_sessions_per_address=2))
    here, there = ("192.0.2.1", 40000), ("198.51.100.9", 40000)
    async with open_asgi_client(app) as asgi:
        first, second = Session(asgi, here), Session(asgi, (here[0], 40001))
        assert (await first.open()).status == 200 and (await second.open()).status == 200
        over = await Session(asgi, here).open()
        assert_over_quota(over.status, over.headers, await over.read(), "client address")
        assert (await Session(asgi, there).open()).status == 200  # another client is not affected
        assert app.statistics()["sessions"] == 3
        await first.delete()  # its place is free again
        await settle()
        assert (await Session(asgi, here).open()).status == 200
        assert app.statistics()["quota_addresses"] == 2


async def by_header(request: HTTPRequestInfo) -> str | None:
    return request.header("x-user")


@pytest.mark.parametrize("per_address", [None, 0])
async def test_per_principal_quota_over_http(per_address: int | None) -> None:
    config = ServerConfig(
        authenticate=by_header, max_sessions_per_principal=2, max_sessions_per_address=per_address
    )
    app = MCPApp(build_demo_server(), config)
    async with open_asgi_client(app) as asgi:
        alice = [Session(asgi, (f"192.0.2.{n}", 1), **{"x-user": "alice"}) for n in range(3)]
        assert [(await s.open()).status for s in alice[:2]] == [200, 200]
        over = await alice[2].open()
        assert_over_quota(over.status, over.headers, await over.read(), "principal")
        assert (await Session(asgi, **{"x-user": "bob"}).open()).status == 200
        for _ in range(4):  # no principal: the principal quota does not count it (the address one is off)
            assert (await Session(asgi).open()).status == 200
        await alice[0].delete()
        await settle()
        assert (await alice[2].open()).status == 200


async def test_sessions_that_end_give_their_quota_back(autojump_clock: trio.testing.MockClock) -> None:
    app = MCPApp(build_demo_server(), ServerConfig(max_sessions_per_address=1, init_timeout=1))
    async with open_asgi_client(app) as asgi:
        for _ in range(3):  # each expires (never initialized), and the next one may come
            response = await asgi.request("POST", headers=POST_HEADERS, body=init_body())
            assert response.status == 200
            await response.aclose()
            with trio.fail_after(5):
                while app.statistics()["sessions"]:  # noqa: ASYNC110 - the session's end has no event
                    await trio.sleep(0.5)  # virtual seconds: the init timeout runs out
        assert app.statistics()["quota_addresses"] == 0


def test_quota_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_sessions_per_address"):
        ServerConfig(max_sessions_per_address=-1)
    assert ServerConfig().max_sessions_per_principal == ServerConfig().max_sessions_per_address == 1000
