"""Protocol revisions served by mcp_trio and how they differ, as data.

Code asks a :class:`Revision` what to do (``revision.batches``) instead of comparing version strings.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_HEADER_REVISION",
    "LATEST",
    "REVISIONS",
    "Revision",
    "negotiate",
    "revision",
]


@dataclass(frozen=True, slots=True)
class Revision:
    """One protocol revision and the transport behaviour that depends on it."""

    name: str
    batches: bool
    """POST bodies may be JSON-RPC batch arrays (2025-03-26 only)."""
    priming_event: bool
    """SSE streams start with an event that carries only an id, and ``retry`` is sent (2025-11-25)."""
    requires_protocol_header: bool
    """Clients send ``MCP-Protocol-Version`` on every request after initialize (2025-06-18 on)."""
    elicitation_modes: bool
    """``elicitation/create`` carries ``mode`` (form or URL) (2025-11-25)."""


REVISIONS: dict[str, Revision] = {
    r.name: r
    for r in (
        Revision(
            "2025-03-26",
            batches=True,
            priming_event=False,
            requires_protocol_header=False,
            elicitation_modes=False,
        ),
        Revision(
            "2025-06-18",
            batches=False,
            priming_event=False,
            requires_protocol_header=True,
            elicitation_modes=False,
        ),
        Revision(
            "2025-11-25",
            batches=False,
            priming_event=True,
            requires_protocol_header=True,
            elicitation_modes=True,
        ),
    )
}

LATEST = REVISIONS["2025-11-25"]

DEFAULT_HEADER_REVISION = REVISIONS["2025-03-26"]
"""What a request without ``MCP-Protocol-Version`` speaks (the spec's backwards-compatible default)."""


def revision(name: str) -> Revision | None:
    return REVISIONS.get(name)


def negotiate(requested: str) -> Revision:
    """The revision a server answers ``initialize`` with: the client's if supported, else the latest."""
    return REVISIONS.get(requested, LATEST)
