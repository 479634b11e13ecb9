"""Replays and unsigned counters, against a real redis-server: what a Redis writer without the key ring
can do with what workers write there.

A bus message, a task store's signal and an inbox entry, each captured as it crossed Redis (by a
subscriber of the channel, or a second reader blocked on the inbox) and written again with the exact
bytes, are delivered once: the copy is dropped and counted as replayed, also by a worker started after
the original was signed; one signed with another key is dropped as forged.  The unsigned parts of an
inbox (its byte counter, the type of its keys, the id of its last entry) set by hand do not make a
healthy worker refuse forwarded messages, and junk entries are drained.

redis-server comes from Debian (the fixtures of test_redis.py start it on a free port and kill it
after the test).  Without it the tests are skipped when run by hand, and fail under the test command.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import test_redis
import trio
from test_redis import (
    OTHER_KEYS,
    STARTUP,
    TOOLS,
    TOOLS_MESSAGE,
    Peer,
    RedisServer,
    bus_of,
    call,
    eventually,
    initialized_session,
    legacy_headers,
    padded_answer,
    sessions_in_redis,
    worker,
)

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._app.tasks import TaskManager
from mcp_trio._protocol.cluster import INBOX_MESSAGE_LIMIT, ClusterKeys, encode_inbox_entry, seal_bus_message
from mcp_trio._transport.admin import samples
from mcp_trio.redis import RedisNotificationBus, RedisTaskStore
from mcp_trio.server import TaskRecord
from mcp_trio.testing import open_asgi_client

redis = test_redis.redis
"""The fixture of test_redis.py: a redis-server of its own for each test, killed after it."""
key_ring = test_redis.key_ring
"""The fixture of test_redis.py (autouse): the buses and stores share a key ring."""

STEP = 5.0
QUIET = 0.3
"""How long to wait to see that nothing more is delivered."""


class Raw:
    """A plain RESP connection of the test's own to Redis, for what a writer without the key ring does
    (and for watching what crosses Redis): commands, and replies read as they come."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def send(self, *args: bytes | str) -> None:
        parts = [a.encode() if isinstance(a, str) else a for a in args]
        await self.stream.send_all(
            b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in parts)
        )

    async def _need(self, n: int) -> None:
        while len(self.buffer) < n:
            chunk = await self.stream.receive_some(65536)
            assert chunk, "Redis closed the connection"
            self.buffer.extend(chunk)

    async def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            await self._need(len(self.buffer) + 1)
        found, _, rest = bytes(self.buffer).partition(b"\r\n")
        self.buffer[:] = rest
        return found

    async def reply(self) -> Any:
        head = await self._line()
        kind, rest = head[:1], head[1:]
        if kind in (b"+", b"-"):
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            await self._need(size + 2)
            value = bytes(self.buffer[:size])
            self.buffer[:] = self.buffer[size + 2 :]
            return value
        assert kind == b"*", head
        count = int(rest)
        return None if count < 0 else [await self.reply() for _ in range(count)]


@asynccontextmanager
async def raw(server: RedisServer, name: str) -> AsyncIterator[Raw]:
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream:
        connection = Raw(stream)
        await connection.send("CLIENT", "SETNAME", name)
        assert await connection.reply() == "OK"
        yield connection


async def blocked(server: RedisServer, name: str) -> None:
    """Wait until the test's connection ``name`` is blocked in a command (an XREAD BLOCK)."""
    with trio.fail_after(STEP):
        while True:
            clients = (await call(server.port, "CLIENT", "LIST")).decode().splitlines()
            if any(f" name={name} " in line and "flags=b" in line for line in clients):
                return
            await trio.sleep(0.01)


async def subscribed(server: RedisServer, channel: str, count: int) -> None:
    with trio.fail_after(STEP):
        while (await call(server.port, "PUBSUB", "NUMSUB", channel))[1] != count:  # noqa: ASYNC110
            await trio.sleep(0.01)


# -- the notification bus ---------------------------------------------------------------------------


