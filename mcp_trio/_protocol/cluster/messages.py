"""What workers write to Redis, and how it is read back: the notification bus's messages (server
notifications every worker hands to its own peers), a worker's inbox entries (client messages of its
sessions that reached another worker) and a task store's records, each signed by the cluster's key ring.

Everything read here is checked as strictly as a message from a socket: what does not match exactly is
refused with :class:`ValueError` (short, safe to log).  What Redis hands over is trusted no more than
the network: what the key ring does not verify is :class:`ForgedMessage`, and a copy of a signed bus
message or inbox entry that its receiver's :class:`ReplayGuard` has already accepted (each carries a
random nonce) is :class:`ReplayedMessage`.
"""

from __future__ import annotations

import heapq
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from ...errors import RemoteProtocolError
from .. import jsonrpc
from .ids import INSTANCE_ID, session_owner
from .keys import TAG_BYTES, ClusterKeys

__all__ = [
    "BUS_MESSAGE_LIMIT",
    "FORWARDED_METHODS",
    "INBOX_FIELDS",
    "INBOX_MESSAGE_LIMIT",
    "MESSAGE_MAX_AGE",
    "PRINCIPAL_TAG",
    "REPLAY_MEMORY",
    "SESSION_TAG",
    "BusMessage",
    "ForgedMessage",
    "InboxEntry",
    "ReplayGuard",
    "ReplayedMessage",
    "decode_bus_message",
    "decode_inbox_entry",
    "encode_bus_message",
    "encode_inbox_entry",
    "open_bus_message",
    "open_record",
    "open_task_record",
    "seal_bus_message",
    "seal_record",
    "seal_task_record",
]

BUS_MESSAGE_LIMIT = 64 * 1024
"""Largest message accepted from the bus channel, in bytes."""
BUS_VERSION = 1
FORWARDED_METHODS = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
"""The server notifications the bus carries between workers (every other one stays in its process)."""
URI_LIMIT = 8192


# -- authenticating what workers write to Redis ------------------------------------------------

MESSAGE_MAX_AGE = 300.0
"""Seconds a signed bus message or inbox entry stays acceptable (either way from its ``ts``): a message
copied from Redis cannot be replayed later than that.  Worker clocks must agree to well within it."""


class ForgedMessage(ValueError):
    """A message that does not carry a valid signature of the cluster's key ring (written by something
    without the secret, or too old or too far in the future): dropped and counted apart."""


def _fresh(ts: object, now: float) -> int:
    """The signed timestamp ``ts`` (milliseconds since the epoch, ASCII digits) if it is within
    :data:`MESSAGE_MAX_AGE` of ``now`` (seconds since the epoch); ForgedMessage otherwise."""
    if not isinstance(ts, bytes) or not ts.isdigit() or len(ts) > 16:
        raise ForgedMessage("no valid timestamp")
    millis = int(ts)
    if abs(millis / 1000 - now) > MESSAGE_MAX_AGE:
        raise ForgedMessage(f"signed more than {MESSAGE_MAX_AGE:g} s away from now")
    return millis


# -- replays: each signed message is accepted once ----------------------------------------------

NONCE_BYTES = 16
"""Random bytes of a message's nonce (written as hex, inside what is signed)."""
_NONCE = re.compile(rb"[0-9a-f]{%d}" % (2 * NONCE_BYTES))
REPLAY_MEMORY = 100_000
"""The nonces a receiver (a bus, a worker's inbox, a task store's signals) remembers at most."""


class ReplayedMessage(ValueError):
    """A signed message that its receiver accepted before (a copy written to Redis again), or one it can
    no longer tell from such a copy (signed before the receiver started, or older than every nonce it
    had to forget): dropped and counted apart."""


def _nonce() -> bytes:
    return secrets.token_hex(NONCE_BYTES).encode()


