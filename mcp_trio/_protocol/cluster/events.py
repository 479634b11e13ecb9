"""The SSE events a Redis event store keeps for resumption, as stored in Redis: each one signed by the
cluster's key ring for its session's key, its stream and its place in the stream."""

from __future__ import annotations

import re

from .ids import check_channel_prefix
from .keys import TAG_BYTES, ClusterKeys
from .messages import ForgedMessage

__all__ = ["EVENT_ENTRY_HEADER", "EVENT_SEQ_LIMIT", "events_key", "open_event_entry", "seal_event_entry"]

_EVENT_MAGIC = b"mte1"
_EVENT_LABEL = b"event entry"
_SEQ_DIGITS = 16
EVENT_SEQ_LIMIT = 2**53
"""Events with a ``seq`` (or a stream id) of this or more are not stored in Redis (never reached: Redis's
scripts count in doubles)."""
EVENT_ENTRY_HEADER = len(_EVENT_MAGIC) + 1 + 16 + 1 + 64 + 1 + _SEQ_DIGITS + 1
"""Bytes of a stored entry before its data: ``mte1 <key id> <signature> <seq, 16 digits> ``.  Fixed, so
that Redis's scripts know an entry's data size from its length alone."""
_ENTRY = re.compile(rb"mte1 ([0-9a-f]{16}) ([0-9a-f]{64}) ([0-9]{16}) ", re.DOTALL)
_TAG = re.compile(f"[0-9a-f]{{{2 * TAG_BYTES}}}")


def events_key(prefix: str, tag: str) -> str:
    """The Redis hash of one session's events: ``<prefix>:events:<the session id's tag>``."""
    if not _TAG.fullmatch(tag):
        raise ValueError("not a session tag")
    return f"{check_channel_prefix(prefix)}:events:{tag}"


def seal_event_entry(keys: ClusterKeys, key: str, stream_id: int, seq: int, data: bytes) -> bytes:
    """The entry stored under the Redis key ``key`` (a session's, :func:`events_key`) for the event
    ``seq`` of stream ``stream_id``: ``mte1 <key id> <signature> <seq> <data>``.  Its own label (no bus
    message, inbox entry, task record or ``requestState`` passes as an event entry, nor the reverse),
    over the key, the stream id, the seq and the data: an entry copied to another session's key or another
    stream does not verify, nor one whose seq or data was changed."""
    if not 0 <= stream_id < EVENT_SEQ_LIMIT or not 0 <= seq < EVENT_SEQ_LIMIT:
        raise ValueError("a stream id or seq out of range")
    seq_text = b"%016d" % seq
    kid, signature = keys.sign(_EVENT_LABEL, key.encode(), b"%d" % stream_id, seq_text, data)
    return b" ".join((_EVENT_MAGIC, kid.encode(), signature.encode(), seq_text, data))


def open_event_entry(keys: ClusterKeys, key: str, stream_id: int, value: object) -> tuple[int, bytes]:
    """The seq and data of an entry read from ``key`` for stream ``stream_id``, once its signature is
    checked: :class:`ForgedMessage` for anything else (not an entry, unsigned, another ring's, altered,
    or copied from another key or stream)."""
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes):
        raise ForgedMessage("not a string")
    found = _ENTRY.match(value)
    if found is None:
        raise ForgedMessage("not a signed event entry")
    kid, signature, seq_text = found.groups()
    data = value[EVENT_ENTRY_HEADER:]
    if not keys.verify(
        kid.decode(), signature.decode(), _EVENT_LABEL, key.encode(), b"%d" % stream_id, seq_text, data
    ):
        raise ForgedMessage("a signature the key ring does not verify for this session and stream")
    return int(seq_text), data