async def test_a_bus_message_published_again_is_delivered_once(redis: RedisServer) -> None:
    channel = "mcp-trio:notifications"
    (a, bus_a), (b, bus_b) = worker(redis.url), worker(redis.url)
    async with MCPApp(a).running(), MCPApp(b).running(), raw(redis, "capture") as capture:
        await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "both connected")
        await capture.send("SUBSCRIBE", channel)
        assert await capture.reply() == [b"subscribe", channel.encode(), 1]
        await subscribed(redis, channel, 3)
        peer_b = Peer()
        b.notifications.subscribe(peer_b)
        await a.notify_tools_changed()
        with trio.fail_after(STEP):
            kind, _, published = await capture.reply()
        assert kind == b"message" and published.startswith(b"mt2 ")
        await eventually(lambda: peer_b.got == [TOOLS], STEP, "b got a's notification")

        assert await redis.publish(channel, published) == 3  # the exact bytes, published again
        await eventually(lambda: bus_b.statistics()["replayed"] == 1, STEP, "b dropped the copy")
        await eventually(lambda: bus_a.statistics()["replayed"] == 1, STEP, "a dropped it too")
        assert await redis.publish(channel, published) == 3
        await eventually(lambda: bus_b.statistics()["replayed"] == 2, STEP, "and the next copy")
        forged = seal_bus_message(OTHER_KEYS, channel, TOOLS_MESSAGE, time.time())
        assert await redis.publish(channel, forged) == 3
        await eventually(lambda: bus_b.statistics()["forged"] == 1, STEP, "a forged one dropped")
        await trio.sleep(QUIET)
        assert peer_b.got == [TOOLS]
        stats = bus_b.statistics()
        assert (stats["received"], stats["replayed"], stats["forged"], stats["malformed"]) == (1, 2, 1, 0)
        metrics = {name: values for name, _, _, values in samples({"notification_bus": stats})}
        assert metrics["mcp_trio_redis_replayed_total"] == [({"link": "notifications"}, 2)]

        # A worker started since (a restart) cannot know what was accepted before: it refuses it too.
        c, bus_c = worker(redis.url)
        peer_c = Peer()
        c.notifications.subscribe(peer_c)
        async with MCPApp(c).running():
            await eventually(lambda: bus_c.state == "connected", STARTUP, "c connected")
            await subscribed(redis, channel, 4)
            assert await redis.publish(channel, published) == 4
            await eventually(lambda: bus_c.statistics()["replayed"] == 1, STEP, "c dropped the copy")
            await a.notify_tools_changed()  # and takes what is published now
            await eventually(lambda: peer_c.got == [TOOLS], STEP, "c got a new one")
            assert bus_c.statistics()["received"] == 1


# -- a task store's signals -------------------------------------------------------------------------


async def test_a_task_signal_published_again_is_handed_over_once(redis: RedisServer) -> None:
    received: list[tuple[str, dict[str, Any]]] = []

    class Manager(TaskManager):
        async def on_signal(self, task_id: str, message: Any) -> None:
            received.append((task_id, dict(message)))

    store = RedisTaskStore(redis.url, timeout=1.0)
    sender = RedisTaskStore(redis.url, timeout=1.0)
    channel = store.channel("a")
    now = time.time()
    record = TaskRecord(task_id="t1", owner="", created_at=now, updated_at=now, ttl_ms=60_000, worker="a")
    async with trio.open_nursery() as nursery, raw(redis, "capture") as capture:
        await nursery.start(store.run, Manager(store, worker_id="a"))
        await eventually(lambda: store.state == "connected", STARTUP, "the store subscribed")
        await capture.send("SUBSCRIBE", channel)
        assert await capture.reply() == [b"subscribe", channel.encode(), 1]
        await subscribed(redis, channel, 2)
        assert await sender.signal(record, {"cancel": True}) is True
        with trio.fail_after(STEP):
            kind, _, published = await capture.reply()
        assert kind == b"message"
        await eventually(lambda: len(received) == 1, STEP, "the signal arrived")
        assert await redis.publish(channel, published) == 2  # published again
        await eventually(
            lambda: store.statistics()["task_store"]["signals_replayed"] == 1, STEP, "the copy dropped"
        )
        await trio.sleep(QUIET)
        assert received == [("t1", {"cancel": True})]
        stats = store.statistics()["task_store"]
        assert (stats["signals_received"], stats["signals_replayed"], stats["signals_forged"]) == (1, 1, 0)
        nursery.cancel_scope.cancel()


