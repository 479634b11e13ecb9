"""The MCP server as an OAuth 2.1 protected resource: :class:`ProtectedResource` (what to protect and
how), its RFC 9728 metadata, and :class:`BearerGuard`, which :class:`~mcp_trio.MCPApp` runs on each
request (the bearer token of the ``Authorization`` header, RFC 6750 challenges, per-operation scopes).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import mcp_types as mt
import trio

from ..._protocol.http import is_loopback
from ..._protocol.modern import NAMED_METHODS
from ...errors import RemoteProtocolError
from ._token import AccessToken, InvalidToken, TokenVerifier, VerifierUnavailable

__all__ = ["MAX_TOKEN_SIZE", "WELL_KNOWN", "BearerGuard", "ProtectedResource", "check_url"]

logger = logging.getLogger("mcp_trio.auth")

WELL_KNOWN = "/.well-known/oauth-protected-resource"
MAX_TOKEN_SIZE = 16 * 1024
"""A bearer token longer than this (bytes) is refused (401) without being looked at."""

_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+")
"""What an absolute URL may hold here (RFC 3986 characters): it goes into quoted header values."""
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
"""A scope token (RFC 6749 section 3.3): visible ASCII but ``"`` and ``\\``."""
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""A bearer token (RFC 6750 section 2.1, ``b64token``)."""
_SAFE_TEXT = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
"""What an ``error_description`` may not hold (RFC 6750 section 3)."""


def check_url(url: object, what: str, *, query: bool = True) -> str:
    """``url`` if it is an absolute ``https`` URL, or ``http`` on a loopback host (127.0.0.1, [::1],
    localhost), with no fragment and no user info; ValueError naming ``what`` otherwise."""
    if not isinstance(url, str) or not _URL_CHARS.fullmatch(url):
        raise ValueError(f"{what} must be an absolute URL, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute https:// URL, got {url!r}")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"{what} must use https (plain http only on a loopback host), got {url!r}")
    if parts.fragment or "#" in url or "@" in parts.netloc:
        raise ValueError(f"{what} must have no fragment and no user info, got {url!r}")
    if not query and parts.query:
        raise ValueError(f"{what} must have no query, got {url!r}")
    return url


def _scopes(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a sequence of scope strings, such as ({value!r},)")
    scopes = tuple(value)
    for scope in scopes:
        if not isinstance(scope, str) or not _SCOPE_TOKEN.fullmatch(scope):
            raise ValueError(
                f"{what}: {scope!r} is not a scope (visible ASCII, no space, quote or backslash)"
            )
    return tuple(dict.fromkeys(scopes))


def _scope_table(value: object, what: str) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a mapping of names to sequences of scopes")
    table = {}
    for key, scopes in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{what}: keys are names (strings), got {key!r}")
        table[key] = _scopes(scopes, f"{what}[{key!r}]")
    return MappingProxyType(table)


@dataclass(frozen=True, eq=False)
class ProtectedResource:
    """The MCP endpoint as an OAuth 2.1 protected resource: give it as ``ServerConfig(oauth=...)``.

    Every request to the endpoint (both protocol eras; POST, GET and DELETE) must then carry
    ``Authorization: Bearer <token>``, checked by ``verifier`` before any JSON-RPC is read, and the
    token must grant the scopes the request needs: ``required_scopes`` always, plus those of its
    JSON-RPC method (``method_scopes``) and of the tool, prompt or resource it names.  The metadata
    of RFC 9728 is served, without authentication, at ``/.well-known/oauth-protected-resource`` followed
    by the endpoint's path, and at ``/.well-known/oauth-protected-resource`` itself.
    """

    resource: str
    """The canonical URL of the MCP endpoint as clients reach it (``https://mcp.example.com/mcp``):
    tokens must name it as their audience (RFC 8707).  ``https``, or ``http`` on a loopback host."""
    authorization_servers: Sequence[str]
    """Issuer URLs of the authorization servers whose tokens are accepted (at least one)."""
    verifier: TokenVerifier
    scopes_supported: Sequence[str] = ()
    """Advertised in the metadata (clients that get no ``scope`` in a challenge ask for these)."""
    required_scopes: Sequence[str] = ()
    """Needed for every request (and named in the ``scope`` of the 401 challenge)."""
    method_scopes: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More scopes by JSON-RPC method (``{"tools/call": ["mcp:tools"]}``)."""
    tool_scopes: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More scopes by tool name, for ``tools/call``."""
    resource_name: str | None = None
    """A human-readable name of the server, in the metadata."""
    bearer_methods_supported: Sequence[str] = ("header",)
    prompt_scopes: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More scopes by prompt name, for ``prompts/get``."""
    resource_scopes: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More scopes by resource URI (exactly as requested), for ``resources/read``."""
    verify_timeout: float = 15.0
    """A verification that takes longer than this (seconds) is abandoned: 503."""

    def __post_init__(self) -> None:
        check_url(self.resource, "resource", query=False)
        servers = self.authorization_servers
        if isinstance(servers, (str, bytes)) or not isinstance(servers, Iterable):
            raise TypeError("authorization_servers must be a sequence of issuer URLs, such as (url,)")
        servers = tuple(servers)
        if not servers:
            raise ValueError("authorization_servers: at least one authorization server is needed")
        for url in servers:
            check_url(url, "authorization server", query=False)
        if not callable(getattr(self.verifier, "verify", None)):
            raise TypeError("verifier must have an async verify(token) method (a TokenVerifier)")
        methods = tuple(self.bearer_methods_supported)
        if not set(methods) <= {"header", "body", "query"}:
            raise ValueError("bearer_methods_supported holds 'header', 'body' or 'query'")
        if not self.verify_timeout > 0:
            raise ValueError("verify_timeout must be positive")
        if self.resource_name is not None and not isinstance(self.resource_name, str):
            raise TypeError("resource_name must be a string")
        fixed: dict[str, Any] = {
            "authorization_servers": servers,
            "scopes_supported": _scopes(self.scopes_supported, "scopes_supported"),
            "required_scopes": _scopes(self.required_scopes, "required_scopes"),
            "method_scopes": _scope_table(self.method_scopes, "method_scopes"),
            "tool_scopes": _scope_table(self.tool_scopes, "tool_scopes"),
            "prompt_scopes": _scope_table(self.prompt_scopes, "prompt_scopes"),
            "resource_scopes": _scope_table(self.resource_scopes, "resource_scopes"),
            "bearer_methods_supported": methods,
        }
        for name, value in fixed.items():
            object.__setattr__(self, name, value)

    @property
    def metadata_url(self) -> str:
        """Where the metadata is (RFC 9728 section 3.1): the well-known path inserted between the host
        and the path of ``resource`` (a trailing ``/`` of the path dropped)."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{parts.path.rstrip('/')}"

    def metadata(self) -> dict[str, Any]:
        """The protected resource metadata document (RFC 9728 section 2)."""
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": list(self.authorization_servers),
        }
        if self.scopes_supported:
            document["scopes_supported"] = list(self.scopes_supported)
        document["bearer_methods_supported"] = list(self.bearer_methods_supported)
        if self.resource_name is not None:
            document["resource_name"] = self.resource_name
        return document

    def scopes_for(self, method: str | None, name: str | None = None) -> tuple[str, ...]:
        """The scopes a request needs: ``required_scopes``, those of ``method``, and those of the tool,
        prompt or resource ``name`` it names (``tools/call``, ``prompts/get``, ``resources/read``)."""
        needed = list(self.required_scopes)
        if method is not None:
            needed.extend(self.method_scopes.get(method, ()))
            table = _NAMED_TABLES.get(method)
            if table is not None and name is not None:
                needed.extend(getattr(self, table).get(name, ()))
        return tuple(dict.fromkeys(needed))


