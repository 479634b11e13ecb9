"""Where the OAuth client keeps what it obtained: tokens per (issuer, resource) and client registrations
per issuer.  :class:`MemoryTokenStore` for one process, :class:`FileTokenStore` across restarts."""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import trio

__all__ = ["ClientRegistration", "FileTokenStore", "MemoryTokenStore", "OAuthTokens", "TokenStore"]

logger = logging.getLogger("mcp_trio.auth")


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _opt_num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass
class OAuthTokens:
    """What a token endpoint issued for one resource.  The token strings stay out of ``repr()``."""

    access_token: str = field(repr=False)
    token_type: str = "Bearer"
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    """When the access token expires, in seconds since the epoch (None: not said)."""
    scope: str | None = None
    """The scopes granted, space-separated (None: the token endpoint did not say)."""
    requested_scope: str | None = None
    """The scopes this client asked for, space-separated (None: it asked for none in particular)."""
    lifetime: float | None = None
    """The access token's lifetime as issued (``expires_in``), in seconds (None: not said)."""

    def expired(self, leeway: float = 0.0) -> bool:
        """Whether the access token has expired, or will within ``leeway`` seconds, or within a
        quarter of its lifetime if that is shorter (a token that lives 20 s is renewed 5 s before its
        end, not at once)."""
        if self.expires_at is None:
            return False
        if self.lifetime is not None:
            leeway = min(leeway, self.lifetime / 4)
        return time.time() + leeway >= self.expires_at

    def to_json(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at,
            "scope": self.scope,
            "requested_scope": self.requested_scope,
            "lifetime": self.lifetime,
        }

    @classmethod
    def from_json(cls, data: Any) -> OAuthTokens | None:
        """Read back what :meth:`to_json` wrote; None for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("access_token"), str):
            return None
        return cls(
            access_token=data["access_token"],
            token_type=_opt_str(data.get("token_type")) or "Bearer",
            refresh_token=_opt_str(data.get("refresh_token")),
            expires_at=_opt_num(data.get("expires_at")),
            scope=_opt_str(data.get("scope")),
            requested_scope=_opt_str(data.get("requested_scope")),
            lifetime=_opt_num(data.get("lifetime")),
        )


@dataclass
class ClientRegistration:
    """A client registered with one authorization server (RFC 7591), or pre-registered.  The secret
    stays out of ``repr()``."""

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint_auth_method: str | None = None
    redirect_uris: tuple[str, ...] = ()
    client_secret_expires_at: float | None = None
    """When the secret expires, in seconds since the epoch (None or 0: never)."""

    def usable_with(self, redirect_uri: str | None) -> bool:
        """Whether this registration can serve an authorization that redirects to ``redirect_uri``: it
        lists that URI, and its secret (if any) has not expired."""
        if redirect_uri is not None and redirect_uri not in self.redirect_uris:
            return False
        expires = self.client_secret_expires_at
        return not (self.client_secret is not None and expires and time.time() >= expires)

    def to_json(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
            "redirect_uris": list(self.redirect_uris),
            "client_secret_expires_at": self.client_secret_expires_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> ClientRegistration | None:
        if not isinstance(data, dict) or not isinstance(data.get("client_id"), str):
            return None
        uris = data.get("redirect_uris")
        return cls(
            client_id=data["client_id"],
            client_secret=_opt_str(data.get("client_secret")),
            token_endpoint_auth_method=_opt_str(data.get("token_endpoint_auth_method")),
            redirect_uris=tuple(u for u in uris if isinstance(u, str)) if isinstance(uris, list) else (),
            client_secret_expires_at=_opt_num(data.get("client_secret_expires_at")),
        )


@runtime_checkable
class TokenStore(Protocol):
    """Where :class:`~mcp_trio.auth.OAuth` keeps tokens and client registrations.

    Tokens are keyed by ``(issuer, resource)``: the authorization server that issued them and the MCP
    server (its protected resource metadata's ``resource``) they are for.  Client registrations are
    keyed by issuer: a client registered with one authorization server is never shown to another.
    Implement it to keep them elsewhere (a keyring, a database); the methods are async so that they
    may do I/O."""

    async def load_tokens(self, issuer: str, resource: str) -> OAuthTokens | None: ...

    async def save_tokens(self, issuer: str, resource: str, tokens: OAuthTokens) -> None: ...

    async def delete_tokens(self, issuer: str, resource: str) -> None: ...

    async def load_client(self, issuer: str) -> ClientRegistration | None: ...

    async def save_client(self, issuer: str, client: ClientRegistration) -> None: ...

    async def delete_client(self, issuer: str) -> None: ...


class MemoryTokenStore:
    """A :class:`TokenStore` in memory: what it holds ends with the process (the default)."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[str, str], dict[str, Any]] = {}
        self._clients: dict[str, dict[str, Any]] = {}

    async def load_tokens(self, issuer: str, resource: str) -> OAuthTokens | None:
        return OAuthTokens.from_json(self._tokens.get((issuer, resource)))

    async def save_tokens(self, issuer: str, resource: str, tokens: OAuthTokens) -> None:
        self._tokens[(issuer, resource)] = tokens.to_json()

    async def delete_tokens(self, issuer: str, resource: str) -> None:
        self._tokens.pop((issuer, resource), None)

    async def load_client(self, issuer: str) -> ClientRegistration | None:
        return ClientRegistration.from_json(self._clients.get(issuer))

    async def save_client(self, issuer: str, client: ClientRegistration) -> None:
        self._clients[issuer] = client.to_json()

    async def delete_client(self, issuer: str) -> None:
        self._clients.pop(issuer, None)


class FileTokenStore:
    """A :class:`TokenStore` in one JSON file that survives restarts (``~`` in ``path`` is expanded).

    The file is created with mode 0600 (its directory, if missing, with 0700), rewritten atomically (a
    new file renamed over the old one, so a crash never leaves half a file), and read again before every
    change, so that two processes sharing it lose at most a concurrent write, never the file.  A file
    that is not this store's JSON is treated as empty (with a warning) and replaced on the next save.
    It holds refresh tokens and client secrets: keep it where only its owner can read it."""

    VERSION = 1

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._lock = trio.Lock()

    def _read(self) -> dict[str, Any]:
        empty: dict[str, Any] = {"version": self.VERSION, "tokens": {}, "clients": {}}
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return empty
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("tokens"), dict)
            or not isinstance(data.get("clients"), dict)
        ):
            logger.warning("%s is not a token store file; starting from an empty store", self.path)
            return empty
        return data

    def _write(self, data: dict[str, Any]) -> None:
        parent = self.path.parent
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = parent / f".{self.path.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1, sort_keys=True)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise

    async def _load(self) -> dict[str, Any]:
        async with self._lock:
            return await trio.to_thread.run_sync(self._read)

    async def _change(self, section: str, key: str, sub: str | None, value: dict[str, Any] | None) -> None:
        def change() -> None:
            data = self._read()
            entries = data[section]
            if sub is None:
                if value is None:
                    entries.pop(key, None)
                else:
                    entries[key] = value
            else:
                inner = entries.get(key)
                inner = inner if isinstance(inner, dict) else {}
                if value is None:
                    inner.pop(sub, None)
                else:
                    inner[sub] = value
                if inner:
                    entries[key] = inner
                else:
                    entries.pop(key, None)
            data["version"] = self.VERSION
            self._write(data)

        async with self._lock:
            await trio.to_thread.run_sync(change)

    async def load_tokens(self, issuer: str, resource: str) -> OAuthTokens | None:
        inner = (await self._load())["tokens"].get(issuer)
        return OAuthTokens.from_json(inner.get(resource) if isinstance(inner, dict) else None)

    async def save_tokens(self, issuer: str, resource: str, tokens: OAuthTokens) -> None:
        await self._change("tokens", issuer, resource, tokens.to_json())

    async def delete_tokens(self, issuer: str, resource: str) -> None:
        await self._change("tokens", issuer, resource, None)

    async def load_client(self, issuer: str) -> ClientRegistration | None:
        return ClientRegistration.from_json((await self._load())["clients"].get(issuer))

    async def save_client(self, issuer: str, client: ClientRegistration) -> None:
        await self._change("clients", issuer, None, client.to_json())

    async def delete_client(self, issuer: str) -> None:
        await self._change("clients", issuer, None, None)
