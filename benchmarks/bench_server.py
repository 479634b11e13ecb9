"""Load benchmark of the ``mcp-trio`` Streamable HTTP server, optionally against the official python-sdk.

    python3 benchmarks/bench_server.py [--quick] [--era 2025|2026] [--baseline python-sdk]
                                       [--baseline bare-asgi] [--json-response] [--runs 3] [--json FILE]

The server under test runs as a subprocess pinned to one CPU (``--server-cpu``, default 0); the load
generator runs in this process pinned to another (``--client-cpu``, default 1).  It speaks raw HTTP/1.1
over keep-alive sockets (``trio.open_tcp_stream``), parsing status line, headers and content-length or
chunked bodies; an SSE answer is read up to the chunked terminator.  Every scenario runs N independent
connections, each with its own loop, bounded by a request count and by a duration.

Scenarios (see README.md):

* ``churn``: per session: POST initialize, POST notifications/initialized, GET (head read, stream kept
  open), POST tools/call echo, DELETE; then the GET stream must end.  Reports sessions/s.
* ``calls c=N``: tools/call echo on N pre-initialized sessions, one session per connection.  Reports
  calls/s and p50/p99 latency.

With ``--era 2026``, stateless 2026-07-28 POSTs instead (``_meta`` with the protocol version and client
capabilities, the MCP-Protocol-Version, Mcp-Method and Mcp-Name headers, no session):

* ``calls c=N``: tools/call echo, one keep-alive connection per loop.
* ``discover c=16``: server/discover.
* ``mrtr c=16``: an input-required round trip of ``test_input_required_result_elicitation`` (the first
  POST answers input_required, the retry carries inputResponses and the requestState); both POSTs count
  as one operation.
* ``listen c=16``: subscriptions/listen on a new connection, read up to its acknowledgement, then the
  connection closed; the server's socket count must fall back afterwards.

For each scenario the server's CPU time (``/proc/PID/stat`` utime+stime) is measured around the timed
part and divided by the operations done; its socket count (``/proc/PID/fd``) and RSS (VmRSS) are read
before and after (after the client closed its connections and the server settled).

Any failed request (wrong status, malformed or missing JSON-RPC result, timeout, dropped connection;
in 2026 also a wrong resultType, sockets or mcp-trio's 2026 requests/listeners not settling) makes the
script exit with status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import trio

HERE = Path(__file__).resolve().parent
PROTOCOL_VERSION = "2025-11-25"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVING_RE = re.compile(rb"serving on (http://\S+)")
URL_RE = re.compile(r"http://([^/:]+):(\d+)(/\S*)")
MAX_ERROR_MESSAGES = 5

INITIALIZE_BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    },
    separators=(",", ":"),
).encode()
INITIALIZED_BODY = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
ECHO_TEXT = "hi"
ACCEPT_BOTH = "application/json, text/event-stream"

T = TypeVar("T")


class BenchError(Exception):
    """A failed request: wrong status, malformed answer, missing result, timeout or dropped connection."""


# --------------------------------------------------------------------------------------------------------
# Raw HTTP/1.1 client
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    path: str

    @property
    def host_header(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes = b""


class Connection:
    """One keep-alive HTTP/1.1 connection, opened lazily and reopened after the server closes it."""

    __slots__ = ("_buf", "_stream", "opened", "target")

    def __init__(self, target: Target) -> None:
        self.target = target
        self._stream: trio.SocketStream | None = None
        self._buf = bytearray()
        self.opened = 0

    async def send(self, data: bytes) -> None:
        if self._stream is None:
            try:
                self._stream = await trio.open_tcp_stream(self.target.host, self.target.port)
            except OSError as exc:
                raise BenchError(f"connect failed: {exc}") from None
            self._buf.clear()
            self.opened += 1
        try:
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise BenchError(f"send failed: {exc!r}") from None

    async def _receive(self) -> None:
        assert self._stream is not None
        try:
            data = await self._stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise BenchError(f"receive failed: {exc!r}") from None
        if not data:
            raise BenchError("connection closed by the server in the middle of a response")
        self._buf += data

    async def _read_until(self, sep: bytes) -> bytes:
        buf = self._buf
        start = 0
        while True:
            i = buf.find(sep, start)
            if i >= 0:
                out = bytes(buf[:i])
                del buf[: i + len(sep)]
                return out
            start = max(0, len(buf) - len(sep) + 1)
            await self._receive()

    async def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            await self._receive()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def read_head(self) -> Response:
        while True:
            head = await self._read_until(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise BenchError(f"malformed status line {lines[0][:80]!r}")
            status = int(parts[1])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(b":")
                if not sep:
                    raise BenchError(f"malformed header line {line[:80]!r}")
                key = name.strip().lower().decode("latin-1")
                val = value.strip().decode("latin-1")
                headers[key] = f"{headers[key]}, {val}" if key in headers else val
            if 100 <= status < 200:  # interim response: the real one follows
                continue
            return Response(status, headers)

    async def read_body(self, response: Response, method: str) -> bytes:
        """The body of ``response``; chunked bodies are read up to their terminator."""
        headers = response.headers
        if method == "HEAD" or response.status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            chunks = []
            while (chunk := await self._read_chunk()) is not None:
                chunks.append(chunk)
            body = b"".join(chunks)
        elif "content-length" in headers:
            body = await self._read_exact(int(headers["content-length"]))
        else:  # delimited by the end of the connection
            assert self._stream is not None
            while True:
                data = await self._stream.receive_some(65536)
                if not data:
                    break
                self._buf += data
            body = bytes(self._buf)
            self._buf.clear()
            await self.close()
            return body
        if "close" in headers.get("connection", "").lower():
            await self.close()
        return body

    async def _read_chunk(self) -> bytes | None:
        """One chunk of a chunked body; None after the terminating chunk (and its trailers)."""
        size_line = await self._read_until(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BenchError(f"malformed chunk size {size_line[:40]!r}") from None
        if size == 0:
            while await self._read_until(b"\r\n"):  # trailers, up to the empty line
                pass
            return None
        chunk = await self._read_exact(size)
        if await self._read_exact(2) != b"\r\n":
            raise BenchError("chunk not followed by CRLF")
        return chunk

    async def read_piece(self, response: Response) -> bytes | None:
        """The next piece of a streamed body (an SSE answer still open): one chunk of a chunked body,
        or what has arrived of any other body (BenchError if the connection ends first); None after the
        terminating chunk."""
        if "chunked" in response.headers.get("transfer-encoding", "").lower():
            return await self._read_chunk()
        if not self._buf:
            await self._receive()
        data = bytes(self._buf)
        self._buf.clear()
        return data

    async def request(self, data: bytes, method: str) -> Response:
        await self.send(data)
        response = await self.read_head()
        response.body = await self.read_body(response, method)
        return response

    async def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                await stream.aclose()
            self._buf.clear()


def http_request(
    target: Target, method: str, headers: list[tuple[str, str]], body: bytes | None = None, path: str = ""
) -> bytes:
    lines = [f"{method} {path or target.path} HTTP/1.1", f"host: {target.host_header}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    if body is not None:
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


# --------------------------------------------------------------------------------------------------------
# MCP over that client
# --------------------------------------------------------------------------------------------------------


def jsonrpc_messages(response: Response, what: str) -> list[Any]:
    ctype = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    try:
        if ctype == "text/event-stream":
            messages = []
            data: list[bytes] = []
            for raw in response.body.split(b"\n"):
                line = raw.rstrip(b"\r")
                if not line:
                    if data:
                        messages.append(json.loads(b"\n".join(data)))
                        data = []
                elif line.startswith(b"data:"):
                    value = line[5:]
                    data.append(value[1:] if value.startswith(b" ") else value)
                    if data == [b""]:  # an empty data field (a priming event) carries no message
                        data = []
            if data:
                messages.append(json.loads(b"\n".join(data)))
            return messages
        if ctype == "application/json":
            decoded = json.loads(response.body)
            return decoded if isinstance(decoded, list) else [decoded]
    except ValueError as exc:
        raise BenchError(
            f"{what}: undecodable JSON in the answer: {exc}; body {response.body[:200]!r}"
        ) from None
    raise BenchError(f"{what}: unexpected content-type {ctype!r}; body {response.body[:200]!r}")


def expect_result(response: Response, request_id: int, what: str) -> dict[str, Any]:
    if response.status != 200:
        raise BenchError(f"{what}: HTTP {response.status}, body {response.body[:200]!r}")
    for message in jsonrpc_messages(response, what):
        if isinstance(message, dict) and message.get("id") == request_id:
            if isinstance(message.get("result"), dict):
                return message["result"]
            raise BenchError(f"{what}: JSON-RPC answer without result: {json.dumps(message)[:200]}")
    raise BenchError(f"{what}: no JSON-RPC answer with id {request_id}; body {response.body[:200]!r}")


class Session:
    """An MCP session over one keep-alive connection (plus, for churn, a second one for the GET stream)."""

    __slots__ = ("conn", "next_id", "session_id", "target")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.target = conn.target
        self.session_id = ""
        self.next_id = 2

    def _headers(self) -> list[tuple[str, str]]:
        return [("mcp-session-id", self.session_id), ("mcp-protocol-version", PROTOCOL_VERSION)]

    def _post(self, body: bytes, with_session: bool = True) -> bytes:
        headers = [("accept", ACCEPT_BOTH), ("content-type", "application/json")]
        if with_session:
            headers += self._headers()
        return http_request(self.target, "POST", headers, body)

    async def initialize(self) -> None:
        response = await self.conn.request(self._post(INITIALIZE_BODY, with_session=False), "POST")
        result = expect_result(response, 1, "initialize")
        if "protocolVersion" not in result:
            raise BenchError(f"initialize: result without protocolVersion: {result}")
        session_id = response.headers.get("mcp-session-id")
        if not session_id:
            raise BenchError("initialize: no mcp-session-id header")
        self.session_id = session_id
        response = await self.conn.request(self._post(INITIALIZED_BODY), "POST")
        if response.status != 202:
            raise BenchError(f"notifications/initialized: HTTP {response.status} (expected 202)")

    async def call_echo(self) -> None:
        request_id = self.next_id
        self.next_id += 1
        body = (
            f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
            f'"params":{{"name":"echo","arguments":{{"text":"{ECHO_TEXT}"}}}}}}'
        ).encode()
        response = await self.conn.request(self._post(body), "POST")
        result = expect_result(response, request_id, "tools/call")
        content = result.get("content")
        if (
            result.get("isError")
            or not isinstance(content, list)
            or not content
            or not isinstance(content[0], dict)
            or content[0].get("text") != ECHO_TEXT
        ):
            raise BenchError(f"tools/call: wrong echo result {json.dumps(result)[:200]}")

    async def delete(self) -> None:
        response = await self.conn.request(http_request(self.target, "DELETE", self._headers()), "DELETE")
        if response.status != 200:
            raise BenchError(f"DELETE: HTTP {response.status} (expected 200), body {response.body[:200]!r}")

    async def open_get(self, conn: Connection) -> Response:
        await conn.send(http_request(self.target, "GET", [("accept", "text/event-stream"), *self._headers()]))
        response = await conn.read_head()
        ctype = response.headers.get("content-type", "")
        if response.status != 200 or not ctype.startswith("text/event-stream"):
            body = await conn.read_body(response, "GET")
            raise BenchError(f"GET: HTTP {response.status} {ctype!r} (expected 200 SSE), body {body[:200]!r}")
        return response


# --------------------------------------------------------------------------------------------------------
# The 2026-07-28 era: stateless POSTs (docs/transport-2026.md)
# --------------------------------------------------------------------------------------------------------

MODERN_VERSION = "2026-07-28"
# What every 2026 POST carries in params._meta: the version and the client's capabilities (elicitation, for
# the input-required round trip; clientInfo is optional and left out).
MODERN_META_JSON = json.dumps(
    {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    },
    separators=(",", ":"),
)
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
INPUT_TOOL = "test_input_required_result_elicitation"  # mcp_trio.demo's; baseline_python_sdk.py has one too
INPUT_ANSWER = {"action": "accept", "content": {"name": "x"}}
INPUT_GREETING = "Hello, x!"


def modern_params(params: dict[str, Any]) -> str:
    """``params`` as JSON with the 2026 ``_meta`` added."""
    encoded = json.dumps(params, separators=(",", ":"))
    return encoded[:-1] + ("," if params else "") + '"_meta":' + MODERN_META_JSON + "}"


ECHO_PARAMS = modern_params({"name": "echo", "arguments": {"text": ECHO_TEXT}})
DISCOVER_PARAMS = modern_params({})
INPUT_PARAMS = modern_params({"name": INPUT_TOOL, "arguments": {}})
LISTEN_PARAMS = modern_params({"notifications": {"toolsListChanged": True}})


def expect_modern_result(response: Response, request_id: int, what: str, result_type: str) -> dict[str, Any]:
    result = expect_result(response, request_id, what)
    if result.get("resultType") != result_type:
        raise BenchError(f"{what}: resultType {result.get('resultType')!r} (expected {result_type!r})")
    return result


def check_text(result: dict[str, Any], text: str, what: str) -> None:
    content = result.get("content")
    if (
        result.get("isError")
        or not isinstance(content, list)
        or not content
        or not isinstance(content[0], dict)
        or content[0].get("text") != text
    ):
        raise BenchError(f"{what}: wrong result {json.dumps(result)[:200]} (expected the text {text!r})")


def sse_events(buffer: bytearray) -> Iterator[Any]:
    """Take the complete SSE events out of ``buffer`` (what has arrived of a stream, CRLF or LF line ends);
    yield the JSON of each one that has data (comments and priming events yield nothing, an incomplete
    last event stays in ``buffer``)."""
    buffer[:] = buffer.replace(b"\r\n", b"\n")  # a CR alone at the end waits for its LF
    while (end := buffer.find(b"\n\n")) >= 0:
        event = bytes(buffer[:end])
        del buffer[: end + 2]
        data = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data and data != [b""]:
            try:
                yield json.loads(b"\n".join(data))
            except ValueError as exc:
                raise BenchError(f"undecodable JSON in an SSE event: {exc}; {event[:200]!r}") from None


class ModernClient:
    """2026-07-28 requests over one keep-alive connection: each POST self-contained (``_meta``, the
    MCP-Protocol-Version, Mcp-Method and Mcp-Name headers), no session."""

    __slots__ = ("conn", "next_id", "target")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.target = conn.target
        self.next_id = 1

    def _post(self, method: str, params: str, name: str | None) -> tuple[int, bytes]:
        request_id = self.next_id
        self.next_id += 1
        body = f'{{"jsonrpc":"2.0","id":{request_id},"method":"{method}","params":{params}}}'.encode()
        headers = [
            ("accept", ACCEPT_BOTH),
            ("content-type", "application/json"),
            ("mcp-protocol-version", MODERN_VERSION),
            ("mcp-method", method),
        ]
        if name is not None:
            headers.append(("mcp-name", name))
        return request_id, http_request(self.target, "POST", headers, body)

    async def call_echo(self) -> None:
        request_id, data = self._post("tools/call", ECHO_PARAMS, "echo")
        response = await self.conn.request(data, "POST")
        check_text(
            expect_modern_result(response, request_id, "tools/call", "complete"), ECHO_TEXT, "tools/call"
        )

    async def discover(self) -> None:
        request_id, data = self._post("server/discover", DISCOVER_PARAMS, None)
        response = await self.conn.request(data, "POST")
        result = expect_modern_result(response, request_id, "server/discover", "complete")
        supported = result.get("supportedVersions")
        if not isinstance(supported, list) or MODERN_VERSION not in supported:
            raise BenchError(f"server/discover: supportedVersions {supported!r} without {MODERN_VERSION}")

    async def ask_input(self) -> tuple[list[str], str]:
        """The first POST of an input-required round trip: the keys asked for and the requestState."""
        what = "tools/call (input_required)"
        request_id, data = self._post("tools/call", INPUT_PARAMS, INPUT_TOOL)
        response = await self.conn.request(data, "POST")
        result = expect_modern_result(response, request_id, what, "input_required")
        requests, state = result.get("inputRequests"), result.get("requestState")
        if (
            not isinstance(requests, dict)
            or not requests
            or not all(
                isinstance(r, dict) and r.get("method") == "elicitation/create" for r in requests.values()
            )
            or not isinstance(state, str)
            or not state
        ):
            raise BenchError(
                f"{what}: no elicitation inputRequests or no requestState: {json.dumps(result)[:200]}"
            )
        return list(requests), state

    async def answer_input(self, keys: list[str], state: str) -> None:
        """The retry: every question answered (accept, name "x"), the requestState echoed."""
        what = "tools/call (retry with inputResponses)"
        params = {
            "name": INPUT_TOOL,
            "arguments": {},
            "inputResponses": dict.fromkeys(keys, INPUT_ANSWER),
            "requestState": state,
        }
        request_id, data = self._post("tools/call", modern_params(params), INPUT_TOOL)
        response = await self.conn.request(data, "POST")
        check_text(expect_modern_result(response, request_id, what, "complete"), INPUT_GREETING, what)

    async def listen_ack(self) -> None:
        """POST subscriptions/listen and read its stream up to the acknowledgement (the stream stays open)."""
        what = "subscriptions/listen"
        request_id, data = self._post("subscriptions/listen", LISTEN_PARAMS, None)
        conn = self.conn
        await conn.send(data)
        response = await conn.read_head()
        ctype = response.headers.get("content-type", "")
        if response.status != 200 or not ctype.startswith("text/event-stream"):
            body = await conn.read_body(response, "POST")
            raise BenchError(
                f"{what}: HTTP {response.status} {ctype!r} (expected 200 SSE), body {body[:200]!r}"
            )
        buffer = bytearray()
        while True:
            piece = await conn.read_piece(response)
            if piece is None:
                raise BenchError(
                    f"{what}: the stream ended before its acknowledgement: {bytes(buffer)[:200]!r}"
                )
            buffer += piece
            for message in sse_events(buffer):
                params = message.get("params") if isinstance(message, dict) else None
                meta = params.get("_meta") if isinstance(params, dict) else None
                if (
                    not isinstance(meta, dict)  # (then message is a dict)
                    or message.get("method") != "notifications/subscriptions/acknowledged"
                    or meta.get(SUBSCRIPTION_ID_KEY) != request_id
                ):
                    raise BenchError(
                        f"{what}: first message is not the acknowledgement of id {request_id}: "
                        f"{json.dumps(message)[:200]}"
                    )
                return


async def step(what: str, limit: float, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``fn(*args)`` within ``limit`` seconds; any failure becomes a BenchError naming ``what``."""
    try:
        with trio.fail_after(limit):
            return await fn(*args)
    except trio.TooSlowError:
        raise BenchError(f"{what}: no complete answer within {limit:g}s") from None
    except BenchError as exc:
        msg = str(exc)
        raise BenchError(msg if msg.startswith(what) else f"{what}: {msg}") from None


