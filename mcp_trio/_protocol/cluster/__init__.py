"""Rules of a server run as several workers, that need no I/O: worker ids, session ids that name their
owner, the ``requestState`` key ring given in the environment, the messages of the notification bus
and of the workers' inboxes that workers share through Redis, the task records a task store keeps
there, the records and leases of sessions that another worker may adopt, and their signatures by
that key ring.

Everything read here comes from outside (a client's ``Mcp-Session-Id``, an environment variable, a
message on a Redis channel) and is checked as strictly as a message from a socket: what does not
match exactly is refused (``None`` or :class:`ValueError`), never half-used.  What Redis hands over
is trusted no more than the network: a message that the cluster's key ring does not verify is
:class:`ForgedMessage`, and a copy of one its receiver accepted before is :class:`ReplayedMessage`.

The rules live in six modules, used through this package: :mod:`.ids` (worker ids, session ids,
Redis key names), :mod:`.keys` (the key ring), :mod:`.messages` (what workers write to Redis),
:mod:`.records` (the sessions that workers hand over), :mod:`.leases` (who owns
one now: leases, epochs and heartbeats) and :mod:`.events` (the events an event store
keeps there).
"""

from __future__ import annotations

from . import events, ids, keys, leases, messages, records
from .events import *  # noqa: F403
from .ids import *  # noqa: F403
from .keys import *  # noqa: F403
from .leases import *  # noqa: F403
from .messages import *  # noqa: F403
from .records import *  # noqa: F403

__all__ = [*ids.__all__, *keys.__all__, *leases.__all__, *messages.__all__, *records.__all__, *events.__all__]
