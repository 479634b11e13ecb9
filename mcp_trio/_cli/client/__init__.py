"""The client commands of ``mcp-trio``: ``tools URL`` lists a server's tools, ``call URL TOOL`` calls
one; ``resources URL`` lists its resources and templates, ``read URL URI`` reads one; ``prompts URL``
lists its prompts, ``prompt URL NAME`` gets one.

``call`` types each ``--arg KEY=VALUE`` by the tool's ``inputSchema`` (fetched with ``tools/list``
first; :mod:`.arguments`; a prompt's arguments are text), the commands show progress and log
notifications on stderr, print the answer on stdout (text as is, other content summarized, ``--raw``
for the whole answer as JSON; :mod:`.display`) and say how it went in their exit status
(``EXIT_STATUS_HELP`` of :mod:`..output`).  :mod:`.parsers` declares the commands (importing nothing
beyond the standard library, so that ``mcp-trio --help`` stays quick), :mod:`.connection` reaches the
server (``--header``, ``--mode``, ``--oauth``) and :mod:`.commands` runs them.
"""
