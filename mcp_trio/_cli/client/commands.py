"""What the client commands do: ``tools`` and ``call``, ``resources`` and ``read``, ``prompts`` and
``prompt`` (their parsers are :mod:`.parsers`), and how their failures are reported (each kind with its
exit status).  Each opens one session (:func:`.connection.open_session`), shows the request's progress
and the server's log messages on stderr (:class:`.display.Notices`) and prints its answer on stdout."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import mcp_types as mt
import pydantic
import trio

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
    report,
    single_exception,
)
from .arguments import parse_arguments, parse_prompt_arguments
from .connection import open_session
from .display import (
    Notices,
    format_prompt,
    format_resource,
    format_tool,
    print_contents,
    print_json,
    print_messages,
    print_result,
)

__all__ = ["list_all", "run_client_command"]

logger = logging.getLogger("mcp_trio._cli.client")  # one logger for the client commands

MAX_PAGES = 100
"""Pages of a listing followed at most (a server whose cursors never end cannot keep us looping)."""


async def list_all(list_page: Callable[[str | None], Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated listing: ``list_page(cursor)`` (``session.list_tools``, ...) asked for
    each page, its ``field`` (``tools``, ...) gathered, until a page has no next cursor (or one seen)."""
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _page in range(MAX_PAGES):
        result = await list_page(cursor)
        items.extend(getattr(result, field))
        cursor = result.next_cursor
        if not cursor or cursor in seen:
            break
        seen.add(cursor)
    return items


async def _tools(args: argparse.Namespace, notices: Notices) -> int:
    async with open_session(args, on_log=notices.log) as session:
        tools: list[mt.Tool] = await list_all(session.list_tools, "tools")
    if args.raw:
        print_json(tools)
    else:
        for tool in tools:
            print("\n".join(format_tool(tool)))
    return EXIT_OK


async def _resources(args: argparse.Namespace, notices: Notices) -> int:
    async with open_session(args, on_log=notices.log) as session:
        resources: list[mt.Resource] = await list_all(session.list_resources, "resources")
        templates: list[mt.ResourceTemplate] = await list_all(
            session.list_resource_templates, "resource_templates"
        )
    if args.raw:
        print_json({"resources": resources, "resourceTemplates": templates})
    else:
        listed: list[mt.Resource | mt.ResourceTemplate] = [*resources, *templates]
        for item in listed:
            print(format_resource(item))
    return EXIT_OK


async def _prompts(args: argparse.Namespace, notices: Notices) -> int:
    async with open_session(args, on_log=notices.log) as session:
        prompts: list[mt.Prompt] = await list_all(session.list_prompts, "prompts")
    if args.raw:
        print_json(prompts)
    else:
        for prompt in prompts:
            print("\n".join(format_prompt(prompt)))
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
        tools: list[mt.Tool] = await list_all(session.list_tools, "tools")
    except RPCError as exc:
        logger.info("tools/list failed (%s): --arg values stay untyped", exc.message)
        return None
    return next((tool.input_schema for tool in tools if tool.name == name), None)


async def _call(args: argparse.Namespace, notices: Notices) -> int:
    parse_arguments(args.arg, args.json)  # a malformed --arg or --json fails before we connect
    async with _logged_session(args, notices) as session:
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


async def _read(args: argparse.Namespace, notices: Notices) -> int:
    async with _logged_session(args, notices) as session:
        try:
            result = await session.read_resource(args.uri, progress=notices.progress)
        finally:
            notices.clear()
    print_contents(result, args.raw)
    return EXIT_OK


async def _prompt(args: argparse.Namespace, notices: Notices) -> int:
    arguments = parse_prompt_arguments(args.arg, args.json)  # before we connect
    async with _logged_session(args, notices) as session:
        try:
            result = await session.get_prompt(args.name, arguments, progress=notices.progress)
        finally:
            notices.clear()
    print_messages(result, args.raw)
    return EXIT_OK


@asynccontextmanager
async def _logged_session(args: argparse.Namespace, notices: Notices) -> AsyncIterator[ClientSession]:
    """The session of a command with ``--mcp-log-level``: the server's log messages on stderr, at
    that level if one was asked."""
    level = cast("mt.LoggingLevel | None", args.mcp_log_level)
    async with open_session(args, on_log=notices.log, log_level=level) as session:
        if level is not None:
            _check_logs_offered(session)
        yield session


COMMANDS: dict[str, Callable[[argparse.Namespace, Notices], Awaitable[int]]] = {
    "tools": _tools,
    "call": _call,
    "resources": _resources,
    "read": _read,
    "prompts": _prompts,
    "prompt": _prompt,
}
"""What each client command does (:data:`~..output.CLIENT_COMMANDS`)."""


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
    """Run the client command ``args.command``; the exit status."""
    notices = Notices(sys.stderr, sys.stderr.isatty())
    try:
        code: int = trio.run(COMMANDS[args.command], args, notices)
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
