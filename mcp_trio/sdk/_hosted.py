"""A python-sdk server as mcp_trio's transport serves it (see :mod:`mcp_trio._transport.core`).

The SDK's kernel does what the SDK does (version negotiation, the init gate, parameter validation, its
handlers and middleware, result shaping); mcp_trio's transport does the rest.  A 2025 session keeps one
SDK ``Connection`` and ``ServerRunner`` (its *kernel*), made by ``initialize``; each request runs the
kernel's ``on_request`` in the request's own task, in the session's nursery.  A 2026 request runs the
SDK's single-exchange entry (``serve_one``) in the request's scope.  A session adopted from another
worker gets its kernel again on its first request, brought to the state its record holds (``initialize``,
``notifications/initialized``, the log level, the resource subscriptions), without the client noticing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import mcp_types as mt
import mcp_types.methods as mtm
import pydantic
import trio
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer as SDKMCPServer
from mcp.server.runner import ServerRunner, aclose_shielded, serve_one
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.transport_context import TransportContext

from .._app.bus import LocalNotificationBus, NotificationBus, Subscriber
from .._app.context import LOG_LEVELS, Context
from .._app.failures import Failures
from .._app.lifespan import Lifespan
from .._app.principal import principal_identity
from .._app.server import MAX_URI_LENGTH, Initialized, client_declared
from .._observe.telemetry import HTTP, PIPE, WEBSOCKET, Telemetry
from .._protocol import versions
from .._protocol.modern import header_parameters
from .._runtime.containment import contained
from ..errors import RPCError
from ._asyncio import on_trio
from ._bridge import EventBridge
from ._channel import RequestChannel, SessionChannel, enter_principal, leave_principal

__all__ = ["HostedServer", "SDKServer"]

logger = logging.getLogger("mcp_trio.sdk")

SDKServer = SDKMCPServer[Any] | Server[Any]
"""What can be hosted: the python-sdk's ``MCPServer`` or its low-level ``Server``."""


class _Kernel:
    """The SDK's state of one 2025 session: its ``Connection`` and ``ServerRunner``."""

    __slots__ = ("connection", "outbound", "runner")

    def __init__(self, server: Server[Any], lifespan_state: Any) -> None:
        self.outbound = SessionChannel()
        self.connection = Connection.for_loop(self.outbound)
        self.runner: ServerRunner[Any] = ServerRunner(server, self.connection, lifespan_state)

    def bind(self, peer: Any) -> None:
        """The session is known (it is made after ``initialize`` is answered): its standalone channel
        and its id (the SDK's ``ctx.session_id``)."""
        if self.outbound.peer is not peer:
            self.outbound.peer = peer
            self.connection.session_id = peer.session_id


