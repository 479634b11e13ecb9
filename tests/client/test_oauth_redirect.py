"""The redirect handlers of mcp_trio.auth: LoopbackRedirect (a real listener on 127.0.0.1; the test is
the browser, with httpx) and HeadlessRedirect (stdin and stderr injected as streams)."""

from __future__ import annotations

import io
import socket
import threading

import httpx
import pytest
import trio

from mcp_trio.auth import HeadlessRedirect, LoopbackRedirect, OAuthError, RedirectHandler
from tests.required import not_applicable

from .conftest import eventually


class Waiting:
    """An authorization running in the background, and its outcome."""

    def __init__(self) -> None:
        self.result: str | None = None
        self.error: BaseException | None = None
        self.done = trio.Event()

    async def run(self, handler: RedirectHandler, url: str) -> None:
        try:
            self.result = await handler.authorize(url)
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()


def refused(url: str) -> bool:
    """Whether nothing listens at ``url``'s port any more."""
    port = httpx.URL(url).port
    assert port is not None
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


async def test_loopback_serves_one_callback_and_closes() -> None:
    out = io.StringIO()
    redirect = LoopbackRedirect(open_browser=False, stderr=out)
    assert isinstance(redirect, RedirectHandler)
    uri = redirect.redirect_uri  # port 0: bound now, before any registration needs it
    assert uri.startswith("http://127.0.0.1:") and uri.endswith("/callback") and redirect.port != 0
    assert uri == redirect.redirect_uri  # stable
    waiting = Waiting()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting.run, redirect, "https://as.example/authorize?x=1")
            await eventually(lambda: "https://as.example/authorize?x=1" in out.getvalue())
            async with httpx.AsyncClient() as browser:
                stray = await browser.get(uri.replace("/callback", "/favicon.ico"))
                assert stray.status_code == 404 and not waiting.done.is_set()
                page = await browser.get(f"{uri}?code=abc&state=xyz&iss=https%3A%2F%2Fas.example")
            assert page.status_code == 200 and "close this tab" in page.text
            assert page.headers["cache-control"] == "no-store"
            await waiting.done.wait()
    assert waiting.result == f"{uri}?code=abc&state=xyz&iss=https%3A%2F%2Fas.example"
    assert refused(uri)


async def test_loopback_times_out_and_closes() -> None:
    redirect = LoopbackRedirect(open_browser=False, timeout=0.3, stderr=io.StringIO())
    uri = redirect.redirect_uri
    with trio.fail_after(10), pytest.raises(OAuthError, match="no authorization redirect arrived"):
        await redirect.authorize("https://as.example/authorize")
    assert refused(uri)


async def test_loopback_is_not_held_up_by_idle_or_broken_connections() -> None:
    redirect = LoopbackRedirect(open_browser=False, stderr=io.StringIO())
    uri = redirect.redirect_uri
    port = redirect.port
    waiting = Waiting()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting.run, redirect, "https://as.example/authorize")
            await eventually(lambda: not refused(uri))
            idle = await trio.open_tcp_stream("127.0.0.1", port)  # a browser's speculative connection
            broken = await trio.open_tcp_stream("127.0.0.1", port)
            await broken.send_all(b"\x16\x03\x01 not http at all\r\n\r\n")
            async with httpx.AsyncClient() as browser:
                page = await browser.get(f"{uri}?code=c&state=s")
            assert page.status_code == 200
            await waiting.done.wait()
            await idle.aclose()
            await broken.aclose()
    assert waiting.result == f"{uri}?code=c&state=s"


async def test_loopback_keeps_its_port_for_the_next_authorization() -> None:
    redirect = LoopbackRedirect(open_browser=False, stderr=io.StringIO())
    uri = redirect.redirect_uri
    for n in range(2):
        waiting = Waiting()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiting.run, redirect, "https://as.example/authorize")
                await eventually(lambda: not refused(uri))
                async with httpx.AsyncClient() as browser:
                    await browser.get(f"{uri}?code={n}&state=s")
                await waiting.done.wait()
        assert waiting.result == f"{uri}?code={n}&state=s" and redirect.redirect_uri == uri


