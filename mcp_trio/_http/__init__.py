"""The HTTP servers mcp_trio starts: hypercorn as mcp_trio runs it, and the embedded h11 server.  They
import only the server-to-app contract (:mod:`mcp_trio._runtime.contract`), never the transport."""
