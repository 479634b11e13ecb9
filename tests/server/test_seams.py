"""The seams the next features plug into, each through its default and through a replacement: the
notification bus, the session id factory, the ``authenticate`` hook (its principal on ``Context``), and
the method registry of extensions."""

from __future__ import annotations

from typing import Any

import mcp_types as mt
import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, RPCError, ServerConfig
from mcp_trio.errors import RemoteProtocolError
from mcp_trio.server import (
    HTTPRequestInfo,
    InMemoryEventStore,
    LocalNotificationBus,
    LocalSessionRegistry,
    StoredEvent,
)
from mcp_trio.testing import open_asgi_client

from .conftest import Client, init_body, settle
from .test_modern import Modern, headers_for


def small_server(**options: Any) -> MCPServer:
    server = MCPServer("seams", **options)

    @server.tool()
    async def whoami(ctx: Context) -> str:
        return repr(ctx.principal)

    return server


class NetworkLikeStore(InMemoryEventStore):
    """An event store whose writes wait, as a store on the network does (and has no store_nowait)."""

    store_nowait = None  # type: ignore[assignment]

    async def store(self, session_id: str, event: StoredEvent) -> None:
        await trio.sleep(0.01)
        InMemoryEventStore.store_nowait(self, session_id, event)


async def test_notifications_reach_every_peer_even_when_the_caller_is_cancelled() -> None:
    # Delivery used to await each session in turn (its event store write included): a caller cancelled
    # at the first wait left every later session unnotified.
    server = small_server()
    app = MCPApp(server, ServerConfig(event_store_factory=NetworkLikeStore))
    async with open_asgi_client(app) as asgi:
        clients = [Client(asgi, app) for _ in range(3)]
        streams = []
        for client in clients:
            await client.initialize()
            stream = await client.get_stream()
            await stream.next_event()  # the priming event
            streams.append(stream)
        with trio.CancelScope() as scope:
            scope.cancel()  # the caller is cancelled at its first checkpoint
            await server.notify_tools_changed()
        assert scope.cancelled_caught
        with trio.fail_after(2):
            for stream in streams:
                message = await stream.next_message()
                assert message == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        assert isinstance(server.notifications, LocalNotificationBus) and len(server.notifications) == 3


async def test_a_replacement_bus_gets_the_server_notifications() -> None:
    class Recording(LocalNotificationBus):
        def __init__(self) -> None:
            super().__init__()
            self.published: list[tuple[dict[str, Any], str | None]] = []

        async def publish(self, message: dict[str, Any], uri: str | None = None) -> None:
            self.published.append((message, uri))
            await super().publish(message, uri)

    bus = Recording()
    server = small_server(notification_bus=bus)
    await server.notify_resource_updated("test://x")
    assert bus.published == [
        (
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://x"}},
            "test://x",
        )
    ]


async def test_session_ids_come_from_the_factory() -> None:
    counter = iter(range(1000))
    config = ServerConfig(session_id_factory=lambda: f"w7.{next(counter)}")
    app = MCPApp(small_server(), config)
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        assert client.session_id == "w7.0"
        assert (await client.request(2, "ping"))["result"] == {}


@pytest.mark.parametrize("bad", ["has space", "", "x" * 300])
async def test_an_unusable_session_id_is_a_503_not_a_crash(bad: str) -> None:
    app = MCPApp(small_server(), ServerConfig(session_id_factory=lambda: bad))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        response = await asgi.request(
            "POST",
            headers=client.headers(),
            body=init_body(),
        )
        assert response.status == 503
        assert app.statistics()["sessions"] == 0


async def test_sessions_are_found_through_the_registry() -> None:
    class Recording(LocalSessionRegistry):
        def __init__(self) -> None:
            super().__init__()
            self.log: list[str] = []

        def add(self, session: Any) -> None:
            self.log.append(f"add {session.session_id}")
            super().add(session)

        def remove(self, session: Any) -> None:
            self.log.append(f"remove {session.session_id}")
            super().remove(session)

    registry = Recording()
    app = MCPApp(small_server(), ServerConfig(session_registry_factory=lambda: registry))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        assert client.session_id in registry and len(registry) == 1
        assert (await client.request(2, "ping"))["result"] == {}
        assert (await client.delete()).status == 200
        assert registry.log == [f"add {client.session_id}", f"remove {client.session_id}"]
        assert len(registry) == 0


async def authenticate(request: HTTPRequestInfo) -> str:
    token = request.header("authorization")
    if token is None or not token.startswith("Bearer "):
        raise RemoteProtocolError(
            "Unauthorized", http_status=401, headers=(("www-authenticate", 'Bearer realm="test"'),)
        )
    return token.removeprefix("Bearer ")


async def test_authenticate_refuses_before_anything_and_its_principal_reaches_context() -> None:
    app = MCPApp(small_server(), ServerConfig(authenticate=authenticate))
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        response = await asgi.request("POST", headers=client.headers(), body=b"not even json")
        assert response.status == 401 and response.headers["www-authenticate"] == 'Bearer realm="test"'
        assert app.statistics()["sessions"] == 0
        alice = {"authorization": "Bearer alice"}
        response = await asgi.request(
            "POST",
            headers={**client.headers(), **alice},
            body=init_body(),
        )
        assert response.status == 200
        client.session_id = response.headers["mcp-session-id"]
        call = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}'
        response = await asgi.request("POST", headers={**client.headers(), **alice}, body=call)
        message = await client.read_message(response)
        assert message["result"]["content"][0]["text"] == "'alice'"
        # The session is alice's: bob with its id gets 404, as if it did not exist.
        response = await asgi.request(
            "POST", headers={**client.headers(), "authorization": "Bearer bob"}, body=call
        )
        assert response.status == 404
        # 2026: the principal of each request.
        modern = Modern(asgi)
        response = await modern.post("tools/call", {"name": "whoami", "arguments": {}})
        assert response.status == 401
        headers = {**headers_for("tools/call", "whoami"), **alice}
        response = await modern.post("tools/call", {"name": "whoami", "arguments": {}}, headers=headers)
        assert (await response.json())["result"]["content"][0]["text"] == "'alice'"


async def test_an_extension_method_is_served_in_both_eras() -> None:
    server = small_server()

    async def jobs_get(ctx: Context, params: dict[str, Any] | None) -> dict[str, Any]:
        job_id = (params or {}).get("jobId")
        if not isinstance(job_id, str):
            raise RPCError(mt.INVALID_PARAMS, "jobId must be a string")
        return {"jobId": job_id, "status": "working"}

    server.add_method("com.example/jobs/get", jobs_get)
    with pytest.raises(ValueError, match="core protocol"):
        server.add_method("tools/call", jobs_get)
    with pytest.raises(ValueError, match="tasks extension"):
        server.add_method("tasks/get", jobs_get)
    app = MCPApp(server)
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        answer = await client.request(2, "com.example/jobs/get", {"jobId": "t1"})
        assert answer["result"] == {"jobId": "t1", "status": "working"}
        answer = await client.request(3, "com.example/jobs/get", {"jobId": 5})
        assert answer["error"]["code"] == mt.INVALID_PARAMS
        status, body = await Modern(asgi).call("com.example/jobs/get", {"jobId": "t2"})
        assert status == 200 and body["result"]["jobId"] == "t2", body
        assert body["result"]["resultType"] == "complete"
    await settle()
