"""The client commands of ``mcp-trio``: ``tools URL`` lists a server's tools, ``call URL TOOL`` calls one.

``call`` types each ``--arg KEY=VALUE`` by the tool's ``inputSchema`` (fetched with ``tools/list``
first), shows progress and log notifications on stderr, prints the result on stdout (text as is,
other content summarized, ``--raw`` for the whole result as JSON) and says how it went in its exit
status (:data:`EXIT_STATUS_HELP`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import logging
import math
import os
import re
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast
from urllib.parse import urlsplit

import httpx
import mcp_types as mt
import pydantic
import trio

from .._app.context import LOG_LEVELS
from .._client.session import ClientSession, open_client_session
from .._protocol.tasks import TaskInfo
from ..errors import MCPTrioError, RPCError, TransportError

if TYPE_CHECKING:
    from ..auth import OAuth, RedirectHandler

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_CONNECTION",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RPC_ERROR",
    "EXIT_STATUS_HELP",
    "EXIT_TOOL_ERROR",
    "EXIT_USAGE",
    "UsageError",
    "add_client_commands",
    "format_content",
    "parse_arguments",
    "run_client_command",
    "single_exception",
]

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_RPC_ERROR = 4
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

EXIT_STATUS_HELP = """\
exit status:
  0    success (serve, demo: stopped by Ctrl-C or SIGTERM)
  1    call: the tool ran and reported an error (isError)
  2    usage error: a bad option, MODULE:ATTR, URL or --json, or an --arg
       value that does not fit its type
  3    cannot connect, an HTTP or protocol failure, or the authorization
       (--oauth) failed; serve, demo: cannot listen on the address, or
       the installed hypercorn is not the one mcp_trio's fixes were
       written for (see --allow-stock-hypercorn)
  4    tools, call: the server answered with a JSON-RPC error
       (unknown tool, invalid arguments, ...)
  130  interrupted (Ctrl-C) while talking to the server
  141  stdout was closed early (piped into head, ...), as for SIGPIPE
"""

logger = logging.getLogger(__name__)

MAX_PAGES = 100
"""tools/list pages followed at most (a server whose cursors never end cannot keep us looping)."""
BAR_WIDTH = 24


class UsageError(Exception):
    """The command line asks for something that cannot be done: exit status 2."""


HEADLESS_REDIRECT_URI = "http://127.0.0.1:8765/callback"
"""The redirect URI of ``--oauth-headless``: nothing listens there, the user copies the URL."""
SECRET_VARIABLE = "MCP_TRIO_OAUTH_CLIENT_SECRET"


# -- the command line ---------------------------------------------------------------------------


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://", "ws://", "wss://")):
        raise argparse.ArgumentTypeError(f"expected an http(s):// or ws(s):// URL, got {text!r}")
    return text


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP field name (RFC 9110 5.1: a token)."""
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")
"""An HTTP field value as sent here: visible ASCII characters, spaces and tabs."""
CLIENT_SET_HEADERS = frozenset(
    {"accept", "content-type", "content-length", "transfer-encoding", "connection", "host", "last-event-id"}
)
"""Headers the client sets itself; --header may not set them, nor any ``Mcp-*`` header."""


def _header(text: str) -> tuple[str, str]:
    """``--header NAME:VALUE``: the name a token, the value printable ASCII (spaces and tabs around it
    are dropped); not a header the client sets itself."""
    name, sep, value = text.partition(":")
    value = value.strip(" \t")
    if not sep or not _TOKEN.fullmatch(name):
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE with NAME an HTTP header name, got {text!r}")
    if not _FIELD_VALUE.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"the value of {name} must be printable ASCII (no CR, LF, NUL or other control character)"
        )
    lowered = name.lower()
    if lowered in CLIENT_SET_HEADERS or lowered.startswith("mcp-"):
        raise argparse.ArgumentTypeError(f"{name} is set by the client itself; it cannot be given")
    return name, value