# -- a worker's inbox -------------------------------------------------------------------------------




@asynccontextmanager
async def two_linked_workers(url: str) -> AsyncIterator[tuple[Any, Any, RedisNotificationBus]]:
    """Workers ``a`` and ``b`` (ASGI clients of each), and a's bus."""
    apps = {name: MCPApp(worker(url)[0], ServerConfig(worker_id=name)) for name in ("a", "b")}
    bus_a, bus_b = bus_of(apps["a"].server), bus_of(apps["b"].server)
    async with open_asgi_client(apps["a"]) as on_a, open_asgi_client(apps["b"]) as on_b:
        await eventually(lambda: bus_a.state == bus_b.state == "connected", STARTUP, "connected")
        yield on_a, on_b, bus_a


async def test_an_inbox_entry_written_again_is_delivered_once(redis: RedisServer) -> None:
    inbox = "mcp-trio:inbox:a"
    async with two_linked_workers(redis.url) as (on_a, on_b, bus_a), raw(redis, "capture") as capture:
        session_id = await initialized_session(on_a)
        await sessions_in_redis(redis.port, "a", 1)
        # a second reader of a's inbox, blocked for what comes next (a's own reader deletes it)
        await capture.send("XREAD", "BLOCK", str(int(STEP * 1000)), "STREAMS", inbox, "$")
        await blocked(redis, "capture")
        answer = padded_answer(10)
        response = await on_b.request("POST", headers=legacy_headers(session_id), body=answer)
        assert response.status == 202, await response.read()  # forwarded by b to a's inbox
        with trio.fail_after(STEP):
            [[_, [[_, fields]]]] = await capture.reply()
        assert dict(zip(fields[::2], fields[1::2], strict=True))[b"body"] == answer
        await eventually(lambda: bus_a.statistics()["inbox_delivered"] == 1, STEP, "delivered")

        for _ in range(2):  # the exact fields, added again by hand
            await call(redis.port, "XADD", inbox, "*", *fields)
        forged = encode_inbox_entry(OTHER_KEYS, "a", session_id, answer, "0" * 32, time.time())
        await call(redis.port, "XADD", inbox, "*", *(x for kv in forged.items() for x in kv))
        await eventually(lambda: bus_a.statistics()["inbox_received"] == 4, STEP, "all read")
        await trio.sleep(QUIET)
        stats = bus_a.statistics()
        counts = ("inbox_delivered", "inbox_replayed", "inbox_forged", "inbox_malformed", "inbox_dropped")
        assert tuple(stats[k] for k in counts) == (1, 2, 1, 0, 0), stats
        assert await call(redis.port, "EXISTS", inbox, "mcp-trio:inbox-bytes:a") == 0  # drained
        assert stats["failures"] == 0 and bus_a.state == "connected"


