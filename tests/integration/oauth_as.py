"""A real OAuth 2.1 authorization server for the end-to-end authorization tests, and a user at a browser.

:func:`run_authorization_server` runs ``tests/oauth_as/server.mjs`` (npm ``oidc-provider`` on Node 22,
see the comment at its top) on 127.0.0.1 with a free port, waits for its ready line, yields an
:class:`AuthorizationServer` and stops it (SIGTERM, then SIGKILL after a bound).  The server registers
any client (RFC 7591), requires PKCE S256, issues JWT access tokens whose ``aud`` is the ``resource`` of
the request (RFC 8707), refresh tokens to clients that registered the ``refresh_token`` grant, and
records what happened at ``GET /_events`` (:meth:`AuthorizationServer.events`).  :func:`serve_protected`
serves mcp_trio's MCP server as a protected resource of such a server, on hypercorn in this process.

:class:`Browser` plays the user: it opens an authorization URL, follows the redirects, fills the
server's login form (any login name is accepted: it becomes the token's ``sub``) and its consent form,
and returns the URL the browser is finally sent to, on the client's ``redirect_uri``, without loading it.
:class:`BrowserRedirect` hands an OAuth client's authorization URLs to a :class:`Browser`, and
:func:`browser_command` makes one a program that :mod:`webbrowser` runs (``BROWSER``) for a client
that opens the user's browser and catches the redirect on a loopback port.

The Node packages come from ``bash scripts/install-node-deps.sh`` (``tests/oauth_as/node_modules``),
which :func:`require_installed` runs first when npm is available (it does nothing when everything is in
place).  Without them the tests skip when run by hand, and fail under the test command
(``tests/required.py``).  Every wait here is bounded in time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx
import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig, serve
from mcp_trio.auth import AccessToken, JWTVerifier, ProtectedResource, TokenVerifier
from mcp_trio.server import hypercorn_config

__all__ = [
    "AS_DIR",
    "NODE",
    "AuthorizationServer",
    "Browser",
    "BrowserRedirect",
    "Protected",
    "browser_command",
    "obtain_tokens",
    "pkce_pair",
    "require_installed",
    "run_authorization_server",
    "serve_protected",
]

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / ".node22" / "node_modules" / "node" / "bin" / "node"  # scripts/node22.sh
AS_DIR = ROOT / "tests" / "oauth_as"
SERVER_JS = AS_DIR / "server.mjs"
PROVIDER_PACKAGE = AS_DIR / "node_modules" / "oidc-provider" / "package.json"

STARTUP_DEADLINE = 20.0
"""Seconds the server gets to print its ready line (Node start, imports, an RSA key, bind)."""
STOP_DEADLINE = 5.0
"""Seconds it gets to exit after SIGTERM before it is killed."""
DEFAULT_SCOPES = ("mcp:tools", "mcp:admin")
MAX_BROWSER_STEPS = 20
"""Redirects and form posts a login may take (login, consent, and the redirects between them)."""


_install_problem: list[str | None] = []


def require_installed() -> None:
    """Install (idempotently, when npm is there) and check Node 22 and ``oidc-provider``; skip the test
    (by hand) or fail it (under the test command) without them.  Sync: call it from a plain fixture,
    outside Trio."""
    if not _install_problem:
        problem = None
        if shutil.which("npm") is not None:
            done = subprocess.run(
                ["bash", str(ROOT / "scripts" / "install-node-deps.sh")],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if done.returncode != 0:
                problem = f"`bash scripts/install-node-deps.sh` failed:\n{done.stderr[-2000:]}"
        if problem is None and not (NODE.is_file() and PROVIDER_PACKAGE.is_file()):
            problem = f"Node 22 or oidc-provider is not installed ({NODE}, {PROVIDER_PACKAGE.parent})"
        _install_problem.append(problem)
    problem = _install_problem[0]
    if problem is None:
        return
    from tests.required import missing  # here: this file also runs as a script (browser_command)

    missing(f"{problem} (run `bash scripts/install-node-deps.sh`)")


@dataclass
class AuthorizationServer:
    """A running ``server.mjs``: its ``issuer`` (``http://127.0.0.1:PORT``, no path)."""

    issuer: str
    process: trio.Process
    stderr: IO[bytes]
    stopped: bool = False

    @property
    def metadata_url(self) -> str:
        return self.issuer + "/.well-known/oauth-authorization-server"

    def log(self) -> str:
        """What the server wrote on stderr so far (for failure messages)."""
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-6000:]

    async def events(self) -> list[dict[str, Any]]:
        """Everything recorded so far, oldest first: ``{"event": NAME, ...}``.

        Names: ``registration_create.success``, ``authorization.accepted`` (an authorization request
        was valid), ``interaction.started`` (``prompt``: ``login`` or ``consent``),
        ``authorization.success`` (a code was sent to the client), ``grant.success`` (``grant_type``:
        ``authorization_code`` or ``refresh_token``), and ``authorization.error``, ``grant.error``,
        ``registration_create.error``, ``server_error`` (with ``error`` and ``description``).
        """
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(self.issuer + "/_events")
        response.raise_for_status()
        events: list[dict[str, Any]] = response.json()
        return events

    async def count(self, event: str, **match: Any) -> int:
        """How many events named ``event`` whose fields include ``match`` were recorded."""
        return sum(
            1
            for item in await self.events()
            if item.get("event") == event and all(item.get(k) == v for k, v in match.items())
        )

    async def stop(self) -> None:
        """SIGTERM; kill it if it has not exited within ``STOP_DEADLINE`` (and then fail)."""
        if self.stopped:
            return
        self.stopped = True
        if self.process.returncode is not None:
            raise AssertionError(
                f"the authorization server had exited ({self.process.returncode}):\n{self.log()}"
            )
        self.process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STOP_DEADLINE):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
            with trio.move_on_after(5):
                await self.process.wait()
            raise AssertionError(f"the authorization server ignored SIGTERM for {STOP_DEADLINE} s; killed it")
        assert self.process.returncode == 0, f"exit status {self.process.returncode}:\n{self.log()}"


