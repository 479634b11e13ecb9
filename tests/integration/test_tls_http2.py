"""TLS and HTTP/2 through mcp_trio's hypercorn server.

1. ``mcp-trio demo --certfile --keyfile`` as users run it (a real process on 127.0.0.1:0, a certificate
   for 127.0.0.1 from a test CA made in Python with ``trustme``, clients that verify it): it prints an
   https:// URL; HTTP/2 by ALPN and HTTP/1.1 for clients without it each carry a whole 2025 session
   (initialize, initialized, the GET stream's priming event, tools/call answered on SSE, DELETE) and a
   2026-07-28 stateless call; concurrent calls and the GET stream share one HTTP/2 connection; mcp_trio's
   own client works over it in each era; plain HTTP on the TLS port fails at once and harms nothing;
   HTTP/2 without TLS (h2c, prior knowledge) works too; the command refuses half a TLS configuration
   and TLS on the embedded h11 server.
2. The HTTP/2 fixes of ``hypercorn_server._H2Protocol`` with a raw ``h2`` client and small ASGI apps in
   process: a stream whose client does not read it is reset alone after ``write_timeout``, and so is a
   send the app cuts (``mcp_trio.cancellable_send``), so a DELETE on the same connection answers at once
   while a send of the session is stuck; sends waiting on flow control end when the connection closes;
   request data that arrives after its response is dropped.
3. The connection fixes under TLS: a closed idle connection is released at once (HTTP/1.1 and h2), and a
   client that stops reading is cut after ``write_timeout``.

Everything binds 127.0.0.1 only, every wait is bounded, and every server started is stopped (SIGINT, then
a bounded wait).  TLS is hypercorn's (the embedded h11 server has none), so this module runs in the main
pass only, not again under ``MCP_TRIO_TEST_HTTP=h11``.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx
import pytest
import trio
import trustme
from mcp_http import (
    INIT,
    POST_HEADERS,
    STEP,
    VERSION,
    DemoServer,
    MCPClient,
    serve_demo,
    tcp_states,
    wait_until,
)
from tests.required import not_applicable

from mcp_trio import MCPApp, MCPServer, open_client_session, open_websocket_client, serve
from mcp_trio._cli import main
from mcp_trio._http.hypercorn_server import hypercorn_fixes_available, serve_hypercorn
from mcp_trio._runtime.contract import CANCELLABLE_SEND
from mcp_trio.errors import TransportError
from mcp_trio.server import hypercorn_config

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("MCP_TRIO_TEST_HTTP", "hypercorn") != "hypercorn",
        reason=not_applicable("TLS and HTTP/2 are served by hypercorn; this module runs in the main pass"),
    ),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason=not_applicable("inspects sockets through /proc")
    ),
    # httpx's chain of async generators (encode/httpx#3686), as in tests/docs/test_samples.py
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(httpx|httpcore)\.[A-Za-z0-9_.]+' was garbage collected:ResourceWarning"
    ),
]

"""Seconds the server process gets to print its URL (interpreter start, imports, bind; busy machine)."""
SHUTDOWN_GRACE = 1.0
RELEASE = 1.5
"""Seconds a connection the client closed may linger on the server (keep_alive_timeout is 5)."""
MODERN = "2026-07-28"
ERR_CANCEL = 8  # RST_STREAM error code CANCEL


# -- the certificate ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cert:
    certfile: Path
    keyfile: Path
    cafile: Path

    @property
    def flags(self) -> list[str]:
        return ["--certfile", str(self.certfile), "--keyfile", str(self.keyfile)]

    def context(self, alpn: list[str] | None = None) -> ssl.SSLContext:
        """A client context that trusts only this test CA (a fresh one: httpx sets ALPN on it)."""
        context = ssl.create_default_context(cafile=str(self.cafile))
        if alpn:
            context.set_alpn_protocols(alpn)
        return context


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    """A certificate for IP 127.0.0.1 issued by a throwaway test CA, made in Python with ``trustme``
    (no ``openssl`` command needed, so nothing here can skip for want of one)."""
    where = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    made = Cert(where / "cert.pem", where / "key.pem", where / "ca.pem")
    issued.cert_chain_pems[0].write_to_path(str(made.certfile))
    for blob in issued.cert_chain_pems[1:]:
        blob.write_to_path(str(made.certfile), append=True)
    issued.private_key_pem.write_to_path(str(made.keyfile))
    authority.cert_pem.write_to_path(str(made.cafile))
    return made


# -- the demo as a process ---------------------------------------------------------------------


def demo(*flags: str) -> AbstractAsyncContextManager[DemoServer]:
    """``mcp-trio demo --bind 127.0.0.1:0 *flags`` until it printed its URL; SIGINT and a bounded wait
    for its clean exit (status 0, "mcp-trio: stopped") at the end (``DemoServer.stop``)."""
    return serve_demo(*flags, shutdown_grace=SHUTDOWN_GRACE)


@asynccontextmanager
async def recording_client(**options: Any) -> AsyncIterator[tuple[httpx.AsyncClient, list[str]]]:
    """An httpx client that notes the HTTP version of every response it gets."""
    versions: list[str] = []

    async def note(response: httpx.Response) -> None:
        versions.append(response.http_version)

    options.setdefault("timeout", httpx.Timeout(30.0))
    async with httpx.AsyncClient(event_hooks={"response": [note]}, **options) as http:
        yield http, versions


def server_connections(server_pid: int, port: int) -> list[str]:
    """The accepted connections a process holds on ``port`` (``port<->peer STATE``)."""
    return [
        entry for entry in tcp_states(server_pid) if entry.startswith(f"{port}<->") and "LISTEN" not in entry
    ]


async def no_connection_left(server_pid: int, port: int, within: float = RELEASE) -> None:
    """Poll (bounded) until the process holds no accepted connection on ``port``."""
    with trio.move_on_after(within):
        while True:
            if not server_connections(server_pid, port):
                return
            await trio.sleep(0.02)
    assert server_connections(server_pid, port) == [], f"still open after {within} s"


async def session_2025(http: httpx.AsyncClient, url: str) -> None:
    """initialize, initialized, the GET stream (priming event), tools/call on SSE, DELETE (which ends the
    GET stream), each step bounded."""
    client = MCPClient(http, url)
    with trio.fail_after(STEP):
        await client.initialize()
        await client.initialized()
        get = await client.open_get()
    try:
        with trio.fail_after(STEP):
            assert await client.echo("over tls") == "over tls"  # its SSE answer: MCPClient.request checks
            await client.delete()
            assert await get.rest() == []  # the session ended: its GET stream ends cleanly
        assert get.ended
    finally:
        await get.aclose()


def modern_call(request_id: int, text: str) -> tuple[dict[str, str], bytes]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": "echo", "arguments": {"text": text}, "_meta": meta}
    headers = {**POST_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "echo"}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return headers, json.dumps(body).encode()


def last_message(response: httpx.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [
            line[5:] for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()
        ]
        message: dict[str, Any] = json.loads(data[-1])
        return message
    answer: dict[str, Any] = response.json()
    return answer


async def stateless_2026(http: httpx.AsyncClient, url: str) -> None:
    headers, body = modern_call(7, "stateless")
    with trio.fail_after(STEP):
        response = await http.post(url, content=body, headers=headers)
    assert response.status_code == 200, response.text
    answer = last_message(response)
    assert answer["id"] == 7 and answer["result"]["content"][0]["text"] == "stateless", answer


# -- 1. the demo over TLS ------------------------------------------------------------------------


@pytest.mark.deadline(60)
@pytest.mark.parametrize("http2", [True, False], ids=["h2", "http1.1"])
async def test_whole_sessions_over_tls(cert: Cert, http2: bool) -> None:
    async with (
        demo(*cert.flags) as server,
        recording_client(http2=http2, verify=cert.context()) as (http, seen),
    ):
        assert server.url.startswith("https://127.0.0.1:") and server.url.endswith("/mcp"), server.url
        await session_2025(http, server.url)
        await stateless_2026(http, server.url)
        assert len(seen) >= 6 and set(seen) == {"HTTP/2" if http2 else "HTTP/1.1"}, seen


@pytest.mark.deadline(60)
async def test_concurrent_calls_and_the_get_stream_share_one_http2_connection(cert: Cert) -> None:
    calls, seconds = 12, 1.0
    async with (
        demo(*cert.flags) as server,
        recording_client(http2=True, verify=cert.context()) as (http, seen),
    ):
        client = MCPClient(http, server.url)
        with trio.fail_after(STEP):
            await client.initialize()
            await client.initialized()
            get = await client.open_get()
        try:
            results: list[str] = []

            async def call(n: int) -> None:
                if n % 2:
                    result = await client.call_tool("sleep", {"seconds": seconds})
                    results.append(result["content"][0]["text"])
                else:
                    headers, body = modern_call(100 + n, f"call {n}")
                    response = await http.post(server.url, content=body, headers=headers)
                    results.append(last_message(response)["result"]["content"][0]["text"])

            start = trio.current_time()
            with trio.fail_after(STEP + seconds):
                async with trio.open_nursery() as nursery:
                    for n in range(calls):
                        nursery.start_soon(call, n)
                    # the sleeps all under way at once (the server's statistics, over the same connection)
                    for _ in range(1000):  # bounded in count, and in time by fail_after
                        if (await http.get(server.stats_url)).json()["inflight"] == calls // 2:
                            break
                        await trio.sleep(0.01)
                    assert len(server_connections(server.pid, server.port)) == 1, tcp_states(server.pid)
            took = trio.current_time() - start
            assert len(results) == calls
            assert took < seconds * (calls // 2) * 0.75, took  # the sleeps ran side by side
            assert set(seen) == {"HTTP/2"}, seen
            # Shutdown with the connection and its GET stream still open: on time (stop() checks).
            await server.stop()
            with trio.fail_after(STEP):
                assert await get.rest() == []
        finally:
            await get.aclose()


@pytest.mark.deadline(60)
@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_mcp_trio_client_over_http2(cert: Cert, mode: str) -> None:
    async with (
        demo(*cert.flags) as server,
        recording_client(http2=True, verify=cert.context()) as (http, seen),
    ):
        with trio.fail_after(3 * STEP):
            async with open_client_session(server.url, http=http, mode=mode) as session:
                assert session.modern is (mode == "modern")
                tools = await session.list_tools()
                assert "echo" in {tool.name for tool in tools.tools}
                result = await session.call_tool("echo", {"text": "h2"})
                assert result.content[0].text == "h2"
        assert seen and set(seen) == {"HTTP/2"}, seen


@pytest.mark.deadline(60)
async def test_websocket_over_tls(cert: Cert) -> None:
    """wss:// to the demo with its certificate: a session in both eras; an untrusted one is refused."""
    async with demo(*cert.flags) as server:
        url = "wss" + server.url.removeprefix("https")
        with trio.fail_after(3 * STEP):
            for mode in ("legacy", "modern"):
                async with open_websocket_client(url, mode=mode, ssl_context=cert.context()) as session:
                    result = await session.call_tool("echo", {"text": "wss"})
                    assert result.content[0].text == "wss"  # type: ignore[union-attr]
                    assert session.modern is (mode == "modern")
            with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
                async with open_websocket_client(url, mode="legacy"):
                    pass  # pragma: no cover - the handshake fails first


