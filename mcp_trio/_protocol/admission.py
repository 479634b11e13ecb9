"""Admission to the MCP endpoint, decided on a request's headers alone (sans-IO).

What the ASGI app asks before it reads a body or touches a session: is the path the endpoint's, is the
request a CORS preflight and what does it answer, which CORS headers go on every response, does
DNS-rebinding protection apply and do ``Host`` and ``Origin`` pass it, are the transport headers
unambiguous; and the refusals the endpoint answers with (each a :class:`RemoteProtocolError` carrying
its HTTP status).  The header rules themselves (:class:`~mcp_trio._protocol.http.OriginPolicy`,
:class:`~mcp_trio._protocol.http.CORSPolicy`, ``check_*``) are in :mod:`._protocol.http`; this module
puts them together as the app's configuration says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from ..errors import RemoteProtocolError
from . import http, versions
from .modern import decode_header_value

__all__ = [
    "AMBIGUOUS_FRAMING",
    "SHUTTING_DOWN",
    "SHUTTING_DOWN_CODE",
    "Admission",
    "body_timeout",
    "check_stats_method",
    "handing_over",
    "header_name",
    "lives_elsewhere",
    "no_more_connections",
    "over_quota",
    "refuse_modern",
    "shutdown_answer",
    "shutting_down",
    "unconfirmed",
]

SHUTTING_DOWN_CODE = mt.CONNECTION_CLOSED
"""The JSON-RPC error code of the server's shutdown (-32000, in the implementation-defined server-error
range): what a request refused while the server stops, and a request in flight that outlived the
shutdown grace, are answered with.  The python-sdk answers the requests its own shutdown cancels with
this code too (its ``CONNECTION_CLOSED``), so its clients, like mcp_trio's, take it for "the
connection is going away"."""
SHUTTING_DOWN = "Server shutting down"
"""The message of that error."""

_UNPROTECTED = http.OriginPolicy.off()


@dataclass(frozen=True, slots=True)
class Admission:
    """The admission rules of one app: its endpoint's path, CORS (None: off, no CORS headers and
    ``OPTIONS`` is 405) and DNS-rebinding protection (``protected``, applied as
    :func:`~mcp_trio._protocol.http.protection_applies` says)."""

    path: str | None
    cors: http.CORSPolicy | None
    protected: http.OriginPolicy
    allow_lists: bool
    dns_rebinding_protection: bool | None

    @classmethod
    def of(
        cls,
        *,
        path: str | None,
        allowed_hosts: Iterable[str] | None,
        allowed_origins: Iterable[str] | None,
        cors_origins: Iterable[str] | None,
        dns_rebinding_protection: bool | None,
    ) -> Admission:
        """The rules of a configuration (``ServerConfig``'s fields of the same names); ValueError for
        an entry that is not a host or an origin."""
        cors = http.CORSPolicy.of(cors_origins) if cors_origins else None
        hosts, origins = tuple(allowed_hosts or ()), tuple(allowed_origins or ())
        return cls(
            path=path,
            cors=cors,
            protected=http.OriginPolicy.protecting(hosts, origins, cors),
            allow_lists=bool(hosts or origins),
            dns_rebinding_protection=dns_rebinding_protection,
        )

    def check_path(self, path: str) -> None:
        """404 off the endpoint."""
        if self.path is not None and path.rstrip("/") != self.path.rstrip("/"):
            raise RemoteProtocolError("Not Found", http_status=404)

    def cors_headers(self, origin: str | None) -> list[tuple[bytes, bytes]]:
        """The CORS headers every response to a request from ``origin`` carries (none with CORS off)."""
        return self.cors.response_headers(origin) if self.cors is not None else []

    def origin_policy(self, local_address: str | None) -> http.OriginPolicy:
        """What ``Host`` and ``Origin`` must pass for a request that arrived on ``local_address`` (the
        server's own address on that connection, ASGI ``scope["server"]``)."""
        enabled = http.protection_applies(
            self.dns_rebinding_protection, allow_lists=self.allow_lists, local_address=local_address
        )
        return self.protected if enabled else _UNPROTECTED

    def preflight(
        self, facts: http.RequestFacts, local_address: str | None
    ) -> list[tuple[bytes, bytes]] | None:
        """The headers of the 204 answering a CORS preflight; None for a request that is not one (or
        with CORS off).  Refusals as :func:`~mcp_trio._protocol.http.cors_preflight` and :meth:`check`."""
        if self.cors is None or not http.is_preflight(facts):
            return None
        http.check_duplicates(facts)
        headers = http.cors_preflight(facts, self.cors)  # its origin passes check_origin
        http.check_origin(facts, self.origin_policy(local_address))
        return headers

    def check(self, facts: http.RequestFacts, local_address: str | None) -> None:
        """What every request to the endpoint passes before authentication (an HTTP one or a WebSocket
        upgrade): no conflicting copies of a transport header, a known ``Host`` and ``Origin``."""
        http.check_duplicates(facts)
        http.check_origin(facts, self.origin_policy(local_address))