def add_client_commands(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add ``tools`` and ``call`` to the subparsers ``sub`` of the ``mcp-trio`` parser."""
    tools = sub.add_parser(
        "tools",
        help="list the tools of an MCP server and their parameters",
        description="List the tools of the MCP server at URL: each tool's name and the first line\n"
        "of its description, then its parameters with their types (optional ones\n"
        "marked, with their defaults).",
        epilog="example:\n  mcp-trio tools http://127.0.0.1:8000/mcp\n\n" + EXIT_STATUS_HELP,
        formatter_class=formatter,
    )
    tools.add_argument(
        "url", metavar="URL", type=_url, help="the MCP endpoint: http(s)://... or ws(s)://... (WebSocket)"
    )
    tools.add_argument("--raw", action="store_true", help="print the tools as JSON")
    call = sub.add_parser(
        "call",
        help="call a tool of an MCP server and print its result",
        description=CALL_DESCRIPTION,
        epilog=CALL_EPILOG + EXIT_STATUS_HELP,
        formatter_class=formatter,
    )
    call.add_argument(
        "url", metavar="URL", type=_url, help="the MCP endpoint: http(s)://... or ws(s)://... (WebSocket)"
    )
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
        cmd.add_argument(
            "--header",
            action="append",
            default=[],
            type=_header,
            metavar="NAME:VALUE",
            help="send this HTTP header with every request (repeat for more), e.g. "
            "'Authorization: Bearer TOKEN'",
        )
        _add_oauth_options(cmd)
        cmd.add_argument(
            "--mode",
            choices=("auto", "legacy", "modern"),
            default="auto",
            help="protocol era: auto (default: try 2026-07-28, else fall back to initialize), "
            "legacy (2025-11-25 and earlier, with initialize), modern (2026-07-28 only)",
        )


def _add_oauth_options(cmd: argparse.ArgumentParser) -> None:
    oauth = cmd.add_argument_group(
        "OAuth",
        "With --oauth, a server that answers 401 gets the MCP authorization flow:\n"
        "discovery, client registration, your browser at the authorization page,\n"
        "the redirect caught on a loopback port.  Tokens are kept in a file and\n"
        "refreshed; the next run uses them without asking.",
    )
    oauth.add_argument("--oauth", action="store_true", help="authorize with OAuth 2.1 when the server asks")
    oauth.add_argument(
        "--oauth-store",
        metavar="PATH",
        help="the file of tokens and client registrations (default: "
        "$XDG_CONFIG_HOME/mcp-trio/tokens.json, or ~/.config/mcp-trio/tokens.json)",
    )
    oauth.add_argument(
        "--oauth-headless",
        action="store_true",
        help="print the authorization URL and read from stdin the URL the browser was redirected to "
        "(for a machine without a browser; also what --oauth does when no browser can be opened)",
    )
    oauth.add_argument(
        "--oauth-redirect-uri",
        metavar="URI",
        help="the redirect URI to register and use (default: http://127.0.0.1:PORT/callback on a free "
        f"port, or {HEADLESS_REDIRECT_URI} with --oauth-headless)",
    )
    oauth.add_argument(
        "--oauth-client-id", metavar="ID", help="a client registered beforehand (no dynamic registration)"
    )
    oauth.add_argument(
        "--oauth-client-secret",
        metavar="SECRET",
        help="its secret (default: the environment variable MCP_TRIO_OAUTH_CLIENT_SECRET)",
    )
    oauth.add_argument(
        "--oauth-scope",
        metavar="SCOPE",
        help="the scopes to ask for, space-separated (default: the server's)",
    )


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


# -- typing --arg values by the input schema ---------------------------------------------------------

_TRIED_IN_ORDER = ("null", "boolean", "integer", "number", "array", "object")
_TYPE_NAMES = {
    "null": "null",
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
    "array": "a JSON array (e.g. [1, 2])",
    "object": 'a JSON object (e.g. {"key": 1})',
    "string": "text",
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json(text: str) -> tuple[bool, Any]:
    """``(True, value)`` if ``text`` is strict JSON (no NaN or Infinity), else ``(False, None)``."""
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return False, None


def _parse_as(kind: str, text: str) -> tuple[bool, Any]:
    if kind == "null":
        return text == "null", None
    if kind == "boolean":
        lowered = text.lower()
        return lowered in ("true", "false"), lowered == "true"
    ok, value = _json(text)
    if not ok:
        return False, None
    fits = {
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }
    return fits.get(kind, False), value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _resolve(root: dict[str, Any], ref: str) -> Any:
    """A local ``$ref`` (``#/$defs/name``) in ``root``, or None."""
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict):
            return None
        node = node.get(part.replace("~1", "/").replace("~0", "~"))
    return node


def accepted_types(schema: Any, root: dict[str, Any], depth: int = 0) -> set[str] | None:
    """The JSON types a parameter's schema accepts, or None when it does not say."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind):
        return set(kind)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        return accepted_types(_resolve(root, ref), root, depth + 1)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        types: set[str] = set()
        for branch in branches:
            found = accepted_types(branch, root, depth + 1)
            if found is None:  # a branch that takes anything: VALUE cannot be typed
                return None
            types |= found
        return types
    values = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if values is None and "const" in schema:
        values = [schema["const"]]
    return {_json_type(value) for value in values} if values else None


def _describe(types: Iterable[str]) -> str:
    ordered = [kind for kind in (*_TRIED_IN_ORDER, "string") if kind in types]
    return " or ".join(_TYPE_NAMES[kind] for kind in ordered)


def type_value(key: str, text: str, types: set[str] | None) -> Any:
    """``text`` as the value of a parameter accepting ``types`` (None: untyped, JSON else text)."""
    known = (types or set()) & _TYPE_NAMES.keys()
    if not known:
        ok, value = _json(text)
        return value if ok else text
    for kind in _TRIED_IN_ORDER:
        if kind in known:
            ok, value = _parse_as(kind, text)
            if ok:
                return value
    if "string" in known:
        return text
    raise UsageError(f"--arg {key}={text}: {key} expects {_describe(known)}, got {text!r}")


def parse_arguments(
    pairs: Iterable[str], json_object: str | None = None, input_schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``arguments`` of ``tools/call``: ``--json``'s object, then each ``--arg`` (which wins), its
    value typed by ``input_schema``'s property of that name."""
    arguments: dict[str, Any] = {}
    if json_object is not None:
        ok, value = _json(json_object)
        if not ok or not isinstance(value, dict):
            raise UsageError(f'--json wants a JSON object such as \'{{"text": "hi"}}\', got {json_object!r}')
        arguments.update(value)
    schema = input_schema or {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--arg wants KEY=VALUE, got {pair!r}")
        types = accepted_types(properties[key], schema) if key in properties else None
        arguments[key] = type_value(key, text, types)
    return arguments


# -- printing results ---------------------------------------------------------------------------------


def _decoded_size(data: str) -> str:
    try:
        return f"{len(base64.b64decode(data, validate=True))} bytes"
    except (binascii.Error, ValueError):
        return "data not valid base64"


def _summary(kind: str, *details: str | None, size: str | None = None) -> str:
    words = " ".join(detail for detail in (kind, *details) if detail)
    return f"[{words}, {size}]" if size else f"[{words}]"


def format_content(item: Any) -> str:
    """One content block as printed: text as it is, anything else as a one-line summary (an embedded
    text resource: the summary, then its text)."""
    if isinstance(item, mt.TextContent):
        return item.text
    if isinstance(item, mt.ImageContent | mt.AudioContent):
        return _summary(item.type, item.mime_type, size=_decoded_size(item.data))
    if isinstance(item, mt.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, mt.BlobResourceContents):
            return _summary(
                "resource", str(resource.uri), resource.mime_type, size=_decoded_size(resource.blob)
            )
        text = resource.text
        header = _summary(
            "resource", str(resource.uri), resource.mime_type, size=f"{len(text.encode())} bytes"
        )
        return f"{header}\n{text}"
    if isinstance(item, mt.ResourceLink):
        known = None if item.size is None else f"{item.size} bytes"
        return _summary("resource_link", str(item.uri), item.mime_type, size=known)
    kind = getattr(item, "type", type(item).__name__)
    return _summary(str(kind))


def print_result(result: mt.CallToolResult, raw: bool) -> None:
    if raw:
        print(json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2))
        return
    for item in result.content:
        print(format_content(item))
    has_text = any(isinstance(item, mt.TextContent) for item in result.content)
    if result.structured_content is not None and not has_text:
        print(json.dumps(result.structured_content, indent=2))


def _type_text(schema: Any, root: dict[str, Any]) -> str:
    if not isinstance(schema, dict):
        return "any"
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_type_text(schema['items'], root)}"
    branches = schema.get("anyOf") or schema.get("oneOf")
    if "type" not in schema and isinstance(branches, list) and branches:
        return " | ".join(dict.fromkeys(_type_text(branch, root) for branch in branches))
    types = accepted_types(schema, root)
    text = " | ".join(sorted(types)) if types else "any"
    if isinstance(schema.get("enum"), list):
        text += ", one of " + ", ".join(json.dumps(value) for value in schema["enum"])
    return text


