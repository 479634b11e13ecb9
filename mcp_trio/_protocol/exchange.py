"""Who owns one HTTP response of the 2025 transport, as a state machine (sans-IO).

An exchange (one HTTP response carrying a stream) can be written by a writer task of its session, by the
handler task that completes it (the quick paths), or ended by the ASGI request task that waits for it.
Exactly one of them owns it at a time, and every change of hands is a row of this table (Rule 1, as in
h11): a writer must *claim* a pending exchange before it sends anything; once it is done, by finishing
the response or by giving up, the request task ends what is left.

```
PENDING --CLAIM--> CLAIMED --START--> STREAMING --FINISH--> FINISHED
   |                  |                   |
   +--ABANDON--+      +------RELEASE------+
               v                          v
           ABANDONED <--------------------+  --END--> CLOSED
```

``PENDING``: connected, nobody writes yet (a JSON answer being computed, an SSE stream whose start is
deferred, a writer task not yet running).  ``ABANDON``: nobody will write it (the client went away, the
session ended).  ``RELEASE``: its writer stopped without finishing (cancelled, the connection broke).
``END``: the request task finished the response (the end of a started stream, or a 404).
"""

from __future__ import annotations

from .table import StateEnum, TransitionTable

__all__ = ["ExchangeEvent", "ExchangeState", "transition"]


class ExchangeState(StateEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    STREAMING = "streaming"
    FINISHED = "finished"
    ABANDONED = "abandoned"
    CLOSED = "closed"


class ExchangeEvent(StateEnum):
    CLAIM = "claim"
    START = "start"
    FINISH = "finish"
    RELEASE = "release"
    ABANDON = "abandon"
    END = "end"


_S, _E = ExchangeState, ExchangeEvent
transition = TransitionTable[ExchangeState, ExchangeEvent](
    "exchange",
    {
        (_S.PENDING, _E.CLAIM): _S.CLAIMED,
        (_S.PENDING, _E.ABANDON): _S.ABANDONED,
        (_S.CLAIMED, _E.START): _S.STREAMING,
        (_S.CLAIMED, _E.RELEASE): _S.ABANDONED,
        (_S.STREAMING, _E.FINISH): _S.FINISHED,
        (_S.STREAMING, _E.RELEASE): _S.ABANDONED,
        (_S.ABANDONED, _E.END): _S.CLOSED,
    },
)
"""The exchange's state after an event; :class:`LocalProtocolError` if it is not allowed (a bug)."""
