"""The python-sdk seams mcp_trio hosts a server through, checked before anything is hosted.

Hosting relies on parts of the ``mcp`` package below its documented surface (the kernel, its
connection, the envelope classifier, where ``MCPServer`` keeps its low-level server and its event bus).
Each is fingerprinted here (a hash of its source, and its signature) for every ``mcp`` release mcp_trio
was tested with; any other release, or a tested one whose seams were changed in place, is refused with
:class:`UntestedSDK`, before a server is served: a transport whose guarantees rest on code it has not
seen does not serve.  ``python -m mcp_trio.sdk._seams`` prints the fingerprints of the installed ``mcp``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = ["TESTED", "UntestedSDK", "check", "fingerprints"]


class UntestedSDK(RuntimeError):
    """The installed ``mcp`` is not a release mcp_trio hosts servers of (or was changed in place)."""


def _seams() -> dict[str, Any]:
    from mcp.server import _otel, connection, runner
    from mcp.server.auth.middleware import auth_context, bearer_auth
    from mcp.server.lowlevel import server as lowlevel
    from mcp.server.mcpserver import server as mcpserver
    from mcp.server.mcpserver.prompts import manager as prompts
    from mcp.server.mcpserver.tools import tool_manager as tools
    from mcp.shared import inbound, jsonrpc_dispatcher, message, subscriptions, transport_context

    return {
        "ServerRunner": runner.ServerRunner,
        "serve_one": runner.serve_one,
        "aclose_shielded": runner.aclose_shielded,
        "Connection": connection.Connection,
        "Server.__init__": lowlevel.Server.__init__,
        "Server.get_request_handler": lowlevel.Server.get_request_handler,
        "Server.get_notification_handler": lowlevel.Server.get_notification_handler,
        "OpenTelemetryMiddleware": _otel.OpenTelemetryMiddleware,
        "ToolManager.get_tool": tools.ToolManager.get_tool,
        "PromptManager.get_prompt": prompts.PromptManager.get_prompt,
        "Server.server_info_stamp": inspect.getattr_static(lowlevel.Server, "server_info_stamp").fget,
        "MCPServer.__init__": mcpserver.MCPServer.__init__,
        "classify_inbound_request": inbound.classify_inbound_request,
        "handler_exception_to_error_data": jsonrpc_dispatcher.handler_exception_to_error_data,
        "ServerMessageMetadata": message.ServerMessageMetadata,
        "TransportContext": transport_context.TransportContext,
        "subscriptions": subscriptions,
        "auth_context": auth_context,
        "AuthenticatedUser": bearer_auth.AuthenticatedUser,
    }


def fingerprints() -> dict[str, str]:
    """Each seam's fingerprint in the installed ``mcp``: sha256 of its source (16 hex digits);
    ``"no source"`` for one whose source cannot be read (an install without ``.py`` files, a seam
    replaced in memory), which no tested release has."""
    return {name: _fingerprint(obj) for name, obj in sorted(_seams().items())}


def _fingerprint(obj: Any) -> str:
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return "no source"
    return hashlib.sha256(source.encode()).hexdigest()[:16]


TESTED: dict[str, dict[str, str]] = {
    "2.3.0": {
        "AuthenticatedUser": "cc46e091a06a6061",
        "Connection": "5dad43e4f55a3824",
        "MCPServer.__init__": "851dfe56f961657a",
        "OpenTelemetryMiddleware": "57c20df261584a4a",
        "PromptManager.get_prompt": "ef715c4e49d7b4e3",
        "Server.__init__": "486dff59af82688b",
        "Server.get_notification_handler": "8f65dc5ef47cb8aa",
        "Server.get_request_handler": "650d1e133d055786",
        "Server.server_info_stamp": "5a5caaf3b6aa8932",
        "ServerMessageMetadata": "3f4b18a3729164c1",
        "ServerRunner": "52a1b611eb225e28",
        "ToolManager.get_tool": "a76446c4d7141d3c",
        "TransportContext": "a052eaa220d12247",
        "aclose_shielded": "cfa5b298c0bef8f8",
        "auth_context": "1f075f488c042af4",
        "classify_inbound_request": "f415a86e66ead1c6",
        "handler_exception_to_error_data": "c8f7792587d15090",
        "serve_one": "87bacb6b578bb41b",
        "subscriptions": "98c4b0745654a66a",
    },
}
"""The fingerprints of every ``mcp`` release hosting was tested with."""

_checked: str | None = None


def check() -> None:
    """Refuse (:class:`UntestedSDK`) an ``mcp`` whose seams are not those of a tested release."""
    global _checked
    try:
        installed = version("mcp")
    except PackageNotFoundError:
        raise UntestedSDK(
            "hosting a python-sdk server needs the mcp package: pip install 'mcp-trio[sdk]'"
        ) from None
    if _checked == installed:
        return
    tested = ", ".join(sorted(TESTED))
    expected = TESTED.get(installed)
    if expected is None:
        raise UntestedSDK(
            f"mcp {installed} is not a release mcp_trio hosts servers of (tested: {tested}); "
            f"install one of those: pip install 'mcp-trio[sdk]'"
        )
    found = fingerprints()
    changed = sorted(name for name, digest in expected.items() if found.get(name) != digest)
    if changed:
        raise UntestedSDK(
            f"mcp {installed} differs from the tested release in what hosting relies on "
            f"({', '.join(changed)}): reinstall it (pip install --force-reinstall 'mcp=={installed}')"
        )
    _checked = installed


if __name__ == "__main__":  # pragma: no cover - a maintainer's tool
    print(json.dumps({version("mcp"): fingerprints()}, indent=4, sort_keys=True))
