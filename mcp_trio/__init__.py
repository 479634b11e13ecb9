"""mcp_trio: the Model Context Protocol over Streamable HTTP, with Trio's structured concurrency.

Names are imported on first use: ``import mcp_trio`` alone costs almost nothing, and a program (the
``mcp-trio`` client commands, say) pays only for the parts it touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "ClientSession": "._client.session",
    "Context": "._app.context",
    "EventStore": "._server.eventstore",
    "H11Config": "._server.h11server",
    "HTTPRequestInfo": "._server.config",
    "InMemoryEventStore": "._server.eventstore",
    "InputRequest": "._app.inputs",
    "LocalNotificationBus": "._app.bus",
    "LocalProtocolError": "._exceptions",
    "LocalSessionRegistry": "._server.session",
    "MCPApp": "._server.asgi",
    "MCPServer": "._app.server",
    "MCPTrioError": "._exceptions",
    "MemoryTaskStore": "._app.tasks",
    "NotificationBus": "._app.bus",
    "ProtocolError": "._exceptions",
    "RPCError": "._exceptions",
    "RemoteProtocolError": "._exceptions",
    "ServerConfig": "._server.config",
    "SessionError": "._exceptions",
    "SessionExpired": "._exceptions",
    "SessionRegistry": "._server.session",
    "SkillVerificationError": "._exceptions",
    "StoredEvent": "._server.eventstore",
    "TaskCancelled": "._exceptions",
    "TaskError": "._exceptions",
    "TaskInfo": "._client.tasks",
    "TaskRecord": "._app.tasks",
    "TaskStatus": "._app.tasks",
    "TaskStore": "._app.tasks",
    "TaskStoreFull": "._exceptions",
    "TaskStoreUnavailable": "._exceptions",
    "TransportError": "._exceptions",
    "hypercorn_config": "._server.serve",
    "open_client_session": "._client.session",
    "open_stdio_client": "._client.session",
    "open_websocket_client": "._client.session",
    "serve": "._server.serve",
    "serve_h11": "._server.h11server",
    "serve_stdio": "._stdio.server",
}

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
    "MemoryTaskStore",
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
    "TaskCancelled",
    "TaskError",
    "TaskInfo",
    "TaskRecord",
    "TaskStatus",
    "TaskStore",
    "TaskStoreFull",
    "TaskStoreUnavailable",
    "TransportError",
    "hypercorn_config",
    "open_client_session",
    "open_stdio_client",
    "open_websocket_client",
    "serve",
    "serve_h11",
    "serve_stdio",
]

if TYPE_CHECKING:  # for type checkers and the docs: the real imports
    from ._app.bus import LocalNotificationBus as LocalNotificationBus
    from ._app.bus import NotificationBus as NotificationBus
    from ._app.context import Context as Context
    from ._app.inputs import InputRequest as InputRequest
    from ._app.server import MCPServer as MCPServer
    from ._app.tasks import MemoryTaskStore as MemoryTaskStore
    from ._app.tasks import TaskRecord as TaskRecord
    from ._app.tasks import TaskStatus as TaskStatus
    from ._app.tasks import TaskStore as TaskStore
    from ._client.session import ClientSession as ClientSession
    from ._client.session import open_client_session as open_client_session
    from ._client.session import open_stdio_client as open_stdio_client
    from ._client.session import open_websocket_client as open_websocket_client
    from ._client.tasks import TaskInfo as TaskInfo
    from ._exceptions import LocalProtocolError as LocalProtocolError
    from ._exceptions import MCPTrioError as MCPTrioError
    from ._exceptions import ProtocolError as ProtocolError
    from ._exceptions import RemoteProtocolError as RemoteProtocolError
    from ._exceptions import RPCError as RPCError
    from ._exceptions import SessionError as SessionError
    from ._exceptions import SessionExpired as SessionExpired
    from ._exceptions import SkillVerificationError as SkillVerificationError
    from ._exceptions import TaskCancelled as TaskCancelled
    from ._exceptions import TaskError as TaskError
    from ._exceptions import TaskStoreFull as TaskStoreFull
    from ._exceptions import TaskStoreUnavailable as TaskStoreUnavailable
    from ._exceptions import TransportError as TransportError
    from ._server.asgi import MCPApp as MCPApp
    from ._server.config import HTTPRequestInfo as HTTPRequestInfo
    from ._server.config import ServerConfig as ServerConfig
    from ._server.eventstore import EventStore as EventStore
    from ._server.eventstore import InMemoryEventStore as InMemoryEventStore
    from ._server.eventstore import StoredEvent as StoredEvent
    from ._server.h11server import H11Config as H11Config
    from ._server.h11server import serve_h11 as serve_h11
    from ._server.serve import hypercorn_config as hypercorn_config
    from ._server.serve import serve as serve
    from ._server.session import LocalSessionRegistry as LocalSessionRegistry
    from ._server.session import SessionRegistry as SessionRegistry
    from ._stdio.server import serve_stdio as serve_stdio


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
