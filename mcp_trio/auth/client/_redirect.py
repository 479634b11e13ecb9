"""How the user's browser comes back from the authorization server: :class:`LoopbackRedirect` (a one-shot
listener on 127.0.0.1) and :class:`HeadlessRedirect` (the user pastes the URL)."""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
import webbrowser
from typing import Protocol, TextIO, runtime_checkable
from urllib.parse import urlsplit

import h11
import trio

from ._errors import OAuthError

__all__ = ["HeadlessRedirect", "LoopbackRedirect", "RedirectHandler"]

logger = logging.getLogger("mcp_trio.auth")

CONNECTION_SECONDS = 10.0  # one connection to the loopback listener: its request and our answer
MAX_REQUEST = 16 * 1024

DONE_PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Authorization complete</title></head>
<body style="font-family: sans-serif; margin: 3em">
<h1>Authorization complete</h1><p>You can close this tab and return to the application.</p>
</body></html>
"""
NOT_FOUND_PAGE = b"<!doctype html><html><body><h1>Not found</h1></body></html>\n"


@runtime_checkable
class RedirectHandler(Protocol):
    """Sends the user to the authorization server and brings back where it redirected the browser.

    ``redirect_uri`` is registered with the authorization server and sent with the authorization
    request; it must be known before :meth:`authorize` is called (it is read first, for the
    registration).  :meth:`authorize` gets the full authorization URL and returns the full URL the
    browser was redirected to (``redirect_uri`` with ``code``, ``state`` and ``iss``, or ``error``)."""

    @property
    def redirect_uri(self) -> str: ...

    async def authorize(self, authorization_url: str) -> str: ...


class LoopbackRedirect:
    """Opens the user's browser at the authorization URL and catches the redirect on a loopback port.

    ``port=0`` takes a free port: it is chosen (the socket bound) the first time :attr:`redirect_uri` is
    read, which is before the client registers, and kept for later authorizations (a registered redirect
    URI names it).  :meth:`authorize` listens on it, opens the browser with ``webbrowser`` in a thread
    (``open_browser=False``: only prints the URL to ``stderr``), serves one callback at ``path`` with a
    small "you can close this tab" page, and closes the socket when it returns, fails, or ``timeout``
    seconds pass.  Any other path gets 404 and the wait goes on.  ``host`` must be a loopback address.
    :meth:`close` releases a port bound by :attr:`redirect_uri` and not used by :meth:`authorize`."""

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        path: str = "/callback",
        open_browser: bool = True,
        timeout: float = 300.0,
        stderr: TextIO | None = None,
    ) -> None:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(
                f"LoopbackRedirect listens on a loopback address only (127.0.0.1, ::1), not {host!r}"
            )
        if not path.startswith("/") or "?" in path or "#" in path:
            raise ValueError(f"path must be an absolute path without query or fragment, not {path!r}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be 0..65535, not {port}")
        self.host = host
        self.port = port
        self.path = path
        self.open_browser = open_browser
        self.timeout = timeout
        self._stderr = stderr
        self._socket: socket.socket | None = None

    @property
    def redirect_uri(self) -> str:
        """``http://127.0.0.1:PORT/callback``; with ``port=0``, reading it binds the port."""
        if self.port == 0:
            self._bind()
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"

    def _bind(self) -> socket.socket:
        if self._socket is not None:
            return self._socket
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if sys.platform != "win32":  # a port in TIME_WAIT from the last authorization is ours to take
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise OAuthError(
                f"cannot listen for the authorization redirect on {self.host}:{self.port}: {exc}"
            ) from exc
        self.port = sock.getsockname()[1]
        self._socket = sock
        return sock

    def close(self) -> None:
        """Release the port, if it is bound and no authorization is using it."""
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> LoopbackRedirect:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def authorize(self, authorization_url: str) -> str:
        listening = trio.socket.from_stdlib_socket(self._bind())
        self._socket = None  # this authorization owns the socket now, and closes it
        found: list[str] = []
        try:
            listening.listen(16)
            listener = trio.SocketListener(listening)
            with trio.move_on_after(self.timeout):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._show, authorization_url)
                    while True:
                        stream = await listener.accept()
                        nursery.start_soon(self._serve, stream, found, nursery.cancel_scope)
        finally:
            listening.close()
        if not found:
            raise OAuthError(
                f"no authorization redirect arrived at {self.redirect_uri} within {self.timeout:g} s"
            )
        return found[0]

    async def _show(self, url: str) -> None:
        out = self._stderr or sys.stderr
        if not self.open_browser:
            print(f"Open this URL in a browser to authorize:\n\n    {url}\n", file=out, flush=True)
            return
        print(
            f"Opening the authorization page in your browser. If it does not open, visit:\n\n    {url}\n",
            file=out,
            flush=True,
        )
        try:
            await trio.to_thread.run_sync(webbrowser.open, url, abandon_on_cancel=True)
        except Exception as exc:  # no browser: the printed URL is the way
            logger.info("could not open a browser: %r", exc)

    async def _serve(self, stream: trio.SocketStream, found: list[str], done: trio.CancelScope) -> None:
        """One connection: read its request; the callback gets the page and ends the wait."""
        try:
            with trio.move_on_after(CONNECTION_SECONDS):
                connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
                request = await _read_request(stream, connection)
                if request is None:
                    return
                target = request.target.decode("ascii", errors="replace")
                ok = request.method == b"GET" and urlsplit(target).path == self.path
                page = DONE_PAGE if ok else NOT_FOUND_PAGE
                response = h11.Response(
                    status_code=200 if ok else 404,
                    headers=[
                        ("content-type", "text/html; charset=utf-8"),
                        ("content-length", str(len(page))),
                        ("cache-control", "no-store"),
                        ("connection", "close"),
                    ],
                )
                for event in (response, h11.Data(data=page), h11.EndOfMessage()):
                    await stream.send_all(connection.send(event) or b"")
                if ok and not found:
                    host = f"[{self.host}]" if ":" in self.host else self.host
                    found.append(f"http://{host}:{self.port}{target}")
                    done.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError) as exc:
            logger.debug("a connection to the redirect listener failed: %r", exc)
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()


