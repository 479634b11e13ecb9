"""``mcp-trio tools URL`` lists a server's tools, ``mcp-trio call URL TOOL`` calls one: their parsers,
what they do, and how their failures are reported (each kind with its exit status)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, cast

import mcp_types as mt
import pydantic
import trio

from ..._app.context import LOG_LEVELS
from ..._client.session import ClientSession
from ...errors import MCPTrioError, RPCError, TransportError
from ..output import (
    EXIT_CONNECTION,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RPC_ERROR,
    EXIT_TOOL_ERROR,
    EXIT_USAGE,
    UsageError,
    add_command,
    report,
    single_exception,
)
from .arguments import parse_arguments
from .connection import add_connection_options, add_url, open_session
from .display import Notices, format_tool, print_result

__all__ = ["add_client_commands", "list_all_tools", "run_client_command"]

logger = logging.getLogger("mcp_trio._cli.client")  # one logger for the client commands

MAX_PAGES = 100
"""tools/list pages followed at most (a server whose cursors never end cannot keep us looping)."""


def add_client_commands(sub: Any) -> None:
    """Add ``tools`` and ``call`` to the subparsers ``sub`` of the ``mcp-trio`` parser."""
    tools = add_command(
        sub,
        "tools",
        help="list the tools of an MCP server and their parameters",
        description="List the tools of the MCP server at URL: each tool's name and the first line\n"
        "of its description, then its parameters with their types (optional ones\n"
        "marked, with their defaults).",
        epilog="example:\n  mcp-trio tools http://127.0.0.1:8000/mcp\n\n",
    )
    add_url(tools)
    tools.add_argument("--raw", action="store_true", help="print the tools as JSON")
    call = add_command(
        sub,
        "call",
        help="call a tool of an MCP server and print its result",
        description=CALL_DESCRIPTION,
        epilog=CALL_EPILOG,
    )
    add_url(call)
    call.add_argument("tool", metavar="TOOL", help="the name of the tool ('mcp-trio tools URL' lists them)")
    call.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one argument of the tool (repeat for more); VALUE is typed by the tool's input schema",
    )
    call.add_argument(
        "--json",
        metavar="OBJECT",
        help="all arguments as one JSON object, e.g. '{\"a\": 1}'; an --arg for the same key wins",
    )
    call.add_argument(
        "--raw", action="store_true", help="print the whole result as JSON instead of its content"
    )
    call.add_argument(
        "--mcp-log-level",
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help="ask the server for its log messages at LEVEL and above: " + ", ".join(LOG_LEVELS) + " "
        "(default: ask nothing, the server decides); they are printed on stderr",
    )
    for cmd in (tools, call):
        add_connection_options(cmd)


CALL_DESCRIPTION = """\
Call the tool TOOL of the MCP server at URL and print its result on stdout.

Each --arg KEY=VALUE is typed by the tool's input schema (tools/list is asked
first):
  string           VALUE as typed: text=42 sends the text "42"
  integer, number  a JSON number: n=42, x=2.5
  boolean          true or false
  array, object    JSON: xs='[1, 2]', point='{"x": 1}'
  null             null
A parameter that accepts several types (anyOf, oneOf, Optional[...]) gets
the first of null, boolean, integer, number, array, object that VALUE parses
as, else VALUE as text if it accepts text: name=null sends null to an
Optional[str] parameter (--json '{"name": "null"}' sends the text).  A
parameter the schema does not type gets VALUE as JSON if it parses, else as
text.  A VALUE that does not fit its type is a usage error: nothing is called.

The result: text content is printed as it is; images, audio, resources and
resource links as one line each, e.g. "[image image/png, 70 bytes]" (an
embedded text resource is followed by its text); structuredContent as JSON
when there is no text content.  --raw prints the whole result as JSON.

Notifications go to stderr: progress as a bar on a terminal, else as lines
"progress 1/3 message"; server log messages as "log info: message".

A server may run the call as a task (the 2026-07-28 tasks extension): the
command then polls it until it ends and shows its status on stderr, on a
terminal as one line updated in place, else as lines "task ID STATUS" (with
": message" when the server gives one).  Ctrl-C cancels the task on the
server (tasks/cancel) before exiting.
"""

CALL_EPILOG = """\
examples (against 'mcp-trio demo'):
  mcp-trio call http://127.0.0.1:8000/mcp echo --arg text=hello
  mcp-trio call http://127.0.0.1:8000/mcp add --arg a=1 --arg b=2.5
  mcp-trio call http://127.0.0.1:8000/mcp add --json '{"a": 1, "b": 2}'
  mcp-trio call http://127.0.0.1:8000/mcp count --arg steps=5 \\
      --arg delay=0.5 --mcp-log-level info
  mcp-trio call http://127.0.0.1:8000/mcp test_image_content --raw
  mcp-trio call http://127.0.0.1:8000/mcp slow_compute --arg seconds=3

