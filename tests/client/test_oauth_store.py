"""The token stores of mcp_trio.auth: MemoryTokenStore and FileTokenStore (JSON, mode 0600, atomic
rewrites, kept across store objects, tolerant of a damaged file), and the records they keep."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
import trio

from mcp_trio.auth import (
    ClientRegistration,
    FileTokenStore,
    MemoryTokenStore,
    OAuthTokens,
    TokenStore,
)

ISSUER = "https://auth.example.com"
RESOURCE = "https://mcp.example.com/mcp"


def tokens(access: str = "at-1", **options: object) -> OAuthTokens:
    return OAuthTokens(access_token=access, refresh_token="rt-1", expires_at=time.time() + 600, **options)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> TokenStore:
    return MemoryTokenStore() if request.param == "memory" else FileTokenStore(tmp_path / "store.json")


async def test_tokens_are_keyed_by_issuer_and_resource(store: TokenStore) -> None:
    assert isinstance(store, TokenStore)
    assert await store.load_tokens(ISSUER, RESOURCE) is None
    await store.save_tokens(ISSUER, RESOURCE, tokens("a", scope="mcp:read"))
    await store.save_tokens(ISSUER, "https://other.example/mcp", tokens("b"))
    await store.save_tokens("https://other-as.example", RESOURCE, tokens("c"))
    loaded = await store.load_tokens(ISSUER, RESOURCE)
    assert loaded is not None and loaded.access_token == "a" and loaded.scope == "mcp:read"
    assert loaded.refresh_token == "rt-1" and not loaded.expired()
    assert (await store.load_tokens("https://other-as.example", RESOURCE)).access_token == "c"  # type: ignore[union-attr]
    await store.delete_tokens(ISSUER, RESOURCE)
    assert await store.load_tokens(ISSUER, RESOURCE) is None
    assert (await store.load_tokens(ISSUER, "https://other.example/mcp")).access_token == "b"  # type: ignore[union-attr]
    await store.delete_tokens(ISSUER, "nothing there")  # deleting what is absent is fine


async def test_clients_are_keyed_by_issuer(store: TokenStore) -> None:
    client = ClientRegistration("client-1", "s3cret", "client_secret_basic", ("http://127.0.0.1:1/cb",))
    await store.save_client(ISSUER, client)
    assert await store.load_client("https://other-as.example") is None
    assert await store.load_client(ISSUER) == client
    await store.delete_client(ISSUER)
    assert await store.load_client(ISSUER) is None


async def test_a_file_store_is_private_atomic_and_survives(tmp_path: Path) -> None:
    path = tmp_path / "config" / "mcp-trio" / "tokens.json"
    await FileTokenStore(path).save_tokens(ISSUER, RESOURCE, tokens("kept"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["tokens.json"]  # no temporary file left
    again = FileTokenStore(path)  # another process, later
    loaded = await again.load_tokens(ISSUER, RESOURCE)
    assert loaded is not None and loaded.access_token == "kept"
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["tokens"][ISSUER][RESOURCE]["access_token"] == "kept"


async def test_a_file_store_keeps_mode_0600_over_a_loose_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text("{}")
    os.chmod(path, 0o644)
    await FileTokenStore(path).save_client(ISSUER, ClientRegistration("c"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("content", ["", "not json", "[]", '{"tokens": []}', '{"tokens": {}, "clients": 5}'])
async def test_a_damaged_file_is_an_empty_store(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    store = FileTokenStore(path)
    assert await store.load_tokens(ISSUER, RESOURCE) is None
    assert "not a token store file" in caplog.text
    await store.save_tokens(ISSUER, RESOURCE, tokens())
    assert (await FileTokenStore(path).load_tokens(ISSUER, RESOURCE)) is not None


async def test_damaged_entries_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    entries = {
        ISSUER: {
            RESOURCE: {"access_token": 5},
            "https://ok.example": {"access_token": "ok", "expires_at": "x"},
        }
    }
    path.write_text(json.dumps({"version": 1, "tokens": entries, "clients": {ISSUER: {"client_id": None}}}))
    store = FileTokenStore(path)
    assert await store.load_tokens(ISSUER, RESOURCE) is None
    assert await store.load_client(ISSUER) is None
    loaded = await store.load_tokens(ISSUER, "https://ok.example")
    assert loaded is not None and loaded.expires_at is None


async def test_concurrent_writes_to_one_file_store_lose_nothing(tmp_path: Path) -> None:
    store = FileTokenStore(tmp_path / "tokens.json")
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(store.save_tokens, ISSUER, f"{RESOURCE}/{n}", tokens(f"t{n}"))
    for n in range(20):
        assert (await store.load_tokens(ISSUER, f"{RESOURCE}/{n}")).access_token == f"t{n}"  # type: ignore[union-attr]


def test_records() -> None:
    expiring = OAuthTokens("a", expires_at=time.time() + 10)
    assert not expiring.expired() and expiring.expired(leeway=30)
    assert not OAuthTokens("a").expired(leeway=10**9)  # no expiry said: never expired
    assert "hidden" not in repr(OAuthTokens("hidden-access", refresh_token="hidden-refresh"))
    assert "hidden" not in repr(ClientRegistration("c", "hidden-secret"))
    kept = tokens(scope="mcp:read", requested_scope="mcp:read offline_access")
    assert OAuthTokens.from_json(kept.to_json()) == kept
    assert OAuthTokens.from_json({"access_token": "a", "expires_at": True}) == OAuthTokens("a")
    client = ClientRegistration(
        "c", "s", redirect_uris=("http://127.0.0.1/cb",), client_secret_expires_at=1.0
    )
    assert not client.usable_with("http://127.0.0.1/cb")  # its secret expired
    assert not ClientRegistration("c").usable_with("http://127.0.0.1/cb")  # another redirect URI
    assert ClientRegistration("c", redirect_uris=("http://127.0.0.1/cb",)).usable_with("http://127.0.0.1/cb")
    assert ClientRegistration("c", "s", client_secret_expires_at=0).usable_with(None)  # 0: never expires


def test_a_short_lived_token_is_renewed_within_a_quarter_of_its_lifetime() -> None:
    now = time.time()
    # A token that lives 20 s is due 5 s before its end, not at once (a 30 s margin would renew it on
    # every request); a long-lived one keeps the full margin; one whose lifetime was not said too.
    assert not OAuthTokens("t", expires_at=now + 10, lifetime=20).expired(30)
    assert OAuthTokens("t", expires_at=now + 4, lifetime=20).expired(30)
    assert OAuthTokens("t", expires_at=now + 25, lifetime=3600).expired(30)
    assert not OAuthTokens("t", expires_at=now + 60, lifetime=3600).expired(30)
    assert OAuthTokens("t", expires_at=now + 10).expired(30)
    assert not OAuthTokens("t").expired(30)
    stored = OAuthTokens("t", expires_at=now + 10, lifetime=20)
    assert OAuthTokens.from_json(json.loads(json.dumps(stored.to_json()))) == stored
