"""The ``mcp-trio`` command: :func:`main` and the parser of its commands.

``mcp-trio serve MODULE:ATTR`` serves an :class:`MCPServer` or :class:`MCPApp` (Streamable HTTP on
hypercorn or the embedded h11 server, or stdio), ``mcp-trio demo`` the demo server (both in
:mod:`.serve`, their app options in :mod:`.server_options`), and the client commands of :mod:`.client`
talk to a running server: ``mcp-trio tools URL`` lists its tools, ``mcp-trio call URL TOOL`` calls one.
What they share on the terminal (exit statuses, error lines, help layout) is in :mod:`.output`.
``mcp-trio --help`` and ``mcp-trio COMMAND --help`` describe every option and the exit status;
docs/cli.md is the user's guide.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from .client import add_client_commands, run_client_command
from .output import (
    EXIT_BROKEN_PIPE,
    EXIT_CONNECTION,
    EXIT_INTERRUPTED,
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    CannotListen,
    HelpFormatter,
    add_log_level,
    report,
    single_exception,
    start_logging,
)
from .serve import add_server_commands, serve_command
from .serve import load_app as load_app
from .server_options import config_from_args as config_from_args

__all__ = ["main"]

DESCRIPTION = """\
Serve MCP servers over Streamable HTTP (or stdio) on Trio, and talk to them
from the terminal.
"""

EPILOG = """\
try it: run 'mcp-trio demo' in one terminal, then in another
  mcp-trio tools http://127.0.0.1:8000/mcp
  mcp-trio call http://127.0.0.1:8000/mcp echo --arg text=hello

'mcp-trio COMMAND --help' describes a command and its options.

"""


def _parser() -> argparse.ArgumentParser:
    """The ``mcp-trio`` parser: ``serve`` and ``demo``, ``tools`` and ``call``, each with ``--log-level``."""
    parser = argparse.ArgumentParser(
        prog="mcp-trio",
        description=DESCRIPTION,
        epilog=EPILOG + EXIT_STATUS_HELP,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    add_server_commands(sub)
    add_client_commands(sub)
    for cmd in sub.choices.values():
        if not any("--log-level" in action.option_strings for action in cmd._actions):
            add_log_level(cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """The ``mcp-trio`` console script: run the command of ``argv`` (default: the process's arguments)
    and exit with its status; an interrupt, a closed stdout or an address that cannot be listened on
    ends it with the status of the table, without a traceback."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        raise SystemExit(EXIT_USAGE)
    start_logging(args.log_level, getattr(args, "log_format", "text"))
    try:
        client = args.command in ("tools", "call")
        code = run_client_command(args) if client else serve_command(parser, args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's final flush
    except BaseException as exc:  # sorted out below; anything unexpected is re-raised
        failure = single_exception(exc)
        if isinstance(failure, BrokenPipeError):
            # stdout was closed early (mcp-trio tools URL | head): no traceback; silence the final flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = EXIT_BROKEN_PIPE
        elif isinstance(failure, KeyboardInterrupt):  # Ctrl-C before a server's signal handler was set
            code = EXIT_INTERRUPTED
        elif isinstance(failure, CannotListen):
            report(failure)
            code = EXIT_CONNECTION
        else:
            raise
    raise SystemExit(code)
