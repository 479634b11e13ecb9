"""The stdio server transport: newline-delimited JSON-RPC on a byte stream pair (stdin and stdout).

One :class:`StdioConnection` serves the whole life of the process.  It owns one Trio nursery: the
single writer task (the only code that writes to stdout, so lines never interleave) and every handler
task run there.  The reader is the task that called :meth:`StdioConnection.run`; end of file on stdin
is the client's way to end the server: in-flight handlers get ``shutdown_grace`` to finish, the rest
are cancelled (and answer nothing), what is queued for stdout is flushed, and :func:`serve_stdio`
returns.
A broken stdout (the client stopped reading for good) ends the server too.

Both eras are served on the same connection, chosen per message as over HTTP, by the
transport-neutral :class:`~mcp_trio._transport.connection.MessageConnection` (a 2025 session opened
by ``initialize``; 2026-07-28 requests whose ``_meta`` names the protocol version, served by the HTTP
transport's own endpoint, ``subscriptions/listen`` included).  ``notifications/cancelled`` cancels a
request of either era.

Bad input never ends the loop: a line that is not JSON gets -32700, one that is not a JSON-RPC
message (or a request with an id already in flight) gets -32600, and a line longer than
``config.max_body_size`` (4 MiB by default) gets -32600 and is skipped without being buffered.

Not supported: JSON-RPC batches (a JSON array line gets -32600), which only the 2025-03-26 revision
allowed.  The default streams are ``trio.lowlevel.FdStream`` duplicates of fds 0 and 1, so the default
is POSIX-only (pass ``stdin``/``stdout`` streams elsewhere).
"""

from __future__ import annotations

import logging
import os

import trio

from .config import ServerConfig
from .connection import MessageConnection
from .core import ServerCore

__all__ = ["StdioConnection", "serve_stdio"]

logger = logging.getLogger(__name__)

READ_SIZE = 64 * 1024


class StdioConnection(MessageConnection):
    """The one connection of a stdio server: newline-delimited messages on a byte stream pair."""

    def __init__(
        self,
        server: ServerCore,
        stdin: trio.abc.ReceiveStream,
        stdout: trio.abc.SendStream,
        config: ServerConfig | None = None,
    ) -> None:
        super().__init__(server, config)
        self._stdin = stdin
        self._stdout = stdout

    async def _read_loop(self) -> None:
        buffer = bytearray()
        searched = 0  # bytes of the buffer known to hold no newline
        skipping = False  # inside a line that was too long: drop bytes up to its newline
        while True:
            try:
                chunk = await self._stdin.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                logger.info("stdio: stdin failed (%r); shutting down", exc)
                return
            if not chunk:
                if buffer and not skipping:
                    await self.receive_message(bytes(buffer))  # a last line without its newline
                return
            buffer += chunk
            while True:
                end = buffer.find(b"\n", searched)
                if end < 0:
                    searched = len(buffer)
                    if not skipping and len(buffer) > self.max_message:
                        skipping = True
                        await self.refuse_oversized()
                    if skipping:
                        buffer.clear()
                        searched = 0
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                searched = 0
                if skipping:
                    skipping = False
                elif len(line) > self.max_message:
                    await self.refuse_oversized()
                else:
                    await self.receive_message(line)

    async def _transmit(self, messages: list[bytes]) -> None:
        await self._stdout.send_all(b"".join(message + b"\n" for message in messages))


async def serve_stdio(
    server: ServerCore,
    *,
    stdin: trio.abc.ReceiveStream | None = None,
    stdout: trio.abc.SendStream | None = None,
    config: ServerConfig | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``server`` over stdio until stdin ends (the client's way to stop the server).

    ``stdin``/``stdout`` default to the process's own (duplicated file descriptors, POSIX only).
    ``config``: its ``max_body_size`` bounds one line, ``stream_buffer`` the messages queued for
    stdout, ``shutdown_grace`` the flush at the end, and ``request_state_secret``/``request_state_ttl``
    the 2026-era ``requestState``; the HTTP settings do not apply.

    The server's lifespan (``MCPServer(lifespan=...)``) is entered before the first line is read and
    left once the connection has ended (the code after its ``yield`` then gets ``shutdown_grace``
    seconds uncancelled); if entering it raises, or its tasks crash, serving stops and this raises
    that exception.
    """
    owned: list[trio.abc.AsyncResource] = []
    try:
        if stdin is None:
            stdin = trio.lowlevel.FdStream(os.dup(0))
            owned.append(stdin)
        if stdout is None:
            stdout = trio.lowlevel.FdStream(os.dup(1))
            owned.append(stdout)
        grace = (config or ServerConfig()).shutdown_grace
        async with server.open_lifespan(grace=grace):  # entered before the first line is read
            await StdioConnection(server, stdin, stdout, config).run(task_status=task_status)
    finally:
        for stream in owned:
            with trio.CancelScope(shield=True):
                await stream.aclose()
