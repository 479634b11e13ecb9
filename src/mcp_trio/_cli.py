"""The ``mcp-trio`` command: ``serve MODULE:ATTR`` and ``demo``."""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence

import trio

from ._app.server import MCPServer
from ._cli_client import add_client_commands, run_client_command
from ._server.asgi import MCPApp
from ._server.config import ServerConfig
from ._server.h11server import H11Config, serve_h11
from ._server.serve import hypercorn_config, serve, wait_for_signal
from ._stdio import serve_stdio

__all__ = ["main"]


def load_app(target: str, config: ServerConfig) -> MCPApp:
    """``package.module:attr`` naming an :class:`MCPApp`, an :class:`MCPServer` or a factory of either."""
    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise SystemExit(f"mcp-trio: expected MODULE:ATTR, got {target!r}")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, (MCPApp, MCPServer)):
        obj = obj()
    if isinstance(obj, MCPServer):
        return MCPApp(obj, config)
    if isinstance(obj, MCPApp):
        return obj
    raise SystemExit(f"mcp-trio: {target} is neither an MCPServer nor an MCPApp")


async def run_server(
    app: MCPApp, bind: str, http_server: str = "hypercorn", *, hypercorn_fast_path: bool = True
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM; print each bound URL once listening."""
    run: Callable[..., Awaitable[None]]
    if http_server == "h11":
        host, _, port = bind.rpartition(":")
        run = functools.partial(
            serve_h11,
            app,
            host.strip("[]") or "127.0.0.1",
            int(port),
            config=H11Config(shutdown_grace=app.config.shutdown_grace),
            shutdown_trigger=wait_for_signal,
        )
    else:
        run = functools.partial(
            serve,
            app,
            hypercorn_config([bind]),
            shutdown_trigger=wait_for_signal,
            hypercorn_fast_path=hypercorn_fast_path,
        )
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(run)
        for url in urls:
            print(f"mcp-trio: serving on {url}{app.config.path or '/'}", flush=True)
    print("mcp-trio: stopped", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-trio", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("serve", "serve an MCPServer or MCPApp"), ("demo", "serve the demo server")):
        cmd = sub.add_parser(name, help=help_text)
        if name == "serve":
            cmd.add_argument("target", metavar="MODULE:ATTR")
        cmd.add_argument("--bind", default="127.0.0.1:8000", help="HOST:PORT (default 127.0.0.1:8000)")
        cmd.add_argument("--stdio", action="store_true", help="speak MCP over stdin/stdout instead of HTTP")
        cmd.add_argument(
            "--http",
            choices=("hypercorn", "h11"),
            default="hypercorn",
            help="HTTP server: hypercorn's trio worker (default) or the embedded Trio + h11 server",
        )
        cmd.add_argument(
            "--no-hypercorn-fast-path",
            action="store_true",
            help="leave hypercorn's request path as shipped (docs/hypercorn.md)",
        )
        cmd.add_argument("--json-response", action="store_true", help="answer with JSON instead of SSE")
        cmd.add_argument("--stats-path", default=None, help="serve statistics() as JSON on this path")
        cmd.add_argument("--log-level", default="WARNING")
        for option, kind in _CONFIG_OPTIONS.items():
            cmd.add_argument(
                f"--{option.replace('_', '-')}", type=kind, default=None, metavar=kind.__name__.upper()
            )
    add_client_commands(sub)
    return parser


_CONFIG_OPTIONS: dict[str, type] = {
    "idle_timeout": float,
    "init_timeout": float,
    "keepalive_interval": float,
    "shutdown_grace": float,
    "write_timeout": float,
    "body_timeout": float,
    "max_sessions": int,
    "max_body_size": int,
    "sse_retry_ms": int,
}


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    options = {name: getattr(args, name) for name in _CONFIG_OPTIONS if getattr(args, name) is not None}
    return ServerConfig(json_response=args.json_response, stats_path=args.stats_path, **options)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.command in ("tools", "call"):
        raise SystemExit(run_client_command(args))
    config = config_from_args(args)
    if args.command == "demo":
        from .demo import build_demo_server

        app = MCPApp(build_demo_server(), config)
    else:
        sys.path.insert(0, "")
        app = load_app(args.target, config)
    if args.stdio:
        # stdout carries only MCP messages (logging.basicConfig writes to stderr)
        trio.run(functools.partial(serve_stdio, app.server, config=config))
        return
    trio.run(
        functools.partial(
            run_server, app, args.bind, args.http, hypercorn_fast_path=not args.no_hypercorn_fast_path
        )
    )