_NAMED_TABLES = {
    "tools/call": "tool_scopes",
    "prompts/get": "prompt_scopes",
    "resources/read": "resource_scopes",
}


class _Malformed(Exception):
    """The ``Authorization`` header is not one bearer token (its message says why)."""


class _Oversized(Exception):
    """The ``Authorization`` header is far too long to hold a token worth looking at."""


def bearer_token(values: Sequence[bytes]) -> str | None:
    """The token of a request's ``Authorization`` header values (RFC 6750 section 2.1): None without
    the header; :class:`_Malformed` when it is not one ``Bearer`` token; :class:`_Oversized` past
    :data:`MAX_TOKEN_SIZE`."""
    if not values:
        return None
    if len(values) > 1:
        raise _Malformed("more than one Authorization header")
    raw = values[0]
    if len(raw) > MAX_TOKEN_SIZE + 16:
        raise _Oversized
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise _Malformed("the Authorization header is not ASCII") from None
    scheme, _, rest = text.strip(" \t").partition(" ")
    if scheme.lower() != "bearer":
        raise _Malformed("the Authorization header must use the Bearer scheme")
    token = rest.strip(" ")
    if not token:
        raise _Malformed("the Bearer scheme needs a token")
    if not _B64TOKEN.fullmatch(token):
        raise _Malformed("the Authorization header must hold exactly one bearer token")
    if len(token) > MAX_TOKEN_SIZE:
        raise _Oversized
    return token


