"""The client commands of ``mcp-trio``: ``tools URL`` lists a server's tools, ``call URL TOOL`` calls one.

``call`` types each ``--arg KEY=VALUE`` by the tool's ``inputSchema`` (fetched with ``tools/list``
first; :mod:`.arguments`), shows progress and log notifications on stderr, prints the result on stdout
(text as is, other content summarized, ``--raw`` for the whole result as JSON; :mod:`.display`) and
says how it went in its exit status (``EXIT_STATUS_HELP`` of :mod:`..output`).  :mod:`.connection`
reaches the server (``--header``, ``--mode``, ``--oauth``); :mod:`.commands` holds the two commands.
"""

from __future__ import annotations

from .commands import add_client_commands, run_client_command

__all__ = ["add_client_commands", "run_client_command"]