@asynccontextmanager
async def run_authorization_server(
    *,
    scopes: Iterable[str] = DEFAULT_SCOPES,
    access_token_ttl: int = 3600,
    access_token_format: Literal["jwt", "opaque"] = "jwt",
    resources: Iterable[str] = (),
) -> AsyncIterator[AuthorizationServer]:
    """Run ``server.mjs`` on 127.0.0.1:0 with these ``scopes`` for every resource, access tokens that
    live ``access_token_ttl`` seconds (JWTs, or opaque ones that only introspection explains), and only
    ``resources`` accepted (default: any loopback URL)."""
    command = [
        str(NODE),
        str(SERVER_JS),
        "--port",
        "0",
        "--scopes",
        " ".join(scopes),
        "--access-token-ttl",
        str(access_token_ttl),
        "--access-token-format",
        access_token_format,
    ]
    for resource in resources:
        command += ["--resource", resource]
    with tempfile.TemporaryFile() as stderr:
        process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=stderr, cwd=AS_DIR)
        try:
            issuer = await _read_issuer(process, stderr)
            server = AuthorizationServer(issuer, process, stderr)
            yield server
            await server.stop()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await process.wait()
            assert process.stdout is not None
            await process.stdout.aclose()


async def _read_issuer(process: trio.Process, stderr: IO[bytes]) -> str:
    assert process.stdout is not None
    output = b""
    with trio.move_on_after(STARTUP_DEADLINE):
        while b"\n" not in output:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                break
            output += chunk
    line = output.partition(b"\n")[0]
    try:
        ready = json.loads(line)
        issuer = ready["issuer"]
        assert ready.get("ready") is True and isinstance(issuer, str)
        assert issuer.startswith("http://127.0.0.1:"), issuer
    except (ValueError, KeyError, TypeError, AssertionError):
        stderr.seek(0)
        raise AssertionError(
            f"the authorization server did not report ready within {STARTUP_DEADLINE} s; stdout={output!r} "
            f"stderr={stderr.read().decode(errors='replace')[-3000:]}"
        ) from None
    return issuer


# -- mcp_trio's protected server --------------------------------------------------------------------


@dataclass
class Protected:
    """mcp_trio's MCP server as a protected resource of ``issuer``, on hypercorn at ``url``: every
    request needs ``mcp:tools``; its tool ``admin_task`` needs ``mcp:admin`` too."""

    url: str
    issuer: str
    principals: list[AccessToken] = field(default_factory=list)

    @property
    def metadata_url(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}"


