"""How a client command reaches its server: the URL, ``--header``, ``--mode`` and the ``--oauth``
options (declared here, checked before anything is sent), and the session they open
(:func:`open_session`): over a WebSocket, or over HTTP with the headers and, with ``--oauth``, the
authorization flow.  The options cost nothing to declare: the client is imported when a session opens."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..output import UsageError

if TYPE_CHECKING:
    from ..._client.session import ClientSession
    from ...auth import OAuth, RedirectHandler

__all__ = ["HEADLESS_REDIRECT_URI", "add_connection_options", "add_url", "open_session"]

HEADLESS_REDIRECT_URI = "http://127.0.0.1:8765/callback"
"""The redirect URI of ``--oauth-headless``: nothing listens there, the user copies the URL."""
SECRET_VARIABLE = "MCP_TRIO_OAUTH_CLIENT_SECRET"


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


def add_url(cmd: argparse.ArgumentParser) -> None:
    """The URL argument, first of a client command's arguments."""
    cmd.add_argument(
        "url", metavar="URL", type=_url, help="the MCP endpoint: http(s)://... or ws(s)://... (WebSocket)"
    )


def add_connection_options(cmd: argparse.ArgumentParser) -> None:
    """``--header``, the ``--oauth`` options and ``--mode``, after a client command's own options."""
    cmd.add_argument(
        "--header",
        action="append",
        default=[],
        type=_header,
        metavar="NAME:VALUE",
        help="send this HTTP header with every request (repeat for more), e.g. 'Authorization: Bearer TOKEN'",
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
    from ...auth import FileTokenStore, HeadlessRedirect, LoopbackRedirect, OAuth

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
async def open_session(args: argparse.Namespace, **options: Any) -> AsyncIterator[ClientSession]:
    """A session with ``args.url`` in ``args.mode`` on an HTTP client that sends the ``--header``s, and
    authorizes with ``--oauth``."""
    _check_oauth_options(args)
    if args.url.startswith(("ws://", "wss://")):
        if args.oauth:
            raise UsageError("--oauth is for http(s):// endpoints; give a WebSocket its token with --header")
        from ..._client.session import open_websocket_client

        async with open_websocket_client(
            args.url, mode=args.mode, headers=dict(args.header), **options
        ) as session:
            yield session
        return
    import httpx

    from ..._client.session import open_client_session

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