def format_tool(tool: mt.Tool) -> list[str]:
    """The lines ``mcp-trio tools`` prints for one tool."""
    first_line = (tool.description or "").strip().splitlines()[:1]
    lines = [f"{tool.name}: {first_line[0] if first_line else ''}".rstrip()]
    schema = tool.input_schema or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    for name, prop in properties.items():
        notes = []
        if name not in required:
            notes.append("optional")
            if isinstance(prop, dict) and "default" in prop:
                notes.append(f"default {json.dumps(prop['default'])}")
        line = f"    {name}: {_type_text(prop, schema)}"
        if notes:
            line += f" ({', '.join(notes)})"
        description = prop.get("description") if isinstance(prop, dict) else None
        if isinstance(description, str) and description.strip():
            line += f" - {description.strip().splitlines()[0]}"
        lines.append(line)
    return lines


# -- progress and log notifications on stderr ---------------------------------------------------------


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


class Notices:
    """Shows progress and log notifications on ``stream``: on a terminal a progress bar redrawn in
    place (log lines go above it), otherwise one line per notification."""

    def __init__(self, stream: TextIO, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self.bar = ""

    def _width(self) -> int:
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            columns = 0
        return max(20, columns - 1) if columns > 0 else 79  # a fresh pty says 0 columns

    def _draw(self, text: str) -> None:
        """Replace the bar's line with ``text`` (blanks cover a longer previous bar); an empty
        ``text`` erases the line and leaves the cursor at its start."""
        text = text[: self._width()]
        line = "\r" + text + " " * max(0, len(self.bar) - len(text))
        self.stream.write(line if text else line + "\r")
        self.stream.flush()
        self.bar = text

    def clear(self) -> None:
        """Erase the progress bar (before the result is printed, or a log line)."""
        if self.bar:
            self._draw("")

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """``progress=`` of the call: the bar redrawn, or one line ``progress 3/10 message``."""
        count = _number(progress) if total is None else f"{_number(progress)}/{_number(total)}"
        if not self.tty:
            self.stream.write(" ".join(filter(None, ("progress", count, message))) + "\n")
            self.stream.flush()
            return
        if total:
            filled = max(0, min(BAR_WIDTH, round(BAR_WIDTH * progress / total)))
            bar = "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "] "
        else:
            bar = "[progress] "
        self._draw(bar + " ".join(filter(None, (count, message))))

    def task(self, task: TaskInfo) -> None:
        """``on_task_status`` of the call: the status line redrawn, or one line
        ``task ID STATUS: message`` per change."""
        if not self.tty:
            line = f"task {task.task_id} {task.status}"
            if task.status_message:
                line += f": {task.status_message}"
            self.stream.write(line + "\n")
            self.stream.flush()
            return
        self._draw(f"[task {task.status}] " + (task.status_message or task.task_id))

    def log(self, log: mt.LoggingMessageNotificationParams) -> None:
        """``on_log``: one line ``log LEVEL [LOGGER]: DATA`` (above the bar on a terminal)."""
        text = log.data if isinstance(log.data, str) else json.dumps(log.data)
        where = f" [{log.logger}]" if log.logger else ""
        bar = self.bar
        self.clear()
        self.stream.write(f"log {log.level}{where}: {text}\n")
        if bar:
            self._draw(bar)
        self.stream.flush()


