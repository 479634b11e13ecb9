"""What a 2025 session is, as workers keep it in Redis so that another worker can adopt it: its record,
its lease, and their key names.

The record holds what ``initialize`` agreed and what the session's requests changed since (its log
level, its resource subscriptions), and the owner key of its principal (a keyed hash, never the
principal itself); the session id is never stored, a keyed hash of it names the keys.  The record is
signed by the cluster's key ring for its key (:func:`seal_session_record`): a Redis writer without the
secret cannot make one, alter one (say, its owner) or copy one to another session.

The lease names the worker instance whose nursery owns the session and the session's epoch (see
:mod:`.leases`); the record carries the same epoch, inside its signature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import safejson
from ..versions import LEGACY, revision
from .ids import check_channel_prefix
from .keys import ClusterKeys
from .messages import open_record, seal_record

__all__ = [
    "RECORD_LIMIT",
    "Adoption",
    "Peek",
    "SessionRecord",
    "decode_session_record",
    "encode_session_record",
    "lease_key",
    "open_session_record",
    "record_key",
    "seal_session_record",
]

RECORD_LIMIT = 256 * 1024
"""Largest session record accepted from Redis, in bytes (client info and capabilities are bounded by
the request body limit; subscriptions by the server's ``max_subscriptions``)."""
RECORD_VERSION = 1
_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_LABEL = b"session record"
_FIELDS = frozenset(
    ("v", "revision", "initialized", "owner", "client_info", "client_capabilities", "log_level")
) | {"subscriptions"}
_LEGACY_NAMES = frozenset(r.name for r in LEGACY)


Adoption = Literal["taken", "owned", "draining", "unknown", "forged", "unavailable"]


@dataclass(frozen=True, slots=True)
class Peek:
    """What a worker link found of a session in Redis: ``taken`` (free to adopt: pass this to its
    ``take_session``), ``owned`` or ``draining`` by the worker ``owner``, ``unknown`` (no record),
    ``forged`` (a record the key ring does not verify), ``unavailable`` (Redis cannot tell now).  With
    the record (checked) when there is one."""

    state: Adoption
    record: SessionRecord | None = None
    owner: str | None = None
    token: object = None
    """For a free session: what the link needs to take it (what it saw, compared again then)."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """What another worker needs to go on with a session."""

    revision: str
    """The protocol revision ``initialize`` agreed (a 2025-era one)."""
    initialized: bool
    """Whether the client sent ``notifications/initialized``."""
    owner: str
    """The owner key of the session's principal (empty: no authentication)."""
    client_info: dict[str, Any] = field(default_factory=dict)
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    subscriptions: tuple[str, ...] = ()


def record_key(prefix: str, session_tag: str) -> str:
    """``<prefix>:session:<tag>``: the signed record of the session whose id has that tag."""
    return f"{check_channel_prefix(prefix)}:session:{session_tag}"


def lease_key(prefix: str, session_tag: str) -> str:
    """``<prefix>:lease:<tag>``: which worker instance owns the session now."""
    return f"{check_channel_prefix(prefix)}:lease:{session_tag}"


def encode_session_record(record: SessionRecord) -> bytes:
    return json.dumps(
        {
            "v": RECORD_VERSION,
            "revision": record.revision,
            "initialized": record.initialized,
            "owner": record.owner,
            "client_info": record.client_info,
            "client_capabilities": record.client_capabilities,
            "log_level": record.log_level,
            "subscriptions": list(record.subscriptions),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def decode_session_record(data: bytes) -> SessionRecord:
    """A record's JSON, checked as strictly as a message from a socket; ValueError for anything else."""
    if len(data) > RECORD_LIMIT:
        raise ValueError(f"a record of {len(data)} bytes, more than {RECORD_LIMIT}")
    try:
        value = safejson.loads(data)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict) or set(value) != _FIELDS or value["v"] != RECORD_VERSION:
        raise ValueError("not a session record of version 1")
    name = value["revision"]
    if not isinstance(name, str) or name not in _LEGACY_NAMES or revision(name) is None:
        raise ValueError("no 2025-era revision")
    owner, info, caps = value["owner"], value["client_info"], value["client_capabilities"]
    if not isinstance(owner, str) or len(owner) > 256:
        raise ValueError("a malformed owner")
    if not isinstance(info, dict) or not isinstance(caps, dict):
        raise ValueError("malformed client info or capabilities")
    level = value["log_level"]
    if level is not None and level not in _LEVELS:
        raise ValueError("an unknown log level")
    subscriptions = value["subscriptions"]
    if not isinstance(subscriptions, list) or not all(isinstance(uri, str) for uri in subscriptions):
        raise ValueError("malformed subscriptions")
    if not isinstance(value["initialized"], bool):
        raise ValueError("a malformed state")
    return SessionRecord(
        revision=name,
        initialized=value["initialized"],
        owner=owner,
        client_info=info,
        client_capabilities=caps,
        log_level=level,
        subscriptions=tuple(subscriptions),
    )


def seal_session_record(keys: ClusterKeys, key: str, data: bytes, epoch: int) -> bytes:
    """``data`` (an :func:`encode_session_record`) of the session's ``epoch`` as stored under ``key``,
    signed for it under a label of its own (no task record, bus message or inbox entry passes as a
    session record): ``<epoch> <data>`` inside the signature, so a record is as current as its lease
    says and one written back from an older epoch is seen as such."""
    return seal_record(keys, _LABEL, key, b"%d %s" % (epoch, data))


def open_session_record(keys: ClusterKeys, key: str, value: object) -> tuple[SessionRecord, int, bytes]:
    """The record stored under ``key``, its epoch and its JSON: :class:`ForgedMessage` if the ring does
    not verify it for that key, ValueError if it is malformed."""
    epoch, _, data = open_record(keys, _LABEL, key, value).partition(b" ")
    if not epoch.isdigit() or len(epoch) > 16 or epoch.startswith(b"0"):
        raise ValueError("a record without its epoch")
    return decode_session_record(data), int(epoch), data