# --------------------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------------------


class Budget:
    """Bounds a scenario by a total operation count and a deadline, shared by all its connections."""

    def __init__(self, count: int, duration: float) -> None:
        self.remaining = count
        self.deadline = trio.current_time() + duration

    def take(self) -> bool:
        if self.remaining <= 0 or trio.current_time() >= self.deadline:
            return False
        self.remaining -= 1
        return True


@dataclass
class Recorder:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    messages: list[str] = field(default_factory=list)

    def fail(self, exc: BaseException) -> None:
        self.errors += 1
        if len(self.messages) < MAX_ERROR_MESSAGES:
            self.messages.append(str(exc))


@dataclass
class ScenarioResult:
    scenario: str
    server: str
    run: int
    concurrency: int
    ops: int
    seconds: float
    rate: float
    p50_ms: float
    p99_ms: float
    server_cpu_ms: float
    server_cpu_ms_per_op: float
    server_cpu_util: float
    client_cpu_util: float
    sockets_before: int
    sockets_peak: int
    sockets_after: int
    rss_kb_before: int
    rss_kb_after: int
    connections_opened: int
    errors: int
    error_messages: list[str]
    server_sessions_after: int | None = None
    server_listeners_after: int | None = None  # mcp-trio's /stats after a 2026 scenario (None otherwise)
    server_inflight_after: int | None = None


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15)


