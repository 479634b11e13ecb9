"""Session leases and worker heartbeats as workers keep them in Redis: signed by the key ring for their
key, every field inside the signature, anything else refused as forged."""

from __future__ import annotations

import pytest

from mcp_trio._protocol.cluster import (
    ClusterKeys,
    ForgedMessage,
    Heartbeat,
    Lease,
    heartbeat_key,
    lease_key,
    open_heartbeat,
    open_lease,
    seal_heartbeat,
    seal_lease,
    seal_session_record,
)

KEYS = ClusterKeys([b"k" * 32])
ROTATED = ClusterKeys([b"n" * 32, b"k" * 32])
OTHER_RING = ClusterKeys([b"o" * 32])
KEY = lease_key("mcp-trio", "0123abcd")
BEAT = heartbeat_key("mcp-trio", "w1")
LEASE = Lease(5, "held", "w1", "inst-1")


def test_a_lease_round_trips_and_verifies_under_a_rotated_ring() -> None:
    sealed = seal_lease(KEYS, KEY, LEASE)
    assert sealed.startswith(b"5 held w1 inst-1 ")  # what the Redis scripts read
    assert open_lease(KEYS, KEY, sealed) == LEASE
    assert open_lease(KEYS, KEY, sealed.decode()) == LEASE
    assert open_lease(ROTATED, KEY, sealed) == LEASE  # signed by the old key, still in the ring
    free = Lease(5, "free", "w1", "inst-1")
    assert open_lease(KEYS, KEY, seal_lease(KEYS, KEY, free)) == free


@pytest.mark.parametrize("epoch", [0, -1, 2**53])
def test_an_epoch_out_of_range_is_not_sealed(epoch: int) -> None:
    with pytest.raises(ValueError):
        seal_lease(KEYS, KEY, Lease(epoch, "held", "w1", "i"))


def test_a_lease_not_signed_for_its_key_by_the_ring_is_forged() -> None:
    sealed = seal_lease(KEYS, KEY, LEASE)
    forged = [
        sealed.replace(b"5 held", b"6 held"),  # a later epoch
        sealed.replace(b"5 held", b"4 held"),  # an earlier one
        sealed.replace(b"held w1", b"free w1"),  # freed
        sealed.replace(b"w1 inst-1", b"w2 inst-1"),  # moved to another worker
        seal_lease(KEYS, lease_key("mcp-trio", "ffff"), LEASE),  # another session's
        seal_lease(OTHER_RING, KEY, LEASE),
        b"w1 inst-1",  # the unsigned form of earlier releases
        b"5 held w1 inst-1",
        b"",
        seal_session_record(KEYS, KEY, b"{}", 5),  # a record is no lease
    ]
    for value in forged:
        with pytest.raises(ForgedMessage):
            open_lease(KEYS, KEY, value)
    with pytest.raises(ForgedMessage):
        open_lease(KEYS, KEY, 42)


def test_a_heartbeat_round_trips_and_anything_else_is_forged() -> None:
    sealed = seal_heartbeat(KEYS, BEAT, "inst-1", "draining", 1_700_000_000.5)
    assert sealed.startswith(b"inst-1 draining 1700000000500 ")
    assert open_heartbeat(KEYS, BEAT, sealed) == Heartbeat("inst-1", "draining", 1_700_000_000_500)
    forged = [
        sealed.replace(b"draining", b"live"),
        sealed.replace(b"1700000000500", b"1800000000500"),  # made fresh again
        sealed.replace(b"inst-1", b"inst-2"),
        seal_heartbeat(KEYS, heartbeat_key("mcp-trio", "w2"), "inst-1", "live", 1.0),  # another worker's
        seal_heartbeat(OTHER_RING, BEAT, "inst-1", "live", 1.0),
        b"inst-1",  # the unsigned form of earlier releases
        b"inst-1 draining",
        seal_lease(KEYS, BEAT, LEASE),  # a lease is no heartbeat
    ]
    for value in forged:
        with pytest.raises(ForgedMessage):
            open_heartbeat(KEYS, BEAT, value)
