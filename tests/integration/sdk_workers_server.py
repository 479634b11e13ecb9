"""A python-sdk server (``mcp.server.mcpserver.MCPServer``, written with the SDK's API only) that the
several-workers tests host: ``mcp-trio serve tests.integration.sdk_workers_server:server --worker-id a
--redis URL`` (tests/integration/test_sdk_workers.py).

What it keeps per client is the SDK kernel's own state, made by the requests the client sent to the
worker that runs its session: the log level of ``logging/setLevel`` (the ``log`` tool sends only the
messages at or above it, the filtering the SDK leaves to the application) and the URIs of
``resources/subscribe``.  A worker that adopts a session starts with none of it, until it replays the
session's record into a new kernel, which the ``kernel_state`` tool shows.  Each test client names
itself (``clientInfo.name``) uniquely, which keys that state.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer

LEVELS: tuple[mt.LoggingLevel, ...] = ("debug", "info", "notice", "warning", "error")


def _client(session: Any) -> str:
    """Who sent the request: its client's name (from the session's ``initialize``)."""
    params = session.client_params
    return "" if params is None else str(params.client_info.name)


def build() -> MCPServer:
    """A new server with state of its own (two of them are two workers in one process)."""
    server = MCPServer("sdk-workers", version="1.0.0")
    levels: dict[str, mt.LoggingLevel] = {}
    subscribed: dict[str, set[str]] = {}

    async def set_level(ctx: ServerRequestContext[Any], params: mt.SetLevelRequestParams) -> dict[str, Any]:
        levels[_client(ctx.session)] = params.level
        return {}

    async def subscribe(ctx: ServerRequestContext[Any], params: mt.SubscribeRequestParams) -> dict[str, Any]:
        subscribed.setdefault(_client(ctx.session), set()).add(params.uri)
        return {}

    async def unsubscribe(
        ctx: ServerRequestContext[Any], params: mt.UnsubscribeRequestParams
    ) -> dict[str, Any]:
        subscribed.get(_client(ctx.session), set()).discard(params.uri)
        return {}

    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("logging/setLevel", mt.SetLevelRequestParams, set_level)
    lowlevel.add_request_handler("resources/subscribe", mt.SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", mt.UnsubscribeRequestParams, unsubscribe)

    @server.resource("test://watched", name="watched", mime_type="text/plain")
    async def watched() -> str:
        return "watched"

    @server.tool(description="Echo the text")
    async def echo(text: str) -> str:
        return text

    @server.tool(description="Sleep for some seconds")
    async def sleep(seconds: float) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Say that the tool list changed (to every session, on every worker)")
    async def change_tools(ctx: Context) -> str:
        await ctx.notify_tools_changed()
        return "tools changed"

    @server.tool(description="Say that a resource was updated (to its subscribers, on every worker)")
    async def touch(uri: str, ctx: Context) -> str:
        await ctx.notify_resource_updated(uri)
        return f"touched {uri}"

    @server.tool(description="Log one message at each level the client's logging/setLevel lets through")
    async def log(ctx: Context) -> str:
        threshold = levels.get(_client(ctx.session), "debug")
        sent = [level for level in LEVELS if LEVELS.index(level) >= LEVELS.index(threshold)]
        for level in sent:  # what Context.log sends (deprecated at 2026-07-28, not at 2025-11-25)
            params = mt.LoggingMessageNotificationParams(level=level, data=f"{level} message")
            notification = mt.LoggingMessageNotification(params=params)
            await ctx.session.send_notification(notification, ctx.request_context.request_id)
        return ",".join(sent)

    @server.tool(description="What the SDK kernel keeps for this client: its log level and subscriptions")
    async def kernel_state(ctx: Context) -> dict[str, Any]:
        client = _client(ctx.session)
        return {"level": levels.get(client), "subscribed": sorted(subscribed.get(client, ()))}

    return server


server = build()
