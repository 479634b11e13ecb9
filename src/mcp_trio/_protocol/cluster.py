"""Rules of a server run as several workers, that need no I/O: worker ids, session ids that name their
owner, the ``requestState`` key ring given in the environment, and the messages of the notification
bus that workers share through Redis.

Everything read here comes from outside (a client's ``Mcp-Session-Id``, an environment variable, a
message on a Redis channel) and is checked as strictly as a message from a socket: what does not
match exactly is refused (``None`` or :class:`ValueError`), never half-used.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from .._exceptions import RemoteProtocolError
from . import jsonrpc

__all__ = [
    "BUS_MESSAGE_LIMIT",
    "FORWARDED_METHODS",
    "INBOX_MESSAGE_LIMIT",
    "REQUEST_STATE_SECRET_ENV",
    "BusMessage",
    "check_channel_prefix",
    "check_instance_id",
    "check_worker_id",
    "decode_bus_message",
    "decode_inbox_entry",
    "encode_bus_message",
    "encode_inbox_entry",
    "heartbeat_key",
    "inbox_key",
    "parse_secret_ring",
    "session_owner",
]

WORKER_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
"""A worker id: short, and safe in a session id, a Redis key and a log line as it is."""
_SESSION_REST = re.compile(r"[\x21-\x7e]{1,223}")
"""What follows ``<worker>.`` in a session id: visible ASCII (the manager's limit is 256 in all)."""
INSTANCE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""The id a worker's bus puts in each message it publishes (to recognise its own echo)."""
CHANNEL_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

REQUEST_STATE_SECRET_ENV = "MCP_TRIO_REQUEST_STATE_SECRET"
"""Environment variable with the ``requestState`` key ring: comma-separated base64 keys, first seals."""
MIN_SECRET_BYTES = 32

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


def parse_secret_ring(text: str) -> tuple[bytes, ...]:
    """The keys of a ``MCP_TRIO_REQUEST_STATE_SECRET`` value: comma-separated base64 (standard or
    URL-safe alphabet, padding optional, spaces around each ignored), each of at least 32 bytes.  The
    first seals new ``requestState``; every one verifies.  ValueError says what is wrong, never what
    the keys are."""
    entries = [entry.strip() for entry in text.split(",")]
    if not any(entries):
        raise ValueError(f"{REQUEST_STATE_SECRET_ENV} is set but empty")
    keys = []
    for position, entry in enumerate(entries, start=1):
        if not entry:
            raise ValueError(f"{REQUEST_STATE_SECRET_ENV}: key {position} is empty (a stray comma?)")
        standard = entry.replace("-", "+").replace("_", "/")
        try:
            key = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{REQUEST_STATE_SECRET_ENV}: key {position} is not base64") from None
        if len(key) < MIN_SECRET_BYTES:
            raise ValueError(
                f"{REQUEST_STATE_SECRET_ENV}: key {position} has {len(key)} bytes, at least "
                f"{MIN_SECRET_BYTES} are needed (make one with 'openssl rand -base64 32')"
            )
        keys.append(key)
    return tuple(keys)


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
        envelope = jsonrpc._decode(data)  # the strict decoder of request bodies
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

INBOX_VERSION = b"1"
INBOX_MESSAGE_LIMIT = 4 * 1024 * 1024
"""Largest body accepted from an inbox entry, in bytes (the default ``max_body_size``)."""


def heartbeat_key(prefix: str, worker: str) -> str:
    """The Redis key a live worker keeps (with a TTL): ``<prefix>:worker:<worker>``."""
    return f"{check_channel_prefix(prefix)}:worker:{check_worker_id(worker)}"


def inbox_key(prefix: str, worker: str) -> str:
    """The Redis stream other workers add a worker's session messages to: ``<prefix>:inbox:<worker>``."""
    return f"{check_channel_prefix(prefix)}:inbox:{check_worker_id(worker)}"


def encode_inbox_entry(session_id: str, body: bytes) -> dict[str, bytes]:
    """The fields of an inbox stream entry carrying ``body`` (a POST body holding only JSON-RPC
    responses and notifications) for the session ``session_id``."""
    return {"v": INBOX_VERSION, "session": session_id.encode("ascii"), "body": body}


def decode_inbox_entry(fields: object, worker: str) -> tuple[str, bytes]:
    """The session id and POST body of an entry read from ``worker``'s inbox, validated like a request
    from a socket: exactly the fields above, version 1, a session id of ``worker``, a body within
    :data:`INBOX_MESSAGE_LIMIT` of JSON-RPC responses and notifications only.  ValueError (short, safe
    to log) for anything else."""
    if not isinstance(fields, Mapping):
        raise ValueError("not a field map")
    named = {k.decode("ascii", "replace") if isinstance(k, bytes) else k: v for k, v in fields.items()}
    if set(named) != {"v", "session", "body"}:
        raise ValueError("unexpected fields")
    if named["v"] != INBOX_VERSION:
        raise ValueError("not version 1")
    raw_session, body = named["session"], named["body"]
    if not isinstance(raw_session, bytes) or not isinstance(body, bytes):
        raise ValueError("fields are not bytes")
    if len(body) > INBOX_MESSAGE_LIMIT:
        raise ValueError(f"a body of {len(body)} bytes, more than {INBOX_MESSAGE_LIMIT}")
    try:
        session_id = raw_session.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("a session id that is not ASCII") from None
    if session_owner(session_id, (worker,)) is None:
        raise ValueError("not a session id of this worker")
    try:
        incoming = jsonrpc.parse_body(body, allow_batch=True)
    except RemoteProtocolError:
        raise ValueError("not a JSON-RPC body") from None
    if incoming.requests:
        raise ValueError("a request (only responses and notifications are forwarded)")
    return session_id, body
