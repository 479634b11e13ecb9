"""Several workers, in process: worker ids and the session ids that name their owner, the shared
``requestState`` key ring (config or environment), the CLI options, and the Redis notification bus
where no Redis is needed (not running, Redis unreachable).  With a real redis-server:
tests/integration/test_redis.py."""

from __future__ import annotations

import base64
import functools
import logging
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio._cli import _parser, config_from_args, main
from mcp_trio._protocol.cluster import REQUEST_STATE_SECRET_ENV, session_owner
from mcp_trio.server import LocalNotificationBus
from mcp_trio.testing import open_asgi_client

from .conftest import Client
from .test_modern import Modern, build

# -- worker ids and session ids ------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "a.b", "a b", "x" * 33, "é"])
def test_a_bad_worker_id_is_refused_by_the_config(bad: str) -> None:
    with pytest.raises(ValueError, match="worker id"):
        ServerConfig(worker_id=bad)


async def test_session_ids_name_their_worker() -> None:
    app = MCPApp(build(), ServerConfig(worker_id="w1"))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        assert client.session_id is not None
        owner, _, rest = client.session_id.partition(".")
        assert owner == "w1" and len(rest) == 43  # the random part as without a worker id
        assert session_owner(client.session_id, {"w1"}) == "w1"
        assert (await client.request(2, "ping"))["result"] == {}
        stream = await client.get_stream()
        assert stream.status == 200
        await stream.aclose()
        assert (await client.delete()).status == 200


async def test_the_worker_prefixes_the_factory_s_ids() -> None:
    counter = iter(range(10))
    config = ServerConfig(worker_id="w-2", session_id_factory=lambda: f"s{next(counter)}")
    app = MCPApp(build(), config)
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        assert client.session_id == "w-2.s0"


async def test_another_worker_s_or_a_malformed_session_id_is_404() -> None:
    app = MCPApp(build(), ServerConfig(worker_id="w1"))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        assert client.session_id is not None
        random_part = client.session_id.partition(".")[2]
        for foreign in (f"w2.{random_part}", random_part, f".{random_part}", f"w1.{random_part}x"):
            client.session_id = foreign
            response = await client.post(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}')
            assert response.status == 404, foreign
            assert (await client.get_stream()).status == 404
            assert (await asgi.request("DELETE", headers={"mcp-session-id": foreign})).status == 404
        assert app.statistics()["sessions"] == 1


# -- the requestState key ring ---------------------------------------------------------------------


def key() -> bytes:
    return secrets.token_bytes(32)


def ring_text(*keys: bytes) -> str:
    return ",".join(base64.b64encode(k).decode() for k in keys)


@asynccontextmanager
async def two_workers(first: ServerConfig, second: ServerConfig) -> AsyncIterator[tuple[Modern, Modern]]:
    async with (
        open_asgi_client(MCPApp(build(), first)) as a,
        open_asgi_client(MCPApp(build(), second)) as b,
    ):
        yield Modern(a), Modern(b)


async def input_required(worker: Modern) -> str:
    """Start the ``greet`` tool on ``worker``: its input-required result's sealed ``requestState``."""
    status, body = await worker.call("tools/call", {"name": "greet", "arguments": {}})
    assert status == 200 and body["result"]["resultType"] == "input_required", body
    state: str = body["result"]["requestState"]
    return state


async def retry(worker: Modern, state: str) -> dict[str, Any]:
    """Retry ``greet`` on ``worker`` with the answer and ``state``: the final message."""
    params = {
        "name": "greet",
        "arguments": {},
        "inputResponses": {"who": {"action": "accept", "content": {"name": "Ann"}}},
        "requestState": state,
    }
    return (await worker.call("tools/call", params))[1]


def completed(message: dict[str, Any]) -> bool:
    result = message.get("result", {})
    return bool(result.get("resultType") == "complete" and result["content"][0]["text"] == "Hello, Ann!")


def refused(message: dict[str, Any]) -> bool:
    return bool(message.get("error", {}).get("code") == -32602)


async def test_workers_with_the_same_ring_accept_each_other_s_state() -> None:
    ring = (key(), key())
    config = ServerConfig(request_state_secret=ring)
    async with two_workers(config, config) as (a, b):
        assert completed(await retry(b, await input_required(a)))
        assert completed(await retry(a, await input_required(b)))


async def test_a_rotated_ring_still_verifies_the_old_key() -> None:
    old, new = key(), key()
    before = ServerConfig(request_state_secret=old)  # a single key, as before the rotation
    after = ServerConfig(request_state_secret=[new, old])  # the new key seals, the old one verifies
    async with two_workers(before, after) as (a, b):
        assert completed(await retry(b, await input_required(a)))
        # the worker not yet rotated cannot verify the new key's states (roll the ring out first)
        assert refused(await retry(a, await input_required(b)))