class HostedServer:
    """A python-sdk server (``mcp.server.mcpserver.MCPServer`` or ``mcp.server.lowlevel.Server``) served
    by mcp_trio's transport: what :func:`~mcp_trio.sdk.hosted_app` makes an :class:`~mcp_trio.MCPApp` of.

    ``notification_bus``: where the SDK server's list-changed and resource-updated events are published
    (a :class:`mcp_trio.redis.RedisNotificationBus` reaches every worker's sessions); ``error_details``:
    an unexpected exception's type and text in the answer (as :class:`mcp_trio.MCPServer`);
    ``max_subscriptions``: most resource URIs one ``subscriptions/listen`` filter names.
    """

    own_request_state = False  # the SDK seals its own requestState (RequestStateSecurity)

    def __init__(
        self,
        server: SDKServer,
        *,
        notification_bus: NotificationBus | None = None,
        error_details: bool = False,
        max_subscriptions: int = 1000,
    ) -> None:
        if isinstance(server, SDKMCPServer):
            lowlevel: Server[Any] = server._lowlevel_server
            self._events: Any = server._subscriptions
        elif isinstance(server, Server):
            lowlevel, self._events = server, None
        else:
            raise TypeError(f"not a python-sdk server: {type(server).__name__}")
        self.sdk_server = server
        """The hosted server, as given."""
        self.lowlevel = lowlevel
        # mcp_trio's transport makes each operation's SERVER span (with the session, the network and the
        # error policy's attributes); the SDK's default span middleware would make a second one for the
        # same operation.  Dropping it is the SDK's documented opt-out (``Server.middleware``).
        lowlevel.middleware = [m for m in lowlevel.middleware if not isinstance(m, OpenTelemetryMiddleware)]
        self.name = lowlevel.name
        self.version = lowlevel.version or ""
        self.max_subscriptions = max_subscriptions
        self.max_uri_length = MAX_URI_LENGTH
        self.failures = Failures(details=error_details)
        self.telemetry = Telemetry("server", self._registered, principal_identity)
        self.notifications: NotificationBus = (
            LocalNotificationBus() if notification_bus is None else notification_bus
        )
        self.lifespan: Lifespan[Any] = Lifespan(f"python-sdk server {self.name!r}", _sdk_lifespan)
        self._listen = lowlevel.get_request_handler("subscriptions/listen") is not None
        self._ended, _ = trio.open_memory_channel[Connection](0)  # the lifespan opens the one it drains

    def __repr__(self) -> str:
        return (
            f"HostedServer({type(self.sdk_server).__module__}.{type(self.sdk_server).__name__} {self.name!r})"
        )

    def _registered(self, kind: str, name: str) -> bool:
        """Only names the server has are span names' targets and metric attributes."""
        if kind == "tool" and isinstance(self.sdk_server, SDKMCPServer):
            return self.sdk_server._tool_manager.get_tool(name) is not None
        if kind == "prompt" and isinstance(self.sdk_server, SDKMCPServer):
            return self.sdk_server._prompt_manager.get_prompt(name) is not None
        if kind == "method":
            return self.lowlevel.get_request_handler(name) is not None
        return False

    # -- what the transport needs ------------------------------------------------------------

    def attach(self, peer: Subscriber) -> None:
        self.notifications.subscribe(peer)

    def detach(self, peer: Subscriber) -> None:
        """A peer leaves the bus; a 2025 session that ends here also ends its SDK connection: the
        cleanup handlers and middleware pushed on ``connection.exit_stack`` run (in a task of the
        server's lifespan, as the SDK's own drivers run them: shielded, bounded, failures logged)."""
        self.notifications.unsubscribe(peer)
        kernel = getattr(peer, "hosted", None)
        if isinstance(kernel, _Kernel):
            try:
                self._ended.send_nowait(kernel.connection)
            except (trio.ClosedResourceError, trio.BrokenResourceError):  # the lifespan has ended
                logger.warning(
                    "session %s ended after the server's lifespan", getattr(peer, "session_id", None)
                )

    def open_lifespan(
        self, *, grace: float, graceful: Callable[[], bool] = lambda: False
    ) -> AbstractAsyncContextManager[Any]:
        """The SDK server's lifespan (``MCPServer(lifespan=...)``, ``Server(lifespan=...)``), with the
        task that carries its list-changed and resource-updated events to :attr:`notifications`."""
        return self.lifespan.open(self, grace=grace, graceful=graceful)

    @property
    def lifespan_context(self) -> Any:
        return self.lifespan.value

    async def initialize_session(self, params: dict[str, Any] | None) -> Initialized:
        kernel = _Kernel(self.lowlevel, self.lifespan.value)
        channel = _InitChannel()
        result = await self._call(kernel.runner.on_request(channel, "initialize", params))
        client = kernel.connection.client_params
        revision = versions.revision(str(result.get("protocolVersion")))
        if client is None or revision is None or revision.modern:  # pragma: no cover - the SDK negotiated
            raise RPCError(mt.INTERNAL_ERROR, "Internal error: the server negotiated no 2025 revision")
        client_info, capabilities = client_declared(client)  # kept on the session, as MCPServer keeps them
        return Initialized(revision, client_info, capabilities, result, kernel)

    def notified(
        self, peer: Any, method: str, params: dict[str, Any] | None
    ) -> Callable[[], Awaitable[object]] | None:
        """The SDK's handling of a client notification (``notifications/initialized`` opens the SDK's
        init gate; ``notifications/roots/list_changed`` and others reach the server's handlers), in a
        task of the session.  None before the session has its kernel (an adopted session replays
        ``notifications/initialized`` when it is rebuilt) and for one the server has no handler for."""
        kernel = peer.hosted
        if not isinstance(kernel, _Kernel):
            return None
        kernel.bind(peer)
        if method == "notifications/initialized":
            kernel.connection.initialized.set()
        if self.lowlevel.get_notification_handler(method) is None:
            return None

        async def handle() -> None:
            with contained(f"the python-sdk server's handler of {method}"):
                await on_trio(kernel.runner.on_notify(_InitChannel(), method, params))

        return handle

    def knows(self, method: str, revision: versions.Revision) -> bool:
        if method == "subscriptions/listen":
            return self._listen and revision.modern
        if self.lowlevel.get_request_handler(method) is None:
            return False
        return method not in mtm.SPEC_CLIENT_METHODS or (method, revision.name) in mtm.CLIENT_REQUESTS

    async def handle_request(
        self, ctx: Context, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        peer: Any = ctx.peer
        revision = versions.revision(ctx.protocol_version)
        if revision is not None and revision.modern:
            route = classify_inbound_request({"method": method, "params": params})
            if isinstance(route, InboundLadderRejection):
                raise RPCError(route.code, route.message, route.data)
            connection = Connection.from_envelope(
                route.protocol_version, route.client_info, route.client_capabilities
            )
            channel = RequestChannel(ctx, kind=_kind(peer), can_send_request=False)
            call = serve_one(
                self.lowlevel,
                channel,
                method,
                params,
                connection=connection,
                lifespan_state=self.lifespan.value,
            )
            result = await self._call(call, ctx.principal)
            if method == "server/discover" and "supportedVersions" in result:
                # the endpoint serves both eras: the versions are the transport's to say (the SDK's
                # default lists the 2026 ones only, and the -32022 error must agree with discover)
                result["supportedVersions"] = versions.supported_versions()
            return result
        kernel = peer.hosted
        if not isinstance(kernel, _Kernel):
            kernel = await self._restored(peer)
        kernel.bind(peer)
        channel = RequestChannel(ctx, kind=_kind(peer), can_send_request=True)
        if method == "resources/subscribe":
            self._check_subscription(peer, params)
        result = await self._call(kernel.runner.on_request(channel, method, params), ctx.principal)
        _record(peer, method, params)
        return result

    def _check_subscription(self, peer: Any, params: dict[str, Any] | None) -> None:
        """A session keeps at most :attr:`max_subscriptions` resource URIs, none longer than
        :attr:`max_uri_length` (as :class:`mcp_trio.MCPServer`'s): refused before the SDK's handler."""
        uri = (params or {}).get("uri")
        if not isinstance(uri, str):
            return  # the SDK refuses it (-32602)
        if len(uri) > self.max_uri_length:
            raise RPCError(mt.INVALID_PARAMS, f"Invalid params: URI longer than {self.max_uri_length}")
        if uri not in peer.subscriptions and len(peer.subscriptions) >= self.max_subscriptions:
            raise self._too_many_subscriptions()

    async def _call(self, call: Any, principal: object = None) -> dict[str, Any]:
        """Await the SDK's answer in the calling task (as the SDK's user for its ``get_access_token``);
        its errors as :class:`RPCError`, an unexpected exception by the error policy (logged, -32603)."""
        token = enter_principal(principal)
        try:
            result: dict[str, Any] = await on_trio(call)
            return result
        except (MCPError, pydantic.ValidationError) as exc:
            error = handler_exception_to_error_data(exc)
            assert error is not None
            raise RPCError(error.code, error.message, error.data) from None
        except Exception as exc:
            raise self.failures.rpc_error("a request's handler", exc) from exc
        finally:
            leave_principal(token)

    async def _restored(self, peer: Any) -> _Kernel:
        """The kernel of an adopted session, rebuilt once: requests that arrive while it is being
        rebuilt wait for it (and fail, -32603, if rebuilding failed: the next request tries again)."""
        pending = peer.hosted
        if isinstance(pending, trio.Event):
            await pending.wait()
            if isinstance(peer.hosted, _Kernel):
                return peer.hosted
            raise RPCError(mt.INTERNAL_ERROR, "Internal error: the session's state could not be restored")
        done = peer.hosted = trio.Event()
        try:
            kernel = await self._restore(peer)
            peer.hosted = kernel
            return kernel
        finally:
            if peer.hosted is done:
                peer.hosted = None
            done.set()

    async def _restore(self, peer: Any) -> _Kernel:
        """The kernel of a session adopted from another worker: ``initialize`` and
        ``notifications/initialized`` replayed from its record, then its log level and subscriptions."""
        kernel = _Kernel(self.lowlevel, self.lifespan.value)
        kernel.bind(peer)
        params = {
            "protocolVersion": peer.protocol_version,
            "capabilities": peer.client_capabilities,
            "clientInfo": peer.client_info or {"name": "unknown", "version": ""},
        }
        await self._call(kernel.runner.on_request(_InitChannel(), "initialize", params))
        await kernel.runner.on_notify(_InitChannel(), "notifications/initialized", None)
        replays: list[tuple[str, dict[str, Any]]] = []
        if peer.log_level is not None:
            replays.append(("logging/setLevel", {"level": peer.log_level}))
        replays.extend(("resources/subscribe", {"uri": uri}) for uri in sorted(peer.subscriptions))
        for method, params in replays:
            if self.lowlevel.get_request_handler(method) is None:
                continue
            try:
                await self._call(kernel.runner.on_request(_InitChannel(), method, params))
            except RPCError as exc:
                logger.warning("session %s: replaying %s failed: %s", peer.session_id, method, exc.message)
        return kernel

    def tool_header_params(self, name: object) -> dict[str, tuple[str, ...]] | None:
        """The ``x-mcp-header`` parameters of a tool, from the input schema the SDK server gives
        (``get_tool_input_schema``: ``MCPServer`` has it; a low-level ``Server`` may set it)."""
        lookup = self.lowlevel.get_tool_input_schema
        if lookup is None or not isinstance(name, str):
            return None
        schema = lookup(name)
        return None if schema is None else header_parameters(schema)

    def result_meta(self) -> dict[str, Any]:
        return {mt.SERVER_INFO_META_KEY: self.lowlevel.server_info_stamp}

    def subscription_filter(self, wanted: mt.SubscriptionFilter) -> mt.SubscriptionFilter:
        uris = wanted.resource_subscriptions or ()
        if len(uris) > self.max_subscriptions:
            raise self._too_many_subscriptions()
        for uri in uris:
            if len(uri) > self.max_uri_length:
                raise RPCError(mt.INVALID_PARAMS, f"Invalid params: URI longer than {self.max_uri_length}")
        has = self.lowlevel.get_request_handler
        resources = has("resources/list") is not None or has("resources/templates/list") is not None
        return mt.SubscriptionFilter(
            tools_list_changed=(wanted.tools_list_changed and has("tools/list") is not None) or None,
            prompts_list_changed=(wanted.prompts_list_changed and has("prompts/list") is not None) or None,
            resources_list_changed=(wanted.resources_list_changed and resources) or None,
            resource_subscriptions=(wanted.resource_subscriptions if resources else None) or None,
        )

    def _too_many_subscriptions(self) -> RPCError:
        return RPCError(
            mt.INVALID_PARAMS, f"Invalid params: more than {self.max_subscriptions} subscriptions"
        )


def _kind(peer: object) -> str:
    """The SDK's ``TransportContext.kind`` of a peer's transport."""
    carrier = getattr(peer, "carrier", HTTP)
    if carrier == PIPE:
        return "stdio"
    return "websocket" if carrier == WEBSOCKET else "streamable-http"


def _record(peer: Any, method: str, params: dict[str, Any] | None) -> None:
    """Keep what the session's record holds (so an adopting worker restores it): the log level the
    client set, the resources it subscribed to (which also route resource-updated events to it)."""
    params = params or {}
    if method == "logging/setLevel" and params.get("level") in LOG_LEVELS:
        peer.log_level = params["level"]
    elif method in ("resources/subscribe", "resources/unsubscribe") and isinstance(params.get("uri"), str):
        if method == "resources/subscribe":
            if isinstance(peer.subscriptions, frozenset):
                peer.subscriptions = set()
            peer.subscriptions.add(params["uri"])
        else:
            peer.subscriptions.discard(params["uri"])


class _InitChannel:
    """The channel of a request the transport answers at once (``initialize``, replays): no
    back-channel (the SDK forbids awaiting the peer during ``initialize``)."""

    request_id = None
    can_send_request = False
    message_metadata = None

    def __init__(self) -> None:
        self.transport = TransportContext(kind="streamable-http", can_send_request=False)
        self.cancel_requested = anyio.Event()

    async def send_raw_request(self, method: str, params: Any, opts: Any = None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Any, opts: Any = None) -> None:
        pass

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        pass


async def _close_connections(ending: trio.MemoryReceiveChannel[Connection]) -> None:
    """End the SDK connections of the sessions that ended, until the lifespan ends (then the rest)."""
    async with ending:
        async for connection in ending:
            await aclose_shielded(connection)


@asynccontextmanager
async def _sdk_lifespan(hosted: HostedServer) -> AsyncIterator[Any]:
    """The SDK server's own lifespan, the bridge of its events to the transport's bus, and the task
    that ends the SDK connections of ended sessions (all of them before the SDK's lifespan is left)."""
    hosted._ended, ending = trio.open_memory_channel[Connection](math.inf)
    async with trio.open_nursery() as bridging:
        if hosted._events is not None:
            bridge = EventBridge(hosted._events, hosted.notifications)
            await bridging.start(bridge.run)
        async with hosted.lowlevel.lifespan(hosted.lowlevel) as state, trio.open_nursery() as closing:
            closing.start_soon(_close_connections, ending)
            try:
                yield state
            finally:
                hosted._ended.close()  # the sessions have ended: the closer ends once it drained
        bridging.cancel_scope.cancel()
