"""The OAuth 2.1 client: discovery, the authorization code flow, client credentials, token stores and
redirect handlers.  The names are exported by :mod:`mcp_trio.auth`."""