def proc_sockets(pid: int) -> int:
    count = 0
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        with contextlib.suppress(OSError):
            if os.readlink(f"{fd_dir}/{name}").startswith("socket:["):
                count += 1
    return count


def proc_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


@dataclass
class Context:
    target: Target
    pid: int
    server: str
    run: int
    limit: float  # per-request timeout, seconds
    settle: float  # how long to wait for the server to close its sockets after a scenario
    stats_path: str | None


async def settle_sockets(ctx: Context, goal: int) -> int:
    deadline = trio.current_time() + ctx.settle
    while True:
        sockets = proc_sockets(ctx.pid)
        if sockets <= goal or trio.current_time() >= deadline:
            return sockets
        await trio.sleep(0.05)


async def server_stats(ctx: Context) -> dict[str, Any] | None:
    """mcp-trio's ``--stats-path`` endpoint (None for a server without one)."""
    if ctx.stats_path is None:
        return None
    conn = Connection(ctx.target)
    try:
        response = await step(
            "stats", ctx.limit, conn.request, http_request(ctx.target, "GET", [], path=ctx.stats_path), "GET"
        )
    finally:
        await conn.close()
    if response.status != 200:
        raise BenchError(f"stats: HTTP {response.status}")
    stats: dict[str, Any] = json.loads(response.body)
    return stats