@pytest.mark.deadline(60)
async def test_an_untrusted_certificate_is_named_in_the_client_error(cert: Cert) -> None:
    """httpx's error for a certificate it does not trust has no text of its own: the client says why."""
    async with demo(*cert.flags) as server, httpx.AsyncClient() as http:
        with trio.fail_after(3 * STEP), pytest.raises(TransportError) as caught:
            async with open_client_session(server.url, http=http, mode="legacy"):
                pass  # pragma: no cover - the handshake fails first
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value), str(caught.value)


@pytest.mark.deadline(60)
async def test_plain_http_on_the_tls_port_fails_at_once_and_harms_nothing(cert: Cert) -> None:
    async with demo(*cert.flags) as server:
        plain = server.url.replace("https://", "http://")
        async with httpx.AsyncClient(timeout=10) as http:
            for _ in range(3):
                with trio.fail_after(STEP), pytest.raises(httpx.TransportError):
                    await http.post(plain, json=INIT, headers=POST_HEADERS)
        for junk in (b"", b"\x16\x03\x01\x00\x05hello", b"GET /mcp HTTP/1.1\r\nhost: x\r\n\r\n"):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(junk)
            if junk:  # the server hangs up at once (perhaps after a TLS alert)
                with trio.fail_after(STEP):
                    while await stream.receive_some(1000):
                        pass
            await stream.aclose()
        await no_connection_left(server.pid, server.port)
        async with recording_client(http2=True, verify=cert.context()) as (http, seen):
            await session_2025(http, server.url)
        assert set(seen) == {"HTTP/2"}


