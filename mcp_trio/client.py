"""The client: a session with one MCP server, over Streamable HTTP, stdio or WebSocket.

:func:`open_client_session` (HTTP), :func:`open_stdio_client` (a server run as a subprocess) and
:func:`open_websocket_client` each open a :class:`ClientSession`; the three openers are also in the
front door (``from mcp_trio import open_client_session``).  :class:`TaskInfo` is a task as the server
last described it (``ClientSession.call_tool`` of a tool that runs as a task, ``ClientSession.get_task``).
The client's exceptions are in ``mcp_trio.errors``; OAuth is ``mcp_trio.auth``.

Names are imported on first use: importing this module loads no server code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "ClientSession": "._client.session",
    "TaskInfo": "._protocol.tasks",
    "open_client_session": "._client.session",
    "open_stdio_client": "._client.session",
    "open_websocket_client": "._client.session",
}

__all__ = [
    "ClientSession",
    "TaskInfo",
    "open_client_session",
    "open_stdio_client",
    "open_websocket_client",
]

if TYPE_CHECKING:  # for type checkers and the docs: the real imports
    from ._client.session import ClientSession as ClientSession
    from ._client.session import open_client_session as open_client_session
    from ._client.session import open_stdio_client as open_stdio_client
    from ._client.session import open_websocket_client as open_websocket_client
    from ._protocol.tasks import TaskInfo as TaskInfo

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