class ReplayGuard:
    """The nonces of the signed messages one receiver accepted, each until its message is too old to
    pass :data:`MESSAGE_MAX_AGE`, so that a copy of one written to Redis again is refused.

    Memory is bounded by ``capacity`` nonces, and forgetting never reopens a replay: the guard keeps a
    *floor*, a signing time below which it refuses every message.  It starts at the time the guard is
    made (a new process cannot know what the one before it accepted: a message signed before it
    started is refused; legitimately, nothing signed then is for it, as a bus message is only heard by
    those subscribed and an inbox's older entries were for the sessions of the process before).  It
    rises above each nonce forgotten: the oldest when ``capacity`` is reached (under a load of more
    than ``capacity`` messages per :data:`MESSAGE_MAX_AGE` the accepted age shrinks, to
    ``capacity`` messages' worth, instead of memory growing), and those that expired (so a wall clock
    stepped back does not make one acceptable again)."""

    __slots__ = ("_floor", "_order", "_seen", "capacity")

    def __init__(self, now: float, capacity: int = REPLAY_MEMORY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._floor = int(now * 1000)
        """Messages signed before this (milliseconds since the epoch) are refused."""
        self._seen: set[bytes] = set()
        self._order: list[tuple[int, bytes]] = []
        """The nonces remembered with their signing times, a heap: the oldest first."""

    def __len__(self) -> int:
        return len(self._seen)

    @property
    def floor(self) -> float:
        """The signing time (seconds since the epoch) below which every message is refused."""
        return self._floor / 1000

    def admit(self, nonce: bytes, ts: int, now: float) -> None:
        """Remember ``nonce`` of a message signed at ``ts`` (milliseconds since the epoch) and checked
        fresh at ``now``; :class:`ReplayedMessage` if it was seen, or is older than the floor."""
        horizon = (now - MESSAGE_MAX_AGE) * 1000
        while self._order and self._order[0][0] < horizon:  # refused as stale from now on anyway
            self._forget()
        if nonce in self._seen:
            raise ReplayedMessage("a copy of a message accepted before")
        if ts < self._floor:
            raise ReplayedMessage("signed before what this receiver can tell apart from a copy")
        self._seen.add(nonce)
        heapq.heappush(self._order, (ts, nonce))
        if len(self._order) > self.capacity:
            self._forget()

    def _forget(self) -> None:
        ts, nonce = heapq.heappop(self._order)
        self._seen.discard(nonce)
        self._floor = max(self._floor, ts + 1)


_BUS_MAGIC = b"mt2"
_BUS_LABEL = b"bus"
_HEX = re.compile(rb"[0-9a-f]+")


def seal_bus_message(keys: ClusterKeys, channel: str, data: bytes, now: float) -> bytes:
    """``data`` (an :func:`encode_bus_message`, or a task store's signal) as published:
    ``mt2 <key id> <signature> <ts> <nonce> <data>``, signed for ``channel`` at ``now`` (seconds since
    the epoch), with a random nonce (so that its receivers accept it once)."""
    ts = str(int(now * 1000)).encode()
    nonce = _nonce()
    kid, signature = keys.sign(_BUS_LABEL, channel.encode(), ts, nonce, data)
    return b" ".join((_BUS_MAGIC, kid.encode(), signature.encode(), ts, nonce, data))


def open_bus_message(
    keys: ClusterKeys,
    channel: str,
    data: object,
    now: float,
    limit: int = BUS_MESSAGE_LIMIT,
    *,
    seen: ReplayGuard,
) -> bytes:
    """The message inside ``data`` read from ``channel`` (a message of at most ``limit`` bytes), once
    its signature is checked and its nonce admitted by ``seen`` (the receiver's): :class:`ForgedMessage`
    if it is not signed by the ring (or is stale), :class:`ReplayedMessage` if ``seen`` refuses it,
    ValueError if it is not even shaped like a signed message."""
    if not isinstance(data, bytes):
        raise ValueError(f"not bytes but {type(data).__name__}")
    if len(data) > limit + 192:
        raise ValueError(f"{len(data)} bytes, more than {limit}")
    fields = data.split(b" ", 5)
    if len(fields) != 6 or fields[0] != _BUS_MAGIC:
        raise ForgedMessage("not a signed message (of this version)")
    _, kid, signature, ts, nonce, inner = fields
    if not _HEX.fullmatch(kid) or not _HEX.fullmatch(signature) or not _NONCE.fullmatch(nonce):
        raise ForgedMessage("not a signed message")
    if not keys.verify(kid.decode(), signature.decode(), _BUS_LABEL, channel.encode(), ts, nonce, inner):
        raise ForgedMessage("a signature the key ring does not verify")
    seen.admit(nonce, _fresh(ts, now), now)
    return inner


_RECORD_MAGIC = b"mtr1"
_RECORD_LABEL = b"task record"


def seal_task_record(keys: ClusterKeys, key: str, data: bytes) -> bytes:
    """``data`` (a task record's JSON) as stored under the Redis key ``key``:
    ``mtr1 <key id> <signature> <data>``, signed for that key (so a valid record copied under another
    key, another task's id or another prefix, does not verify).  Its own label: no bus message, inbox
    entry or ``requestState`` passes as a record, nor the reverse.  No timestamp: a record lives as long
    as its task, and is checked again at each read."""
    return seal_record(keys, _RECORD_LABEL, key, data)


def open_task_record(keys: ClusterKeys, key: str, value: object) -> bytes:
    """The record's JSON inside ``value`` read from the Redis key ``key``, once its signature is
    checked: :class:`ForgedMessage` if it is not signed by the ring for this key (unsigned, another
    ring's, altered, or copied from another key), ValueError if ``value`` is not a string at all."""
    return open_record(keys, _RECORD_LABEL, key, value)


def seal_record(keys: ClusterKeys, label: bytes, key: str, data: bytes) -> bytes:
    """``data`` as stored under the Redis key ``key``: ``mtr1 <key id> <signature> <data>``, signed
    under ``label`` (one per kind of record) for that key."""
    kid, signature = keys.sign(label, key.encode(), data)
    return b" ".join((_RECORD_MAGIC, kid.encode(), signature.encode(), data))


def open_record(keys: ClusterKeys, label: bytes, key: str, value: object) -> bytes:
    """What :func:`seal_record` sealed under ``label`` for ``key``, once its signature is checked."""
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes):
        raise ValueError("the key does not hold a string")
    fields = value.split(b" ", 3)
    if len(fields) != 4 or fields[0] != _RECORD_MAGIC:
        raise ForgedMessage("not a signed record")
    _, kid, signature, data = fields
    if not _HEX.fullmatch(kid) or not _HEX.fullmatch(signature):
        raise ForgedMessage("not a signed record")
    if not keys.verify(kid.decode(), signature.decode(), label, key.encode(), data):
        raise ForgedMessage("a signature the key ring does not verify for this key")
    return data


