"""``mcp-trio tools URL`` and ``mcp-trio call URL TOOL --arg k=v``: poke a server from the terminal."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import mcp_types as mt
import trio

from ._client.session import Mode, open_client_session
from ._exceptions import MCPTrioError, RPCError

__all__ = ["add_client_commands", "run_client_command"]


def add_client_commands(sub: Any) -> None:
    tools = sub.add_parser("tools", help="list the tools of an MCP server")
    tools.add_argument("url")
    call = sub.add_parser("call", help="call a tool of an MCP server and print its result")
    call.add_argument("url")
    call.add_argument("tool")
    call.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an argument; VALUE is parsed as JSON when it can be (42, true, [1]), else taken as text",
    )
    for cmd in (tools, call):
        cmd.add_argument(
            "--mode",
            choices=("auto", "legacy", "modern"),
            default="auto",
            help="protocol era: auto (try 2026-07-28, fall back to initialize), legacy, modern",
        )
        cmd.add_argument("--log-level", default="WARNING")


def parse_arguments(pairs: list[str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"mcp-trio: --arg wants KEY=VALUE, got {pair!r}")
        try:
            arguments[key] = json.loads(value)
        except ValueError:
            arguments[key] = value
    return arguments


async def _tools(url: str, mode: Mode) -> None:
    async with open_client_session(url, mode=mode) as session:
        for tool in (await session.list_tools()).tools:
            first_line = (tool.description or "").strip().splitlines()[:1]
            print(f"{tool.name}: {first_line[0] if first_line else ''}")
            properties = (tool.input_schema or {}).get("properties") or {}
            required = set((tool.input_schema or {}).get("required") or ())
            for name, schema in properties.items():
                kind = schema.get("type", "any") if isinstance(schema, dict) else "any"
                print(f"    {name}: {kind}{'' if name in required else ' (optional)'}")


async def _call(url: str, mode: Mode, tool: str, arguments: dict[str, Any]) -> int:
    async with open_client_session(url, mode=mode) as session:
        result = await session.call_tool(tool, arguments)
    for item in result.content:
        if isinstance(item, mt.TextContent):
            print(item.text)
        else:
            print(item.model_dump_json(by_alias=True, exclude_none=True))
    if result.structured_content is not None:
        print(json.dumps(result.structured_content, indent=2))
    return 1 if result.is_error else 0


def run_client_command(args: argparse.Namespace) -> int:
    try:
        if args.command == "tools":
            trio.run(_tools, args.url, args.mode)
            return 0
        code: int = trio.run(_call, args.url, args.mode, args.tool, parse_arguments(args.arg))
        return code
    except RPCError as exc:
        print(f"mcp-trio: error {exc.code}: {exc.message}", file=sys.stderr)
    except MCPTrioError as exc:
        print(f"mcp-trio: {exc}", file=sys.stderr)
    except OSError as exc:
        print(f"mcp-trio: cannot reach {args.url}: {exc}", file=sys.stderr)
    return 2
