"""OAuth with several workers, in process: two apps (workers ``a`` and ``b``) joined by an in-memory
worker link (the seam the Redis bus fills in production).  Each worker checks the bearer token itself;
a client's answer for a session of another worker is forwarded to its owner without OAuth, but with
OAuth it gets 503 (the forwarded body carries no principal the owner could check), after the token
check: an unauthenticated one is 401 first."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

from mcp_trio import LocalNotificationBus, MCPApp, MCPServer, ServerConfig
from mcp_trio.testing import ASGIClient, open_asgi_client

from .conftest import POST_HEADERS, init_body
from .test_auth_app import Tokens, resource


class Link(LocalNotificationBus):
    """One worker's end of an in-memory link between workers (``workers``: shared by all ends)."""

    def __init__(self, workers: dict[str, Callable[[str, bytes], bool]]) -> None:
        super().__init__()
        self.workers = workers
        self.forwarded = 0

    def attach_worker(self, worker_id: str, deliver: Callable[[str, bytes], bool]) -> None:
        self.workers[worker_id] = deliver

    async def worker_alive(self, worker: str) -> bool | None:
        return worker in self.workers

    async def forward_to_worker(
        self, worker: str, session_id: str, body: bytes
    ) -> Literal["sent", "gone", "unavailable"]:
        deliver = self.workers.get(worker)
        if deliver is None:
            return "gone"
        self.forwarded += 1
        deliver(session_id, body)
        return "sent"


def two_workers(config: Callable[[str], ServerConfig]) -> tuple[MCPApp, MCPApp, Link]:
    workers: dict[str, Callable[[str, bytes], bool]] = {}
    apps = []
    for name in ("a", "b"):
        link = Link(workers)
        apps.append(MCPApp(MCPServer(f"worker-{name}", notification_bus=link), config(name)))
    return apps[0], apps[1], link


async def session_on(asgi: ASGIClient, headers: dict[str, str]) -> str:
    response = await asgi.request("POST", headers={**POST_HEADERS, **headers}, body=init_body())
    assert response.status == 200, await response.read()
    return response.headers["mcp-session-id"]


ANSWER = json.dumps({"jsonrpc": "2.0", "id": "s-1", "result": {}}).encode()
"""A client's answer to a server request (what a worker forwards to the session's owner)."""


async def test_without_oauth_an_answer_is_forwarded_to_the_owner() -> None:
    a, b, link_b = two_workers(lambda name: ServerConfig(worker_id=name))
    async with open_asgi_client(a) as on_a, open_asgi_client(b) as on_b:
        session = await session_on(on_a, {})
        headers = {**POST_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        response = await on_b.request("POST", headers=headers, body=ANSWER)
        assert response.status == 202 and link_b.forwarded == 1


async def test_with_oauth_each_worker_checks_the_token_and_answers_503() -> None:
    tokens = Tokens()
    token = tokens.issue("alice", "alice", "mcp")
    a, b, link_b = two_workers(lambda name: ServerConfig(worker_id=name, oauth=resource(tokens)))
    async with open_asgi_client(a) as on_a, open_asgi_client(b) as on_b:
        session = await session_on(on_a, {"authorization": f"Bearer {token}"})
        headers = {**POST_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        unauthenticated = await on_b.request("POST", headers=headers, body=ANSWER)
        assert unauthenticated.status == 401
        response = await on_b.request(
            "POST", headers={**headers, "authorization": f"Bearer {token}"}, body=ANSWER
        )
        assert response.status == 503 and response.headers["retry-after"] == "1"
        assert "worker a" in (await response.json())["error"]["message"]
        assert link_b.forwarded == 0
        # on its owner, the same answer with the same token is taken
        response = await on_a.request(
            "POST", headers={**headers, "authorization": f"Bearer {token}"}, body=ANSWER
        )
        assert response.status == 202
