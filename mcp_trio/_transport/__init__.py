"""MCP over any ASGI server: the ASGI app, the 2025 session driver, the 2026 endpoint, and the message
connection of stdio and WebSocket.  Imports no HTTP server."""