async def test_workers_with_other_keys_refuse_each_other_s_state() -> None:
    async with two_workers(ServerConfig(request_state_secret=key()), ServerConfig()) as (a, b):
        assert refused(await retry(b, await input_required(a)))
        assert completed(await retry(a, await input_required(a)))


async def test_the_ring_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = key(), key()
    monkeypatch.setenv(REQUEST_STATE_SECRET_ENV, ring_text(old))
    first = MCPApp(build())  # the environment is read when the app is made
    monkeypatch.setenv(REQUEST_STATE_SECRET_ENV, ring_text(new, old))
    second = MCPApp(build())
    async with open_asgi_client(first) as a, open_asgi_client(second) as b:
        assert completed(await retry(Modern(b), await input_required(Modern(a))))
        assert completed(await retry(Modern(b), await input_required(Modern(b))))
    monkeypatch.setenv(REQUEST_STATE_SECRET_ENV, ring_text(key()))
    overridden = MCPApp(build(), ServerConfig(request_state_secret=old))  # the config wins
    async with open_asgi_client(first) as a, open_asgi_client(overridden) as c:
        assert completed(await retry(Modern(c), await input_required(Modern(a))))


def test_a_malformed_ring_in_the_environment_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUEST_STATE_SECRET_ENV, "too-short")
    with pytest.raises(ValueError, match=REQUEST_STATE_SECRET_ENV):
        MCPApp(build())
    MCPApp(build(), ServerConfig(request_state_secret=key()))  # not read when the config has keys


@pytest.mark.parametrize("bad", [b"", [], [b"k" * 32, b""], "text", ["text"]])
def test_a_bad_secret_in_the_config_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="request_state_secret"):
        ServerConfig(request_state_secret=bad)


# -- the command line ---------------------------------------------------------------------------


