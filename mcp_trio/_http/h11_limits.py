"""The embedded server's connection caps and shedding (:mod:`.h11_server`): :class:`ConnectionLimits`.

A connection is counted from its accept until its socket is closed, in total and per client address
(an IPv4 address; an IPv6 address whole, an IPv4-mapped one, ``::ffff:a.b.c.d``, as the IPv4 address
it maps).  A new connection from an address that already has ``max_per_address`` open is refused at
once; one beyond ``max_total`` is let in when an older connection can make room, else refused.  A
refusal is a ``503`` written without waiting (a client that has not read it yet may see a reset
instead) and the socket closed: nothing of the connection is kept.

*Sheddable* connections are those that serve nothing: idle between requests, or still receiving a
request head.  They are kept in the order they became so; when room is needed (the total cap, or an
``accept`` that fails because the process has run out of descriptors), the oldest is closed first (what
nginx does with its idle keep-alive connections when it runs out).  A connection whose request head is
complete is never shed: a request under way, its body or its response, is never cut.

The defaults follow the process's descriptor limit (the soft ``RLIMIT_NOFILE`` when the server starts):
:func:`default_caps`.
"""

from __future__ import annotations

import ipaddress
import os
import resource
from typing import Protocol

import trio

from .h11_reader import RAW_FD_IO

__all__ = ["ConnectionLimits", "Sheddable", "address_key", "default_caps", "refuse"]

_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 32\r\n"
    b"retry-after: 1\r\nconnection: close\r\n\r\nToo many connections; try again.\n"
)


class Sheddable(Protocol):
    def shed(self) -> None:
        """Close the connection as soon as its task runs (it serves nothing now)."""


def default_caps(descriptors: int | None = None) -> tuple[int, int]:
    """``(max_total, max_per_address)`` for a process allowed ``descriptors`` open files (None: the
    soft ``RLIMIT_NOFILE`` now; unlimited counts as 2**20).

    Headroom of an eighth of the descriptors, at least 64, stays free for what is not a client
    connection (the listening sockets, Trio's own, Redis connections, log and session files, the
    operations listener); one address may hold a quarter of the rest, so that it takes four addresses
    to reach the total cap, and one address alone always leaves three quarters to everyone else.
    With 1024 descriptors: 896 connections, 224 per address."""
    if descriptors is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        descriptors = 2**20 if soft == resource.RLIM_INFINITY else soft
    total = max(16, descriptors - max(64, descriptors // 8))
    return total, max(4, total // 4)


def address_key(host: str) -> str:
    """The address a client is counted under: ``host`` normalized (an IPv4-mapped IPv6 address as the
    IPv4 address; an IPv6 address in its compressed form, its scope kept)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def refuse(stream: trio.SocketStream) -> None:
    """Write the ``503`` if the socket takes it now (never waits), and close the socket."""
    sock = stream.socket
    if RAW_FD_IO:
        try:
            os.write(sock.fileno(), _REFUSAL)
        except OSError:  # not writable now, or reset already: the close says it
            pass
    sock.close()


class ConnectionLimits:
    """The counts of one server's connections, and its sheddable connections oldest first."""

    __slots__ = (
        "_per_address",
        "_released",
        "_shedding",
        "_waiting",
        "max_per_address",
        "max_total",
        "total",
    )

    def __init__(self, max_total: int, max_per_address: int) -> None:
        self.max_total = max_total
        """At most this many connections at once (beyond, the oldest sheddable one makes room)."""
        self.max_per_address = max_per_address
        """At most this many connections from one address (beyond, refused)."""
        self.total = 0
        self._per_address: dict[str, int] = {}
        self._waiting: dict[Sheddable, None] = {}
        """The sheddable connections, in the order they became so (a dict keeps it)."""
        self._shedding = 0
        """Connections shed whose socket is not closed yet (counted in :attr:`total` until it is)."""
        self._released: trio.Event | None = None

    def admit(self, key: str) -> bool:
        """Count a new connection from address ``key``; False (counted nowhere) if it must be refused."""
        count = self._per_address.get(key, 0)
        if count >= self.max_per_address:
            return False
        if self.total - self._shedding >= self.max_total and not self.shed_oldest():
            return False
        self._per_address[key] = count + 1
        self.total += 1
        return True

    def release(self, key: str, *, shed: bool = False) -> None:
        """The socket of a connection counted under ``key`` is closed; ``shed``: it was shed."""
        count = self._per_address[key] - 1
        if count:
            self._per_address[key] = count
        else:
            del self._per_address[key]
        self.total -= 1
        if shed:
            self._shedding -= 1
        released, self._released = self._released, None
        if released is not None:
            released.set()

    def idle(self, connection: Sheddable) -> None:
        """``connection`` serves nothing now (idle, or waiting for a request head): it may be shed."""
        self._waiting[connection] = None

    def busy(self, connection: Sheddable) -> None:
        """``connection`` has a request to serve: it is not shed."""
        self._waiting.pop(connection, None)

    def shed_oldest(self) -> bool:
        """Shed the oldest sheddable connection; False if there is none."""
        for connection in self._waiting:
            del self._waiting[connection]
            self._shedding += 1
            connection.shed()
            return True
        return False

    async def wait_released(self) -> None:
        """Wait until a counted connection's socket is closed."""
        if self._released is None:
            self._released = trio.Event()
        await self._released.wait()

    def count(self, key: str) -> int:
        """Connections open from address ``key``."""
        return self._per_address.get(key, 0)

    @property
    def sheddable(self) -> int:
        return len(self._waiting)
