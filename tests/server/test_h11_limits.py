"""The embedded server's connection counts and shedding order (:mod:`mcp_trio._http.h11_limits`), alone.

The same on real sockets, through the server: ``tests/integration/test_h11_limits.py``; a flood against
a server whose descriptor limit is 1024: ``tests/integration/test_flood.py``.
"""

from __future__ import annotations

import errno
import functools
import resource
import sys

import pytest
import trio

from mcp_trio import MCPApp, serve
from mcp_trio._http.h11_limits import ConnectionLimits, address_key, default_caps
from mcp_trio._http.h11_server import _make_room, connection_limits
from mcp_trio.demo import build_demo_server
from mcp_trio.server import H11Config


class FakeConnection:
    """A sheddable connection: records that it was shed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.shed_calls = 0

    def shed(self) -> None:
        self.shed_calls += 1


@pytest.mark.parametrize(
    ("descriptors", "caps"),
    [(1024, (896, 224)), (4096, (3584, 896)), (65536, (57344, 14336)), (256, (192, 48)), (40, (16, 4))],
)
def test_default_caps_leave_headroom_and_give_one_address_a_quarter(
    descriptors: int, caps: tuple[int, int]
) -> None:
    total, per_address = default_caps(descriptors)
    assert (total, per_address) == caps
    assert total <= descriptors - 64 or total == 16
    assert per_address * 4 <= total


def test_default_caps_follow_the_soft_descriptor_limit() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    expected = default_caps(2**20 if soft == resource.RLIM_INFINITY else soft)
    assert default_caps() == expected
    assert connection_limits(H11Config()).max_total == expected[0]
    assert connection_limits(H11Config()).max_per_address == expected[1]


def test_configured_caps() -> None:
    limits = connection_limits(H11Config(max_connections=100))
    assert (limits.max_total, limits.max_per_address) == (100, 25)
    limits = connection_limits(H11Config(max_connections=100, max_connections_per_address=7))
    assert (limits.max_total, limits.max_per_address) == (100, 7)
    limits = connection_limits(H11Config(max_connections=0, max_connections_per_address=0))
    assert (limits.max_total, limits.max_per_address) == (sys.maxsize, sys.maxsize)
    limits = connection_limits(H11Config(max_connections_per_address=0))
    assert limits.max_per_address == sys.maxsize
    assert limits.max_total == default_caps()[0]


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("127.0.0.2", "127.0.0.2"),
        ("::ffff:127.0.0.2", "127.0.0.2"),
        ("::FFFF:10.1.2.3", "10.1.2.3"),
        ("::1", "::1"),
        ("2001:db8:0:0:0:0:0:1", "2001:db8::1"),
        ("fe80::1%eth0", "fe80::1%eth0"),
        ("not an address", "not an address"),
    ],
)
def test_addresses_are_counted_normalized(host: str, key: str) -> None:
    assert address_key(host) == key


def test_one_address_is_refused_beyond_its_cap_and_counted_again_once_released() -> None:
    limits = ConnectionLimits(max_total=10, max_per_address=2)
    assert limits.admit("127.0.0.2")
    assert limits.admit(address_key("::ffff:127.0.0.2"))
    assert not limits.admit("127.0.0.2")  # the third from the same address, mapped or not
    assert limits.admit("127.0.0.1")  # another address is not concerned
    assert (limits.total, limits.count("127.0.0.2"), limits.count("127.0.0.1")) == (3, 2, 1)
    limits.release("127.0.0.2")
    assert limits.admit("127.0.0.2")
    for key in ("127.0.0.2", "127.0.0.2", "127.0.0.1"):
        limits.release(key)
    assert (limits.total, limits.count("127.0.0.2"), limits.count("127.0.0.1")) == (0, 0, 0)


def test_at_the_total_cap_the_oldest_sheddable_connection_makes_room() -> None:
    limits = ConnectionLimits(max_total=3, max_per_address=10)
    a, b, c = FakeConnection("a"), FakeConnection("b"), FakeConnection("c")
    for _ in range(3):
        assert limits.admit("x")
    limits.idle(a)
    limits.idle(b)
    limits.idle(c)
    limits.busy(b)  # b's request head is whole: it serves a request, it is never shed
    limits.busy(a)
    limits.idle(a)  # idle again after a request: it became so after c, so c is now the oldest
    assert limits.sheddable == 2
    assert limits.admit("x")  # room made: c closes
    assert (a.shed_calls, b.shed_calls, c.shed_calls) == (0, 0, 1)
    assert limits.total == 4  # c is counted until its socket is closed...
    assert limits.admit("x") is True  # ...but no longer against the cap: a makes room for this one
    assert a.shed_calls == 1
    assert not limits.admit("x")  # nothing left to shed (b is busy): refused
    assert b.shed_calls == 0
    limits.release("x", shed=True)
    limits.release("x", shed=True)
    assert limits.total == 3
    assert not limits.admit("x")
    limits.release("x")  # b's socket closed
    assert limits.admit("x")


def test_shedding_with_nothing_to_shed() -> None:
    limits = ConnectionLimits(max_total=1, max_per_address=1)
    assert not limits.shed_oldest()
    connection = FakeConnection("a")
    limits.idle(connection)
    limits.busy(connection)
    limits.busy(connection)  # twice: harmless
    assert not limits.shed_oldest()
    assert connection.shed_calls == 0


async def test_waiting_for_a_release() -> None:
    limits = ConnectionLimits(max_total=1, max_per_address=1)
    assert limits.admit("x")
    connection = FakeConnection("a")
    limits.idle(connection)
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:

            async def release_soon() -> None:
                await trio.sleep(0.01)
                limits.release("x", shed=True)

            assert limits.shed_oldest()
            nursery.start_soon(release_soon)
            await limits.wait_released()
    assert limits.total == 0
    assert limits.admit("x")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--max-connections", "3"], "are options of --http h11"),
        (["demo", "--http", "h11", "--stdio", "--max-connections-per-address", "3"], "options of --http h11"),
        (["demo", "--http", "h11", "--max-connections", "-1"], "expected 0 or more, got -1"),
        (["demo", "--http", "h11", "--max-connections-per-address", "many"], "expected a whole number"),
    ],
)
def test_the_caps_on_the_command_line_are_checked(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mcp_trio._cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


async def test_out_of_descriptors_the_oldest_idle_connection_makes_room() -> None:
    """``accept`` failed with EMFILE: the oldest sheddable connection is closed and the accept loop waits
    until its socket is; with none to close, it waits 0.1 s."""
    limits = ConnectionLimits(max_total=10, max_per_address=10)
    old, new = FakeConnection("old"), FakeConnection("new")
    for connection in (old, new):
        assert limits.admit("x")
        limits.idle(connection)
    error = OSError(errno.EMFILE, "Too many open files")

    async def closes_when_shed() -> None:
        while not old.shed_calls:  # noqa: ASYNC110 - the fake connection has no event
            await trio.sleep(0.01)
        limits.release("x", shed=True)

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(closes_when_shed)
            await _make_room(limits, error)
    assert (old.shed_calls, new.shed_calls, limits.total) == (1, 0, 1)
    limits.busy(new)
    start = trio.current_time()
    with trio.fail_after(2):
        await _make_room(limits, error)  # nothing to shed
    assert trio.current_time() - start >= 0.1
    assert new.shed_calls == 0


async def test_the_operations_listener_keeps_16_connections_from_one_address() -> None:
    """The operations listener's own caps (64, 16 from one address): a flood of it from one address
    leaves the MCP endpoint's descriptors alone."""
    app = MCPApp(build_demo_server())
    admin: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            options = {"http": "h11", "admin_bind": "127.0.0.1:0", "admin_started": admin.extend}
            await nursery.start(functools.partial(serve, app, "127.0.0.1", 0, **options))
            port = int(admin[0].rsplit(":", 1)[1])
            held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(16)]
            try:
                over = await trio.open_tcp_stream("127.0.0.1", port)
                async with over:
                    answer = b""
                    while chunk := await over.receive_some(65536):
                        answer += chunk
                assert answer.startswith(b"HTTP/1.1 503 "), answer
            finally:
                for stream in held:
                    await stream.aclose()
            nursery.cancel_scope.cancel()