async def server_sessions(ctx: Context) -> int | None:
    """Live sessions according to mcp-trio's ``--stats-path`` endpoint (None for a server without one)."""
    stats = await server_stats(ctx)
    return None if stats is None else int(stats["sessions"])


MODERN_STATS = ("modern_inflight", "listeners")  # what /stats must show back at 0 after a 2026 scenario


async def settle_modern_stats(ctx: Context) -> dict[str, Any] | None:
    """mcp-trio's stats once its 2026 requests in progress and its listeners are back at 0 (or, after
    ``ctx.settle`` seconds, as they are); None for a server without stats."""
    deadline = trio.current_time() + ctx.settle
    while True:
        stats = await server_stats(ctx)
        if stats is None or not any(stats.get(k) for k in MODERN_STATS) or trio.current_time() >= deadline:
            return stats
        await trio.sleep(0.05)


async def measure(
    ctx: Context,
    name: str,
    concurrency: int,
    setup: Callable[[], Awaitable[None]],
    body: Callable[[], Awaitable[None]],
    teardown: Callable[[], Awaitable[None]],
    rec: Recorder,
    conns: list[Connection],
    modern: bool = False,
    sockets_must_settle: bool = False,
) -> ScenarioResult:
    """Runs ``setup``, the timed ``body``, ``teardown``; closes ``conns``; reads the server's figures.

    ``modern`` (a 2026 scenario): mcp-trio's /stats must come back to no request in progress and no
    listener within ``ctx.settle`` seconds; ``sockets_must_settle``: the server's sockets must come back
    to their count before the scenario within that time.  Otherwise the scenario counts one failure."""
    sockets_before = proc_sockets(ctx.pid)
    rss_before = proc_rss_kb(ctx.pid)
    await setup()
    cpu0, cli0, t0 = proc_cpu_seconds(ctx.pid), time.process_time(), time.perf_counter()
    await body()
    t1, cli1, cpu1 = time.perf_counter(), time.process_time(), proc_cpu_seconds(ctx.pid)
    sockets_peak = proc_sockets(ctx.pid)
    await teardown()
    for conn in conns:
        await conn.close()
    stats: dict[str, Any] | None = None
    try:
        if modern:
            stats = await settle_modern_stats(ctx)
            sessions_after = None if stats is None else int(stats["sessions"])
        else:
            sessions_after = await server_sessions(ctx)
    except BenchError as exc:
        rec.fail(exc)
        sessions_after = None
    sockets_after = await settle_sockets(ctx, sockets_before)  # after the /stats connection, too
    if modern and stats is not None and any(stats.get(k) for k in MODERN_STATS):
        left = ", ".join(f"{k} {stats.get(k)}" for k in MODERN_STATS)
        rec.fail(BenchError(f"{name}: /stats still shows {left} {ctx.settle:g}s after the clients left"))
    if sockets_must_settle and sockets_after > sockets_before:
        rec.fail(
            BenchError(
                f"{name}: the server's sockets did not settle: {sockets_before} before, {sockets_after}"
                f" {ctx.settle:g}s after the clients closed their connections"
            )
        )
    latencies = sorted(rec.latencies)
    ops = len(latencies)
    seconds = t1 - t0
    cpu_ms = (cpu1 - cpu0) * 1000
    return ScenarioResult(
        scenario=name,
        server=ctx.server,
        run=ctx.run,
        concurrency=concurrency,
        ops=ops,
        seconds=seconds,
        rate=ops / seconds if seconds > 0 else 0.0,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        server_cpu_ms=cpu_ms,
        server_cpu_ms_per_op=cpu_ms / ops if ops else math.nan,
        server_cpu_util=(cpu1 - cpu0) / seconds if seconds > 0 else 0.0,
        client_cpu_util=(cli1 - cli0) / seconds if seconds > 0 else 0.0,
        sockets_before=sockets_before,
        sockets_peak=sockets_peak,
        sockets_after=sockets_after,
        rss_kb_before=rss_before,
        rss_kb_after=proc_rss_kb(ctx.pid),
        connections_opened=sum(c.opened for c in conns),
        errors=rec.errors,
        error_messages=rec.messages,
        server_sessions_after=sessions_after,
        server_listeners_after=None if stats is None else stats.get("listeners"),
        server_inflight_after=None if stats is None else stats.get("modern_inflight"),
    )


