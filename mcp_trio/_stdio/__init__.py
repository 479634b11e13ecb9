"""The stdio transport: newline-delimited JSON-RPC over a subprocess's standard streams."""

from .server import StdioConnection, serve_stdio

__all__ = ["StdioConnection", "serve_stdio"]