@pytest.mark.deadline(60)
async def test_h2c_prior_knowledge_without_tls() -> None:
    async with demo() as server, recording_client(http1=False, http2=True) as (http, seen):
        assert server.url.startswith("http://127.0.0.1:")
        await session_2025(http, server.url)
        await stateless_2026(http, server.url)
        assert len(seen) >= 6 and set(seen) == {"HTTP/2"}, seen


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--certfile", "{cert}"], "--certfile and --keyfile go together"),
        (["--keyfile", "{key}"], "--certfile and --keyfile go together"),
        (["--certfile", "{cert}", "--keyfile", "{key}", "--http", "h11"], "--http h11 cannot serve TLS"),
        (["--certfile", "{cert}", "--keyfile", "{key}", "--stdio"], "not --stdio"),
        (["--certfile", "{key}", "--keyfile", "{key}"], "cannot load a certificate"),
        (["--certfile", "{cert}", "--keyfile", "{cert}.missing"], "No such file"),
    ],
    ids=["certfile-alone", "keyfile-alone", "h11", "stdio", "not-a-cert", "missing"],
)
def test_the_command_refuses_what_cannot_serve_tls(
    cert: Cert, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [flag.format(cert=cert.certfile, key=cert.keyfile) for flag in flags]
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--bind", "127.0.0.1:0", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


# -- 2. HTTP/2 in process, with a raw h2 client --------------------------------------------------


App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def asgi(handler: App) -> App:
    """An ASGI app: ``handler(scope, receive, send)`` for HTTP, lifespan answered."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        await handler(scope, receive, send)

    return app


@asynccontextmanager
async def serving(
    app: App, *, write_timeout: float = 30.0, cert: Cert | None = None, fast_path: bool = True
) -> AsyncIterator[int]:
    """mcp_trio's hypercorn server (``serve_hypercorn``) on 127.0.0.1:0; yields its port."""
    assert hypercorn_fixes_available() is None
    tls = {"certfile": str(cert.certfile), "keyfile": str(cert.keyfile)} if cert else {}
    config = hypercorn_config(["127.0.0.1:0"], graceful_timeout=1.0, **tls)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve_hypercorn(
                app,
                config,
                shutdown_trigger=stop.wait,
                write_timeout=write_timeout,
                fast_path=fast_path,
                task_status=task_status,
            )
        )
        try:
            yield int(urls[0].rsplit(":", 1)[1])
        finally:
            stop.set()
            nursery.cancel_scope.deadline = trio.current_time() + 5