# -- the commands ---------------------------------------------------------------------------------


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


# -- --oauth ---------------------------------------------------------------------------------------


def default_token_store() -> Path:
    """``$XDG_CONFIG_HOME/mcp-trio/tokens.json``, or ``~/.config/mcp-trio/tokens.json``."""
    config_home = os.environ.get("XDG_CONFIG_HOME", "").strip()
    base = Path(config_home) if config_home and Path(config_home).is_absolute() else Path.home() / ".config"
    return base / "mcp-trio" / "tokens.json"


def _browser_available() -> bool:
    import webbrowser

    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def _loopback_parts(uri: str) -> tuple[str, int, str]:
    """(host, port, path) of an ``http://`` loopback redirect URI with a port, for LoopbackRedirect."""
    import ipaddress

    parts = urlsplit(uri)
    try:
        port = parts.port
        loopback = parts.hostname is not None and ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        port, loopback = None, False
    if parts.scheme != "http" or not loopback or port is None or parts.query or parts.fragment:
        raise UsageError(
            f"--oauth-redirect-uri {uri}: mcp-trio listens there for the redirect, so it must be "
            "http://127.0.0.1:PORT/PATH (or [::1]) with a port; with --oauth-headless any URI goes"
        )
    assert parts.hostname is not None
    return parts.hostname, port, parts.path or "/"


