"""The python-sdk's dispatch seam, backed by mcp_trio's transport.

The SDK's server kernel (``ServerRunner``) answers a request given a ``DispatchContext``: the request's
back-channel (notifications, progress, server-to-client requests) and what the transport can do.  Here
that channel is the request's own :class:`~mcp_trio._app.context.Context`: a message the SDK's handler
sends travels on the stream of the request it belongs to (a 2025 POST's SSE stream, a 2026 answer's
stream, a WebSocket or stdio connection), and a server-to-client request's answer comes back through the
session that owns the request.  :class:`SessionChannel` is a 2025 session's standalone channel (its GET
stream): the SDK's connection-scoped ``outbound``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as mt
import trio
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken as SDKAccessToken
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext

from .._app.context import Context
from .._protocol import jsonrpc
from ..auth.server._token import AccessToken
from ..errors import RPCError

if TYPE_CHECKING:
    from contextvars import Token

__all__ = ["RequestChannel", "SessionChannel", "principal_as_sdk_user"]


def _as_dict(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if params is None else dict(params)


async def _client_request(
    send: Any, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None
) -> dict[str, Any]:
    """A server-to-client request through ``send(method, params)``; the client's error as ``MCPError``
    (what the SDK's handlers expect), ``opts["timeout"]`` honoured as the SDK does (-32001)."""
    timeout = (opts or {}).get("timeout")
    try:
        with trio.fail_after(timeout if timeout is not None else float("inf")):
            result: dict[str, Any] = await send(method, _as_dict(params))
            return result
    except RPCError as exc:
        raise MCPError(exc.code, exc.message, exc.data) from None
    except trio.TooSlowError:
        raise MCPError(mt.REQUEST_TIMEOUT, f"Timed out waiting for the client's answer to {method}") from None


class RequestChannel:
    """A ``DispatchContext`` for one request: its messages go where the request's :class:`Context` sends
    them.  ``can_send_request``: 2025 sessions (never a 2026 request: the protocol forbids it)."""

    __slots__ = ("_cancel", "_ctx", "can_send_request", "transport")

    def __init__(self, ctx: Context, *, kind: str, can_send_request: bool) -> None:
        self._ctx = ctx
        self._cancel: anyio.Event | None = None
        self.can_send_request = can_send_request
        self.transport = TransportContext(kind=kind, can_send_request=can_send_request)

    @property
    def request_id(self) -> mt.RequestId | None:
        return self._ctx.request_id

    @property
    def message_metadata(self) -> ServerMessageMetadata:
        return ServerMessageMetadata(
            related_request_id=self._ctx.request_id,
            close_sse_stream=self._close_sse_stream,
            close_standalone_sse_stream=self._close_standalone_sse_stream,
        )

    async def _close_sse_stream(self) -> None:
        self._ctx.peer.close_sse_stream(self._ctx.request_id)

    async def _close_standalone_sse_stream(self) -> None:
        self._ctx.peer.close_sse_stream(None)

    @property
    def cancel_requested(self) -> anyio.Event:
        """Never set: ``notifications/cancelled`` cancels the handler's task itself (its scope is the
        request's, in the session's nursery)."""
        if self._cancel is None:
            self._cancel = anyio.Event()
        return self._cancel

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        if not self.can_send_request:
            raise NoBackChannelError(method)
        return await _client_request(self._ctx.request, method, params, opts)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        await self._ctx.send_notification(method, _as_dict(params))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        await self._ctx.report_progress(progress, total, message)


class SessionChannel:
    """A 2025 session's standalone channel (the SDK connection's ``outbound``): notifications go to its
    GET stream, requests (``ping``) wait for the client's answer.  The session is known from its first
    request on (``peer``); before that there is nowhere to send, and a notification is dropped."""

    __slots__ = ("peer",)

    def __init__(self) -> None:
        self.peer: Any = None

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        peer = self.peer
        if peer is None:
            raise NoBackChannelError(method)

        async def send(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
            result: dict[str, Any] = await peer.request(method, params, None)
            return result

        return await _client_request(send, method, params, opts)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        if self.peer is not None:
            await self.peer.send_message(jsonrpc.notification(method, _as_dict(params)))


def principal_as_sdk_user(principal: object) -> AuthenticatedUser | None:
    """mcp_trio's verified :class:`~mcp_trio.auth.AccessToken` as the python-sdk's authenticated user
    (what its ``get_access_token()`` returns inside a handler); None for any other principal."""
    if not isinstance(principal, AccessToken):
        return None
    token = SDKAccessToken(
        token=principal.token,
        client_id=principal.client_id or "",
        scopes=sorted(principal.scopes),
        expires_at=int(principal.expires_at) if principal.expires_at is not None else None,
        resource=principal.audience[0] if principal.audience else None,
        subject=principal.subject,
        claims=dict(principal.claims) or None,
    )
    return AuthenticatedUser(token)


def enter_principal(principal: object) -> Token[AuthenticatedUser | None] | None:
    """Make ``principal`` the SDK's current user for the calling task (reset with the returned token)."""
    user = principal_as_sdk_user(principal)
    return None if user is None else auth_context_var.set(user)


def leave_principal(token: Token[AuthenticatedUser | None] | None) -> None:
    if token is not None:
        auth_context_var.reset(token)
