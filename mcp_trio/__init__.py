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
    "EventStore": "._transport.eventstore",
    "H11Config": "._http.h11_server",
    "HTTPRequestInfo": "._transport.config",
    "InMemoryEventStore": "._transport.eventstore",
    "InputRequest": "._app.inputs",
    "LocalNotificationBus": "._app.bus",
    "LocalProtocolError": ".errors",
    "LocalSessionRegistry": "._transport.session",
    "MCPApp": "._transport.asgi",
    "MCPServer": "._app.server",
    "MCPTrioError": ".errors",
    "MemoryTaskStore": "._app.tasks.store",
    "NotificationBus": "._app.bus",
    "ProtocolError": ".errors",
    "RPCError": ".errors",
    "RemoteProtocolError": ".errors",
    "ServerConfig": "._transport.config",
    "SessionError": ".errors",
    "SessionExpired": ".errors",
    "SessionRegistry": "._transport.session",
    "SkillVerificationError": ".errors",
    "StoredEvent": "._transport.eventstore",
    "TaskCancelled": ".errors",
    "TaskError": ".errors",
    "TaskInfo": "._client.tasks",
    "TaskRecord": "._app.tasks.record",
    "TaskStarter": "._app.tasks.starter",
    "TaskStore": "._app.tasks.store",
    "TaskStoreFull": ".errors",
    "TaskStoreUnavailable": ".errors",
    "TransportError": ".errors",
    "hypercorn_config": "._http.serve",
    "open_client_session": "._client.session",
    "open_stdio_client": "._client.session",
    "open_websocket_client": "._client.session",
    "serve": "._http.serve",
    "serve_h11": "._http.h11_server",
    "serve_stdio": "._transport.stdio",
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
    "TaskStarter",
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
    from ._app.tasks.record import TaskRecord as TaskRecord
    from ._app.tasks.starter import TaskStarter as TaskStarter
    from ._app.tasks.store import MemoryTaskStore as MemoryTaskStore
    from ._app.tasks.store import TaskStore as TaskStore
    from ._client.session import ClientSession as ClientSession
    from ._client.session import open_client_session as open_client_session
    from ._client.session import open_stdio_client as open_stdio_client
    from ._client.session import open_websocket_client as open_websocket_client
    from ._client.tasks import TaskInfo as TaskInfo
    from ._http.h11_server import H11Config as H11Config
    from ._http.h11_server import serve_h11 as serve_h11
    from ._http.serve import hypercorn_config as hypercorn_config
    from ._http.serve import serve as serve
    from ._transport.asgi import MCPApp as MCPApp
    from ._transport.config import HTTPRequestInfo as HTTPRequestInfo
    from ._transport.config import ServerConfig as ServerConfig
    from ._transport.eventstore import EventStore as EventStore
    from ._transport.eventstore import InMemoryEventStore as InMemoryEventStore
    from ._transport.eventstore import StoredEvent as StoredEvent
    from ._transport.session import LocalSessionRegistry as LocalSessionRegistry
    from ._transport.session import SessionRegistry as SessionRegistry
    from ._transport.stdio import serve_stdio as serve_stdio
    from .errors import LocalProtocolError as LocalProtocolError
    from .errors import MCPTrioError as MCPTrioError
    from .errors import ProtocolError as ProtocolError
    from .errors import RemoteProtocolError as RemoteProtocolError
    from .errors import RPCError as RPCError
    from .errors import SessionError as SessionError
    from .errors import SessionExpired as SessionExpired
    from .errors import SkillVerificationError as SkillVerificationError
    from .errors import TaskCancelled as TaskCancelled
    from .errors import TaskError as TaskError
    from .errors import TaskStoreFull as TaskStoreFull
    from .errors import TaskStoreUnavailable as TaskStoreUnavailable
    from .errors import TransportError as TransportError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
