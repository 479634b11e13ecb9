"""``python -m mcp_trio``: the ``mcp-trio`` command, where its script is not on ``PATH`` (or to pick the
interpreter: ``python3.12 -m mcp_trio demo``)."""

from mcp_trio._cli import main

if __name__ == "__main__":
    main()