async def churn(ctx: Context, concurrency: int, count: int, duration: float) -> ScenarioResult:
    """Whole session lifecycles: initialize, initialized, GET (kept open), tools/call, DELETE, GET ends."""
    rec = Recorder()
    pairs = [(Connection(ctx.target), Connection(ctx.target)) for _ in range(concurrency)]
    limit = ctx.limit

    async def worker(post: Connection, get: Connection, budget: Budget) -> None:
        while budget.take():
            t0 = time.perf_counter()
            session = Session(post)
            try:
                await step("initialize", limit, session.initialize)
                get_head = await step("GET", limit, session.open_get, get)
                await step("tools/call", limit, session.call_echo)
                await step("DELETE", limit, session.delete)
                await step("GET stream end after DELETE", limit, get.read_body, get_head, "GET")
            except BenchError as exc:
                rec.fail(exc)
                return
            rec.latencies.append(time.perf_counter() - t0)

    async def body() -> None:
        budget = Budget(count, duration)
        async with trio.open_nursery() as nursery:
            for post, get in pairs:
                nursery.start_soon(worker, post, get, budget)

    async def nothing() -> None:
        pass

    conns = [c for pair in pairs for c in pair]
    return await measure(ctx, f"churn c={concurrency}", concurrency, nothing, body, nothing, rec, conns)


async def calls(ctx: Context, concurrency: int, count: int, duration: float) -> ScenarioResult:
    """tools/call echo on ``concurrency`` pre-initialized sessions, one per keep-alive connection."""
    rec = Recorder()
    sessions = [Session(Connection(ctx.target)) for _ in range(concurrency)]
    ready: list[Session] = []
    limit = ctx.limit

    async def open_one(session: Session) -> None:
        try:
            await step("initialize", limit, session.initialize)
        except BenchError as exc:
            rec.fail(exc)
        else:
            ready.append(session)

    async def setup() -> None:
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(open_one, session)

    async def worker(session: Session, budget: Budget) -> None:
        latencies = rec.latencies
        while budget.take():
            t0 = time.perf_counter()
            try:
                await step("tools/call", limit, session.call_echo)
            except BenchError as exc:
                rec.fail(exc)
                ready.remove(session)  # its connection is in an unknown state: no DELETE on it
                return
            latencies.append(time.perf_counter() - t0)

    async def body() -> None:
        budget = Budget(count, duration)
        async with trio.open_nursery() as nursery:
            for session in list(ready):
                nursery.start_soon(worker, session, budget)

    async def delete_one(session: Session) -> None:
        try:
            await step("DELETE", limit, session.delete)
        except BenchError as exc:
            rec.fail(exc)

    async def teardown() -> None:
        async with trio.open_nursery() as nursery:
            for session in ready:
                nursery.start_soon(delete_one, session)

    conns = [s.conn for s in sessions]
    return await measure(ctx, f"calls c={concurrency}", concurrency, setup, body, teardown, rec, conns)


async def modern_op(client: ModernClient, kind: str, limit: float) -> None:
    """One operation of 2026 scenario ``kind`` (see MODERN_SCENARIOS)."""
    if kind == "calls":
        await step("tools/call", limit, client.call_echo)
    elif kind == "discover":
        await step("server/discover", limit, client.discover)
    elif kind == "mrtr":
        keys, state = await step("tools/call (input_required)", limit, client.ask_input)
        await step("tools/call (retry with inputResponses)", limit, client.answer_input, keys, state)
    elif kind == "listen":
        try:
            await step("subscriptions/listen", limit, client.listen_ack)
        finally:
            await client.conn.close()  # drop the stream: the next listen opens a new connection
    else:
        raise AssertionError(kind)


async def modern(ctx: Context, kind: str, concurrency: int, count: int, duration: float) -> ScenarioResult:
    """2026-07-28 scenario ``kind`` on ``concurrency`` connections, each with its own loop (keep-alive, but
    ``listen`` opens a connection per stream and closes it once the acknowledgement is read)."""
    rec = Recorder()
    clients = [ModernClient(Connection(ctx.target)) for _ in range(concurrency)]
    limit = ctx.limit

    async def worker(client: ModernClient, budget: Budget) -> None:
        latencies = rec.latencies
        while budget.take():
            t0 = time.perf_counter()
            try:
                await modern_op(client, kind, limit)
            except BenchError as exc:
                rec.fail(exc)
                return
            latencies.append(time.perf_counter() - t0)

    async def body() -> None:
        budget = Budget(count, duration)
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(worker, client, budget)

    async def nothing() -> None:
        pass

    conns = [c.conn for c in clients]
    name = f"{kind} c={concurrency}"
    return await measure(
        ctx,
        name,
        concurrency,
        nothing,
        body,
        nothing,
        rec,
        conns,
        modern=True,
        sockets_must_settle=kind == "listen",
    )


@dataclass(frozen=True)
class Plan:
    churn_concurrency: int
    churn_count: int
    churn_seconds: float
    call_concurrency: tuple[int, ...]
    call_count: int
    call_seconds: float
    warmup_sessions: int
    warmup_calls: int
    request_timeout: float
    settle_seconds: float
    # --era 2026: discover, mrtr and listen (the calls use call_concurrency, call_count, call_seconds)
    modern_concurrency: int = 16
    modern_count: int = 100_000
    modern_seconds: float = 2.0


FULL = Plan(16, 20_000, 4.0, (1, 16, 64), 100_000, 3.0, 50, 500, 10.0, 3.0, 16, 100_000, 2.0)
QUICK = Plan(4, 40, 0.5, (1, 16, 64), 300, 0.3, 4, 40, 5.0, 1.0, 16, 100, 0.3)


async def run_scenarios(
    ctx: Context, plan: Plan, with_churn: bool = True
) -> tuple[list[ScenarioResult], ScenarioResult]:
    warm = [await churn(ctx, 2, plan.warmup_sessions, 30.0)] if with_churn else []
    warm.append(await calls(ctx, 4, plan.warmup_calls, 30.0))
    warmup = warm[0]
    for other in warm[1:]:
        warmup.errors += other.errors
        warmup.error_messages += other.error_messages
    warmup.scenario = "warmup"
    results = []
    if with_churn:
        results.append(await churn(ctx, plan.churn_concurrency, plan.churn_count, plan.churn_seconds))
    for concurrency in plan.call_concurrency:
        results.append(await calls(ctx, concurrency, plan.call_count, plan.call_seconds))
    return results, warmup


