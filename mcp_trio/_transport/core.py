"""What the transport needs of the server it serves: the few operations every transport calls.

:class:`~mcp_trio._app.server.MCPServer` is one implementation; a python-sdk server hosted by
:func:`mcp_trio.sdk.hosted_app` (:class:`mcp_trio.sdk.HostedServer`) is the other.  The transport owns
everything around a request (admission, sessions and their nurseries, streams, resumption, limits,
shutdown, telemetry); the server answers requests in a :class:`~mcp_trio._app.context.Context` whose peer
carries the server-to-client channel of the request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as mt

from .._protocol import versions
from ..errors import RPCError

if TYPE_CHECKING:
    from .._app.bus import NotificationBus, Subscriber
    from .._app.context import Context
    from .._app.lifespan import Lifespan
    from .._app.server import Initialized
    from .._observe.telemetry import Telemetry

__all__ = ["ServerCore"]


class ServerCore(Protocol):
    """A server, as the transport serves it."""

    name: str
    version: str
    telemetry: Telemetry
    """What its requests and sessions are recorded into."""
    notifications: NotificationBus
    """Where its own notifications (list changes, resource updates) are published."""
    lifespan: Lifespan[Any]
    max_subscriptions: int
    own_request_state: bool
    """Whether the transport seals a 2026 request's ``requestState`` (input rounds) for it."""

    def open_lifespan(self, *, grace: float, graceful: Any = ...) -> AbstractAsyncContextManager[Any]: ...

    def attach(self, peer: Subscriber) -> None: ...

    def detach(self, peer: Subscriber) -> None: ...

    async def initialize_session(self, params: dict[str, Any] | None) -> Initialized:
        """Answer a 2025 ``initialize`` (RPCError to refuse it)."""
        ...

    def notified(
        self, peer: Any, method: str, params: dict[str, Any] | None
    ) -> Callable[[], Awaitable[object]] | None:
        """A client's notification to a 2025 session (``notifications/cancelled`` aside, which the
        transport handles): what to run for it, in a task of the session; None for nothing."""
        ...

    def knows(self, method: str, revision: versions.Revision) -> bool:
        """Whether ``method`` is served in ``revision`` (others get -32601 before anything runs)."""
        ...

    async def handle_request(
        self, ctx: Context, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The result of one request (RPCError for an error answer)."""
        ...

    def tool_header_params(self, name: object) -> dict[str, tuple[str, ...]] | None: ...

    def result_meta(self) -> dict[str, Any]:
        """The ``_meta`` of a 2026 result this transport writes itself (who answered)."""
        ...

    def subscription_filter(self, wanted: mt.SubscriptionFilter) -> mt.SubscriptionFilter:
        """What a ``subscriptions/listen`` filter gets (RPCError -32602 for one too large)."""
        ...

    def _too_many_subscriptions(self) -> RPCError: ...