def _check_oauth_options(args: argparse.Namespace) -> None:
    """Usage errors of the OAuth options, before anything is sent."""
    given = [
        option
        for option, value in (
            ("--oauth-store", args.oauth_store),
            ("--oauth-headless", args.oauth_headless),
            ("--oauth-redirect-uri", args.oauth_redirect_uri),
            ("--oauth-client-id", args.oauth_client_id),
            ("--oauth-client-secret", args.oauth_client_secret),
            ("--oauth-scope", args.oauth_scope),
        )
        if value
    ]
    if not args.oauth:
        if given:
            raise UsageError(f"{given[0]} goes with --oauth")
        return
    if any(name.lower() == "authorization" for name, _value in args.header):
        raise UsageError(
            "--oauth sends its own Authorization header: give --oauth or that --header, not both"
        )
    if args.oauth_client_secret and not args.oauth_client_id:
        raise UsageError("--oauth-client-secret goes with --oauth-client-id")
    if args.oauth_scope is not None and not args.oauth_scope.split():
        raise UsageError("--oauth-scope wants at least one scope")
    if args.oauth_redirect_uri and not args.oauth_headless:
        _loopback_parts(args.oauth_redirect_uri)
    if args.oauth_store is not None and Path(args.oauth_store).is_dir():
        raise UsageError(f"--oauth-store {args.oauth_store} is a directory: name the file to keep tokens in")


