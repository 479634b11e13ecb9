"""What every room shares: the containment of a task root, rate-limited peer logs, and the contract
between mcp_trio's HTTP servers and the ASGI app."""
