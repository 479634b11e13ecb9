"""Lingering close, for both HTTP/1.1 servers: after an answer sent before its request was all read.

An answer can go out before its request body has all arrived (413 for a body too large, 401 from the
headers, 408, a parse error).  The connection cannot serve another request, so it closes; but closing a
socket with unread data makes the kernel reset the connection (RST), and a reset can destroy the answer
before the client, or a proxy still sending the body, has read it.  So the close lingers: our side ends
first (FIN), then what the client still sends is read and dropped, until it closes, for a bounded time
and size, and only then is the socket closed.  Only the connection's own task waits; a client that
keeps sending is cut at the bound.
"""

from __future__ import annotations

import trio

__all__ = ["LINGER_BYTES", "LINGER_TIME", "half_close", "linger_and_close"]

LINGER_TIME = 2.0
"""How long (seconds) what the client still sends is read and dropped before the socket is closed."""
LINGER_BYTES = 16 * 1024 * 1024
"""...and at most this many bytes, whichever comes first (then the connection is closed anyway)."""
_RECEIVE_SIZE = 65536
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError)
"""What ends the lingering early: the client reset, or the stream is closed or broken already."""


def half_close(stream: trio.SocketStream) -> None:
    """End our side of a plain TCP connection (FIN) at once, without a checkpoint: a keep-alive client
    must see the end of file before it can send its next request on this connection."""
    try:
        stream.socket.shutdown(trio.socket.SHUT_WR)
    except OSError:
        pass


async def linger_and_close(stream: trio.abc.Stream) -> None:
    """Our side has ended (:func:`half_close`, or ``send_eof``; a TLS stream has no half-close): read
    and drop what the client still sends, until it closes, for at most :data:`LINGER_TIME` seconds and
    :data:`LINGER_BYTES` bytes, then close ``stream``."""
    try:
        with trio.move_on_after(LINGER_TIME):
            dropped = 0
            while dropped < LINGER_BYTES:
                data = await stream.receive_some(_RECEIVE_SIZE)
                if not data:
                    break
                dropped += len(data)
    except _GONE:
        pass
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()