@dataclass
class Received:
    headers: dict[str, str] = field(default_factory=dict)
    data: int = 0
    ended: bool = False
    reset: int | None = None
    when: float = 0.0


@dataclass
class H2Client:
    """HTTP/2 with prior knowledge (or over TLS with ALPN h2) on one stream, acknowledging the data of
    the streams in ``reading`` only (and always the connection's window)."""

    stream: trio.abc.Stream
    window: int = 65535
    connection: h2.connection.H2Connection = field(
        default_factory=lambda: h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    )
    streams: dict[int, Received] = field(default_factory=dict)
    reading: set[int] = field(default_factory=set)
    closed: bool = False

    async def start(self) -> None:
        self.connection.initiate_connection()
        if self.window != 65535:
            self.connection.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.window})
            self.connection.increment_flow_control_window(self.window - 65535)
        else:
            self.connection.increment_flow_control_window(2**24)
        await self.flush()

    async def flush(self) -> None:
        data = self.connection.data_to_send()
        if data:
            await self.stream.send_all(data)

    async def request(
        self,
        path: str,
        *,
        read: bool = True,
        body: bytes | None = None,
        method: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> int:
        stream_id = self.connection.get_next_available_stream_id()
        method = method or ("POST" if body else "GET")
        head = [(":method", method), (":path", path), (":scheme", "http"), (":authority", "127.0.0.1")]
        self.connection.send_headers(stream_id, [*head, *(headers or {}).items()], end_stream=not body)
        self.streams[stream_id] = Received()
        if read:
            self.reading.add(stream_id)
        await self.flush()
        if body:
            self.connection.send_data(stream_id, body, end_stream=True)
            await self.flush()
        return stream_id

    async def pump(self, until: Callable[[], bool], within: float) -> None:
        """Read and handle frames until ``until()`` holds; fail after ``within`` seconds."""
        with trio.fail_after(within):
            while not until():
                data = await self.stream.receive_some(65536)
                if not data:
                    self.closed = True
                    break
                for event in self.connection.receive_data(data):
                    received = self.streams.get(getattr(event, "stream_id", 0) or 0)
                    if isinstance(event, h2.events.DataReceived) and received is not None:
                        received.data += len(event.data)
                        if event.flow_controlled_length:
                            self.connection.increment_flow_control_window(event.flow_controlled_length)
                            if event.stream_id in self.reading:
                                try:
                                    self.connection.increment_flow_control_window(
                                        event.flow_controlled_length, event.stream_id
                                    )
                                except h2.exceptions.StreamClosedError:
                                    pass  # its end came in the same read: no window left to open
                    elif isinstance(event, h2.events.ResponseReceived) and received is not None:
                        received.headers = {bytes(k).decode(): bytes(v).decode() for k, v in event.headers}
                    elif isinstance(event, h2.events.StreamEnded) and received is not None:
                        received.ended, received.when = True, trio.current_time()
                    elif isinstance(event, h2.events.StreamReset) and received is not None:
                        received.reset, received.when = event.error_code, trio.current_time()
                await self.flush()
        assert until(), "the connection closed"


@asynccontextmanager
async def h2_client(port: int, window: int = 65535) -> AsyncIterator[H2Client]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = H2Client(stream, window)
    try:
        await client.start()
        yield client
    finally:
        await stream.aclose()


def streaming_app(log: list[tuple[str, Any]], done: trio.Event, *, cut_after: float | None = None) -> App:
    """``/big``: 2 MB in 100 kB sends (each cut by the app after ``cut_after`` s if given), then waits for
    ``http.disconnect`` (``done`` is set when it ends); ``/small``: five 1 kB sends 0.3 s apart; ``/ok``:
    one small body."""

    async def handler(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        log.append((path, "cancellable" if CANCELLABLE_SEND in scope["extensions"] else "not cancellable"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if path == "/big":
            try:
                for _ in range(20):
                    with trio.move_on_after(cut_after if cut_after is not None else float("inf")) as scope_:
                        await send({"type": "http.response.body", "body": b"x" * 100_000, "more_body": True})
                    if scope_.cancelled_caught:
                        log.append((path, "cut"))
                        break
                while (await receive())["type"] != "http.disconnect":
                    pass
                log.append((path, "disconnect"))
            finally:
                done.set()
        elif path == "/small":
            for _ in range(5):
                await send({"type": "http.response.body", "body": b"y" * 1000, "more_body": True})
                await trio.sleep(0.3)
            await send({"type": "http.response.body", "body": b""})
        else:
            await send({"type": "http.response.body", "body": b"ok"})

    return asgi(handler)


@pytest.mark.deadline(30)
@pytest.mark.parametrize("cut", ["write_timeout", "app"])
async def test_h2_a_stream_the_client_does_not_read_is_reset_alone(cut: str) -> None:
    """The client reads /small but not /big on the same connection: /big is reset (RST_STREAM CANCEL)
    after write_timeout, or when the app cuts its send; /small and later requests are served."""
    log: list[tuple[str, Any]] = []
    done = trio.Event()
    app = streaming_app(log, done, cut_after=0.3 if cut == "app" else None)
    write_timeout = 1.0 if cut == "write_timeout" else 30.0
    async with serving(app, write_timeout=write_timeout) as port, h2_client(port) as h2c:
        start = trio.current_time()
        big = await h2c.request("/big", read=False)
        small = await h2c.request("/small")
        await h2c.pump(lambda: h2c.streams[small].ended and h2c.streams[big].reset is not None, within=5)
        assert h2c.streams[big].reset == ERR_CANCEL
        took = h2c.streams[big].when - start
        assert (0.8 if cut == "write_timeout" else 0.25) < took < 3, took
        assert h2c.streams[big].data == 65535  # its window, no more
        assert h2c.streams[small].data == 5000 and h2c.streams[small].reset is None
        again = await h2c.request("/ok")
        await h2c.pump(lambda: h2c.streams[again].ended, within=2)
        with trio.fail_after(2):
            await done.wait()
    assert ("/big", "cancellable") in log and ("/small", "cancellable") in log  # claimed on h2: it holds
    assert ("/big", "disconnect") in log
    assert (("/big", "cut") in log) is (cut == "app")


@pytest.mark.deadline(30)
async def test_h2_a_closed_connection_ends_sends_waiting_on_flow_control() -> None:
    """The client takes /big's first 64 KiB, then hangs up: the app's sends (waiting for the window)
    end, its task ends and the connection is released, long before write_timeout."""
    done = trio.Event()
    async with serving(streaming_app([], done), write_timeout=30.0) as port:
        async with h2_client(port) as h2c:
            big = await h2c.request("/big", read=False)
            await h2c.pump(lambda: h2c.streams[big].data >= 65535, within=3)
        with trio.fail_after(2):
            await done.wait()
        await no_connection_left(os.getpid(), port)


@pytest.mark.deadline(30)
async def test_h2_request_data_after_its_response_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """A response complete before its request body (hypercorn as shipped: KeyError, pgjones/hypercorn#329,
    which ends the connection, and the server): the rest of the body is dropped, the connection goes on."""

    async def early(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"no"})

    caplog.set_level(logging.WARNING)
    async with serving(asgi(early)) as port, httpx.AsyncClient(http1=False, http2=True, timeout=10) as http:
        for _ in range(3):
            with trio.fail_after(STEP):
                response = await http.post(f"http://127.0.0.1:{port}/", content=b"x" * 2_000_000)
            assert response.status_code == 404 and response.http_version == "HTTP/2"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


@pytest.mark.deadline(30)
async def test_h2_a_session_that_ends_cuts_a_send_stuck_on_an_unread_stream() -> None:
    """mcp_trio's app cuts a send stuck on a session that ends (``mcp_trio.cancellable_send``): on HTTP/2
    that resets the stuck stream alone, so DELETE, on the same connection, answers at once (well before
    write_timeout, 30 s)."""
    server = MCPServer("big", "1")

    @server.tool(description="a megabyte of text")
    async def big() -> str:
        return "x" * 1_000_000

    app = MCPApp(server)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        config = hypercorn_config(["127.0.0.1:0"], graceful_timeout=1.0)
        urls = await nursery.start(
            lambda task_status: serve(app, config=config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        port = int(urls[0].removesuffix("/mcp").rsplit(":", 1)[1])
        async with h2_client(port) as h2c:
            init = await h2c.request("/mcp", body=json.dumps(INIT).encode(), headers=POST_HEADERS)
            await h2c.pump(lambda: h2c.streams[init].ended, within=STEP)
            session = {
                "mcp-session-id": h2c.streams[init].headers["mcp-session-id"],
                "mcp-protocol-version": VERSION,
            }
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
            done = await h2c.request("/mcp", body=note, headers={**POST_HEADERS, **session})
            await h2c.pump(lambda: h2c.streams[done].ended, within=STEP)
            message = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "big", "arguments": {}},
            }
            call = await h2c.request(
                "/mcp", body=json.dumps(message).encode(), headers={**POST_HEADERS, **session}, read=False
            )
            await h2c.pump(lambda: h2c.streams[call].data >= 65535, within=STEP)
            # its writer now waits for a window the client never opens: the app counts that send
            await wait_until(lambda: app.statistics()["writes_in_progress"] == 1, within=STEP)
            start = trio.current_time()
            delete = await h2c.request("/mcp", method="DELETE", headers=session)
            await h2c.pump(
                lambda: h2c.streams[delete].ended and h2c.streams[call].reset is not None, within=STEP
            )
            assert h2c.streams[delete].headers[":status"] == "200"
            assert h2c.streams[delete].when - start < 10.0  # not held until write_timeout (30 s)
            assert h2c.streams[call].reset == ERR_CANCEL
        stop.set()
    assert app.statistics()["sessions"] == 0


# -- 3. the connection fixes under TLS -------------------------------------------------------------


async def tls_stream(cert: Cert, port: int, alpn: str) -> trio.SSLStream[trio.SocketStream]:
    stream = await trio.open_ssl_over_tcp_stream(
        "127.0.0.1", port, ssl_context=cert.context([alpn]), https_compatible=True
    )
    await stream.do_handshake()
    assert stream.selected_alpn_protocol() == alpn
    return stream


@pytest.mark.deadline(30)
@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "no-fast-path"])
@pytest.mark.parametrize("alpn", ["http/1.1", "h2"])
async def test_tls_closed_idle_connections_are_released_at_once(
    cert: Cert, alpn: str, fast_path: bool
) -> None:
    async with serving(streaming_app([], trio.Event()), cert=cert, fast_path=fast_path) as port:
        for _ in range(3):
            stream = await tls_stream(cert, port, alpn)
            if alpn == "h2":
                h2c = H2Client(stream)
                await h2c.start()
                ok = await h2c.request("/ok")
                await h2c.pump(lambda: h2c.streams[ok].ended, within=STEP)  # noqa: B023
            else:
                await stream.send_all(b"GET /ok HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                answer = b""
                with trio.fail_after(STEP):
                    while not answer.endswith(b"\r\n0\r\n\r\n"):  # the end of a chunked body
                        answer += await stream.receive_some(4096)
                assert answer.startswith(b"HTTP/1.1 200")
            await stream.aclose()  # idle now: keep_alive_timeout (5 s) must not hold it
            await no_connection_left(os.getpid(), port)


@pytest.mark.deadline(30)
@pytest.mark.parametrize("alpn", ["http/1.1", "h2"])
async def test_tls_a_client_that_stops_reading_is_cut_after_write_timeout(cert: Cert, alpn: str) -> None:
    """16 MB for a client that reads nothing (over h2 with windows wide open): the socket write times out
    after write_timeout, the connection is closed and the app's sends end (what is sent after that is
    dropped)."""
    sent: list[int] = []
    finished = trio.Event()

    async def flood(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(64):
                await send({"type": "http.response.body", "body": b"z" * 256_000, "more_body": True})
                sent.append(1)
        finally:
            finished.set()

    async with serving(asgi(flood), write_timeout=1.0, cert=cert) as port:
        stream = await tls_stream(cert, port, alpn)
        try:
            start = trio.current_time()
            if alpn == "h2":
                h2c = H2Client(stream, window=2**31 - 1)
                await h2c.start()
                await h2c.request("/flood")
            else:
                await stream.send_all(b"GET /flood HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            with trio.fail_after(6):
                await finished.wait()
            assert trio.current_time() - start > 0.9, "the client read nothing: the writes must wait"
            assert len(sent) > 0
            await no_connection_left(os.getpid(), port)
        finally:
            await stream.aclose()


async def test_shipped_hypercorn_is_what_the_h2_subclass_was_written_against() -> None:
    """The guard covers the HTTP/2 code relied on (a changed hypercorn is refused)."""
    from mcp_trio._http import hypercorn_guard

    guarded = hypercorn_guard.expected()["ast"]
    assert {"ProtocolWrapper.handle", "ProtocolWrapper.__init__"} <= set(guarded["hypercorn.protocol"])
    assert {"H2Protocol.stream_send", "H2Protocol.handle", "StreamBuffer", "StreamBuffer.drain"} <= set(
        guarded["hypercorn.protocol.h2"]
    )
    assert hypercorn_fixes_available() is None
