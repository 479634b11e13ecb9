"""mcp_trio: the Model Context Protocol over Streamable HTTP, with Trio's structured concurrency."""

from ._app.bus import LocalNotificationBus, NotificationBus
from ._app.context import Context
from ._app.inputs import InputRequest
from ._app.server import MCPServer
from ._client.session import ClientSession, open_client_session, open_stdio_client
from ._exceptions import (
    LocalProtocolError,
    MCPTrioError,
    ProtocolError,
    RemoteProtocolError,
    RPCError,
    SessionError,
    SessionExpired,
    SkillVerificationError,
    TransportError,
)
from ._server.asgi import MCPApp
from ._server.config import HTTPRequestInfo, ServerConfig
from ._server.eventstore import EventStore, InMemoryEventStore, StoredEvent
from ._server.h11server import H11Config, serve_h11
from ._server.serve import hypercorn_config, serve
from ._server.session import LocalSessionRegistry, SessionRegistry
from ._stdio import serve_stdio

__version__ = "0.1.0"

__all__ = [
    "ClientSession",
    "Context",
    "EventStore",
    "H11Config",
    "HTTPRequestInfo",
    "InMemoryEventStore",
    "InputRequest",
    "LocalNotificationBus",
    "LocalProtocolError",
    "LocalSessionRegistry",
    "MCPApp",
    "MCPServer",
    "MCPTrioError",
    "NotificationBus",
    "ProtocolError",
    "RPCError",
    "RemoteProtocolError",
    "ServerConfig",
    "SessionError",
    "SessionExpired",
    "SessionRegistry",
    "SkillVerificationError",
    "StoredEvent",
    "TransportError",
    "hypercorn_config",
    "open_client_session",
    "open_stdio_client",
    "serve",
    "serve_h11",
    "serve_stdio",
]