AMBIGUOUS_FRAMING = RemoteProtocolError(http.AMBIGUOUS_FRAMING, headers=(("connection", "close"),))
"""The answer to a request with both ``Content-Length`` and ``Transfer-Encoding`` (``http.check_framing``):
400, then the connection closes (the ``Connection: close`` of the answer makes both servers close it)."""


def check_stats_method(facts: http.RequestFacts) -> None:
    """The statistics endpoint answers ``GET`` only: 405 for anything else."""
    if facts.method != "GET":
        raise RemoteProtocolError(
            f"Method Not Allowed: {facts.method}", http_status=405, headers=(("allow", "GET"),)
        )


def refuse_modern(facts: http.RequestFacts) -> None:
    """GET and DELETE do not exist in the modern era: 405 (the legacy era keeps them)."""
    found = versions.revision(facts.protocol_version) if facts.protocol_version else None
    if found is not None and found.modern:
        raise RemoteProtocolError(
            f"Method Not Allowed: {facts.method} in {found.name}",
            http_status=405,
            headers=(("allow", "POST"),),
        )


def header_name(facts: http.RequestFacts) -> str | None:
    """The decoded ``Mcp-Name`` header, or None (absent or malformed: the body check refuses that)."""
    if facts.mcp_name is None:
        return None
    try:
        return decode_header_value(facts.mcp_name)
    except ValueError:
        return None


def body_timeout(seconds: float) -> RemoteProtocolError:
    """408 for a POST body that did not arrive in time; the connection closes after it."""
    return RemoteProtocolError(
        f"Request Timeout: the body did not arrive within {seconds:g} s",
        http_status=408,
        headers=(("connection", "close"),),
    )


def over_quota(what: str, request_id: mt.RequestId | None) -> RemoteProtocolError:
    """429 with ``Retry-After`` for a new session (or WebSocket connection) over one of its quotas
    (``what``: the principal or the client address)."""
    return RemoteProtocolError(
        f"Too Many Requests: this {what} holds too many sessions; end one, or try again later",
        http_status=429,
        code=mt.INTERNAL_ERROR,
        request_id=request_id,
        headers=(("retry-after", "5"),),
    )


def no_more_connections() -> RemoteProtocolError:
    """503 for a WebSocket upgrade past ``max_sessions`` connections (or while the app closes)."""
    return RemoteProtocolError(
        "Service Unavailable: no more connections, try again later",
        http_status=503,
        headers=(("retry-after", "1"),),
    )


def handing_over() -> RemoteProtocolError:
    """503 with ``Retry-After`` from a worker that is handing its sessions over (draining, or moving
    one session to another worker): the request will find the session's next owner."""
    return RemoteProtocolError(
        "Service Unavailable: this worker is handing its sessions over; retry",
        http_status=503,
        code=mt.INTERNAL_ERROR,
        headers=(("retry-after", "1"),),
    )


def shutting_down(request_id: mt.RequestId | None = None) -> RemoteProtocolError:
    """503 with ``Retry-After`` for a request that arrives while the server stops (a new session, a new
    request of a session, a 2026 request): -32000 ``Server shutting down``, for ``request_id``.  The
    client may retry, elsewhere or later."""
    return RemoteProtocolError(
        SHUTTING_DOWN,
        http_status=503,
        code=SHUTTING_DOWN_CODE,
        request_id=request_id,
        headers=(("retry-after", "1"),),
    )


def shutdown_answer(request_id: mt.RequestId) -> dict[str, Any]:
    """The answer to a request still in flight when the shutdown grace ran out (its handler cancelled):
    -32000 ``Server shutting down``, sent on the request's own stream before that stream ends."""
    error = {"code": SHUTTING_DOWN_CODE, "message": SHUTTING_DOWN}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def unconfirmed() -> RemoteProtocolError:
    """503 with ``Retry-After`` for a request of a session this worker cannot confirm it still owns
    (its lease in Redis could not be checked after its heartbeat lapsed, or Redis cannot be asked
    where the session is): not served from a copy that may be stale."""
    return RemoteProtocolError(
        "Service Unavailable: this worker cannot confirm it still has this session; retry",
        http_status=503,
        code=mt.INTERNAL_ERROR,
        headers=(("retry-after", "1"),),
    )


def lives_elsewhere(worker: str) -> RemoteProtocolError:
    """503 with ``Retry-After`` for a request of a session that ``worker`` owns (or may own)."""
    return RemoteProtocolError(
        f"Service Unavailable: this session lives on worker {worker}; send its requests there",
        http_status=503,
        code=mt.INTERNAL_ERROR,
        headers=(("retry-after", "1"),),
    )
