"""Protocol revisions served by mcp_trio and how they differ, as data.

Code asks a :class:`Revision` what to do (``revision.batches``) instead of comparing version strings,
and :func:`select_era` decides, per HTTP request, which era's rules apply.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_HEADER_REVISION",
    "LATEST",
    "LATEST_MODERN",
    "LEGACY",
    "MODERN",
    "PROTOCOL_VERSION_META_KEY",
    "REVISIONS",
    "Revision",
    "negotiate",
    "revision",
    "select_era",
    "supported_versions",
]

PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"


@dataclass(frozen=True, slots=True)
class Revision:
    """One protocol revision and the transport behaviour that depends on it."""

    name: str
    modern: bool = False
    """Modern era (2026-07-28 on): no sessions; every request carries its version and capabilities in
    ``_meta``; server-to-client requests become input-required results; ``subscriptions/listen``."""
    batches: bool = False
    """POST bodies may be JSON-RPC batch arrays (2025-03-26 only)."""
    priming_event: bool = False
    """SSE streams start with an event that carries only an id, and ``retry`` is sent (2025-11-25)."""
    elicitation_modes: bool = False
    """``elicitation/create`` carries ``mode`` (form or URL) (2025-11-25 on)."""
    result_metadata: bool = False
    """Results carry ``resultType``, list/read results ``ttlMs`` and ``cacheScope``, and every result
    ``serverInfo`` in ``_meta`` (2026-07-28 on)."""
    logs_need_opt_in: bool = False
    """``notifications/message`` only for requests that name a log level in ``_meta`` (2026-07-28 on);
    before, logging was on until ``logging/setLevel``."""
    resource_not_found_code: int = -32002
    """The error code of ``resources/read`` for an unknown URI (-32602 from 2026-07-28 on)."""


REVISIONS: dict[str, Revision] = {
    r.name: r
    for r in (
        Revision("2025-03-26", batches=True),
        Revision("2025-06-18"),
        Revision("2025-11-25", priming_event=True, elicitation_modes=True),
        Revision(
            "2026-07-28",
            modern=True,
            elicitation_modes=True,
            result_metadata=True,
            logs_need_opt_in=True,
            resource_not_found_code=-32602,
        ),
    )
}

LEGACY = tuple(r for r in REVISIONS.values() if not r.modern)
MODERN = tuple(r for r in REVISIONS.values() if r.modern)
LATEST = LEGACY[-1]
"""The newest revision an ``initialize`` handshake can negotiate."""
LATEST_MODERN = MODERN[-1]

DEFAULT_HEADER_REVISION = REVISIONS["2025-03-26"]
"""What a request without ``MCP-Protocol-Version`` speaks (the spec's backwards-compatible default)."""


def revision(name: str) -> Revision | None:
    return REVISIONS.get(name)


def supported_versions() -> list[str]:
    """Every revision served, newest first (the ``supported`` list of error -32022)."""
    return [r.name for r in reversed(REVISIONS.values())]


def negotiate(requested: str) -> Revision:
    """The revision a server answers ``initialize`` with: the client's if it is a legacy revision we
    serve, else the latest legacy one."""
    found = REVISIONS.get(requested)
    return found if found is not None and not found.modern else LATEST


def select_era(*, header_version: str | None, meta_version: object) -> bool:
    """Whether one HTTP request is served by the modern (stateless) rules.

    A request whose ``_meta`` names a protocol version, or whose ``MCP-Protocol-Version`` header names
    a modern revision, is modern (an ``initialize`` among them gets the modern answer to a removed
    method: 404); any other ``initialize`` opens a legacy session; the rest is legacy too.
    """
    if meta_version is not None:
        return True
    found = REVISIONS.get(header_version) if header_version is not None else None
    return found is not None and found.modern