def _oauth(args: argparse.Namespace) -> tuple[OAuth, RedirectHandler] | None:
    """The ``OAuth`` of ``--oauth`` and its redirect handler, or None without ``--oauth``."""
    if not args.oauth:
        return None
    from ..auth import FileTokenStore, HeadlessRedirect, LoopbackRedirect, OAuth

    redirect: RedirectHandler
    if args.oauth_headless or not _browser_available():
        redirect = HeadlessRedirect(args.oauth_redirect_uri or HEADLESS_REDIRECT_URI)
    elif args.oauth_redirect_uri:
        host, port, path = _loopback_parts(args.oauth_redirect_uri)
        redirect = LoopbackRedirect(port, host=host, path=path)
    else:
        redirect = LoopbackRedirect()
    secret = args.oauth_client_secret or os.environ.get(SECRET_VARIABLE) or None
    oauth = OAuth(
        redirect=redirect,
        client_name="mcp-trio",
        client_id=args.oauth_client_id,
        client_secret=secret if args.oauth_client_id else None,
        scopes=args.oauth_scope.split() if args.oauth_scope else None,
        store=FileTokenStore(args.oauth_store or default_token_store()),
    )
    return oauth, redirect


@asynccontextmanager
async def _open_session(args: argparse.Namespace, **options: Any) -> AsyncIterator[ClientSession]:
    """A session with ``args.url`` in ``args.mode`` on an HTTP client that sends the ``--header``s, and
    authorizes with ``--oauth``."""
    _check_oauth_options(args)
    if args.url.startswith(("ws://", "wss://")):
        if args.oauth:
            raise UsageError("--oauth is for http(s):// endpoints; give a WebSocket its token with --header")
        from .._client.session import open_websocket_client

        async with open_websocket_client(
            args.url, mode=args.mode, headers=dict(args.header), **options
        ) as session:
            yield session
        return
    oauth = _oauth(args)
    try:
        async with (
            httpx.AsyncClient(headers=args.header, timeout=httpx.Timeout(30.0, read=None)) as http,
            open_client_session(
                args.url, mode=args.mode, http=http, auth=oauth[0] if oauth else None, **options
            ) as session,
        ):
            yield session
    finally:
        close = getattr(oauth[1], "close", None) if oauth else None
        if close is not None:
            close()  # a loopback port bound for a registration and left unused


async def _tools(args: argparse.Namespace, notices: Notices) -> int:
    async with _open_session(args, on_log=notices.log) as session:
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
        print("mcp-trio: the server does not offer logging; --mcp-log-level has no effect", file=sys.stderr)


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
    async with _open_session(args, on_log=notices.log, log_level=level) as session:
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
        print(f"mcp-trio: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, RPCError):
        print(f"mcp-trio: error {exc.code}: {exc.message}", file=sys.stderr)
        if exc.data is not None:
            print(f"mcp-trio: error data: {json.dumps(exc.data)}", file=sys.stderr)
        return EXIT_RPC_ERROR
    if isinstance(exc, TransportError) and exc.status == 404 and not args.url.rstrip("/").endswith("/mcp"):
        print(f"mcp-trio: {exc}", file=sys.stderr)
        print("mcp-trio: is the path right? MCP endpoints often end in /mcp", file=sys.stderr)
    elif isinstance(exc, MCPTrioError):
        print(f"mcp-trio: {exc}", file=sys.stderr)
    elif isinstance(exc, pydantic.ValidationError):
        print(f"mcp-trio: the server's answer is not valid MCP: {exc}", file=sys.stderr)
    elif isinstance(exc, OSError) and exc.filename is not None:  # the --oauth token store, not the network
        print(f"mcp-trio: {exc}", file=sys.stderr)
    else:
        print(f"mcp-trio: cannot reach {args.url}: {exc}", file=sys.stderr)
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
            print("mcp-trio: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        if isinstance(failure, BrokenPipeError):
            raise failure from None  # stdout closed early (mcp-trio tools URL | head): main() handles it
        if isinstance(failure, UsageError | MCPTrioError | pydantic.ValidationError | OSError):
            return _failure(args, failure)
        raise


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
