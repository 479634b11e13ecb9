"""A misbehaving peer costs mcp_trio's hypercorn server one log line at most, rate-limited, no traceback:
HTTP/2 rapid reset (more streams at once than hypercorn's priority tree takes) and WebSocket handshakes
with a non-ASCII subprotocol, each on real sockets against ``serve_hypercorn`` on 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
import trio

from mcp_trio._http import hypercorn_protocols, hypercorn_server
from mcp_trio._http.hypercorn_server import serve_hypercorn
from mcp_trio._runtime.peerlog import RateLimitedLog
from mcp_trio.server import hypercorn_config

CONNECTIONS = 50
RAPID_RESETS = 5  # each costs the server its streams (and their app tasks) before it is refused
STREAMS = 1200  # in one write: more than the priority tree takes (twice h2_max_concurrent_streams, 100)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def serving(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    # Fresh rate limits, so that what other tests logged in the last minute does not count here.
    monkeypatch.setattr(hypercorn_protocols, "peer_log", RateLimitedLog(hypercorn_protocols.logger))
    monkeypatch.setattr(hypercorn_server, "failure_log", RateLimitedLog(hypercorn_server.logger, burst=5))
    config = hypercorn_config(["127.0.0.1:0"], graceful_timeout=1.0)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(lambda task_status: serve_hypercorn(app, config, task_status=task_status))
        yield int(urls[0].rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


def h2_client() -> h2.connection.H2Connection:
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    return connection


HEAD = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "127.0.0.1")]


async def rapid_reset(port: int, *, priorities_only: bool = False) -> int | None:
    """Open STREAMS streams and reset each at once, in one write (or, cheaper for the server, send a
    PRIORITY frame for each of STREAMS idle streams: the same priority tree overflows); the error code
    of the server's GOAWAY."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        client = h2_client()
        for n in range(STREAMS):
            if priorities_only:
                client.prioritize(2 * n + 1, weight=16)
                continue
            stream_id = client.get_next_available_stream_id()
            client.send_headers(stream_id, HEAD, end_stream=True)
            client.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        try:
            await stream.send_all(client.data_to_send())
            while data := await stream.receive_some(65536):
                for event in client.receive_data(data):
                    if isinstance(event, h2.events.ConnectionTerminated):
                        return int(event.error_code)
        except trio.BrokenResourceError:  # the server closed with our data unread
            pass
    return None


async def h2_get(port: int) -> int:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        client = h2_client()
        client.send_headers(1, HEAD, end_stream=True)
        await stream.send_all(client.data_to_send())
        while data := await stream.receive_some(65536):
            for event in client.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    return int(dict(event.headers)[b":status"])
            await stream.send_all(client.data_to_send())
    raise AssertionError("no response")


def our_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name.startswith("mcp_trio")]


@pytest.mark.deadline(120)
async def test_http2_rapid_reset_is_one_line_at_most_per_connection_rate_limited(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with serving(monkeypatch) as port:
        codes = [await rapid_reset(port) for _ in range(RAPID_RESETS)]
        codes += [await rapid_reset(port, priorities_only=True) for _ in range(CONNECTIONS)]
        assert await h2_get(port) == 200  # still serving
    # Each flood is told to calm down (GOAWAY ENHANCE_YOUR_CALM) where the client still reads it.
    assert codes.count(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM) >= len(codes) // 2, codes
    assert set(codes) <= {h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, None}, codes
    records = our_records(caplog)
    assert not [record for record in caplog.records if record.exc_info], [r.getMessage() for r in records]
    assert 1 <= len(records) <= 10, [record.getMessage() for record in records]
    assert all("TooManyStreamsError" in record.getMessage() for record in records)


async def test_websocket_handshakes_with_a_non_ascii_subprotocol_are_400_and_one_line_at_most(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    handshake = (
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Protocol: mcp, caf\xc3\xa9\r\n\r\n"
    )
    with trio.fail_after(60):
        async with serving(monkeypatch) as port:
            for _ in range(CONNECTIONS):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    await stream.send_all(handshake)
                    answer = b""
                    while data := await stream.receive_some(65536):  # until the server closes
                        answer += data
                    assert answer.startswith(b"HTTP/1.1 400"), answer
            # A valid handshake is still accepted.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(handshake.replace(b", caf\xc3\xa9", b""))
                assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 101"), "not upgraded"
    records = our_records(caplog)
    assert not [record for record in caplog.records if record.exc_info], [r.getMessage() for r in records]
    assert 1 <= len(records) <= 10, [record.getMessage() for record in records]
    assert "non-ASCII sec-websocket-protocol" in records[0].getMessage()


def test_the_rate_limited_log_says_what_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = RateLimitedLog(
        logging.getLogger("mcp_trio.test_peerlog"), burst=2, interval=60.0, clock=lambda: now[0]
    )
    caplog.set_level(logging.INFO, logger="mcp_trio.test_peerlog")
    sent = [log.log(logging.INFO, "peer %d misbehaved", n) for n in range(5)]
    assert sent == [True, True, False, False, False]
    now[0] = 59.9
    assert not log.log(logging.INFO, "peer %d misbehaved", 5)
    now[0] = 60.0
    assert log.log(logging.INFO, "peer %d misbehaved", 6)
    assert [record.getMessage() for record in caplog.records] == [
        "peer 0 misbehaved",
        "peer 1 misbehaved",
        "peer 6 misbehaved (and 4 more lines like it left out before this one)",
    ]


async def websocket_over_h2(port: int, subprotocol: bytes) -> int:
    """An HTTP/2 extended CONNECT (RFC 8441) WebSocket handshake; the status of the answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        client = h2_client()
        await stream.send_all(client.data_to_send())
        sent = False
        while data := await stream.receive_some(65536):
            for event in client.receive_data(data):
                if isinstance(event, h2.events.RemoteSettingsChanged) and not sent:  # CONNECT allowed now
                    head = [(b":method", b"CONNECT"), (b":protocol", b"websocket"), (b":path", b"/")]
                    head += [(b":scheme", b"http"), (b":authority", b"127.0.0.1")]
                    head += [(b"sec-websocket-version", b"13"), (b"sec-websocket-protocol", subprotocol)]
                    client.send_headers(1, head)
                    sent = True
                elif isinstance(event, h2.events.ResponseReceived):
                    return int(dict(event.headers)[b":status"])
            await stream.send_all(client.data_to_send())
    raise AssertionError("no answer")


async def test_an_http2_websocket_handshake_with_a_non_ascii_subprotocol_is_400(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with serving(monkeypatch) as port:
        assert await websocket_over_h2(port, "café".encode()) == 400
        assert await websocket_over_h2(port, b"mcp") == 200
    records = our_records(caplog)
    assert not [record for record in caplog.records if record.exc_info]
    assert [record.getMessage().split(": ", 1)[1] for record in records] == [
        "non-ASCII sec-websocket-protocol"
    ]
