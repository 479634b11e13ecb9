"""Cut hypercorn 0.18's per-request cost on its trio worker (HTTP/1.1): three guarded monkeypatches.

Measured on a bare ASGI app (no MCP) at 16 connections: server CPU per request 375 -> 235 us, requests/s
x1.6 (median of 5 interleaved runs); under ``mcp-trio demo`` tools/call 551 -> 401 us per call (SSE).
Where the cost went, counted per request (trio instrument, strace, callgrind; docs/performance.md):
upstream does ~18 task steps and spawns 2 tasks per request where a plain Trio + h11 loop does 2 and 0.

Applied by :func:`mcp_trio.serve` and the ``mcp-trio`` command after the CLOSE_WAIT fix
(``hypercorn_patch.py``); ``serve(..., hypercorn_fast_path=False)`` / ``--no-hypercorn-fast-path``
leave hypercorn's request path as shipped.  Each change could go upstream on its own:

1. **Idle timer without a task per request** (``_IdleTimer`` replaces ``TrioSingleTask`` as
   ``TCPServer.idle_task``).  Upstream cancels the idle task at every request (``stop``: a Lock and a
   cancel) and spawns a new one after every response (``restart``: a Lock, ``nursery.start``, a
   CancelScope and ``move_on_after``), about 7 scheduler steps and a task spawn per request.  Here each
   connection has one watchdog task sleeping in a CancelScope whose *deadline* moves: ``now +
   keep_alive_timeout`` when the connection turns idle, ``inf`` when a request starts.  Same behaviour:
   an idle connection is closed after ``keep_alive_timeout``, or at once on graceful shutdown; a busy
   one never by the timer.  Once the CLOSE_WAIT fix marks the read loop as ended
   (``_mcp_trio_read_ended``), ``stop()`` ends the watchdog, so closed connections are still released
   at once.

2. **One socket write per ASGI send** (``H11Protocol._send_h11_event`` / ``stream_send`` and
   ``HTTPStream.app_send``).  Upstream writes the head, the body and h11's (empty) EndOfMessage in
   three ``send_all`` calls, each behind ``send_lock``.  Here the bytes one ASGI ``send()`` produces
   are written once, before that call returns, and the head of a response that has a
   ``content-length`` waits for the app's first non-empty ``http.response.body`` or the end of the
   body (ASGI allows a server to do so).  A response without ``content-length`` (SSE, chunked
   streaming) still gets its head written at ``http.response.start``, and every body message of a
   stream is on the wire before the app's ``send()`` returns.  Empty writes are skipped.

3. **No scheduling round trip on the app's queue when none is needed** (``TaskGroup.spawn_app``): the
   read task hands messages over with ``send_nowait`` and the app's ``receive()`` takes a queued one
   with ``receive_nowait``; both fall back to the blocking call (queue full / empty).

Guarded like the CLOSE_WAIT fix: applied only on hypercorn 0.18.x when every replaced function is, to
the character, the 0.18.0 one (sha256 of its dedented source); idempotent; process-wide.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import textwrap
import threading
from math import inf
from typing import Any

import h11
import trio
from hypercorn.events import RawData
from hypercorn.protocol.events import Body, EndBody, Response, StreamClosed
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.trio import tcp_server as _tcp_server
from hypercorn.trio.task_group import TaskGroup, _handle
from hypercorn.trio.worker_context import TrioSingleTask

__all__ = ["apply_hypercorn_fast_path", "hypercorn_fast_path_applied"]

# sha256[:16] of the dedented 0.18.0 sources of what we replace or wrap.
_EXPECTED = {
    "TrioSingleTask": "aa59316c028b876a",
    "H11Protocol._send_h11_event": "fdb5e069793a1d99",
    "H11Protocol.stream_send": "c7ef437818f28b28",
    "HTTPStream.app_send": "6371d58b7f58ae8d",
    "TaskGroup.spawn_app": "487c35772c8bd89c",
}
_lock = threading.Lock()
_applied = False


# --------------------------------------------------------------------------------------------------
# 1. Idle timer: one watchdog per connection, re-armed by moving a deadline
# --------------------------------------------------------------------------------------------------


class _IdleTimer:
    """``TCPServer.idle_task`` with TrioSingleTask's API (restart/stop), without a task per request."""

    __slots__ = ("_closed", "_deadline", "_life", "_nursery", "_server", "_timer")

    def __init__(self) -> None:
        self._deadline = inf
        self._timer: trio.CancelScope | None = None  # the scope the watchdog sleeps in
        self._life: trio.CancelScope | None = None  # the watchdog's whole life
        self._server: Any = None
        self._nursery: trio.Nursery | None = None
        self._closed = False

    async def restart(self, task_group: Any, action: Any) -> None:
        # Called with (the connection's TaskGroup, TCPServer._idle_timeout): at connection start and
        # whenever the connection turns idle.  No checkpoint, like a plain attribute update.
        if self._server is None:
            self._server = action.__self__
            self._nursery = task_group._nursery
        if self._closed:
            return
        self._deadline = trio.current_time() + self._server.config.keep_alive_timeout
        if self._life is None:
            self._life = trio.CancelScope()
            assert self._nursery is not None
            self._nursery.start_soon(self._watch)
        elif self._timer is not None:
            self._timer.deadline = self._deadline

    async def stop(self) -> None:
        if self._server is not None and getattr(self._server, "_mcp_trio_read_ended", False):
            # mcp_trio's CLOSE_WAIT fix: the read loop is over, nothing left to time out.
            self._closed = True
            if self._life is not None:
                self._life.cancel()
            return
        self._deadline = inf  # a request is being served: never close it for idleness
        if self._timer is not None:
            self._timer.deadline = inf

    async def _watch(self) -> None:
        server = self._server
        terminated = server.context.terminated
        assert self._life is not None
        with self._life:
            while True:
                with trio.CancelScope(deadline=self._deadline) as self._timer:
                    await terminated.wait()
                self._timer = None
                if self._deadline == inf:  # busy (the deadline may have expired just as it was disarmed)
                    if terminated.is_set():
                        break  # H11Protocol closes the connection once the response is done
                    continue
                if terminated.is_set() or trio.current_time() >= self._deadline:
                    # What TCPServer._idle_timeout does once its move_on_after expires.
                    with trio.CancelScope(shield=True):
                        await server._initiate_server_close()
                    break
                # re-armed later than the deadline we slept on: sleep again
        self._life = None


