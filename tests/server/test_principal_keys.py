"""Owner keys of sessions and tasks: a keyed hash of who sent a request, never the principal itself.

An access token with neither ``sub`` nor ``client_id`` stands only for itself; its raw string must not
become part of a stored task record (a Redis task store keeps those), nor of a session's owner key.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._app.principal import PrincipalKeys
from mcp_trio.auth import AccessToken
from mcp_trio.demo import build_demo_server
from mcp_trio.server import HTTPRequestInfo, MemoryTaskStore
from mcp_trio.testing import open_asgi_client

from .conftest import POST_HEADERS, init_body
from .test_tasks import NOT_FOUND, Probe, TaskClient, add_test_tools

TOKEN_A = "raw-bearer-AAAA-0123456789abcdef"
TOKEN_B = "raw-bearer-BBBB-0123456789abcdef"


async def bare_token(request: HTTPRequestInfo) -> AccessToken | None:
    """The principal is an access token naming neither a subject nor a client (RFC 7662 allows it):
    the ``x-user`` header is its raw string."""
    token = request.header("x-user")
    return None if token is None else AccessToken(token=token)


def test_keys_are_keyed_hashes_that_match_under_every_key_of_the_ring() -> None:
    old, new = b"o" * 32, b"n" * 32
    token = AccessToken(token=TOKEN_A)
    before = PrincipalKeys([old])
    key = before.key(token)
    assert TOKEN_A not in key and key.startswith("p1:")
    assert before.key(AccessToken(token=TOKEN_A)) == key  # the same token, another request
    assert before.key(AccessToken(token=TOKEN_B)) != key
    rotated = PrincipalKeys([new, old])
    assert rotated.owns(key, token) and not rotated.owns(key, AccessToken(token=TOKEN_B))
    assert not PrincipalKeys([new]).owns(key, token)  # another ring: another key
    assert not PrincipalKeys().owns(key, token)  # a random key of its own
    # A token naming its owner: a refreshed one (another string) is the same owner.
    alice = AccessToken(token="t1", subject="alice", issuer="https://as")
    assert before.key(alice) == before.key(AccessToken(token="t2", subject="alice", issuer="https://as"))
    assert before.key(alice) != before.key(AccessToken(token="t1", subject="bob", issuer="https://as"))
    # No principal is the empty key; a custom principal is hashed too (its repr may hold a secret).
    assert before.key(None) == "" and before.owns("", None) and not before.owns("", token)
    assert "s3cret" not in before.key("user:s3cret") and before.owns(before.key("user:s3cret"), "user:s3cret")
    assert not before.owns("\u00e9\ud800 not a key", token)  # any stored string is compared safely


async def test_a_bare_token_is_never_in_a_task_record_and_still_owns_its_task() -> None:
    store = MemoryTaskStore()
    config = ServerConfig(authenticate=bare_token, task_store_factory=lambda: store)
    app = MCPApp(add_test_tools(build_demo_server(), Probe()), config)
    async with open_asgi_client(app) as asgi:
        alice, bob = TaskClient(asgi, TOKEN_A), TaskClient(asgi, TOKEN_B)
        task_id = (await alice.start("confirm_delete", {"filename": "c.txt"}))["taskId"]
        await alice.wait(task_id, "input_required")
        assert (await alice.get(task_id))["taskId"] == task_id  # the same token, a later request
        status, body = await bob.task("tasks/get", task_id)
        assert status == 200 and body["error"] == NOT_FOUND, body
        record = await store.get(task_id)
        assert record is not None
        kept = json.dumps(dataclasses.asdict(record), default=str)
        assert TOKEN_A not in kept and TOKEN_A not in repr(record), kept
        assert record.owner == app._modern.principals.key(AccessToken(token=TOKEN_A))
        await alice.task("tasks/cancel", task_id)


async def test_a_bare_token_owns_its_session_by_a_keyed_hash() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(authenticate=bare_token))
    async with open_asgi_client(app) as asgi:
        response = await asgi.request("POST", headers={**POST_HEADERS, "x-user": TOKEN_A}, body=init_body())
        assert response.status == 200, await response.read()
        session_id = response.headers["mcp-session-id"]
        await response.read()
        (session,) = app._manager._sessions
        assert TOKEN_A not in session.owner and session.owner.startswith("p1:")

        async def ping(token: str) -> int:
            headers = {
                **POST_HEADERS,
                "mcp-session-id": session_id,
                "mcp-protocol-version": "2025-11-25",
                "x-user": token,
            }
            body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode()
            reply = await asgi.request("POST", headers=headers, body=body)
            await reply.read()
            return reply.status

        assert await ping(TOKEN_A) == 200
        assert await ping(TOKEN_B) == 404


@pytest.mark.parametrize("secret", [b"k" * 32, [b"n" * 32, b"k" * 32]])
def test_apps_sharing_the_ring_agree_on_owner_keys(secret: bytes | list[bytes]) -> None:
    """Workers given the same ring (a Redis task store's case) make and accept the same keys."""
    first = MCPApp(build_demo_server(), ServerConfig(request_state_secret=b"k" * 32))
    second = MCPApp(build_demo_server(), ServerConfig(request_state_secret=secret))
    alone = MCPApp(build_demo_server(), ServerConfig())
    token = AccessToken(token=TOKEN_A)
    key = first._modern.principals.key(token)
    assert second._modern.principals.owns(key, token)
    assert not alone._modern.principals.owns(key, token)


class SharedStore(MemoryTaskStore):
    """Stands for a store several workers share (one with tasks of its own: a ``run`` method)."""

    async def run(self) -> None:  # never started here
        raise AssertionError("not run in this test")


@pytest.mark.parametrize("secret", [None, b"k" * 32])
def test_a_shared_store_with_authentication_needs_the_ring(
    secret: bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    config = ServerConfig(
        authenticate=bare_token, task_store_factory=SharedStore, request_state_secret=secret
    )
    with caplog.at_level("WARNING", logger="mcp_trio"):
        MCPApp(build_demo_server(), config)
        MCPApp(build_demo_server(), ServerConfig(task_store_factory=SharedStore))  # no principals: no key
    warned = [r.getMessage() for r in caplog.records if "key ring" in r.getMessage()]
    assert len(warned) == (1 if secret is None else 0), warned