MODERN_SCENARIOS = ("calls", "discover", "mrtr", "listen")
CANNED_SCENARIOS = ("calls", "discover")  # what the bare floors answer in the 2026 era


async def run_modern_scenarios(
    ctx: Context, plan: Plan, kinds: tuple[str, ...] = MODERN_SCENARIOS
) -> tuple[list[ScenarioResult], ScenarioResult]:
    """The 2026 scenarios a server serves (``kinds``): warm-up, then calls at each concurrency, then
    discover, mrtr and listen at ``plan.modern_concurrency``."""
    warm = [await modern(ctx, "calls", 4, plan.warmup_calls, 30.0)]
    for kind in ("mrtr", "listen"):
        if kind in kinds:
            warm.append(await modern(ctx, kind, 2, plan.warmup_sessions, 30.0))
    warmup = warm[0]
    for other in warm[1:]:
        warmup.errors += other.errors
        warmup.error_messages += other.error_messages
    warmup.scenario = "warmup"
    results = []
    for concurrency in plan.call_concurrency:
        results.append(await modern(ctx, "calls", concurrency, plan.call_count, plan.call_seconds))
    for kind in kinds:
        if kind != "calls":
            results.append(
                await modern(ctx, kind, plan.modern_concurrency, plan.modern_count, plan.modern_seconds)
            )
    return results, warmup


# --------------------------------------------------------------------------------------------------------
# Server processes
# --------------------------------------------------------------------------------------------------------

PIN_AND_EXEC = (
    "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); os.execv(sys.argv[2], sys.argv[2:])"
)


@dataclass(frozen=True)
class ServerSpec:
    name: str
    argv: list[str]
    stats_path: str | None
    churn: bool = True  # False: the server has no GET stream / session lifecycle (bare-asgi)
    modern: tuple[str, ...] = MODERN_SCENARIOS  # the 2026 scenarios it serves (none: no 2026-07-28)


def ts_sdk_node() -> str | None:
    """Node 22 of ``scripts/install-node-deps.sh`` if it and the TypeScript SDK it installs are present.

    ``baseline_ts_sdk.mjs`` imports the SDK from ``tests/client/ts_server/node_modules`` by path.
    """
    node = HERE.parent / ".node22/node_modules/node/bin/node"
    sdk = HERE.parent / "tests/client/ts_server/node_modules/@modelcontextprotocol/sdk/package.json"
    return str(node) if os.access(node, os.X_OK) and sdk.is_file() else None


def server_specs(args: argparse.Namespace) -> list[ServerSpec]:
    exe = shutil.which("mcp-trio") or str(Path(sys.executable).with_name("mcp-trio"))
    if Path(exe).is_file():
        ours = [exe]
    else:
        ours = [sys.executable, "-c", "import sys; from mcp_trio._cli import main; main(sys.argv[1:])"]
    ours += ["demo", "--bind", "127.0.0.1:0", "--stats-path", "/stats", "--http", args.http]
    ours += ["--max-sessions-per-address", "0"]  # every load client is 127.0.0.1: no per-address quota
    base = [sys.executable, str(HERE / "baseline_python_sdk.py"), "--bind", "127.0.0.1:0"]
    if args.json_response:
        ours.append("--json-response")
        base.append("--json-response")
    shipped = getattr(args, "hypercorn_as_shipped", False)
    if shipped:  # the same hypercorn for every server on it: all patched, or none
        ours.append("--no-hypercorn-fast-path")
        base.append("--no-hypercorn-fast-path")
    specs = [ServerSpec("mcp-trio" if args.http == "hypercorn" else f"mcp-trio/{args.http}", ours, "/stats")]
    for baseline in dict.fromkeys(args.baseline or []):
        if baseline == "python-sdk":
            specs.append(ServerSpec("python-sdk", base, None))
        elif baseline == "python-sdk-shipped":  # hypercorn as its users run it: no fix, no fast path
            specs.append(ServerSpec("python-sdk-shipped", [*base, "--no-hypercorn-fix"], None))
        elif baseline == "bare-asgi":
            bare = [sys.executable, str(HERE / "baseline_bare_asgi.py"), "--bind", "127.0.0.1:0"]
            if shipped:
                bare.append("--no-hypercorn-fast-path")
            specs.append(ServerSpec("bare-asgi", bare, None, churn=False, modern=CANNED_SCENARIOS))
        elif baseline == "bare-h11":
            bare = [sys.executable, str(HERE / "baseline_bare_h11.py"), "--bind", "127.0.0.1:0"]
            specs.append(ServerSpec("bare-h11", bare, None, churn=False, modern=CANNED_SCENARIOS))
        elif baseline == "ts-sdk":
            if getattr(args, "era", "2025") == "2026":
                print(
                    "bench: --baseline ts-sdk skipped for --era 2026: the TypeScript SDK"
                    " (@modelcontextprotocol/sdk 1.32.2) does not serve 2026-07-28 (its newest revision is"
                    " 2025-11-25; a 2026 POST without a session gets 400 'No valid session ID provided')",
                    file=sys.stderr,
                )
                continue
            node = ts_sdk_node()
            if node is None:
                print("bench: --baseline ts-sdk skipped: no Node 22 with the TypeScript SDK", file=sys.stderr)
                continue
            ts = [node, str(HERE / "baseline_ts_sdk.mjs"), "--bind", "127.0.0.1:0"]
            if args.json_response:
                ts.append("--json-response")
            specs.append(ServerSpec("ts-sdk", ts, None, modern=()))
    return specs


class ServerProcess:
    """The server under test, pinned to one CPU; stopped with SIGINT, killed if it is not gone in time."""

    def __init__(self, spec: ServerSpec, cpu: int | None, start_timeout: float, stop_timeout: float) -> None:
        self.spec = spec
        self.cpu = cpu
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.target: Target | None = None
        self.stop_seconds = math.nan
        self.killed = False
        self.exit_code: int | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="bench-server-")
        self._out = Path(self._dir.name) / "stdout"
        self._err = Path(self._dir.name) / "stderr"

    def start(self) -> Target:
        argv = self.spec.argv
        if self.cpu is not None:
            argv = [sys.executable, "-c", PIN_AND_EXEC, str(self.cpu), *argv]
        with open(self._out, "wb") as out, open(self._err, "wb") as err:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            match = SERVING_RE.search(self._out.read_bytes())
            if match:
                url = URL_RE.fullmatch(match.group(1).decode())
                if not url:
                    raise RuntimeError(f"{self.spec.name}: cannot parse URL {match.group(1)!r}")
                self.target = Target(url.group(1), int(url.group(2)), url.group(3))
                return self.target
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(
            f"{self.spec.name} did not report 'serving on' within {self.start_timeout:g}s "
            f"(exit code {self.proc.poll()}); stderr tail:\n{self.stderr_tail()}"
        )

    def stderr_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._err.read_text(errors="replace").splitlines()[-lines:])
        return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            t0 = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                proc.kill()
                proc.wait()
            self.stop_seconds = time.monotonic() - t0
        if proc is not None:
            self.exit_code = proc.returncode
        self._dir.cleanup()


