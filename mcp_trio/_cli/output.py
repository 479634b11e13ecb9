"""What every ``mcp-trio`` command shares on the terminal: the commands and their help lines, the exit
statuses and their help text, the usage error, the one-line ``mcp-trio: ...`` messages on stderr, the
help formatter and the help layout of every command, and the ``--log-level`` option (Python logging on
stderr, as text or, for the server commands' ``--log-format json``, JSON lines).

It imports only the standard library: ``mcp-trio --version`` and ``--help`` load nothing more."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

__all__ = [
    "CLIENT_COMMANDS",
    "COMMAND_HELP",
    "EXIT_BROKEN_PIPE",
    "EXIT_CONNECTION",
    "EXIT_INTERRUPTED",
    "EXIT_LIFESPAN_FAILED",
    "EXIT_OK",
    "EXIT_RPC_ERROR",
    "EXIT_STATUS_HELP",
    "EXIT_TOOL_ERROR",
    "EXIT_USAGE",
    "HelpFormatter",
    "UsageError",
    "add_command",
    "add_log_level",
    "report",
    "single_exception",
    "start_logging",
]

COMMAND_HELP = {
    "serve": "serve your MCPServer or MCPApp (MODULE:ATTR) over HTTP or stdio",
    "demo": "serve the built-in demo server, to try clients against",
    "tools": "list the tools of an MCP server and their parameters",
    "call": "call a tool of an MCP server and print its result",
    "resources": "list the resources and resource templates of an MCP server",
    "read": "read a resource of an MCP server and print its contents",
    "prompts": "list the prompts of an MCP server and their arguments",
    "prompt": "get a prompt of an MCP server and print its messages",
}
"""Every command of ``mcp-trio``, in the order of its help, with the line that help shows for it."""
CLIENT_COMMANDS = frozenset({"tools", "call", "resources", "read", "prompts", "prompt"})
"""The commands that talk to a running server (:mod:`.client`); the others serve (:mod:`.serve`)."""

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_RPC_ERROR = 4
EXIT_INTERRUPTED = 130
EXIT_LIFESPAN_FAILED = 1
"""serve, demo: the app's lifespan failed (entering it raised, or its tasks crashed)."""
EXIT_BROKEN_PIPE = 141

EXIT_STATUS_HELP = """\
exit status:
  0    success (serve, demo: stopped by Ctrl-C or SIGTERM)
  1    call: the tool ran and reported an error (isError); serve: the
       app's lifespan failed (at start, or its tasks crashed later)
  2    usage error: a bad option, MODULE:ATTR, URL or --json (prompt: a
       value that is not a string), or an --arg value that does not fit
       its type; serve, demo: OTEL_* variables asking for an export
       other than OTLP/HTTP (http/protobuf)
  3    cannot connect, an HTTP or protocol failure, or the authorization
       (--oauth) failed; serve, demo: cannot listen on the address, or
       the installed hypercorn is not the one mcp_trio's fixes were
       written for (see --allow-stock-hypercorn), or serve: the installed
       mcp is not a release hosting python-sdk servers was tested with
  4    the server answered with a JSON-RPC error (unknown tool,
       resource or prompt, invalid arguments, ...)
  130  interrupted (Ctrl-C) while talking to the server
  141  stdout was closed early (piped into head, ...), as for SIGPIPE
"""


class UsageError(Exception):
    """The command line asks for something that cannot be done: exit status 2."""


def report(message: object) -> None:
    """One line ``mcp-trio: MESSAGE`` on stderr: how a command says what went wrong."""
    print(f"mcp-trio: {message}", file=sys.stderr)


def single_exception(exc: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups of one exception each, or a
    KeyboardInterrupt anywhere in them; else ``exc`` itself."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    interrupts, _rest = exc.split(KeyboardInterrupt)
    if interrupts is not None:
        return KeyboardInterrupt()
    if len(exc.exceptions) == 1:
        return single_exception(exc.exceptions[0])
    return exc


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs keep their lines (lists, examples, the exit status table)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        # argparse measures the commands without the indentation they are printed with, so that the
        # longest one ("resources") had its help line wrapped under it
        if action.help is not argparse.SUPPRESS and isinstance(action, argparse._SubParsersAction):
            indent = self._current_indent + self._indent_increment
            for sub in action._get_subactions():
                length = len(self._format_action_invocation(sub)) + indent
                self._action_max_length = max(self._action_max_length, length)


def add_command(sub: Any, name: str, *, description: str, epilog: str) -> argparse.ArgumentParser:
    """Add the command ``name`` to the subparsers ``sub`` of the ``mcp-trio`` parser: its help line is
    :data:`COMMAND_HELP`'s, its help keeps the lines it is written in, and its epilog (examples) ends
    with the exit status table."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=COMMAND_HELP[name],
        description=description,
        epilog=epilog + EXIT_STATUS_HELP,
        formatter_class=HelpFormatter,
    )
    return parser


_PYTHON_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_HELP = (
    "level of Python logging on stderr (messages of mcp_trio and the libraries under it): "
    "DEBUG, INFO, WARNING (default), ERROR or CRITICAL; not the MCP log level"
)


def add_log_level(cmd: argparse.ArgumentParser) -> None:
    """``--log-level``: every command has it (the server commands among their own options)."""
    cmd.add_argument(
        "--log-level",
        type=str.upper,
        choices=_PYTHON_LOG_LEVELS,
        default="WARNING",
        metavar="LEVEL",
        help=LOG_LEVEL_HELP,
    )


def start_logging(level: str, log_format: str = "text") -> None:
    """Python logging on stderr at ``--log-level`` (stdout is the command's output, or MCP messages):
    ``LEVEL LOGGER: MESSAGE`` lines, or with ``log_format="json"`` (``--log-format json`` of the server
    commands) one JSON object per line, Python's warnings included."""
    if log_format == "json":
        from .._observe.logs import JSONFormatter

        handler = logging.StreamHandler()
        handler.setFormatter(JSONFormatter())
        logging.basicConfig(level=level, handlers=[handler])
        logging.captureWarnings(True)  # a warning is a record too, not a bare line among the JSON ones
        return
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