# --------------------------------------------------------------------------------------------------
# 2. One socket write per response
# --------------------------------------------------------------------------------------------------

_upstream_stream_send = H11Protocol.stream_send
_upstream_app_send = HTTPStream.app_send

# Per-connection state lives on H11Protocol, with class-level defaults set by apply_hypercorn_fast_path():
# _fp_pending (bytes not written yet), _fp_batch (> 0 while an ASGI send() call runs), _fp_hold_head
# (the head of a content-length response waits for its body).


async def _send_h11_event(self: Any, event: Any) -> None:
    try:
        data = self.connection.send(event)
    except h11.LocalProtocolError:
        if self.connection.their_state != h11.ERROR:
            raise
    else:
        if self._fp_pending:
            data = self._fp_pending + data
        if self._fp_batch or self._fp_hold_head:
            self._fp_pending = data
        else:
            self._fp_pending = b""
            if data:  # h11's EndOfMessage of a content-length body is b"": nothing to write
                await self.send(RawData(data=data))


async def _flush(self: Any) -> None:
    data = self._fp_pending
    if data:
        self._fp_pending = b""
        await self.send(RawData(data=data))


async def _stream_send(self: Any, event: Any) -> None:
    if isinstance(event, Response):
        if event.status_code >= 200:
            self._fp_hold_head = any(name.lower() == b"content-length" for name, _ in event.headers)
    elif isinstance(event, (Body, EndBody)):
        self._fp_hold_head = False
    elif isinstance(event, StreamClosed):
        self._fp_hold_head = False
        await _flush(self)  # the response is on the wire before the connection is recycled or closed
    await _upstream_stream_send(self, event)


async def _app_send(self: Any, message: Any) -> None:
    found = getattr(self.send, "__self__", None)
    if not isinstance(found, H11Protocol):  # h2/h3: unchanged
        await _upstream_app_send(self, message)
        return
    protocol: Any = found
    protocol._fp_batch += 1
    try:
        await _upstream_app_send(self, message)
    finally:
        protocol._fp_batch -= 1
    if not protocol._fp_batch and not protocol._fp_hold_head:
        await _flush(protocol)  # what this send() produced is written before it returns


# --------------------------------------------------------------------------------------------------
# 3. The app's queue without needless scheduling round trips
# --------------------------------------------------------------------------------------------------


async def _spawn_app(self: Any, app: Any, config: Any, scope: Any, send: Any) -> Any:
    send_channel, receive_channel = trio.open_memory_channel[Any](config.max_app_queue_size)
    receive_nowait, receive_wait = receive_channel.receive_nowait, receive_channel.receive
    send_nowait, send_wait = send_channel.send_nowait, send_channel.send

    async def receive() -> Any:
        try:
            return receive_nowait()
        except trio.WouldBlock:
            return await receive_wait()

    async def put(message: Any) -> None:
        try:
            send_nowait(message)
        except trio.WouldBlock:
            await send_wait(message)

    self._nursery.start_soon(
        _handle, app, config, scope, receive, send, trio.to_thread.run_sync, trio.from_thread.run
    )
    return put


# --------------------------------------------------------------------------------------------------


def _source_hash(obj: Any) -> str | None:
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _targets() -> dict[str, Any]:
    return {
        "TrioSingleTask": vars(_tcp_server)["TrioSingleTask"],
        "H11Protocol._send_h11_event": H11Protocol._send_h11_event,
        "H11Protocol.stream_send": H11Protocol.stream_send,
        "HTTPStream.app_send": HTTPStream.app_send,
        "TaskGroup.spawn_app": TaskGroup.spawn_app,
    }


def apply_hypercorn_fast_path() -> bool:
    """Apply the three changes if hypercorn is the 0.18.0 code they were written against; True if active."""
    global _applied
    with _lock:
        if _applied:
            return True
        try:
            version = importlib.metadata.version("hypercorn")
        except importlib.metadata.PackageNotFoundError:
            return False
        if not version.startswith("0.18.") or vars(_tcp_server)["TrioSingleTask"] is not TrioSingleTask:
            return False
        if any(_source_hash(obj) != _EXPECTED[name] for name, obj in _targets().items()):
            return False
        H11Protocol._fp_pending = b""  # type: ignore[attr-defined]
        H11Protocol._fp_batch = 0  # type: ignore[attr-defined]
        H11Protocol._fp_hold_head = False  # type: ignore[attr-defined]
        vars(_tcp_server)["TrioSingleTask"] = _IdleTimer  # only TCPServer.idle_task uses it
        H11Protocol._send_h11_event = _send_h11_event  # type: ignore[method-assign]
        H11Protocol.stream_send = _stream_send  # type: ignore[method-assign]
        HTTPStream.app_send = _app_send  # type: ignore[method-assign]
        TaskGroup.spawn_app = _spawn_app  # type: ignore[method-assign]
        _applied = True
        return True


def hypercorn_fast_path_applied() -> bool:
    return _applied
