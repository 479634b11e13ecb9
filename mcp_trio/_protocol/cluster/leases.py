"""Who owns a 2025 session across workers, as workers keep it in Redis: the session's lease and each
worker's heartbeat, both signed by the cluster's key ring.

A lease is ``"<epoch> <state> <worker id> <instance id> <key id> <signature>"``: the session's
*epoch* (its fencing token: it grows by one at each change of owner, and everything the owner writes
for the session carries it, so a write of an older owner is refused), ``held`` by that worker instance
or ``free`` (handed over by it: the next worker that gets a request for the session takes it).  The
signature covers the Redis key and every field, so a writer without the secret can neither make a
lease nor move one to another session.

A heartbeat is ``"<instance id> <state> <ts> <key id> <signature>"``: the instance alive (``live``)
or handing its sessions over (``draining``), signed at ``ts`` (milliseconds since the epoch).  A
heartbeat older than the heartbeat TTL is no proof of life (it was copied and written back); one that
does not verify is no proof of anything.

The Redis scripts read the first fields (the epoch, the worker, the instance) to compare and set
atomically; a worker checks the signature of everything it acts on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .ids import INSTANCE_ID, WORKER_ID
from .keys import ClusterKeys
from .messages import ForgedMessage

__all__ = [
    "EPOCH_LIMIT",
    "Claim",
    "Heartbeat",
    "Lease",
    "open_heartbeat",
    "open_lease",
    "seal_heartbeat",
    "seal_lease",
]

EPOCH_LIMIT = 2**53
"""Epochs are below this (a JSON-safe integer; a lease naming a larger one is refused)."""
_LEASE_LABEL = b"session lease"
_HEARTBEAT_LABEL = b"worker heartbeat"
_LEASE = re.compile(rb"([1-9][0-9]{0,15}) (held|free) (\S{1,32}) (\S{1,64}) ([0-9a-f]{16}) ([0-9a-f]{64})")
_HEARTBEAT = re.compile(rb"(\S{1,64}) (live|draining) ([0-9]{1,16}) ([0-9a-f]{16}) ([0-9a-f]{64})")


@dataclass(frozen=True, slots=True)
class Lease:
    """A session's lease, checked."""

    epoch: int
    state: Literal["held", "free"]
    worker: str
    instance: str


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A worker instance's heartbeat, checked."""

    instance: str
    state: Literal["live", "draining"]
    millis: int
    """When it was signed (milliseconds since the epoch)."""


def seal_lease(keys: ClusterKeys, key: str, lease: Lease) -> bytes:
    """``lease`` as stored under the Redis key ``key`` (the session's lease key), signed for it."""
    if not 0 < lease.epoch < EPOCH_LIMIT:
        raise ValueError(f"an epoch out of range: {lease.epoch}")
    fields = (str(lease.epoch).encode(), lease.state.encode(), lease.worker.encode(), lease.instance.encode())
    kid, signature = keys.sign(_LEASE_LABEL, key.encode(), *fields)
    return b" ".join((*fields, kid.encode(), signature.encode()))


def open_lease(keys: ClusterKeys, key: str, value: object) -> Lease:
    """The lease stored under ``key``: :class:`ForgedMessage` if the ring does not verify it for that
    key (made without the secret, altered, or copied from another session's key)."""
    if isinstance(value, str):
        value = value.encode()
    found = _LEASE.fullmatch(value) if isinstance(value, bytes) else None
    if found is None:
        raise ForgedMessage("not a signed lease")
    epoch, state, worker, instance, kid, signature = found.groups()
    if not keys.verify(
        kid.decode(), signature.decode(), _LEASE_LABEL, key.encode(), epoch, state, worker, instance
    ):
        raise ForgedMessage("a lease the key ring does not verify for this key")
    if not WORKER_ID.fullmatch(worker.decode()) or not INSTANCE_ID.fullmatch(instance.decode()):
        raise ForgedMessage("a lease naming no valid worker")  # pragma: no cover - signed by a worker
    return Lease(int(epoch), state.decode(), worker.decode(), instance.decode())  # type: ignore[arg-type]


def seal_heartbeat(
    keys: ClusterKeys, key: str, instance: str, state: Literal["live", "draining"], now: float
) -> bytes:
    """The heartbeat ``key`` (a worker's) holds: ``instance`` is ``state``, signed at ``now`` (seconds
    since the epoch)."""
    fields = (instance.encode(), state.encode(), str(int(now * 1000)).encode())
    kid, signature = keys.sign(_HEARTBEAT_LABEL, key.encode(), *fields)
    return b" ".join((*fields, kid.encode(), signature.encode()))


def open_heartbeat(keys: ClusterKeys, key: str, value: object) -> Heartbeat:
    """The heartbeat stored under ``key``: :class:`ForgedMessage` if the ring does not verify it for
    that key."""
    if isinstance(value, str):
        value = value.encode()
    found = _HEARTBEAT.fullmatch(value) if isinstance(value, bytes) else None
    if found is None:
        raise ForgedMessage("not a signed heartbeat")
    instance, state, millis, kid, signature = found.groups()
    parts = (key.encode(), instance, state, millis)
    if not keys.verify(kid.decode(), signature.decode(), _HEARTBEAT_LABEL, *parts):
        raise ForgedMessage("a heartbeat the key ring does not verify for this key")
    return Heartbeat(instance.decode(), state.decode(), int(millis))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Claim:
    """What ``SessionLeases.take_session`` needs of a session ``peek_session``
    found free: what Redis held then (compared again as the lease is taken)."""

    session_id: str
    tag: str
    record: bytes
    data: bytes
    """The record's JSON (written again under the taker's epoch)."""
    lease: bytes
    epoch: int
    """The epoch of the lease seen (the taker's is the next)."""
    heartbeat_key: str | None
    """The former owner's heartbeat key, when the lease named an instance seen not beating."""
    heartbeat: bytes = b""
