"""Host a python-sdk server (``mcp``) on mcp_trio's transport, unmodified (the ``sdk`` extra).

>>> from mcp.server.mcpserver import MCPServer
>>> from mcp_trio.sdk import hosted_app
>>> server = MCPServer("weather")
>>> app = hosted_app(server)           # an mcp_trio.MCPApp: serve it as any other

On the command line: ``mcp-trio serve package.module:server`` (docs/hosting.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._seams import UntestedSDK, check

check()  # before anything of the SDK's below its surface is imported: an untested mcp is refused

from ._asyncio import AsyncioOnTrio  # noqa: E402
from ._hosted import HostedServer, SDKServer  # noqa: E402

if TYPE_CHECKING:
    from .._transport.asgi import MCPApp
    from .._transport.config import ServerConfig

__all__ = ["AsyncioOnTrio", "HostedServer", "SDKServer", "UntestedSDK", "hosted_app", "is_sdk_server"]


def hosted_app(server: SDKServer, config: ServerConfig | None = None, **options: Any) -> MCPApp:
    """An :class:`~mcp_trio.MCPApp` serving the python-sdk ``server`` (its ``MCPServer`` or low-level
    ``Server``) over mcp_trio's transport, with ``config`` as any app's.  ``options``: those of
    :class:`HostedServer` (``notification_bus``, ``error_details``, ``max_subscriptions``)."""
    from .._transport.asgi import MCPApp

    return MCPApp(HostedServer(server, **options), config)


def is_sdk_server(obj: object) -> bool:
    """Whether ``obj`` is a python-sdk server this module hosts."""
    from mcp.server.lowlevel.server import Server
    from mcp.server.mcpserver import MCPServer

    return isinstance(obj, (MCPServer, Server))