# -- the notification bus's messages -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BusMessage:
    """A server notification that came through the bus: who published it, the JSON-RPC notification
    to hand to the local peers, and the resource URI it is about (``resources/updated`` only)."""

    sender: str
    message: dict[str, Any]
    uri: str | None


def encode_bus_message(sender: str, message: Mapping[str, Any], uri: str | None) -> bytes | None:
    """The bytes to publish for ``message`` (a server notification), or None if the bus does not carry
    it (its method is not one of :data:`FORWARDED_METHODS`, or it would be refused on arrival)."""
    method = message.get("method")
    if method not in FORWARDED_METHODS:
        return None
    envelope: dict[str, Any] = {"v": BUS_VERSION, "from": sender, "message": dict(message)}
    if uri is not None:
        envelope["uri"] = uri
    data = jsonrpc.encode(envelope)
    try:
        decode_bus_message(data)
    except ValueError:
        return None
    return data


def decode_bus_message(data: object) -> BusMessage:
    """A message read from the bus channel, validated like a message from a socket; ValueError (with
    the reason, short and safe to log) for anything else."""
    if not isinstance(data, bytes):
        raise ValueError(f"not bytes but {type(data).__name__}")
    if len(data) > BUS_MESSAGE_LIMIT:
        raise ValueError(f"{len(data)} bytes, more than {BUS_MESSAGE_LIMIT}")
    try:
        envelope = jsonrpc.decode(data)  # the strict decoder of request bodies
    except RemoteProtocolError:
        raise ValueError("not UTF-8 JSON") from None
    if not isinstance(envelope, dict):
        raise ValueError("not a JSON object")
    if set(envelope) - {"v", "from", "message", "uri"}:
        raise ValueError("unknown members")
    if envelope.get("v") != BUS_VERSION or type(envelope.get("v")) is not int:
        raise ValueError(f"not version {BUS_VERSION}")
    sender = envelope.get("from")
    if not isinstance(sender, str) or not INSTANCE_ID.fullmatch(sender):
        raise ValueError("no valid sender")
    raw = envelope.get("message")
    try:
        parsed = jsonrpc.parse_message(raw)
    except RemoteProtocolError:
        raise ValueError("not a JSON-RPC message") from None
    if not isinstance(parsed, mt.JSONRPCNotification) or parsed.method not in FORWARDED_METHODS:
        raise ValueError("not a server notification the bus carries")
    assert isinstance(raw, dict)
    params = raw.get("params")
    if params is not None and not isinstance(params, dict):
        raise ValueError("params is not an object")
    uri = envelope.get("uri")
    if parsed.method == "notifications/resources/updated":
        if not isinstance(uri, str) or not 0 < len(uri) <= URI_LIMIT or (params or {}).get("uri") != uri:
            raise ValueError("resources/updated without a matching uri")
    elif uri is not None:
        raise ValueError("a uri on a list change")
    return BusMessage(sender, jsonrpc.notification(parsed.method, params), uri)


