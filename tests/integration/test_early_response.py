"""A response sent before the request body was read reaches the client (lingering close), on both servers.

The app answers some requests without reading their body: 413 for a ``Content-Length`` over
``max_body_size``, 4xx answered from the headers.  If the server then closed the socket with the body
still arriving, Linux would send RST and a client (or a proxy: Caddy turned the 413 into 502) still
sending gets ``ECONNRESET`` and never reads the answer.  Both servers half-close and read and drop what
still arrives for a bounded time and size before closing; these tests check that the answer always
arrives, that a client sending forever is cut after the bound, and that keep-alive is unchanged.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from mcp_http import INIT, POST_HEADERS, serve_in_process

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio._http.linger import LINGER_TIME

SERVERS = ["hypercorn", "hypercorn-as-shipped-path", "h11"]
LIMIT = 4 * 1024 * 1024
OVER = 8 * 1024 * 1024
TRIES = 20


def build_app() -> MCPApp:
    server = MCPServer("early")

    @server.tool()
    async def hello(name: str) -> str:
        return f"hello {name}"

    return MCPApp(server, ServerConfig(shutdown_grace=1.0, max_body_size=LIMIT))


@asynccontextmanager
async def running(kind: str) -> AsyncIterator[int]:
    """The app on 127.0.0.1:0 with ``kind`` of server; yields its port and stops it on exit."""
    async with serve_in_process(build_app(), kind, stop_within=10) as (_url, port, _stop):
        yield port


def head_for(length: int, *, extra: bytes = b"") -> bytes:
    return (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"accept: application/json, text/event-stream\r\n"
        + extra
        + b"content-length: "
        + str(length).encode()
        + b"\r\n\r\n"
    )


def oversized_post(port: int) -> tuple[bytes, str | None]:
    """Blocking client: send the head and the whole 8 MiB body in one ``sendall`` from a thread while
    this thread reads the answer.  Returns what was read and the first error of either side: the
    sender's ``ECONNRESET``/``EPIPE`` is what makes a proxy drop the answer (Caddy: 502)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    payload = head_for(OVER) + b"x" * OVER
    sender_error: list[BaseException] = []

    def send() -> None:
        try:
            sock.sendall(payload)
        except OSError as exc:  # the connection was reset under the sender
            sender_error.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    error: str | None = None
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except OSError as exc:
        error = repr(exc)
    finally:
        sender.join(5)  # the server drains the body (lingering close), so the send completes
        sock.close()  # also ends a sender still blocked
        sender.join(5)
    if sender.is_alive():
        error = error or "the send did not complete"
    return answer, error or (repr(sender_error[0]) if sender_error else None)


def complete_413(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1.1 413"):
        return False
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        None,
    )
    if length is not None and len(body) < length:
        return False
    try:
        message = json.loads(body[: length if length is not None else len(body)])
    except ValueError:
        return False
    return isinstance(message, dict) and "error" in message


@pytest.mark.parametrize("kind", SERVERS)
async def test_413_before_the_body_always_reaches_the_client(kind: str) -> None:
    async with running(kind) as port:
        failures = []
        for _ in range(TRIES):
            with trio.fail_after(15):
                answer, error = await trio.to_thread.run_sync(oversized_post, port)
            if not complete_413(answer) or error is not None:
                failures.append((answer[:200], error))
        assert not failures, f"{len(failures)} of {TRIES} tries lost the 413: {failures[:3]}"


def sending_forever(port: int, within: float, chunk: int, pause: float) -> tuple[bytes, float, bool]:
    """Blocking client that sends an endless body (``chunk`` bytes every ``pause`` s) and never closes:
    returns the answer read, the seconds until the server cut the connection (a send fails), and
    whether that happened within ``within``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=within)
    sock.sendall(head_for(OVER * 100))
    cut = threading.Event()
    data = b"y" * chunk

    def send() -> None:
        deadline = time.monotonic() + within
        try:
            while time.monotonic() < deadline:
                sock.sendall(data)
                if pause:
                    time.sleep(pause)
        except OSError:
            cut.set()  # reset or broken pipe: the server closed its end for good

    started = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    try:
        while part := sock.recv(65536):  # the answer, then our EOF (the server's half-close)
            answer += part
    except OSError:
        pass
    sender.join(within + 1)
    elapsed = time.monotonic() - started
    sock.close()
    return answer, elapsed, cut.is_set()


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("pace", ["flood", "trickle"])
async def test_a_client_that_sends_forever_is_cut_after_the_bound(kind: str, pace: str) -> None:
    # flood: the byte bound (LINGER_BYTES) ends the linger at once; trickle: the time bound does.
    bound = LINGER_TIME  # both servers linger alike (mcp_trio._http.linger)
    chunk, pause = (65536, 0.0) if pace == "flood" else (1024, 0.02)
    async with running(kind) as port:
        with trio.fail_after(bound + 15):
            answer, elapsed, cut = await trio.to_thread.run_sync(
                sending_forever, port, bound + 5, chunk, pause
            )
        assert cut, f"the server kept the connection for {elapsed:.1f} s"
        assert elapsed < bound + 2, elapsed
        if pace == "trickle":
            assert elapsed > bound - 0.5, elapsed  # it did linger
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # The server goes on serving.
        with trio.fail_after(10):
            answer, _ = await trio.to_thread.run_sync(oversized_post, port)
        assert complete_413(answer), answer[:200]


async def _read_response(stream: trio.SocketStream, buffer: bytearray) -> bytes:
    while b"\r\n\r\n" not in buffer:
        chunk = await stream.receive_some(65536)
        assert chunk, bytes(buffer)
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        chunk = await stream.receive_some(65536)
        assert chunk
        rest += chunk
    buffer[:] = rest[length:]
    return head + b"\r\n\r\n" + rest[:length]


@pytest.mark.parametrize("kind", SERVERS)
async def test_keep_alive_after_a_fully_read_body_is_unchanged(kind: str) -> None:
    body = json.dumps(INIT).encode()
    headers = b"".join(f"{k}: {v}\r\n".encode() for k, v in POST_HEADERS.items() if k != "content-type")
    async with running(kind) as port:
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                buffer = bytearray()
                for _ in range(3):
                    started = trio.current_time()
                    await stream.send_all(head_for(len(body), extra=headers) + body)
                    answer = await _read_response(stream, buffer)
                    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
                    assert trio.current_time() - started < 1.0  # no linger on a normal response
                # A 4xx answered after its (small) body was read keeps the connection too.
                await stream.send_all(head_for(2) + b"{}")
                answer = await _read_response(stream, buffer)
                assert answer.startswith(b"HTTP/1.1 4"), answer[:300]
                await stream.send_all(head_for(len(body), extra=headers) + body)
                answer = await _read_response(stream, buffer)
                assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


@pytest.mark.parametrize("kind", SERVERS)
async def test_an_answer_before_the_body_says_the_connection_closes(kind: str) -> None:
    """A complete answer sent while the request body is still to come ends the connection: the
    answer says ``connection: close``, so a keep-alive client does not send its next request on a
    connection the server is about to close (it would be lost)."""
    async with running(kind) as port:
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(head_for(OVER) + b"x" * 1024)  # most of the body never comes
                buffer = bytearray()
                answer = await _read_response(stream, buffer)
                head = answer.partition(b"\r\n\r\n")[0].lower()
                assert head.startswith(b"http/1.1 413"), answer[:300]
                assert b"\r\nconnection: close" in head, answer[:300]