async def test_loopback_port_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        redirect = LoopbackRedirect(taken.getsockname()[1], open_browser=False, stderr=io.StringIO())
        with (
            trio.fail_after(10),
            pytest.raises(OAuthError, match="cannot listen for the authorization redirect"),
        ):
            await redirect.authorize("https://as.example/authorize")


def test_loopback_close_releases_the_port() -> None:
    with LoopbackRedirect() as redirect:
        uri = redirect.redirect_uri
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", httpx.URL(uri).port or 0))  # free again


def ipv6_loopback() -> bool:
    """Whether this machine can bind ::1 at all (a container may have no IPv6)."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


async def test_loopback_ipv6() -> None:
    if not socket.has_ipv6 or not ipv6_loopback():
        pytest.skip(not_applicable("no IPv6 loopback (::1) on this machine"))
    redirect = LoopbackRedirect(host="::1", open_browser=False, stderr=io.StringIO())
    uri = redirect.redirect_uri  # where ::1 can be bound, the listener must bind it
    assert uri.startswith("http://[::1]:")
    redirect.close()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"host": "0.0.0.0"}, "loopback address only"),
        ({"host": "example.com"}, "loopback address only"),
        ({"path": "callback"}, "absolute path"),
        ({"path": "/cb?x=1"}, "absolute path"),
        ({"port": 70000}, "port must be"),
    ],
)
def test_loopback_refuses_bad_options(options: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LoopbackRedirect(**options)  # type: ignore[arg-type]


# -- HeadlessRedirect ---------------------------------------------------------------------------


async def test_headless_prints_the_url_and_reads_the_redirect() -> None:
    out = io.StringIO()
    pasted = "http://127.0.0.1:8765/callback?code=abc&state=xyz\n"
    redirect = HeadlessRedirect("http://127.0.0.1:8765/callback", stdin=io.StringIO(pasted), stderr=out)
    assert isinstance(redirect, RedirectHandler)
    with trio.fail_after(10):
        got = await redirect.authorize("https://as.example/authorize?client_id=c")
    assert got == pasted.strip()
    assert "https://as.example/authorize?client_id=c" in out.getvalue()
    assert "http://127.0.0.1:8765/callback" in out.getvalue()


@pytest.mark.parametrize("pasted", ["code=abc&state=xyz", "?code=abc&state=xyz", "  code=abc&state=xyz  "])
async def test_headless_accepts_only_the_query(pasted: str) -> None:
    redirect = HeadlessRedirect(
        "http://127.0.0.1:8765/cb", stdin=io.StringIO(pasted + "\n"), stderr=io.StringIO()
    )
    with trio.fail_after(10):
        assert (
            await redirect.authorize("https://as.example/a") == "http://127.0.0.1:8765/cb?code=abc&state=xyz"
        )


@pytest.mark.parametrize("pasted", ["", "\n", "   \n"])
async def test_headless_without_input_is_an_error(pasted: str) -> None:
    redirect = HeadlessRedirect("http://127.0.0.1:8765/cb", stdin=io.StringIO(pasted), stderr=io.StringIO())
    with trio.fail_after(10), pytest.raises(OAuthError, match="no redirected URL was entered"):
        await redirect.authorize("https://as.example/a")


class NeverTyped(io.StringIO):
    """A terminal nobody types into (until ``release``)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def readline(self, size: int | None = -1) -> str:
        self.release.wait(10)
        return ""


async def test_headless_is_bounded_in_time() -> None:
    stdin = NeverTyped()
    redirect = HeadlessRedirect("http://127.0.0.1:8765/cb", stdin=stdin, stderr=io.StringIO(), timeout=0.3)
    try:
        with trio.fail_after(10), pytest.raises(OAuthError, match=r"within 0\.3 s"):
            await redirect.authorize("https://as.example/a")
    finally:
        stdin.release.set()  # let the abandoned reader thread end


def test_headless_refuses_a_relative_redirect_uri() -> None:
    with pytest.raises(ValueError, match="absolute URI"):
        HeadlessRedirect("/callback")
