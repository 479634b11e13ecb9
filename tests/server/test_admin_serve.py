"""``serve(app, admin_bind=...)`` on real sockets, with either HTTP server: the operations listener
listens before the public one, turns ``/readyz`` to 503 at shutdown while the public port still serves
(``drain_delay``), and closes only after the public listener has."""

from __future__ import annotations

import errno
import functools
import json
import logging
import re
import socket
from typing import Any

import httpx
import pytest
import trio

from mcp_trio import MCPApp, ServerConfig, serve
from mcp_trio._serve import split_bind
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import ListenError

from .conftest import POST_HEADERS, init_body

DRAIN = 1.0


@pytest.mark.parametrize("kind", ["hypercorn", "h11"])
async def test_readiness_turns_while_the_public_port_serves_then_the_listener_closes_last(kind: str) -> None:
    app = MCPApp(build_demo_server(), ServerConfig(drain_delay=DRAIN, shutdown_grace=1.0))
    stop = trio.Event()
    order: list[str] = []
    admin_urls: list[str] = []
    returned = trio.Event()

    def admin_started(urls: list[str]) -> None:
        order.append("admin")
        admin_urls.extend(urls)

    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve(
            app, "127.0.0.1", 0, http=kind, shutdown_trigger=stop.wait, task_status=task_status,
            admin_bind="127.0.0.1:0", admin_started=admin_started,
        )  # fmt: skip
        order.append("returned")
        returned.set()

    async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=5) as http:
        with trio.fail_after(10):
            (public,) = await nursery.start(run)
            order.append("public")
            (admin,) = admin_urls
            assert admin.startswith("http://127.0.0.1:") and admin != public
            ready = await http.get(admin + "/readyz")
            assert (ready.status_code, ready.json()) == (200, {"ready": True, "reasons": []})
            scraped = await http.get(admin + "/metrics")
            assert scraped.status_code == 200 and "mcp_trio_sessions_open 0\n" in scraped.text
            (build,) = [line for line in scraped.text.splitlines() if line.startswith("mcp_trio_build_info{")]
            assert f'http_server="{kind}",' in build and build.endswith("} 1")  # the server serving it
            assert (
                await http.get(public + "/metrics")
            ).status_code == 404  # nothing of it on the public port

            stop.set()
            while (await http.get(admin + "/readyz")).status_code == 200:  # noqa: ASYNC110 - over a socket
                await trio.sleep(0.02)
            assert (await http.get(admin + "/readyz")).json()["reasons"] == ["draining"]
            # the public listener still serves: a new client is answered, with a new session
            async with httpx.AsyncClient(timeout=5) as fresh:
                response = await fresh.post(public, headers=POST_HEADERS, content=init_body())
            assert response.status_code == 200, response.text
            assert "returned" not in order
        with trio.fail_after(DRAIN + 5):
            await returned.wait()
        with pytest.raises(httpx.ConnectError):  # both listeners are closed once serve returned
            await http.get(admin + "/healthz")
        with pytest.raises(httpx.ConnectError):
            await http.post(public, headers=POST_HEADERS, content=init_body())
    assert order == ["admin", "public", "returned"]


async def test_a_bad_admin_bind_or_a_port_in_use_is_an_error_before_serving() -> None:
    app = MCPApp(build_demo_server())
    for bind in ("9000", "127.0.0.1:", "127.0.0.1:http", ":9000", "127.0.0.1:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            await serve(app, "127.0.0.1", 0, http="h11", admin_bind=bind)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        with trio.fail_after(5), pytest.raises(ListenError, match="operations listener") as caught:
            await serve(app, "127.0.0.1", 0, http="h11", admin_bind=bind)
    assert caught.value.filename == caught.value.address == bind
    assert caught.value.errno == errno.EADDRINUSE


async def test_the_listener_serves_the_statistics_of_a_running_app() -> None:
    app = MCPApp(build_demo_server())
    stop = trio.Event()
    urls: list[str] = []
    async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=5) as http:
        with trio.fail_after(10):
            await nursery.start(
                lambda task_status: serve(
                    app,
                    "127.0.0.1",
                    0,
                    http="h11",
                    shutdown_trigger=stop.wait,
                    task_status=task_status,
                    admin_bind="127.0.0.1:0",
                    admin_started=urls.extend,
                )
            )
            response = await http.get(urls[0] + "/stats")
            stats: dict[str, Any] = json.loads(response.content)
            assert response.status_code == 200 and stats["sessions"] == 0
            health = await http.get(urls[0] + "/healthz")
            assert (health.status_code, health.text) == (200, "ok\n")
            port = int(urls[0].rsplit(":", 1)[1])
            for garbage in (
                b"\x00\xff garbage\r\n\r\n",
                b"GET /" + b"a" * 70000,
                b"GET /metrics HTTP/1.1\r\n\r\n",
            ):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    await stream.send_all(garbage)
                    answer = await stream.receive_some(65536)
                    assert answer.startswith(b"HTTP/1.1 4"), answer[:100]  # refused (no Host: 400)
            health = await http.get(urls[0] + "/healthz")
            assert health.status_code == 200
            stop.set()


def test_admin_bind_is_host_colon_port() -> None:
    assert split_bind("127.0.0.1:9100") == ("127.0.0.1", 9100)
    assert split_bind("[::1]:0") == ("::1", 0)
    assert split_bind("localhost:65535") == ("localhost", 65535)


