"""OAuth with several workers, in process: two apps (workers ``a`` and ``b``) joined by an in-memory
worker link (the seam the Redis bus fills in production, with the same rules: a worker records its
sessions with a keyed hash of their principals, another forwards an answer only for a recorded
session of the same principal, and the owner checks the principal again before delivering).  Each
worker checks the bearer token itself: an unauthenticated answer is 401 first; an answer with the
session owner's token is forwarded (202), with another principal's token or for a made-up session id
it is 404, and nothing reaches the owner."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Literal

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio._protocol.cluster import PRINCIPAL_TAG, ClusterKeys
from mcp_trio.server import HTTPRequestInfo, LocalNotificationBus
from mcp_trio.testing import ASGIClient, open_asgi_client

from .conftest import POST_HEADERS, init_body
from .test_auth_app import Tokens, resource

KEYS = ClusterKeys([b"k" * 32])
Deliver = Callable[[str, bytes, str], bool]


class Link(LocalNotificationBus):
    """One worker's end of an in-memory link between workers (``workers`` and ``records``: shared by
    all ends)."""

    def __init__(self, workers: dict[str, Deliver], records: dict[str, dict[str, str]]) -> None:
        super().__init__()
        self.workers = workers
        self.records = records
        self.worker = ""
        self.forwarded = 0
        self.refused = 0

    def attach_worker(self, worker_id: str, deliver: Deliver) -> None:
        self.worker = worker_id
        self.workers[worker_id] = deliver
        self.records[worker_id] = {}

    def session_opened(self, session_id: str, principal: bytes) -> None:
        self.records[self.worker][session_id] = KEYS.tag(PRINCIPAL_TAG, principal)

    def session_closed(self, session_id: str) -> None:
        self.records[self.worker].pop(session_id, None)

    def principal_matches(self, principal: bytes, tag: str) -> bool:
        return KEYS.matches(PRINCIPAL_TAG, principal, tag)

    async def has_session(self, worker: str, session_id: str, principal: bytes) -> bool | None:
        return self.records.get(worker, {}).get(session_id) == KEYS.tag(PRINCIPAL_TAG, principal)

    async def forward_to_worker(
        self, worker: str, session_id: str, body: bytes, principal: bytes
    ) -> Literal["sent", "unknown", "full", "gone", "unavailable"]:
        deliver = self.workers.get(worker)
        if deliver is None:
            return "gone"
        tag = KEYS.tag(PRINCIPAL_TAG, principal)
        if self.records[worker].get(session_id) != tag:
            self.refused += 1
            return "unknown"
        self.forwarded += 1
        assert deliver(session_id, body, tag)
        return "sent"


def two_workers(config: Callable[[str], ServerConfig]) -> tuple[MCPApp, MCPApp, Link]:
    workers: dict[str, Deliver] = {}
    records: dict[str, dict[str, str]] = {}
    apps = []
    for name in ("a", "b"):
        link = Link(workers, records)
        apps.append(MCPApp(MCPServer(f"worker-{name}", notification_bus=link), config(name)))
    return apps[0], apps[1], link


async def session_on(asgi: ASGIClient, headers: dict[str, str]) -> str:
    response = await asgi.request("POST", headers={**POST_HEADERS, **headers}, body=init_body())
    assert response.status == 200, await response.read()
    return response.headers["mcp-session-id"]


ANSWER = json.dumps({"jsonrpc": "2.0", "id": "s-1", "result": {}}).encode()
"""A client's answer to a server request (what a worker forwards to the session's owner)."""


def legacy(session: str, **more: str) -> dict[str, str]:
    return {**POST_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25", **more}


async def test_without_oauth_an_answer_is_forwarded_to_the_owner() -> None:
    a, b, link_b = two_workers(lambda name: ServerConfig(worker_id=name))
    async with open_asgi_client(a) as on_a, open_asgi_client(b) as on_b:
        session = await session_on(on_a, {})
        response = await on_b.request("POST", headers=legacy(session), body=ANSWER)
        assert response.status == 202 and link_b.forwarded == 1
        made_up = await on_b.request("POST", headers=legacy("a.made-up"), body=ANSWER)
        assert made_up.status == 404 and link_b.forwarded == 1
        assert (await made_up.json())["error"]["message"] == "Not Found: unknown or terminated session"
        await on_a.request("DELETE", headers=legacy(session))  # closed: no longer recorded
        after = await on_b.request("POST", headers=legacy(session), body=ANSWER)
        assert after.status == 404 and link_b.forwarded == 1


async def test_with_oauth_the_owner_s_token_is_forwarded_and_another_is_404() -> None:
    tokens = Tokens()
    alice = tokens.issue("alice", "alice", "mcp")
    refreshed = tokens.issue("alice-2", "alice", "mcp")  # the same owner, a new token
    bob = tokens.issue("bob", "bob", "mcp")
    a, b, link_b = two_workers(lambda name: ServerConfig(worker_id=name, oauth=resource(tokens)))
    async with open_asgi_client(a) as on_a, open_asgi_client(b) as on_b:
        session = await session_on(on_a, {"authorization": f"Bearer {alice}"})
        unauthenticated = await on_b.request("POST", headers=legacy(session), body=ANSWER)
        assert unauthenticated.status == 401
        for token in (alice, refreshed):
            response = await on_b.request(
                "POST", headers=legacy(session, authorization=f"Bearer {token}"), body=ANSWER
            )
            assert response.status == 202, await response.read()
        assert link_b.forwarded == 2
        other = await on_b.request(
            "POST", headers=legacy(session, authorization=f"Bearer {bob}"), body=ANSWER
        )
        assert other.status == 404 and link_b.forwarded == 2 and link_b.refused == 1
        # the owner checks the principal itself: a body that claims bob's tag is not delivered
        bob_tag = KEYS.tag(PRINCIPAL_TAG, b'token:["https://issuer.example","bob","c1"]')
        assert not link_b.workers["a"](session, ANSWER, bob_tag)
        assert not link_b.workers["a"](session, ANSWER, "0" * 32)
        # a request (not an answer) for another worker's session is 503 for its owner (send it to
        # worker a), 404 for anyone else or for a made-up session: nothing to send anywhere
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        response = await on_b.request(
            "POST", headers=legacy(session, authorization=f"Bearer {alice}"), body=ping
        )
        assert response.status == 503 and response.headers["retry-after"] == "1"
        assert "worker a" in (await response.json())["error"]["message"]
        for headers in (
            legacy(session, authorization=f"Bearer {bob}"),
            legacy("a.made-up", authorization=f"Bearer {alice}"),
        ):
            assert (await on_b.request("POST", headers=headers, body=ping)).status == 404
            get = {"accept": "text/event-stream", **{k: v for k, v in headers.items() if k != "accept"}}
            assert (await on_b.request("GET", headers=get)).status == 404
            assert (await on_b.request("DELETE", headers=headers)).status == 404
        assert (
            await on_b.request("DELETE", headers=legacy(session, authorization=f"Bearer {alice}"))
        ).status == 503


async def test_a_custom_principal_travels_by_its_type_and_repr() -> None:
    """``authenticate`` returning an object: its identity is its type and ``repr`` (as for task owners),
    so a principal with a stable ``repr`` is forwarded, and another one's answer gets 404."""

    @dataclasses.dataclass(frozen=True)
    class Who:
        name: str

    async def authenticate(info: HTTPRequestInfo) -> Who:
        return Who(info.header("x-who") or "nobody")

    a, b, link_b = two_workers(lambda name: ServerConfig(worker_id=name, authenticate=authenticate))
    async with open_asgi_client(a) as on_a, open_asgi_client(b) as on_b:
        session = await session_on(on_a, {"x-who": "alice"})
        response = await on_b.request("POST", headers=legacy(session, **{"x-who": "alice"}), body=ANSWER)
        assert response.status == 202 and link_b.forwarded == 1
        response = await on_b.request("POST", headers=legacy(session, **{"x-who": "mallory"}), body=ANSWER)
        assert response.status == 404 and link_b.forwarded == 1