def test_worker_id_on_the_command_line() -> None:
    args = _parser().parse_args(["demo", "--worker-id", "w7"])
    assert config_from_args(args).worker_id == "w7"
    assert config_from_args(_parser().parse_args(["demo"])).worker_id is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["demo", "--worker-id", "a.b"], "worker id"),
        (["demo", "--redis", "http://127.0.0.1:6379"], "redis://"),
        (["demo", "--stdio", "--redis", "redis://127.0.0.1:1"], "stdio"),
    ],
)
def test_bad_worker_options_are_usage_errors(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_a_bad_ring_in_the_environment_stops_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(REQUEST_STATE_SECRET_ENV, "short")
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--bind", "127.0.0.1:0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert REQUEST_STATE_SECRET_ENV in err and "short" not in err.replace("has", "")


def test_importing_mcp_trio_does_not_import_coredis() -> None:
    code = (
        "import sys, mcp_trio, mcp_trio.testing, mcp_trio._cli, mcp_trio.redis, mcp_trio.demo\n"
        "assert 'coredis' not in sys.modules, 'coredis was imported'\n"
        "assert 'anyio' not in sys.modules, 'anyio was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- the Redis bus without Redis ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_bus(url: str | None = None, **options: Any) -> Any:
    from mcp_trio.redis import RedisNotificationBus  # coredis (a dev dependency) once the bus is made

    options.setdefault("secret", key())
    return RedisNotificationBus(url or f"redis://127.0.0.1:{free_port()}", **options)


def test_a_bus_without_a_key_ring_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers sign what they write to Redis: without the cluster's secret, no bus (fail closed)."""
    monkeypatch.delenv(REQUEST_STATE_SECRET_ENV, raising=False)
    with pytest.raises(ValueError, match=REQUEST_STATE_SECRET_ENV):
        redis_bus(secret=None)
    monkeypatch.setenv(REQUEST_STATE_SECRET_ENV, ring_text(key()))
    assert redis_bus(secret=None).statistics()["forged"] == 0


def test_redis_without_a_key_ring_stops_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(REQUEST_STATE_SECRET_ENV, raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--worker-id", "a", "--redis", f"redis://127.0.0.1:{free_port()}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--redis" in err and REQUEST_STATE_SECRET_ENV in err and "openssl rand" in err


class Peer:
    def __init__(self) -> None:
        self.subscriptions: set[str] = set()
        self.got: list[dict[str, Any]] = []

    def notify_nowait(self, message: dict[str, Any]) -> None:
        self.got.append(message)


TOOLS = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_a_bus_that_is_not_running_delivers_locally_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = redis_bus()
    assert isinstance(bus, LocalNotificationBus)
    peer = Peer()
    bus.subscribe(peer)
    with caplog.at_level(logging.WARNING, logger="mcp_trio.redis"):
        server = MCPServer("x", notification_bus=bus)
        await server.notify_tools_changed()
        await server.notify_tools_changed()
    assert peer.got == [TOOLS, TOOLS]
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "not running" in caplog.records[0].message
    stats = bus.statistics()
    assert stats["state"] == "stopped" and stats["local_only"] == 2 and stats["published"] == 0


@pytest.mark.parametrize(
    "options",
    [
        {"url": "http://127.0.0.1:6379"},
        {"url": "127.0.0.1:6379"},
        {"channel_prefix": "has space"},
        {"instance_id": "a/b"},
        {"outbox": 0},
        {"retry_initial": 0},
        {"retry_initial": 2, "retry_max": 1},
        {"inbox_max_bytes": 1024},
        {"inbox_ttl": 1.0},
        {"secret": []},
        {"secret": b""},
    ],
)
def test_bad_bus_options(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        redis_bus(**options)


async def test_redis_unreachable_local_delivery_goes_on_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = redis_bus(retry_initial=0.01, retry_max=0.02)
    server = build()
    server.notifications = bus
    app = MCPApp(server)
    with caplog.at_level(logging.WARNING, logger="mcp_trio.redis"):
        async with open_asgi_client(app) as asgi:
            client = Client(asgi, app)
            await client.initialize()
            stream = await client.get_stream()
            await stream.next_event()  # priming
            with trio.fail_after(5):
                while bus.statistics()["failures"] < 5:  # noqa: ASYNC110 - no event to wait for
                    await trio.sleep(0.01)
            stats = app.statistics()["notification_bus"]
            assert stats["state"] == "disconnected" and "refused" in stats["last_error"]
            await server.notify_tools_changed()
            with trio.fail_after(2):
                assert await stream.next_message() == TOOLS
            assert app.statistics()["notification_bus"]["local_only"] == 1
            await stream.aclose()
    assert bus.state == "stopped"
    warnings = [r for r in caplog.records if r.name == "mcp_trio.redis"]
    assert len(warnings) == 1, [r.message for r in warnings]
    assert "cannot reach" in warnings[0].message and "retrying" in warnings[0].message


async def test_one_app_runs_a_bus() -> None:
    bus = redis_bus(retry_initial=0.05, retry_max=0.05)
    server = MCPServer("x", notification_bus=bus)
    async with MCPApp(server).running():
        with pytest.raises(RuntimeError, match="already running"):
            await bus.run()
    assert bus.state == "stopped"


async def test_the_password_stays_out_of_statistics_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    bus = redis_bus(f"redis://user:s3cret@127.0.0.1:{free_port()}/0", retry_initial=0.05, retry_max=0.05)
    with caplog.at_level(logging.DEBUG, logger="mcp_trio.redis"):
        async with MCPApp(MCPServer("x", notification_bus=bus)).running() as app:
            with trio.fail_after(5):
                while bus.statistics()["failures"] < 2:  # noqa: ASYNC110 - no event to wait for
                    await trio.sleep(0.01)
            assert "s3cret" not in repr(app.statistics())
            assert app.statistics()["notification_bus"]["url"] == f"redis://***@{bus.url.rpartition('@')[2]}"
    assert caplog.records and not [r for r in caplog.records if "s3cret" in r.getMessage()]


async def test_a_redis_that_accepts_but_never_answers(caplog: pytest.LogCaptureFixture) -> None:
    # The connection opens, the handshake times out: one warning of the bus, none of coredis's
    # per-attempt errors (they become DEBUG lines of mcp_trio.redis), and the app ends cleanly.
    async def hold(stream: trio.SocketStream) -> None:
        async with stream:
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, hold, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        timeouts = {"connect_timeout": 0.2, "command_timeout": 0.2}
        bus = redis_bus(f"redis://127.0.0.1:{port}", retry_initial=0.01, retry_max=0.02, **timeouts)
        with caplog.at_level(logging.DEBUG):
            async with MCPApp(MCPServer("x", notification_bus=bus)).running():
                with trio.fail_after(10):
                    while bus.statistics()["failures"] < 3:  # noqa: ASYNC110 - no event to wait for
                        await trio.sleep(0.01)
                assert bus.state == "disconnected"
        nursery.cancel_scope.cancel()
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in loud] == ["mcp_trio.redis"], [(r.name, r.getMessage()) for r in loud]
    assert "cannot reach" in loud[0].getMessage()
    assert any(r.getMessage().startswith("coredis: ") for r in caplog.records if r.name == "mcp_trio.redis")