"""


async def list_all_tools(session: ClientSession) -> list[mt.Tool]:
    tools: list[mt.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _page in range(MAX_PAGES):
        result = await session.list_tools(cursor)
        tools.extend(result.tools)
        cursor = result.next_cursor
        if not cursor or cursor in seen:
            break
        seen.add(cursor)
    return tools


async def _tools(args: argparse.Namespace, notices: Notices) -> int:
    async with open_session(args, on_log=notices.log) as session:
        tools = await list_all_tools(session)
    if args.raw:
        dumped = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
        print(json.dumps(dumped, indent=2))
    else:
        for tool in tools:
            print("\n".join(format_tool(tool)))
    return EXIT_OK


def _check_logs_offered(session: ClientSession) -> None:
    """Legacy sessions: the client sent ``logging/setLevel`` if the server offers logging (modern ones
    carry the level in each request's _meta); say so when it does not."""
    if not session.modern and "logging" not in session.server_capabilities:
        report("the server does not offer logging; --mcp-log-level has no effect")


async def _input_schema(session: ClientSession, name: str) -> dict[str, Any] | None:
    """The input schema of tool ``name``; None if the server does not list it (its --arg values are
    then untyped, and the server has the last word)."""
    try:
        tools = await list_all_tools(session)
    except RPCError as exc:
        logger.info("tools/list failed (%s): --arg values stay untyped", exc.message)
        return None
    return next((tool.input_schema for tool in tools if tool.name == name), None)


async def _call(args: argparse.Namespace, notices: Notices) -> int:
    level = cast("mt.LoggingLevel | None", args.mcp_log_level)
    parse_arguments(args.arg, args.json)  # a malformed --arg or --json fails before we connect
    async with open_session(args, on_log=notices.log, log_level=level) as session:
        if level is not None:
            _check_logs_offered(session)
        schema = await _input_schema(session, args.tool) if args.arg else None
        arguments = parse_arguments(args.arg, args.json, schema)
        try:
            result = await session.call_tool(
                args.tool, arguments, progress=notices.progress, on_task_status=notices.task
            )
        finally:
            notices.clear()
    print_result(result, args.raw)
    return EXIT_TOOL_ERROR if result.is_error else EXIT_OK


def _failure(args: argparse.Namespace, exc: BaseException) -> int:
    """Report an exception of a client command on stderr; its exit status."""
    if isinstance(exc, UsageError):
        report(exc)
        return EXIT_USAGE
    if isinstance(exc, RPCError):
        report(f"error {exc.code}: {exc.message}")
        if exc.data is not None:
            report(f"error data: {json.dumps(exc.data)}")
        return EXIT_RPC_ERROR
    if isinstance(exc, TransportError) and exc.status == 404 and not args.url.rstrip("/").endswith("/mcp"):
        report(exc)
        report("is the path right? MCP endpoints often end in /mcp")
    elif isinstance(exc, MCPTrioError):
        report(exc)
    elif isinstance(exc, pydantic.ValidationError):
        report(f"the server's answer is not valid MCP: {exc}")
    elif isinstance(exc, OSError) and exc.filename is not None:  # the --oauth token store, not the network
        report(exc)
    else:
        report(f"cannot reach {args.url}: {exc}")
    return EXIT_CONNECTION


def run_client_command(args: argparse.Namespace) -> int:
    """Run ``tools`` or ``call``; the exit status."""
    notices = Notices(sys.stderr, sys.stderr.isatty())
    command = _tools if args.command == "tools" else _call
    try:
        code: int = trio.run(command, args, notices)
        return code
    except BaseException as exc:  # sorted out below; anything unexpected is re-raised
        failure = single_exception(exc)
        if isinstance(failure, KeyboardInterrupt):
            notices.clear()
            report("interrupted")
            return EXIT_INTERRUPTED
        if isinstance(failure, BrokenPipeError):
            raise failure from None  # stdout closed early (mcp-trio tools URL | head): main() handles it
        if isinstance(failure, UsageError | MCPTrioError | pydantic.ValidationError | OSError):
            return _failure(args, failure)
        raise
