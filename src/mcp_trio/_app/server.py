"""The MCP server object users register tools on, and the request dispatcher behind it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp_types as mt
import mcp_types.methods as mtm
import pydantic

from .._exceptions import RPCError
from .._protocol import versions
from .context import LOG_LEVELS, Context, Peer
from .tools import ToolFn, ToolSpec, to_call_tool_result

__all__ = ["MCPServer"]

logger = logging.getLogger("mcp_trio")

Handler = Callable[[Context, Any], Awaitable[dict[str, Any]]]
F = TypeVar("F", bound=ToolFn)


class MCPServer:
    """An MCP server: a name, a version, and what it offers (tools, for now).

    Request handlers are async functions run in the owning session's nursery (or, for 2026-era
    requests, in the request's scope); a cancelled request cancels its handler.
    """

    def __init__(self, name: str, version: str = "0.1.0", *, instructions: str | None = None) -> None:
        self.name = name
        self.version = version
        self.instructions = instructions
        self._tools: dict[str, ToolSpec] = {}
        self._handlers: dict[str, Handler] = {
            "ping": self._ping,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "logging/setLevel": self._set_level,
        }

    # -- registration -------------------------------------------------------------------------

    def tool(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        annotations: mt.ToolAnnotations | None = None,
    ) -> Callable[[F], F]:
        """Decorator that registers an async function as a tool (see :meth:`add_tool`)."""

        def register(fn: F) -> F:
            self.add_tool(
                fn,
                name=name,
                title=title,
                description=description,
                input_schema=input_schema,
                output_schema=output_schema,
                annotations=annotations,
            )
            return fn

        return register

    def add_tool(self, fn: ToolFn, **options: Any) -> None:
        """Register ``fn`` as a tool; its input schema comes from its type hints unless given."""
        spec = ToolSpec.build(fn, **options)
        self._tools[spec.definition.name] = spec

    # -- protocol ---------------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        return {"tools": {"listChanged": False}, "logging": {}}

    def initialize_result(self, params: dict[str, Any] | None) -> tuple[versions.Revision, dict[str, Any]]:
        """Validate ``initialize`` params and answer them: the negotiated revision and the result."""
        try:
            request = mt.InitializeRequestParams.model_validate(params or {})
        except pydantic.ValidationError as exc:
            raise RPCError(mt.INVALID_PARAMS, f"Invalid params: {_first_error(exc)}") from exc
        revision = versions.negotiate(request.protocol_version)
        result: dict[str, Any] = {
            "protocolVersion": revision.name,
            "capabilities": self.capabilities(),
            "serverInfo": {"name": self.name, "version": self.version},
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return revision, result

    def knows(self, method: str) -> bool:
        return method in self._handlers

    async def handle_request(
        self, ctx: Context, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Run the handler of one request; raises :class:`RPCError` for a JSON-RPC error answer."""
        handler = self._handlers.get(method)
        if handler is None:
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {method}")
        try:
            request = mtm.parse_client_request(method, ctx.protocol_version, params)
        except (KeyError, ValueError) as exc:
            if isinstance(exc, pydantic.ValidationError):
                raise RPCError(mt.INVALID_PARAMS, f"Invalid params: {_first_error(exc)}") from exc
            raise RPCError(mt.METHOD_NOT_FOUND, f"Method not found: {method}") from exc
        result = await handler(ctx, request.params)
        return mtm.serialize_server_result(method, ctx.protocol_version, result)

    # -- handlers ---------------------------------------------------------------------------

    async def _ping(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {}

    async def _list_tools(self, ctx: Context, params: Any) -> dict[str, Any]:
        return {"tools": [spec.wire() for spec in self._tools.values()]}

    async def _call_tool(self, ctx: Context, params: mt.CallToolRequestParams) -> dict[str, Any]:
        spec = self._tools.get(params.name)
        if spec is None:
            raise RPCError(mt.INVALID_PARAMS, f"Unknown tool: {params.name}")
        try:
            value = await spec.call(ctx, params.arguments or {})
        except RPCError:
            raise
        except pydantic.ValidationError as exc:
            return _tool_error(f"Invalid arguments for tool {params.name}: {_first_error(exc)}")
        except Exception as exc:
            logger.info("tool %s raised %r", params.name, exc)
            return _tool_error(f"{type(exc).__name__}: {exc}")
        return to_call_tool_result(value)

    async def _set_level(self, ctx: Context, params: mt.SetLevelRequestParams) -> dict[str, Any]:
        ctx.peer.log_level = params.level if params.level in LOG_LEVELS else None
        return {}


def _tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _first_error(exc: pydantic.ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def peer_for(session_id: str | None, revision: versions.Revision, send: Any) -> Peer:
    return Peer(session_id=session_id, protocol_version=revision.name, send=send)
