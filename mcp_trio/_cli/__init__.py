"""The ``mcp-trio`` command: :func:`main` and the parser of its commands.

``mcp-trio serve MODULE:ATTR`` serves an :class:`MCPServer` or :class:`MCPApp` (Streamable HTTP on
hypercorn or the embedded h11 server, or stdio), ``mcp-trio demo`` the demo server (both in
:mod:`.serve`, their app options in :mod:`.server_options`), and the client commands of :mod:`.client`
talk to a running server: ``tools`` and ``call`` (its tools), ``resources`` and ``read`` (its
resources), ``prompts`` and ``prompt`` (its prompts).  What they share on the terminal (the commands,
exit statuses, error lines, help layout) is in :mod:`.output`.  ``mcp-trio --help`` and ``mcp-trio
COMMAND --help`` describe every option and the exit status; docs/cli.md is the user's guide.

Start-up is lazy: :func:`main` declares the options of the one command it runs (the others are a name
and a help line), and imports what runs it after parsing, so ``mcp-trio --version`` and ``--help`` load
only the standard library and :mod:`.output`, and a client command never loads the server side.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import __version__
from .._lazy import lazy_exports
from .output import (
    CLIENT_COMMANDS,
    COMMAND_HELP,
    EXIT_BROKEN_PIPE,
    EXIT_CONNECTION,
    EXIT_INTERRUPTED,
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    HelpFormatter,
    add_log_level,
    report,
    single_exception,
    start_logging,
)

if TYPE_CHECKING:
    from .serve import load_app as load_app
    from .server_options import config_from_args as config_from_args

__all__ = ["main"]

# for tests and programs that built on them before the parser was lazy
__getattr__, __dir__ = lazy_exports(__name__, {"load_app": ".serve", "config_from_args": ".server_options"})

DESCRIPTION = """\
Serve MCP servers over Streamable HTTP (or stdio) on Trio, and talk to them
from the terminal.
"""

EPILOG = """\
try it: run 'mcp-trio demo' in one terminal, then in another
  mcp-trio tools http://127.0.0.1:8000/mcp
  mcp-trio call http://127.0.0.1:8000/mcp echo --arg text=hello
  mcp-trio resources http://127.0.0.1:8000/mcp
  mcp-trio prompt http://127.0.0.1:8000/mcp test_prompt_with_arguments \\
      --arg arg1=hello --arg arg2=world

'mcp-trio COMMAND --help' describes a command and its options.

"""


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the ``mcp-trio`` parser's
    own options, ``--help`` and ``--version``, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``mcp-trio`` parser: every command of :data:`COMMAND_HELP`, each with ``--log-level``.
    Given ``argv``, only the command it names gets its options (and its module imported): the others
    are their name and help line, all that ``mcp-trio --help`` and argparse's "invalid choice" show."""
    parser = argparse.ArgumentParser(
        prog="mcp-trio",
        description=DESCRIPTION,
        epilog=EPILOG + EXIT_STATUS_HELP,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    wanted = set(COMMAND_HELP) if argv is None else {_command(argv)}
    if wanted & {"serve", "demo"}:
        from .serve import add_server_commands

        add_server_commands(sub)
    if wanted & CLIENT_COMMANDS:
        from .client.parsers import add_client_commands

        add_client_commands(sub)
    for name, line in COMMAND_HELP.items():  # (a full parser lists them in this order too)
        if name not in sub.choices:
            sub.add_parser(name, help=line)
    for cmd in sub.choices.values():
        if not any("--log-level" in action.option_strings for action in cmd._actions):
            add_log_level(cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """The ``mcp-trio`` console script: run the command of ``argv`` (default: the process's arguments)
    and exit with its status; an interrupt, a closed stdout or an address that cannot be listened on
    ends it with the status of the table, without a traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        raise SystemExit(EXIT_USAGE)
    start_logging(args.log_level, getattr(args, "log_format", "text"))
    try:
        if args.command in CLIENT_COMMANDS:
            from .client.commands import run_client_command

            code = run_client_command(args)
        else:
            from .serve import serve_command

            code = serve_command(parser, args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's final flush
    except BaseException as exc:  # sorted out below; anything unexpected is re-raised
        from ..errors import ListenError

        failure = single_exception(exc)
        if isinstance(failure, BrokenPipeError):
            # stdout was closed early (mcp-trio tools URL | head): no traceback; silence the final flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = EXIT_BROKEN_PIPE
        elif isinstance(failure, KeyboardInterrupt):  # Ctrl-C before a server's signal handler was set
            code = EXIT_INTERRUPTED
        elif isinstance(failure, ListenError):  # serve, demo: the address is in use, not local, ...
            report(failure)
            code = EXIT_CONNECTION
        else:
            raise
    raise SystemExit(code)
