"""mcp_trio: the Model Context Protocol over Streamable HTTP, with Trio's structured concurrency.

The front door holds what a server and a client need first (the tutorial's names).  The rest is in
three public modules:

- ``mcp_trio.server``: the extension points of a server (event store, session registry, notification
  bus, task store) and the advanced serving names (``HTTPRequestInfo``, ``H11Config``,
  ``hypercorn_config``, ``wait_for_signal``);
- ``mcp_trio.client``: the client session, its openers and ``TaskInfo``;
- ``mcp_trio.errors``: every exception mcp_trio raises.

Names are imported on first use: ``import mcp_trio`` alone costs almost nothing, and a program (the
``mcp-trio`` client commands, say) pays only for the parts it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "ClientSession": "._client.session",
    "Context": "._app.context",
    "InputRequest": "._app.inputs",
    "MCPApp": "._transport.asgi",
    "MCPServer": "._app.server",
    "RPCError": ".errors",
    "ServerConfig": "._transport.config",
    "ToolError": ".errors",
    "open_client_session": "._client.session",
    "open_stdio_client": "._client.session",
    "open_websocket_client": "._client.session",
    "serve": "._serve",
    "serve_stdio": "._transport.stdio",
}

__all__ = [
    "ClientSession",
    "Context",
    "InputRequest",
    "MCPApp",
    "MCPServer",
    "RPCError",
    "ServerConfig",
    "ToolError",
    "open_client_session",
    "open_stdio_client",
    "open_websocket_client",
    "serve",
    "serve_stdio",
]

if TYPE_CHECKING:  # for type checkers and the docs: the real imports
    from ._app.context import Context as Context
    from ._app.inputs import InputRequest as InputRequest
    from ._app.server import MCPServer as MCPServer
    from ._client.session import ClientSession as ClientSession
    from ._client.session import open_client_session as open_client_session
    from ._client.session import open_stdio_client as open_stdio_client
    from ._client.session import open_websocket_client as open_websocket_client
    from ._serve import serve as serve
    from ._transport.asgi import MCPApp as MCPApp
    from ._transport.config import ServerConfig as ServerConfig
    from ._transport.stdio import serve_stdio as serve_stdio
    from .errors import RPCError as RPCError
    from .errors import ToolError as ToolError

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
