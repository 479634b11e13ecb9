"""The protected resource (server side of OAuth 2.1): bearer tokens, their verifiers, and the resource's
metadata.  The names are exported by :mod:`mcp_trio.auth`."""