async def _read_request(stream: trio.SocketStream, connection: h11.Connection) -> h11.Request | None:
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await stream.receive_some(4096))
            continue
        return event if isinstance(event, h11.Request) else None


class HeadlessRedirect:
    """For a machine without a browser: prints the authorization URL to ``stderr`` and reads back, from
    ``stdin``, the URL the browser (on any machine) was redirected to, however it failed to load.

    ``redirect_uri`` is registered as it is: use one the authorization server accepts (a loopback URL
    such as ``http://127.0.0.1:8765/callback`` is the usual choice: nothing needs to listen there).  The
    input may be the whole URL or only its query (``code=...&state=...``).  The read runs in a thread
    and is bounded by ``timeout`` seconds (None: no bound)."""

    def __init__(
        self,
        redirect_uri: str,
        *,
        stdin: TextIO | None = None,
        stderr: TextIO | None = None,
        timeout: float | None = 600.0,
    ) -> None:
        parts = urlsplit(redirect_uri)
        if not parts.scheme or not (parts.netloc or parts.path):
            raise ValueError(f"redirect_uri must be an absolute URI, not {redirect_uri!r}")
        self.redirect_uri = redirect_uri
        self._stdin = stdin
        self._stderr = stderr
        self.timeout = timeout

    async def authorize(self, authorization_url: str) -> str:
        out = self._stderr or sys.stderr
        source = self._stdin or sys.stdin
        print(
            f"Open this URL in a browser to authorize:\n\n    {authorization_url}\n\n"
            f"Then paste here the URL the browser was redirected to (it starts with {self.redirect_uri}):",
            file=out,
            flush=True,
        )
        with trio.move_on_after(self.timeout if self.timeout is not None else float("inf")) as scope:
            line = await trio.to_thread.run_sync(source.readline, abandon_on_cancel=True)
        if scope.cancelled_caught:
            raise OAuthError(f"no redirected URL was entered within {self.timeout:g} s")
        text = str(line).strip()
        if not text:
            raise OAuthError("no redirected URL was entered")
        if "://" not in text:  # only the query
            text = f"{self.redirect_uri}{'' if text.startswith('?') else '?'}{text}"
        return text
