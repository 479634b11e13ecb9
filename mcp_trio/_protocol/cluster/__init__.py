"""Rules of a server run as several workers, that need no I/O: worker ids, session ids that name their
owner, the ``requestState`` key ring given in the environment, the messages of the notification bus
and of the workers' inboxes that workers share through Redis, the task records a task store keeps
there, and their signatures by that key ring.

Everything read here comes from outside (a client's ``Mcp-Session-Id``, an environment variable, a
message on a Redis channel) and is checked as strictly as a message from a socket: what does not
match exactly is refused (``None`` or :class:`ValueError`), never half-used.  What Redis hands over
is trusted no more than the network: a message that the cluster's key ring does not verify is
:class:`ForgedMessage`.

The rules live in three modules, used through this package: :mod:`.ids` (worker ids, session ids,
Redis key names), :mod:`.keys` (the key ring) and :mod:`.messages` (what workers write to Redis).
"""

from __future__ import annotations

from .ids import (
    CHANNEL_PREFIX,
    INSTANCE_ID,
    WORKER_ID,
    check_channel_prefix,
    check_instance_id,
    check_worker_id,
    heartbeat_key,
    inbox_bytes_key,
    inbox_key,
    session_owner,
    sessions_key,
)
from .keys import MIN_SECRET_BYTES, REQUEST_STATE_SECRET_ENV, TAG_BYTES, ClusterKeys, parse_secret_ring
from .messages import (
    BUS_MESSAGE_LIMIT,
    FORWARDED_METHODS,
    INBOX_MESSAGE_LIMIT,
    MESSAGE_MAX_AGE,
    PRINCIPAL_TAG,
    SESSION_TAG,
    BusMessage,
    ForgedMessage,
    InboxEntry,
    decode_bus_message,
    decode_inbox_entry,
    encode_bus_message,
    encode_inbox_entry,
    open_bus_message,
    open_task_record,
    seal_bus_message,
    seal_task_record,
)

__all__ = [
    "BUS_MESSAGE_LIMIT",
    "CHANNEL_PREFIX",
    "FORWARDED_METHODS",
    "INBOX_MESSAGE_LIMIT",
    "INSTANCE_ID",
    "MESSAGE_MAX_AGE",
    "MIN_SECRET_BYTES",
    "PRINCIPAL_TAG",
    "REQUEST_STATE_SECRET_ENV",
    "SESSION_TAG",
    "TAG_BYTES",
    "WORKER_ID",
    "BusMessage",
    "ClusterKeys",
    "ForgedMessage",
    "InboxEntry",
    "check_channel_prefix",
    "check_instance_id",
    "check_worker_id",
    "decode_bus_message",
    "decode_inbox_entry",
    "encode_bus_message",
    "encode_inbox_entry",
    "heartbeat_key",
    "inbox_bytes_key",
    "inbox_key",
    "open_bus_message",
    "open_task_record",
    "parse_secret_ring",
    "seal_bus_message",
    "seal_task_record",
    "session_owner",
    "sessions_key",
]