# -- a worker's inbox: client messages of its sessions that reached another worker --------------

INBOX_VERSION = b"3"
INBOX_MESSAGE_LIMIT = 4 * 1024 * 1024
"""Largest body accepted from an inbox entry, in bytes (the default ``max_body_size``)."""
_INBOX_LABEL = b"inbox"
INBOX_FIELDS = ("v", "kid", "sig", "ts", "nonce", "session", "principal", "body")
"""The fields of an inbox entry, in the order they are written."""
SESSION_TAG = b"session"
"""The label of a session id's tag (the field of a worker's session record)."""
PRINCIPAL_TAG = b"principal"
"""The label of a principal's tag (what travels with a forwarded answer, and a session record's value)."""
_TAG = re.compile(f"[0-9a-f]{{{2 * TAG_BYTES}}}")


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """A forwarded POST body, checked: the session it is for, the body (JSON-RPC responses and
    notifications only), and the tag of the principal that sent it (to compare with the session's)."""

    session_id: str
    body: bytes
    principal: str


def encode_inbox_entry(
    keys: ClusterKeys, worker: str, session_id: str, body: bytes, principal: str, now: float
) -> dict[str, bytes]:
    """The fields of a stream entry of ``worker``'s inbox carrying ``body`` (a POST body holding only
    JSON-RPC responses and notifications) for the session ``session_id``, sent by the principal whose
    tag is ``principal``; signed at ``now`` (seconds since the epoch) for this worker alone, with a
    random nonce (so that the worker accepts it once)."""
    ts = str(int(now * 1000)).encode()
    nonce = _nonce()
    session = session_id.encode("ascii")
    tag = principal.encode("ascii")
    kid, signature = keys.sign(_INBOX_LABEL, worker.encode(), ts, nonce, session, tag, body)
    return {
        "v": INBOX_VERSION,
        "kid": kid.encode(),
        "sig": signature.encode(),
        "ts": ts,
        "nonce": nonce,
        "session": session,
        "principal": tag,
        "body": body,
    }


def decode_inbox_entry(
    fields: object, worker: str, keys: ClusterKeys, now: float, *, seen: ReplayGuard
) -> InboxEntry:
    """An entry read from ``worker``'s inbox, checked like a request from a socket: signed by the key
    ring for this worker within :data:`MESSAGE_MAX_AGE` (else :class:`ForgedMessage`), its nonce
    admitted by ``seen`` (the worker's: else :class:`ReplayedMessage`), then exactly the fields above,
    a session id of ``worker``, a body within :data:`INBOX_MESSAGE_LIMIT` of JSON-RPC responses and
    notifications only (else ValueError; short, safe to log)."""
    if not isinstance(fields, Mapping):
        raise ValueError("not a field map")
    named = {k.decode("ascii", "replace") if isinstance(k, bytes) else k: v for k, v in fields.items()}
    if set(named) != set(INBOX_FIELDS) or not all(isinstance(v, bytes) for v in named.values()):
        raise ForgedMessage("not the fields of a signed entry (of this version)")
    if named["v"] != INBOX_VERSION:
        raise ForgedMessage(f"not version {INBOX_VERSION.decode()}")
    raw_session, body, tag, ts, nonce = (named[k] for k in ("session", "body", "principal", "ts", "nonce"))
    if len(body) > INBOX_MESSAGE_LIMIT:
        raise ValueError(f"a body of {len(body)} bytes, more than {INBOX_MESSAGE_LIMIT}")
    kid, signature = named["kid"].decode("ascii", "replace"), named["sig"].decode("ascii", "replace")
    if not _NONCE.fullmatch(nonce) or not keys.verify(
        kid, signature, _INBOX_LABEL, worker.encode(), ts, nonce, raw_session, tag, body
    ):
        raise ForgedMessage("a signature the key ring does not verify")
    seen.admit(nonce, _fresh(ts, now), now)
    try:
        session_id = raw_session.decode("ascii")
        principal = tag.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("a session id or principal that is not ASCII") from None
    if session_owner(session_id) is None:  # any worker's: this one may have adopted it
        raise ValueError("not a session id")
    if not _TAG.fullmatch(principal):
        raise ValueError("not a principal's tag")
    try:
        incoming = jsonrpc.parse_body(body, allow_batch=True)
    except RemoteProtocolError:
        raise ValueError("not a JSON-RPC body") from None
    if incoming.requests:
        raise ValueError("a request (only responses and notifications are forwarded)")
    return InboxEntry(session_id, body, principal)
