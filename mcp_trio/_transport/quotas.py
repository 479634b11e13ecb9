"""Quotas of live sessions per principal and per client address, so that no one client can hold every
session of ``max_sessions`` (2025-era sessions and WebSocket connections count alike)."""

from __future__ import annotations

import functools
import ipaddress

from ..errors import SessionError

__all__ = ["QuotaExceeded", "Quotas", "client_address"]


class QuotaExceeded(SessionError):
    """A new session would put its principal or its client address over quota."""

    def __init__(self, what: str) -> None:
        super().__init__(f"too many sessions for this {what}")
        self.what = what


def client_address(client: object) -> str | None:
    """The quota key of an ASGI scope's ``client`` (``(host, port)``): the IPv4 address, or the /64 an
    IPv6 address is in (one host usually has a whole /64 to pick from); None when there is no usable
    address (a Unix socket, a server that does not say)."""
    if not isinstance(client, (tuple, list)) or not client:
        return None
    host = client[0]
    return _address_key(host) if type(host) is str else _address_key.__wrapped__(str(host))


@functools.lru_cache(maxsize=1024)
def _address_key(host: str) -> str | None:
    """The quota key of a host address (cached: a client opens its sessions from one address; the
    cache is bounded whatever addresses clients come from)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped
        if mapped is not None:
            return str(mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class Quotas:
    """Counts live sessions by owner key (see :class:`~mcp_trio._app.principal.PrincipalKeys`; ``""``,
    no principal, has no principal quota) and by client address (see :func:`client_address`).

    ``per_principal`` / ``per_address``: the most live sessions each may hold; None or 0 turns that
    quota off.  Counts are kept only for keys that hold sessions, so memory follows live sessions."""

    __slots__ = ("_addresses", "_owners", "per_address", "per_principal")

    def __init__(self, per_principal: int | None, per_address: int | None) -> None:
        self.per_principal = per_principal or None
        self.per_address = per_address or None
        self._owners: dict[str, int] = {}
        self._addresses: dict[str, int] = {}

    def take(self, owner: str, address: str | None, *, force: bool = False) -> tuple[str | None, str | None]:
        """Count one more session of ``owner`` from ``address``, or raise :class:`QuotaExceeded`
        (never with ``force``: a session adopted from another worker exists already, it is counted).
        Returns what to give back (:meth:`give_back`) when the session ends."""
        owner_key = owner if owner and self.per_principal is not None else None
        address_key = address if self.per_address is not None else None
        if force:
            pass
        elif owner_key is not None and self._owners.get(owner_key, 0) >= (self.per_principal or 0):
            raise QuotaExceeded("principal")
        elif address_key is not None and self._addresses.get(address_key, 0) >= (self.per_address or 0):
            raise QuotaExceeded("client address")
        if owner_key is not None:
            self._owners[owner_key] = self._owners.get(owner_key, 0) + 1
        if address_key is not None:
            self._addresses[address_key] = self._addresses.get(address_key, 0) + 1
        return owner_key, address_key

    def give_back(self, taken: tuple[str | None, str | None]) -> None:
        owner_key, address_key = taken
        for counts, key in ((self._owners, owner_key), (self._addresses, address_key)):
            if key is not None:
                left = counts.get(key, 0) - 1
                if left > 0:
                    counts[key] = left
                else:
                    counts.pop(key, None)

    def statistics(self) -> dict[str, int]:
        """How many principals and client addresses hold sessions now."""
        return {"quota_principals": len(self._owners), "quota_addresses": len(self._addresses)}