@contextlib.contextmanager
def running(spec: ServerSpec, cpu: int | None, stop_timeout: float) -> Iterator[ServerProcess]:
    server = ServerProcess(spec, cpu, start_timeout=60.0, stop_timeout=stop_timeout)
    try:
        server.start()
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def fmt(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def ratio(a: float, b: float) -> float:
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else math.nan


RATIO_KEYS = ("rate_median", "p50_ms_median", "p99_ms_median", "server_cpu_ms_per_op_median")


def summarize(results: list[ScenarioResult], servers: list[str]) -> list[dict[str, Any]]:
    summary = []
    for scenario in dict.fromkeys(r.scenario for r in results):
        row: dict[str, Any] = {"scenario": scenario, "servers": {}}
        for server in servers:
            rs = [r for r in results if r.scenario == scenario and r.server == server]
            if not rs:
                continue
            rates = [r.rate for r in rs]
            row["servers"][server] = {
                "runs": len(rs),
                "rate_median": med(rates),
                "rate_min": min(rates),
                "rate_max": max(rates),
                "p50_ms_median": med([r.p50_ms for r in rs]),
                "p99_ms_median": med([r.p99_ms for r in rs]),
                "server_cpu_ms_per_op_median": med([r.server_cpu_ms_per_op for r in rs]),
                "server_cpu_util_median": med([r.server_cpu_util for r in rs]),
                "client_cpu_util_median": med([r.client_cpu_util for r in rs]),
                "sockets_before_median": med([r.sockets_before for r in rs]),
                "sockets_peak_median": med([r.sockets_peak for r in rs]),
                "sockets_after_median": med([r.sockets_after for r in rs]),
                "sockets_after_max": max(r.sockets_after for r in rs),
                "rss_mib_before_median": med([r.rss_kb_before / 1024 for r in rs]),
                "rss_mib_after_median": med([r.rss_kb_after / 1024 for r in rs]),
                "errors": sum(r.errors for r in rs),
            }
        ours = row["servers"].get(servers[0])
        row["ratio_ours_over_baseline"] = {}
        for baseline in servers[1:]:  # one set of ratios per baseline; None if a server skipped the scenario
            base = row["servers"].get(baseline)
            row["ratio_ours_over_baseline"][baseline] = (
                {key: ratio(ours[key], base[key]) for key in RATIO_KEYS} if ours and base else None
            )
        summary.append(row)
    return summary


COLUMNS = (  # title, width, alignment
    ("scenario", 13, "<"),
    ("server", 15, "<"),
    ("rate/s", 8, ">"),
    ("(min-max)", 19, "<"),
    ("p50 ms", 7, ">"),
    ("p99 ms", 7, ">"),
    ("cpu ms/op", 9, ">"),
    ("srv cpu", 7, ">"),
    ("cli cpu", 7, ">"),
    ("sockets b>peak>a", 16, ">"),
    ("rss MiB b>a", 12, ">"),
    ("err", 4, ">"),
)


def table_line(cells: list[str], columns: tuple[tuple[str, int, str], ...] = COLUMNS) -> str:
    return " ".join(f"{cell:{align}{width}}" for cell, (_, width, align) in zip(cells, columns, strict=False))


def render(summary: list[dict[str, Any]], unit: dict[str, str], servers: list[str], era: str = "2025") -> str:
    head = table_line([title for title, _, _ in COLUMNS])
    out = [head, "-" * len(head)]
    for row in summary:
        for i, server in enumerate(servers):
            s = row["servers"].get(server)
            if s is None:
                out.append(table_line([row["scenario"] if i == 0 else "", server, "n/a"]).rstrip())
                continue
            out.append(
                table_line(
                    [
                        row["scenario"] if i == 0 else "",
                        server,
                        fmt(s["rate_median"]),
                        f"({fmt(s['rate_min'])}-{fmt(s['rate_max'])})",
                        fmt(s["p50_ms_median"], 2),
                        fmt(s["p99_ms_median"], 2),
                        fmt(s["server_cpu_ms_per_op_median"], 3),
                        fmt(100 * s["server_cpu_util_median"], 0) + "%",
                        fmt(100 * s["client_cpu_util_median"], 0) + "%",
                        f"{fmt(s['sockets_before_median'], 0)}>{fmt(s['sockets_peak_median'], 0)}"
                        f">{fmt(s['sockets_after_median'], 0)}",
                        f"{fmt(s['rss_mib_before_median'])}>{fmt(s['rss_mib_after_median'])}",
                        str(s["errors"]),
                    ]
                ).rstrip()
            )
        for baseline, ratios in row.get("ratio_ours_over_baseline", {}).items():
            if ratios is None:
                out.append(table_line(["", f"ours/{baseline}", "n/a"]).rstrip())
                continue
            keys = ("rate_median", "", "p50_ms_median", "p99_ms_median", "server_cpu_ms_per_op_median")
            cells = ["", f"ours/{baseline}"] + [fmt(ratios[k], 2) + "x" if k else "" for k in keys]
            out.append(table_line(cells).rstrip())
    out.append("")
    out.append(
        "rate: "
        + "; ".join(f"{k} in {v}" for k, v in unit.items())
        + ". Medians over runs; (min-max) is the spread of the rate."
    )
    out.append(
        "cpu ms/op: server utime+stime per operation; srv cpu / cli cpu: CPU use of server and load generator"
        " (100% = one core)."
    )
    out.append(
        "sockets: server's open sockets before > at the end of the timed part > after the client closed"
        " and the server settled."
    )
    not_run = (
        "the bare floors answer only tools/call and server/discover, with canned JSON"
        if era == "2026"
        else "the bare floors have no churn"
    )
    out.append(
        "ours/X: mcp-trio divided by baseline X (rate > 1x: ours faster; latency and cpu/op < 1x: ours"
        f" cheaper). n/a: scenario not run for that server ({not_run})."
    )
    if era == "2026":
        out.append(
            "2026-07-28 stateless POSTs (_meta, MCP-Protocol-Version, Mcp-Method, Mcp-Name); mrtr: one"
            " input-required round trip = both POSTs; listen: a subscriptions/listen stream opened, its"
            " acknowledgement read, the connection closed."
        )
    elif "bare-asgi" in servers:
        out.append("bare-asgi always answers application/json (never SSE), whatever --json-response says.")
    return "\n".join(out)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("mcp_trio", "mcp", "trio", "hypercorn", "h11", "anyio", "starlette"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    return found


def pin_cpus(args: argparse.Namespace) -> tuple[int | None, int | None]:
    available = os.sched_getaffinity(0)
    if args.no_pin:
        return None, None
    if {args.server_cpu, args.client_cpu} <= available and args.server_cpu != args.client_cpu:
        os.sched_setaffinity(0, {args.client_cpu})
        return args.server_cpu, args.client_cpu
    print(
        f"warning: CPUs {args.server_cpu} and {args.client_cpu} are not both available ({sorted(available)}):"
        " not pinning",
        file=sys.stderr,
    )
    return None, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument(
        "--baseline",
        action="append",
        choices=["python-sdk", "python-sdk-shipped", "bare-asgi", "bare-h11", "ts-sdk"],
        help="also run a baseline: the official python-sdk on the same hypercorn as ours (python-sdk) or on"
        " hypercorn as shipped, as its users run it (python-sdk-shipped), a bare ASGI app or Trio + h11 loop"
        " (the floors), the TypeScript SDK; may be repeated",
    )
    parser.add_argument("--json-response", action="store_true", help="servers answer with JSON, not SSE")
    parser.add_argument(
        "--era",
        choices=["2025", "2026"],
        default="2025",
        help="2025: sessions (churn, calls); 2026: stateless 2026-07-28 POSTs (calls discover mrtr listen)",
    )
    parser.add_argument(
        "--hypercorn-as-shipped",
        action="store_true",
        help="every hypercorn-based server without mcp_trio's request-path patches (CLOSE_WAIT fix stays)",
    )
    parser.add_argument(
        "--http",
        choices=["hypercorn", "h11"],
        default="hypercorn",
        help="the HTTP server mcp-trio runs on: hypercorn's trio worker (default) or the embedded h11 server",
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per server (default 3; 1 with --quick)")
    parser.add_argument("--json", metavar="FILE", help="also write all results as JSON to FILE")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and load generator to CPUs")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    if runs < 1:
        parser.error("--runs must be at least 1")

    server_cpu, client_cpu = pin_cpus(args)
    specs = server_specs(args)
    mode = "json" if args.json_response else "sse"
    print(
        f"bench_server: era={args.era} mode={mode} runs={runs} {'quick' if args.quick else 'full'} "
        f"servers={','.join(s.name for s in specs)} server cpu={server_cpu} client cpu={client_cpu}"
    )
    print("versions: " + " ".join(f"{k}={v}" for k, v in versions().items()))
    calls_plan = (
        f"calls c={','.join(map(str, plan.call_concurrency))} <= {plan.call_count} calls"
        f" / {plan.call_seconds:g}s each"
    )
    if args.era == "2026":
        first = ""
        calls_plan += (
            f"; discover, mrtr, listen c={plan.modern_concurrency} <= {plan.modern_count}"
            f" / {plan.modern_seconds:g}s each"
        )
    else:
        first = f"churn c={plan.churn_concurrency} <= {plan.churn_count} sessions / {plan.churn_seconds:g}s; "
    print(f"plan: {first}{calls_plan}; request timeout {plan.request_timeout:g}s", flush=True)

    results: list[ScenarioResult] = []
    warmups: list[ScenarioResult] = []
    stops: list[dict[str, Any]] = []
    started = time.monotonic()
    for run in range(1, runs + 1):
        for spec in specs:  # interleaved: ours, baseline(s), ours, baseline(s), ...
            with running(spec, server_cpu, stop_timeout=15.0) as server:
                assert server.target is not None
                affinity = sorted(os.sched_getaffinity(server.pid))
                ctx = Context(
                    server.target,
                    server.pid,
                    spec.name,
                    run,
                    plan.request_timeout,
                    plan.settle_seconds,
                    spec.stats_path,
                )
                if args.era == "2026":
                    run_results, warmup = trio.run(run_modern_scenarios, ctx, plan, spec.modern)
                else:
                    run_results, warmup = trio.run(run_scenarios, ctx, plan, spec.churn)
            stop = {
                "server": spec.name,
                "run": run,
                "stop_seconds": server.stop_seconds,
                "killed": server.killed,
                "exit_code": server.exit_code,
                "affinity": affinity,
            }
            stops.append(stop)
            results += run_results
            warmups.append(warmup)
            line = ", ".join(
                f"{r.scenario} {r.rate:.1f}/s" + (f" ({r.errors} errors)" if r.errors else "")
                for r in run_results
            )
            stopped = (
                "killed after SIGINT timeout" if server.killed else f"stopped in {server.stop_seconds:.1f}s"
            )
            print(f"run {run} {spec.name:<10} cpus={affinity} {line}; {stopped}", flush=True)

    servers = [s.name for s in specs]
    summary = summarize(results, servers)
    if args.era == "2026":
        units = {
            "calls": "tools/call per s",
            "discover": "server/discover per s",
            "mrtr": "input-required round trips per s",
            "listen": "streams opened per s",
        }
    else:
        units = {"churn": "sessions/s", "calls": "tools/call per s"}
    print()
    print(render(summary, units, servers, args.era))
    print(f"\ntotal wall time {time.monotonic() - started:.1f}s")

    failed = [r for r in results + warmups if r.errors]
    leaks = [r for r in results if r.server_sessions_after]
    for r in leaks:
        print(
            f"note: {r.server} run {r.run} {r.scenario}: "
            f"server still reports {r.server_sessions_after} sessions"
        )
    for stop in stops:
        if stop["killed"]:
            print(f"note: {stop['server']} run {stop['run']} ignored SIGINT for 15s and was killed")
    if args.json:
        document = {
            "era": args.era,
            "mode": mode,
            "runs": runs,
            "quick": args.quick,
            "plan": asdict(plan),
            "pinning": {"server_cpu": server_cpu, "client_cpu": client_cpu},
            "versions": versions(),
            "summary": summary,
            "results": [asdict(r) for r in results],
            "warmups": [asdict(r) for r in warmups],
            "stops": stops,
        }
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
    if failed:
        total = sum(r.errors for r in failed)
        print(f"\nFAILED: {total} request(s) failed", file=sys.stderr)
        for r in failed:
            for message in r.error_messages:
                print(f"  {r.server} run {r.run} {r.scenario}: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