@pytest.mark.parametrize("kind", ["hypercorn", "h11"])
async def test_cancelling_serve_closes_both_listeners_at_once(kind: str) -> None:
    app = MCPApp(build_demo_server(), ServerConfig(drain_delay=30))
    urls: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            (public,) = await nursery.start(
                functools.partial(
                    serve, app, "127.0.0.1", 0, http=kind, admin_bind="127.0.0.1:0", admin_started=urls.extend
                )
            )
            nursery.cancel_scope.cancel()  # no drain: everything stops at once
    async with httpx.AsyncClient(timeout=5) as http:
        for url in (urls[0] + "/healthz", public):
            with pytest.raises(httpx.ConnectError):
                await http.get(url)


async def _raw(port: int, head: bytes) -> bytes:
    """Send one request head to 127.0.0.1:``port``; the whole answer (the listener closes after it, or
    the answer's ``Content-Length`` says where it ends)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(head)
        answer = b""
        while chunk := await stream.receive_some(65536):
            answer += chunk
            head_end = answer.find(b"\r\n\r\n")
            if head_end >= 0:
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", answer[:head_end])
                if length is not None and len(answer) >= head_end + 4 + int(length.group(1)):
                    break
        return answer


async def test_the_listener_answers_only_its_own_address_loopback_names_and_the_hosts_it_accepts() -> None:
    """DNS-rebinding protection: a page in a browser on this machine whose name resolves to 127.0.0.1
    sends its own name as Host, and gets 421 with a short body that says nothing of the server."""
    app = MCPApp(build_demo_server())
    stop = trio.Event()
    urls: list[str] = []
    async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=5) as http:
        with trio.fail_after(20):
            await nursery.start(
                functools.partial(
                    serve, app, "127.0.0.1", 0, http="h11", shutdown_trigger=stop.wait,
                    admin_bind="127.0.0.1:0", admin_started=urls.extend,
                    admin_allowed_hosts=["Metrics.Internal", "scraper.example:9999"],
                )
            )  # fmt: skip
            (base,) = urls
            port = int(base.rsplit(":", 1)[1])
            served = [
                f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", "127.0.0.1",
                f"LOCALHOST:{port}", f"metrics.internal:{port}", "metrics.internal", "scraper.example:9999",
            ]  # fmt: skip
            refused = [
                f"rebind.example:{port}", "rebind.example", f"127.0.0.1.rebind.example:{port}",
                "scraper.example:1234", f"localhost.:{port}", f"127.0.0.2:{port}", "",
            ]  # fmt: skip
            for path in ("/stats", "/metrics", "/healthz", "/readyz", "/nowhere"):
                for host in served:
                    response = await http.get(base + path, headers={"host": host})
                    assert response.status_code == (404 if path == "/nowhere" else 200), (path, host)
                for host in refused:
                    response = await http.get(base + path, headers={"host": host})
                    assert response.status_code == 421, (path, host, response.text)
                    assert response.text == (
                        "Misdirected Request: this listener does not serve that host (see "
                        "admin_allowed_hosts, --admin-allowed-host)\n"
                    )
                    assert response.headers["content-type"] == "text/plain; charset=utf-8"
            # two Host headers: refused (by h11 itself: 400); none (HTTP/1.0; no browser sends that): served
            twice = f"GET /stats HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: rebind.example\r\n\r\n"
            assert (await _raw(port, twice.encode())).startswith(b"HTTP/1.1 400 ")
            answer = await _raw(port, b"GET /healthz HTTP/1.0\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nok\n"), answer
            stop.set()


async def test_an_admin_bind_beyond_loopback_needs_admin_public_and_then_a_warning_says_what_it_shows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = MCPApp(build_demo_server())
    for bind in ("0.0.0.0:0", "[::]:0", "192.0.2.1:9464", "metrics.example:9464"):
        with pytest.raises(ValueError, match="is not a loopback address") as refused:
            await serve(app, "127.0.0.1", 0, http="h11", admin_bind=bind)
        assert "admin_public=True" in str(refused.value) and "metrics (/metrics)" in str(refused.value)
    with pytest.raises(TypeError, match="collection of strings"):
        await serve(app, "127.0.0.1", 0, http="h11", admin_bind="127.0.0.1:0", admin_allowed_hosts="a.b")
    with pytest.raises(ValueError, match="not a host"):
        await serve(app, "127.0.0.1", 0, http="h11", admin_bind="127.0.0.1:0", admin_allowed_hosts=["a/b"])
    caplog.set_level(logging.INFO, logger="mcp_trio.serve")
    for bind, public in (("127.0.0.1:0", True), ("0.0.0.0:0", True)):
        caplog.clear()
        urls: list[str] = []
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:  # stopped at once: no traffic to 0.0.0.0
                await nursery.start(
                    functools.partial(
                        serve, app, "127.0.0.1", 0, http="h11", admin_bind=bind, admin_public=public,
                        admin_started=urls.extend,
                    )
                )  # fmt: skip
                nursery.cancel_scope.cancel()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if bind.startswith("127."):
            assert warnings == [] and urls[0].startswith("http://127.0.0.1:")  # loopback: nothing exposed
        else:
            (warning,) = warnings
            assert warning.startswith(f"the operations listener on {urls[0]} is not on loopback"), warning
            for shown in ("metrics (/metrics)", "statistics (/stats)", "health (/healthz, /readyz)"):
                assert shown in warning
