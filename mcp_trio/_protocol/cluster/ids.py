"""Names in a cluster of workers: worker ids, session ids that name their owner, the ids and channel
prefixes of the notification bus, and the Redis keys of a worker.

What is read here comes from outside (a client's ``Mcp-Session-Id``, a setting) and is checked exactly:
what does not match is refused (``None`` or :class:`ValueError`), never half-used.
"""

from __future__ import annotations

import re
from collections.abc import Container

__all__ = [
    "CHANNEL_PREFIX",
    "INSTANCE_ID",
    "WORKER_ID",
    "check_channel_prefix",
    "check_instance_id",
    "check_worker_id",
    "heartbeat_key",
    "inbox_bytes_key",
    "inbox_key",
    "session_owner",
    "sessions_key",
]

WORKER_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
"""A worker id: short, and safe in a session id, a Redis key and a log line as it is."""
_SESSION_REST = re.compile(r"[\x21-\x7e]{1,223}")
"""What follows ``<worker>.`` in a session id: visible ASCII (the manager's limit is 256 in all)."""
INSTANCE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""The id a worker's bus puts in each message it publishes (to recognise its own echo)."""
CHANNEL_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def check_worker_id(value: object) -> str:
    """``value`` if it is a usable worker id (1 to 32 of ``A-Z a-z 0-9 _ -``), else ValueError."""
    if not isinstance(value, str) or not WORKER_ID.fullmatch(value):
        raise ValueError(f"a worker id is 1 to 32 characters of A-Z, a-z, 0-9, '_' and '-'; got {value!r}")
    return value


def check_instance_id(value: object) -> str:
    if not isinstance(value, str) or not INSTANCE_ID.fullmatch(value):
        raise ValueError(
            f"an instance id is 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', '-'; got {value!r}"
        )
    return value


def check_channel_prefix(value: object) -> str:
    if not isinstance(value, str) or not CHANNEL_PREFIX.fullmatch(value):
        raise ValueError(
            f"a channel prefix is 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', ':', '-'; got {value!r}"
        )
    return value


def session_owner(session_id: str, known: Container[str] | None = None) -> str | None:
    """The worker that owns ``session_id`` (``<worker>.<random>``), or None: the id is malformed, or
    names a worker not in ``known`` (when given).  None means "not a session of any worker we know":
    the request is answered as for an unknown session (404), and the id goes no further."""
    if not isinstance(session_id, str):
        return None
    owner, dot, rest = session_id.partition(".")
    if not dot or not WORKER_ID.fullmatch(owner) or not _SESSION_REST.fullmatch(rest):
        return None
    if known is not None and owner not in known:
        return None
    return owner


def heartbeat_key(prefix: str, worker: str) -> str:
    """The Redis key a live worker keeps (with a TTL): ``<prefix>:worker:<worker>``."""
    return f"{check_channel_prefix(prefix)}:worker:{check_worker_id(worker)}"


def inbox_key(prefix: str, worker: str) -> str:
    """The Redis stream other workers add a worker's session messages to: ``<prefix>:inbox:<worker>``."""
    return f"{check_channel_prefix(prefix)}:inbox:{check_worker_id(worker)}"


def inbox_bytes_key(prefix: str, worker: str) -> str:
    """The counter of the bytes waiting in a worker's inbox: ``<prefix>:inbox-bytes:<worker>``."""
    return f"{check_channel_prefix(prefix)}:inbox-bytes:{check_worker_id(worker)}"


def sessions_key(prefix: str, worker: str) -> str:
    """The hash of a worker's live sessions (``<prefix>:sessions:<worker>``, with the heartbeat's
    TTL): a session id's tag -> its principal's tag."""
    return f"{check_channel_prefix(prefix)}:sessions:{check_worker_id(worker)}"