async def test_unsigned_inbox_values_do_not_make_a_worker_refuse(redis: RedisServer) -> None:
    """The counter of an inbox set far too high, or to something that is no count, a key of another
    type in place of the inbox or its counter, an inbox whose last id is the largest there is: the next
    forward is sent all the same, and the counter is trusted no further than the entries there.  A
    worker whose own inbox is of another type when it connects deletes it, and reads on."""
    server, bus = worker(redis.url)
    await call(redis.port, "SET", "mcp-trio:inbox:b", "not a stream")
    async with MCPApp(server, ServerConfig(worker_id="b")).running():
        await eventually(lambda: bus.state == "connected", STARTUP, "connected")
        assert await call(redis.port, "EXISTS", "mcp-trio:inbox:b") == 0
        assert (bus.statistics()["inbox_forged"], bus.statistics()["failures"]) == (1, 0)
        keys = ClusterKeys.of(None)
        await call(redis.port, "SET", "mcp-trio:worker:ghost", "x", "PX", "60000")
        session_tag = keys.tag(b"session", b"ghost.s1")
        await call(
            redis.port, "HSET", "mcp-trio:sessions:ghost", session_tag, keys.tag(b"principal", b"none")
        )
        inbox, counter = "mcp-trio:inbox:ghost", "mcp-trio:inbox-bytes:ghost"
        small = padded_answer(100)

        async def forward() -> str:
            return await bus.worker_link.forward_to_worker("ghost", "ghost.s1", small, b"none")

        # an empty inbox with a huge counter (no TTL): reset
        await call(redis.port, "SET", counter, str(10**15))
        assert await forward() == "sent"
        assert (await call(redis.port, "XLEN", inbox), await call(redis.port, "GET", counter)) == (
            1,
            str(len(small)).encode(),
        )
        # one entry there, and a counter set to what no entries hold: trusted as one full entry at most
        for value in (str(10**15), str(2**62), "-5", "1e300", "nan", "0x10", " 7", "9" * 40):
            await call(redis.port, "SET", counter, value)
            entries = await call(redis.port, "XLEN", inbox)
            assert await forward() == "sent", value
            held = int(await call(redis.port, "GET", counter))
            assert held <= entries * INBOX_MESSAGE_LIMIT + len(small), (value, held)
            assert 0 < await call(redis.port, "PTTL", counter) <= bus.worker_link.inbox_ttl * 1000
        # keys of another type in their place
        await call(redis.port, "DEL", counter)
        await call(redis.port, "HSET", counter, "f", "v")
        assert await forward() == "sent"
        assert await call(redis.port, "TYPE", counter) == "string"
        await call(redis.port, "DEL", inbox, counter)
        await call(redis.port, "SET", inbox, "not a stream")
        assert await forward() == "sent"
        assert (await call(redis.port, "TYPE", inbox), await call(redis.port, "XLEN", inbox)) == ("stream", 1)
        # an empty inbox that no new id fits in
        await call(redis.port, "DEL", inbox, counter)
        top = "18446744073709551615-18446744073709551615"
        await call(redis.port, "XADD", inbox, top, "junk", "1")
        await call(redis.port, "XDEL", inbox, top)
        assert await forward() == "sent"
        # the real bounds still hold: entries counted, and bytes of what was sent
        await call(redis.port, "DEL", inbox, counter)
        bus.worker_link.inbox_maxlen = 2
        assert [await forward() for _ in range(3)] == ["sent", "sent", "full"]
        assert int(await call(redis.port, "GET", counter)) == 2 * len(small)
        stats = bus.statistics()
        assert stats["forward_unavailable"] == 0 and stats["forward_full"] == 1, stats


async def test_junk_in_an_inbox_is_drained_and_the_inbox_reads_on(redis: RedisServer) -> None:
    """What a writer without the key ring puts in a live worker's inbox: entries (one with the largest
    id there is), a counter far too high, a value of another type under its key.  The reader drops
    them, deletes the inbox, stays connected, and the next forwarded message is delivered."""
    inbox, counter = "mcp-trio:inbox:a", "mcp-trio:inbox-bytes:a"
    async with two_linked_workers(redis.url) as (on_a, on_b, bus_a):
        session_id = await initialized_session(on_a)
        await sessions_in_redis(redis.port, "a", 1)
        answer = padded_answer(10)

        async def forwarded(delivered: int) -> None:
            response = await on_b.request("POST", headers=legacy_headers(session_id), body=answer)
            assert response.status == 202, await response.read()
            await eventually(
                lambda: bus_a.statistics()["inbox_delivered"] == delivered, STEP, f"delivered {delivered}"
            )

        await call(redis.port, "SET", counter, str(10**15))
        await call(redis.port, "XADD", inbox, "*", "v", "3", "body", answer)
        await call(redis.port, "XADD", inbox, "99999999999999-0", "junk", "1")
        await eventually(lambda: bus_a.statistics()["inbox_forged"] == 2, STEP, "junk dropped")
        await eventually(lambda: bus_a.statistics()["inbox_received"] == 2, STEP, "junk read")
        with trio.fail_after(STEP):
            while await call(redis.port, "EXISTS", inbox, counter):  # noqa: ASYNC110 - polls Redis
                await trio.sleep(0.01)
        await forwarded(1)  # an id far below the junk's: read all the same
        await call(redis.port, "SET", inbox, "not a stream")
        await eventually(lambda: bus_a.statistics()["inbox_forged"] == 3, STEP, "the string deleted")
        await forwarded(2)
        stats = bus_a.statistics()
        assert (stats["inbox_received"], stats["inbox_replayed"], stats["inbox_malformed"]) == (4, 0, 0)
        assert stats["failures"] == 0 and bus_a.state == "connected"