def _quoted(text: str, limit: int = 200) -> str:
    """``text`` fit for a quoted header parameter (RFC 6750 ``error_description``)."""
    return _SAFE_TEXT.sub("?", text)[:limit]


class BearerGuard:
    """What :class:`~mcp_trio.MCPApp` runs for a :class:`ProtectedResource`: the metadata answer, the
    bearer check of each request, and its scope checks.  Sans-IO but for the verifier's call."""

    def __init__(self, resource: ProtectedResource, endpoint_path: str | None) -> None:
        if not isinstance(resource, ProtectedResource):  # ServerConfig.oauth, checked where it is used
            raise TypeError("oauth must be a mcp_trio.auth.ProtectedResource")
        self.resource = resource
        self.metadata_body = json.dumps(resource.metadata(), separators=(",", ":")).encode()
        own = urlsplit(resource.resource).path.rstrip("/")
        paths = {WELL_KNOWN, WELL_KNOWN + own}
        if endpoint_path is not None:
            paths.add(WELL_KNOWN + endpoint_path.rstrip("/"))
        self.paths = frozenset(paths)
        """The request paths the metadata is served at."""
        self._resource_metadata = f'resource_metadata="{resource.metadata_url}"'

    # -- the metadata ---------------------------------------------------------------------------

    def metadata_response(
        self, method: str, cors_request_headers: str | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers, body) answering a request for the metadata: public, readable from any
        web origin (CORS ``*``); GET and HEAD, OPTIONS for a preflight, 405 for anything else."""
        cors = [(b"access-control-allow-origin", b"*")]
        if method in ("GET", "HEAD"):
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(self.metadata_body)).encode()),
                (b"cache-control", b"public, max-age=300"),
                *cors,
            ]
            return 200, headers, b"" if method == "HEAD" else self.metadata_body
        if method == "OPTIONS":
            headers = [*cors, (b"access-control-allow-methods", b"GET, HEAD, OPTIONS")]
            names = [n.strip().lower() for n in (cors_request_headers or "").split(",") if n.strip()]
            if names and all(_SCOPE_TOKEN.fullmatch(n) and "," not in n for n in names):
                headers.append((b"access-control-allow-headers", ", ".join(names).encode()))
            headers.append((b"access-control-max-age", b"7200"))
            return 204, headers, b""
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": mt.INVALID_REQUEST, "message": f"Method Not Allowed: {method}"},
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"allow", b"GET, HEAD, OPTIONS"),
            *cors,
        ]
        return 405, headers, body

    # -- the bearer check -----------------------------------------------------------------------

    async def authenticate(self, headers: Iterable[tuple[bytes, bytes]]) -> AccessToken:
        """The verified token of a request (which must grant ``required_scopes``), or
        :class:`RemoteProtocolError`: 401 (no token, or an invalid one), 400 (a malformed
        ``Authorization`` header), 403 (scopes missing), 503 (the verifier cannot tell now)."""
        values = [value for name, value in headers if name.lower() == b"authorization"]
        try:
            token = bearer_token(values)
        except _Oversized:
            raise self.invalid_token("the token is too large") from None
        except _Malformed as exc:
            raise self._error(400, "invalid_request", str(exc)) from None
        if token is None:
            raise self.unauthorized()
        try:
            with trio.fail_after(self.resource.verify_timeout):
                access = await self.resource.verifier.verify(token)
        except InvalidToken as exc:
            raise self.invalid_token(exc.description) from None
        except (VerifierUnavailable, trio.TooSlowError) as exc:
            logger.debug("token verification unavailable: %s", exc)
            raise self.unavailable() from None
        except Exception:
            logger.exception("the token verifier failed")
            raise RemoteProtocolError(
                "Internal error: the token could not be verified", http_status=500, code=mt.INTERNAL_ERROR
            ) from None
        if not isinstance(access, AccessToken):
            logger.error("the token verifier returned %s, not an AccessToken", type(access).__name__)
            raise RemoteProtocolError(
                "Internal error: the token could not be verified", http_status=500, code=mt.INTERNAL_ERROR
            )
        self.require(access, self.resource.required_scopes)
        return access

    def require(
        self, access: AccessToken, needed: Sequence[str], request_id: mt.RequestId | None = None
    ) -> None:
        """403 ``insufficient_scope`` naming ``needed`` (every scope this operation needs, so that
        the client asks for them all) unless ``access`` grants them."""
        if access.has_scopes(needed):
            return
        missing = [scope for scope in needed if scope not in access.scopes]
        raise self._error(
            403,
            "insufficient_scope",
            f"this operation needs the scope {' '.join(missing)}",
            scope=" ".join(needed),
            request_id=request_id,
        )

    def require_for(
        self,
        access: AccessToken,
        method: str | None,
        name: str | None,
        request_id: mt.RequestId | None = None,
    ) -> None:
        """:meth:`require` the scopes of one request (``method`` naming ``name``)."""
        self.require(access, self.resource.scopes_for(method, name), request_id)

    def require_for_messages(self, access: AccessToken, messages: Iterable[object]) -> None:
        """:meth:`require` the union of the scopes of the requests and notifications of one POST body
        (a 2025 batch, or one message)."""
        needed: dict[str, None] = dict.fromkeys(self.resource.required_scopes)
        ids = []
        for message in messages:
            if not isinstance(message, (mt.JSONRPCRequest, mt.JSONRPCNotification)):
                continue
            if isinstance(message, mt.JSONRPCRequest):
                ids.append(message.id)
            field_name = NAMED_METHODS.get(message.method)
            name = (message.params or {}).get(field_name) if field_name else None
            needed.update(dict.fromkeys(self.resource.scopes_for(message.method, _text(name))))
        self.require(access, tuple(needed), ids[0] if len(ids) == 1 else None)

    # -- the answers ----------------------------------------------------------------------------

    def unauthorized(self) -> RemoteProtocolError:
        """401 for a request without a token: the challenge names the metadata and the required scopes."""
        challenge = f"Bearer {self._resource_metadata}"
        if self.resource.required_scopes:
            challenge += f', scope="{" ".join(self.resource.required_scopes)}"'
        return RemoteProtocolError(
            "Unauthorized: a bearer token is required",
            http_status=401,
            headers=(("www-authenticate", challenge),),
        )

    def invalid_token(self, description: str) -> RemoteProtocolError:
        return self._error(401, "invalid_token", description)

    def unavailable(self) -> RemoteProtocolError:
        return RemoteProtocolError(
            "Service Unavailable: the token cannot be verified now; retry later",
            http_status=503,
            code=mt.INTERNAL_ERROR,
            headers=(("retry-after", "5"),),
        )

    def _error(
        self,
        status: int,
        error: str,
        description: str,
        *,
        scope: str | None = None,
        request_id: mt.RequestId | None = None,
    ) -> RemoteProtocolError:
        text = _quoted(description)
        params = [f'error="{error}"', f'error_description="{text}"']
        if scope:
            params.append(f'scope="{scope}"')
        params.append(self._resource_metadata)
        title = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}[status]
        data: dict[str, str] = {"error": error, "error_description": text}
        if scope:
            data["scope"] = scope
        return RemoteProtocolError(
            f"{title}: {text}",
            http_status=status,
            request_id=request_id,
            data=data,
            headers=(("www-authenticate", "Bearer " + ", ".join(params)),),
        )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
