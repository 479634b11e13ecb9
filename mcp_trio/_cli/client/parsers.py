"""The parsers of the client commands: ``tools`` and ``call``, ``resources`` and ``read``, ``prompts``
and ``prompt``, with the options they share (``--raw``, ``--arg``/``--json``, ``--mcp-log-level``,
and the connection's from :mod:`.connection`).  Declaring them imports nothing beyond the standard
library: what runs them is :mod:`.commands`."""

from __future__ import annotations

import argparse
from typing import Any

from ..output import add_command
from .connection import add_connection_options, add_url

__all__ = ["MCP_LOG_LEVELS", "add_client_commands"]

MCP_LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""The MCP log levels, least severe first (``mcp_types.LoggingLevel``; a test checks they agree)."""

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

RESOURCES_DESCRIPTION = """\
List the resources of the MCP server at URL, then its resource templates:
one line each, "URI (MIME TYPE): NAME - DESCRIPTION" (the title instead of
the name when there is one; the first line of the description).  A
template's URI has {variables}: 'mcp-trio read URL URI' reads a resource,
the variables of a template filled in.
"""

READ_DESCRIPTION = """\
Read the resource URI of the MCP server at URL and print its contents on
stdout: text as it is; binary contents (blobs) as one line each, e.g.
"[resource test://logo image/png, 70 bytes]".  --raw prints the whole
result as JSON (blobs in base64).

Notifications go to stderr, as for 'mcp-trio call': progress, and server log
messages with --mcp-log-level.
"""

PROMPTS_DESCRIPTION = """\
List the prompts of the MCP server at URL: each prompt's name and the first
line of its description, then its arguments (optional ones marked, with the
first line of their descriptions).
"""

PROMPT_DESCRIPTION = """\
Get the prompt NAME of the MCP server at URL, with its arguments, and print
its messages on stdout: each as "ROLE: " and its content, text as it is and
anything else as one line, as 'mcp-trio call' prints a result's content.
--raw prints the whole result as JSON.

Prompt arguments are text: --arg KEY=VALUE sends VALUE as it is typed
(n=42 sends "42"); --json takes an object whose values are strings.  The
server checks them (a missing required argument is its JSON-RPC error).

Notifications go to stderr, as for 'mcp-trio call': progress, and server log
messages with --mcp-log-level.
"""


def _add_raw(cmd: argparse.ArgumentParser, what: str) -> None:
    cmd.add_argument("--raw", action="store_true", help=f"print {what} as JSON")


def _add_arguments(cmd: argparse.ArgumentParser, of: str, typed: str) -> None:
    """``--arg KEY=VALUE`` (repeated) and ``--json OBJECT``: the arguments of a tool or a prompt."""
    cmd.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"one argument of the {of} (repeat for more); {typed}",
    )
    cmd.add_argument(
        "--json",
        metavar="OBJECT",
        help="all arguments as one JSON object, e.g. '{\"a\": 1}'; an --arg for the same key wins",
    )


def _add_mcp_log_level(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--mcp-log-level",
        choices=MCP_LOG_LEVELS,
        metavar="LEVEL",
        help="ask the server for its log messages at LEVEL and above: " + ", ".join(MCP_LOG_LEVELS) + " "
        "(default: ask nothing, the server decides); they are printed on stderr",
    )


def _example(command: str, *rest: str) -> str:
    return (
        "example (against 'mcp-trio demo'):\n"
        + f"  mcp-trio {command} http://127.0.0.1:8000/mcp{''.join(rest)}\n\n"
    )


def add_client_commands(sub: Any) -> None:
    """Add the client commands to the subparsers ``sub`` of the ``mcp-trio`` parser, in the order of
    :data:`~..output.COMMAND_HELP`."""
    tools = add_command(
        sub,
        "tools",
        description="List the tools of the MCP server at URL: each tool's name and the first line\n"
        "of its description, then its parameters with their types (optional ones\n"
        "marked, with their defaults).",
        epilog="example:\n  mcp-trio tools http://127.0.0.1:8000/mcp\n\n",
    )
    add_url(tools)
    _add_raw(tools, "the tools")
    call = add_command(sub, "call", description=CALL_DESCRIPTION, epilog=CALL_EPILOG)
    add_url(call)
    call.add_argument("tool", metavar="TOOL", help="the name of the tool ('mcp-trio tools URL' lists them)")
    _add_arguments(call, "tool", "VALUE is typed by the tool's input schema")
    call.add_argument(
        "--raw", action="store_true", help="print the whole result as JSON instead of its content"
    )
    _add_mcp_log_level(call)
    resources = add_command(sub, "resources", description=RESOURCES_DESCRIPTION, epilog=_example("resources"))
    add_url(resources)
    _add_raw(resources, 'the resources and templates ({"resources": [...], "resourceTemplates": [...]})')
    read = add_command(
        sub, "read", description=READ_DESCRIPTION, epilog=_example("read", " test://static-text")
    )
    add_url(read)
    read.add_argument("uri", metavar="URI", help="the resource's URI ('mcp-trio resources URL' lists them)")
    _add_raw(read, "the whole result")
    _add_mcp_log_level(read)
    prompts = add_command(sub, "prompts", description=PROMPTS_DESCRIPTION, epilog=_example("prompts"))
    add_url(prompts)
    _add_raw(prompts, "the prompts")
    prompt = add_command(
        sub,
        "prompt",
        description=PROMPT_DESCRIPTION,
        epilog=_example("prompt", " \\\n      test_prompt_with_arguments --arg arg1=hello --arg arg2=world"),
    )
    add_url(prompt)
    prompt.add_argument("name", metavar="NAME", help="the prompt's name ('mcp-trio prompts URL' lists them)")
    _add_arguments(prompt, "prompt", "VALUE is sent as text, as typed")
    _add_raw(prompt, "the whole result")
    _add_mcp_log_level(prompt)
    for cmd in (tools, call, resources, read, prompts, prompt):
        add_connection_options(cmd)