@asynccontextmanager
async def serve_protected(
    issuer: str, verifier: Callable[[str], TokenVerifier] | None = None
) -> AsyncIterator[Protected]:
    """Serve a :class:`Protected` server on hypercorn at 127.0.0.1 in this process; stop it on exit (it
    must stop within 5 s).  Its tokens are checked by ``verifier(resource URL)``, by default JWT access
    tokens of ``issuer`` with no leeway on their times."""
    # The resource URL names the port, so the socket is bound first and handed to hypercorn.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        config = hypercorn_config([f"fd://{listener.detach()}"], graceful_timeout=1.0)
    protected = Protected(f"http://127.0.0.1:{port}/mcp", issuer)
    server = MCPServer("protected", "1.0.0")

    @server.tool(description="Who the token speaks for.")
    async def whoami(ctx: Context) -> str:
        principal = ctx.principal
        assert isinstance(principal, AccessToken)
        protected.principals.append(principal)
        return f"{principal.subject} {' '.join(sorted(principal.scopes))}"

    @server.tool(description="Needs mcp:admin.")
    async def admin_task(ctx: Context) -> str:
        principal = ctx.principal
        assert isinstance(principal, AccessToken)
        protected.principals.append(principal)
        return f"admin work done for {principal.subject}"

    oauth = ProtectedResource(
        resource=protected.url,
        authorization_servers=[issuer],
        verifier=verifier(protected.url) if verifier else JWTVerifier(issuer, protected.url, leeway=0),
        scopes_supported=["mcp:tools", "mcp:admin"],
        required_scopes=["mcp:tools"],
        tool_scopes={"admin_task": ["mcp:admin"]},
    )
    app = MCPApp(server, ServerConfig(oauth=oauth, shutdown_grace=1))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(app, config=config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        assert urls == [protected.url], urls
        try:
            yield protected
        finally:
            stop.set()
            with trio.fail_after(5):
                while nursery.child_tasks:  # noqa: ASYNC110 - waits for the server task to return
                    await trio.sleep(0.01)


# -- the user at a browser ------------------------------------------------------------------------------


@dataclass
class _Form:
    action: str
    method: str
    fields: dict[str, str] = field(default_factory=dict)


class _Forms(HTMLParser):
    """The forms of a page: action, method, and the names and values of their inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[_Form] = []
        self._current: _Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "form":
            self._current = _Form(values.get("action", ""), values.get("method", "get").lower())
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None and values.get("name"):
            self._current.fields[values["name"]] = values.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def _without_query(url: str) -> str:
    return urlsplit(url)._replace(query="", fragment="").geturl()


class Browser:
    """A user at a browser, with its cookies (a second authorization finds the login session: only the
    consent form is shown).  ``login`` is the name typed into the login form (the tokens' ``sub``)."""

    def __init__(self, login: str = "alice") -> None:
        self.login = login
        self.http = httpx.AsyncClient(follow_redirects=False, timeout=10)
        self.pages: list[str] = []
        """The URL of every page this browser showed a form of (login and consent pages)."""

    async def aclose(self) -> None:
        await self.http.aclose()

    async def authorize(self, authorization_url: str, redirect_uri: str | None = None) -> str:
        """Open ``authorization_url``, log in and consent as needed; return the URL the browser is sent to
        on ``redirect_uri`` (default: the ``redirect_uri`` parameter of ``authorization_url``)."""
        if redirect_uri is None:
            [redirect_uri] = parse_qs(urlsplit(authorization_url).query)["redirect_uri"]
        target = _without_query(redirect_uri)
        response = await self.http.get(authorization_url)
        for _ in range(MAX_BROWSER_STEPS):
            if response.is_redirect:
                location = urljoin(str(response.url), response.headers["location"])
                if _without_query(location) == target:
                    return location
                response = await self.http.get(location)
                continue
            if response.status_code != 200 or "html" not in response.headers.get("content-type", ""):
                raise AssertionError(
                    f"the authorization server answered {response.status_code} at {response.url}: "
                    f"{response.text[:1000]}"
                )
            parser = _Forms()
            parser.feed(response.text)
            forms = [form for form in parser.forms if form.method == "post"]
            if not forms:
                raise AssertionError(f"no form to submit at {response.url}: {response.text[:1000]}")
            form = forms[0]
            if "login" in form.fields:
                form.fields.update(login=self.login, password="any password")
            self.pages.append(str(response.url))
            response = await self.http.post(urljoin(str(response.url), form.action), data=form.fields)
        raise AssertionError(f"no redirect to {target} after {MAX_BROWSER_STEPS} steps")


class BrowserRedirect:
    """A redirect handler for ``mcp_trio.auth.OAuth``: each authorization URL goes to ``browser``, which
    returns the URL it is redirected to on ``redirect_uri`` (nothing listens there: the browser stops
    at the redirect).  ``authorizations`` lists the authorization URLs it was given."""

    def __init__(self, browser: Browser, redirect_uri: str = "http://127.0.0.1:33418/callback") -> None:
        self.browser = browser
        self.redirect_uri = redirect_uri
        self.authorizations: list[str] = []

    async def authorize(self, authorization_url: str) -> str:
        self.authorizations.append(authorization_url)
        return await self.browser.authorize(authorization_url, self.redirect_uri)


# -- a client by hand ---------------------------------------------------------------------------------


def pkce_pair() -> tuple[str, str]:
    """A PKCE ``code_verifier`` and its S256 ``code_challenge``."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


async def obtain_tokens(
    server: AuthorizationServer,
    browser: Browser,
    *,
    resource: str,
    scope: str,
    redirect_uri: str = "http://127.0.0.1:33418/callback",
) -> dict[str, Any]:
    """Register a public client, run the code flow with PKCE through ``browser`` and redeem the code:
    the token response (``access_token``, ``refresh_token``, ``scope``...).  Plain HTTP, no mcp_trio."""
    async with httpx.AsyncClient(timeout=10) as http:
        meta = (await http.get(server.metadata_url)).json()
        registered = await http.post(
            meta["registration_endpoint"],
            json={
                "application_type": "native",
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_method": "none",
            },
        )
        assert registered.status_code == 201, registered.text
        client_id = registered.json()["client_id"]
        verifier, challenge = pkce_pair()
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "resource": resource,
            "scope": scope,
            "state": "state",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        redirected = await browser.authorize(meta["authorization_endpoint"] + "?" + urlencode(query))
        [code] = parse_qs(urlsplit(redirected).query)["code"]
        response = await http.post(
            meta["token_endpoint"],
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "client_id": client_id,
                "code_verifier": verifier,
                "resource": resource,
            },
        )
        assert response.status_code == 200, response.text
        tokens: dict[str, Any] = response.json()
        return tokens


# -- a browser for Python's webbrowser module -------------------------------------------------------


def browser_command(directory: Path, login: str = "alice") -> Path:
    """An executable in ``directory`` that :mod:`webbrowser` can run as the user's browser (the
    ``BROWSER`` environment variable names one program, given the URL): it logs in as ``login`` at the
    authorization URL and then loads the page the authorization server redirects to (the OAuth
    client's loopback listener), as a real browser would.  It exits 0 once that page answered 200."""
    command = directory / "browser"
    command.write_text(
        f"#!/bin/sh\nOAUTH_AS_LOGIN={shlex.quote(login)} exec {shlex.quote(sys.executable)} "
        f'{shlex.quote(str(Path(__file__).resolve()))} "$@"\n'
    )
    command.chmod(0o755)
    return command


async def _browse(url: str, login: str) -> None:
    browser = Browser(login)
    try:
        with trio.fail_after(30):
            redirected = await browser.authorize(url)
            response = await browser.http.get(redirected)
        if response.status_code != 200:
            raise SystemExit(f"browser: {redirected} answered {response.status_code}")
    finally:
        await browser.aclose()


if __name__ == "__main__":
    trio.run(_browse, sys.argv[1], os.environ.get("OAUTH_AS_LOGIN", "alice"))


# -- fixtures (imported by the test modules that use them) ----------------------------------------


@pytest.fixture
def oauth_as_installed() -> None:
    require_installed()


@pytest.fixture
async def authorization_server(oauth_as_installed: None) -> AsyncIterator[AuthorizationServer]:
    async with run_authorization_server() as server:
        yield server


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    user = Browser("alice")
    try:
        yield user
    finally:
        await user.aclose()
