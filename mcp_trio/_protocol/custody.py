"""Which worker holds a 2025 session, seen from the worker that runs it, as a state machine (sans-IO).

A session that outlives its worker (``_transport/ownership.py``, with Redis) is this worker's until it
hands it over, loses it to another worker, or ends here; what its end leaves in Redis (its record and
events, for the worker that adopts it, or nothing) follows from how it got there.  Every change is a row
of this table (Rule 1, as in h11); one that is not is our bug.

```
SERVING --HAND_OVER--> MOVING --RELEASE--> LEAVING
   |                      |                   |
 CLOSE                  CLOSE               CLOSE
   v                      +-----> MOVED <-----+
CLOSING

any state --LOSE--> LOST
```

``CLOSE`` is whatever ends the session here (a DELETE, its idle timeout, the server's shutdown): in
``SERVING`` its record and events go with it; while it is handed over (the app ends during a hand-over,
say) it ends as handed over, its record and events kept, and the hand-over still gives up its lease with
its last record (``MOVED --RELEASE--> MOVED``).  ``LOSE``: another worker holds its lease now (adopted
while this one could not see Redis): whatever this worker was doing with it, the record and events are
that worker's.
"""

from __future__ import annotations

from .table import StateEnum, TransitionTable

__all__ = ["ENDING", "RECORDED", "Custody", "CustodyEvent", "transition"]


class Custody(StateEnum):
    SERVING = "serving"
    """This worker's: it serves the session's requests and keeps its record."""
    MOVING = "moving"
    """Being handed over: its new requests get 503 (come back later), those in flight settle."""
    LEAVING = "leaving"
    """Handed over, not ended yet: its last record is taken and its lease given up, its streams are told
    to come back; its requests still get 503 here.  No record is written for it any more."""
    MOVED = "moved"
    """Handed over and ending: its end leaves its record and events to the worker that adopts it."""
    LOST = "lost"
    """Another worker took it: ending here, its record and events are that worker's."""
    CLOSING = "closing"
    """Ending here, this worker's to the last: its record and events go with it."""


class CustodyEvent(StateEnum):
    HAND_OVER = "hand over"
    """A hand-over starts (this worker drains, or the session's home asks for it back)."""
    RELEASE = "release"
    """The hand-over took the last record: the lease is given up with it."""
    LOSE = "lose"
    """Another worker holds the lease."""
    CLOSE = "close"
    """The session ends here (a DELETE, its idle timeout, the server's shutdown, a hand-over's end)."""


_S, _E = Custody, CustodyEvent
transition = TransitionTable[Custody, CustodyEvent](
    "session custody",
    {
        (_S.SERVING, _E.HAND_OVER): _S.MOVING,
        (_S.SERVING, _E.CLOSE): _S.CLOSING,
        (_S.MOVING, _E.RELEASE): _S.LEAVING,
        (_S.MOVING, _E.CLOSE): _S.MOVED,  # closed during its hand-over: it ends as handed over
        (_S.LEAVING, _E.CLOSE): _S.MOVED,
        (_S.MOVED, _E.RELEASE): _S.MOVED,  # ... and the hand-over still gives up the lease
        (_S.MOVED, _E.CLOSE): _S.MOVED,
        (_S.CLOSING, _E.CLOSE): _S.CLOSING,
        (_S.LOST, _E.CLOSE): _S.LOST,
        **{(state, _E.LOSE): _S.LOST for state in _S},
    },
)
"""The custody after an event; :class:`LocalProtocolError` if it is not allowed (a bug): a second
hand-over, a release without one (or of a session lost or ended here meanwhile)."""

ENDING = frozenset({_S.MOVED, _S.LOST, _S.CLOSING})
"""The session ends here: it takes no new work (``Session.closing``), and requests for it are not its."""

RECORDED = frozenset({_S.SERVING, _S.MOVING})
"""Its record in Redis follows its changes (later, the record is the hand-over's or another worker's)."""
