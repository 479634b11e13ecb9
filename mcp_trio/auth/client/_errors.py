"""The one exception of the OAuth client, in a module of its own so that the HTTP transport can name it
without importing the OAuth machinery."""

from __future__ import annotations

from ...errors import MCPTrioError

__all__ = ["OAuthError"]


class OAuthError(MCPTrioError):
    """Authorization with an MCP server failed, or was refused on purpose.

    Raised out of the request that needed the authorization (for :func:`~mcp_trio.open_client_session`:
    out of the session block, or the call).  The message says what happened in words.  When an
    authorization server answered with an OAuth error, ``error`` is its code (``invalid_grant``,
    ``access_denied``...), ``description`` its ``error_description`` and ``status`` the HTTP status.
    """

    def __init__(
        self,
        message: str,
        *,
        error: str | None = None,
        description: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error = error
        self.description = description
        self.status = status
