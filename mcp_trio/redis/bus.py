"""The notification bus that workers share through Redis: :class:`RedisNotificationBus`."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from .._app.bus import LocalNotificationBus
from .._protocol.cluster import (
    INBOX_MESSAGE_LIMIT,
    ClusterKeys,
    ForgedMessage,
    ReplayedMessage,
    ReplayGuard,
    check_channel_prefix,
    check_instance_id,
    decode_bus_message,
    encode_bus_message,
    open_bus_message,
    seal_bus_message,
)
from .connection import (
    MALFORMED_LOG_INTERVAL,
    RedisLink,
    load_coredis,
    logger,
    new_client,
    probe,
    redact,
)
from .heartbeat import Heartbeat
from .sessions import SessionLeases
from .workers import Deliver, WorkerLink

if TYPE_CHECKING:
    import coredis

__all__ = ["RedisNotificationBus"]


class RedisNotificationBus(RedisLink, LocalNotificationBus):
    """A :class:`~mcp_trio.server.NotificationBus` shared by every worker subscribed to one Redis channel.

    A notification published in this worker reaches its own peers at once (as with
    :class:`~mcp_trio.server.LocalNotificationBus`, without a round trip) and is published on the channel
    ``<channel_prefix>:notifications``; every other worker's bus hands it to that worker's peers (2025
    sessions, 2026 ``subscriptions/listen`` streams).  Each message names the ``instance_id`` of the bus
    that sent it, so a bus ignores its own echo: each worker delivers each notification once.  The bus
    carries list changes and resource updates; what a worker reads from the channel is validated as a
    message from a socket, and a malformed one is logged and dropped.

    Every message a bus writes to Redis is signed (HMAC-SHA256) with the cluster's key ring: ``secret``
    (a key, or a sequence of keys: the first signs, every one verifies), else the ring in
    ``MCP_TRIO_REQUEST_STATE_SECRET``, the one the workers already share for ``requestState``; without
    either the bus refuses to be made.  A message that the ring does not verify (written by anything
    without the secret, or older than five minutes) is dropped and counted as ``forged``; each signed
    message carries a random nonce, and a copy of one this bus accepted before (published again) is
    dropped and counted as ``replayed``.

    Its connection runs in :meth:`run`, which :meth:`MCPApp.run <mcp_trio.MCPApp.run>` (and so
    hypercorn's lifespan, ``serve`` and ``serve_h11``) starts in the app's nursery: it ends with the
    app.  While Redis cannot be reached, notifications reach this worker's peers only (those published
    meanwhile are not sent later), the outage is logged once, and the bus retries with exponential
    backoff (``retry_initial`` doubling up to ``retry_max`` seconds, with jitter).  :meth:`statistics`
    (``notification_bus`` in :meth:`MCPApp.statistics <mcp_trio.MCPApp.statistics>`) tells its state.

    ``url``: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or ``unix://path``.
    ``outbox``: notifications waiting to be published; past that many (Redis too slow) one is dropped
    for the other workers.  ``command_timeout``: a Redis command (a ``PUBLISH``, the subscriber's
    keep-alive ``PING``) that takes longer counts as a lost connection.  ``inbox_maxlen`` and
    ``inbox_max_bytes`` bound a worker's inbox (entries not yet read: forwarding past them is
    refused), and ``inbox_ttl`` is how long an inbox nobody reads is kept (see ``attach_worker``).
    """

    _name = "Redis notification bus"
    _outage_effect = "notifications reach this worker's peers only"
    _back_effect = "; notifications reach the other workers again"

    def __init__(
        self,
        url: str,
        *,
        channel_prefix: str = "mcp-trio",
        instance_id: str | None = None,
        outbox: int = 1024,
        retry_initial: float = 0.1,
        retry_max: float = 2.0,
        connect_timeout: float = 5.0,
        command_timeout: float = 5.0,
        heartbeat_interval: float = 1.0,
        heartbeat_ttl: float = 5.0,
        inbox_maxlen: int = 1000,
        inbox_max_bytes: int = 64 * 1024 * 1024,
        inbox_ttl: float = 60.0,
        secret: bytes | Sequence[bytes] | None = None,
    ) -> None:
        RedisLink.__init__(self, url, retry_initial, retry_max)
        if outbox < 1:
            raise ValueError("outbox must be at least 1")
        if not 0 < heartbeat_interval < heartbeat_ttl or inbox_maxlen < 1:
            raise ValueError("0 < heartbeat_interval < heartbeat_ttl, and inbox_maxlen at least 1")
        if inbox_max_bytes < INBOX_MESSAGE_LIMIT or not inbox_ttl >= heartbeat_ttl:
            raise ValueError(
                f"inbox_max_bytes must be at least {INBOX_MESSAGE_LIMIT} (one body), and inbox_ttl at "
                "least heartbeat_ttl"
            )
        LocalNotificationBus.__init__(self)
        self._keys = ClusterKeys.of(secret)
        """The cluster's key ring: signs what this bus writes, verifies what it reads."""
        self.prefix = check_channel_prefix(channel_prefix)
        self.channel = f"{self.prefix}:notifications"
        self.instance_id = check_instance_id(instance_id or secrets.token_hex(8))
        self.heart = Heartbeat(self._keys, self.prefix, self.instance_id, heartbeat_interval, heartbeat_ttl)
        """This worker's heartbeat (once :meth:`attach_worker` made the bus a worker's link)."""
        self.session_leases = SessionLeases(
            self._keys, self.prefix, self.heart, self._connected_client, command_timeout
        )
        """The records, leases and epochs of this worker's sessions, for their adoption by other
        workers (``mcp_trio.redis.sessions``; see docs/deploy/workers)."""
        self.worker_link = WorkerLink(
            self._keys,
            self.prefix,
            self.heart,
            self.session_leases,
            self._connected_client,
            self._client,
            self._log_malformed,
            command_timeout,
            heartbeat_interval,
            heartbeat_ttl,
            inbox_maxlen,
            inbox_max_bytes,
            inbox_ttl,
        )
        """This worker's heartbeat, session hash, inbox and forwarding, once :meth:`attach_worker`
        made the bus a worker's link (``mcp_trio.redis.workers``)."""
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self._outbox_send, self._outbox = trio.open_memory_channel[bytes](outbox)
        self._warned_not_running = False
        self._malformed_logged_at: float | None = None
        self._live: coredis.Redis[bytes] | None = None
        """The connected client, while there is one (what :meth:`forward_to_worker` uses)."""
        self._seen = ReplayGuard(time.time())
        """The nonces of the messages accepted from the channel (each is delivered once)."""
        self._counts = dict.fromkeys(
            (
                "published",
                "received",
                "echoes",
                "malformed",
                "forged",
                "replayed",
                "local_only",
                "dropped",
                "connects",
                "failures",
            ),
            0,
        )

    def statistics(self) -> dict[str, Any]:
        """The bus's state and counters: notifications ``published`` to Redis, ``received`` from other
        workers and delivered here, ``echoes`` (its own, ignored), ``malformed`` (dropped), ``forged``
        (dropped: not signed by the key ring), ``replayed`` (dropped: a copy of a signed message
        accepted before, or one signed before this bus was made; a worker's inbox counts its own as
        ``inbox_replayed``), ``local_only`` (published while Redis was unreachable, or of a kind the
        bus does not carry), ``dropped`` (the outbox was full), ``connects``,
        ``failures`` (failed attempts and lost connections), ``key_id`` (of the key that signs) and the
        ``last_error``.  A worker's link adds its ``worker_id``, ``sessions_published``, what it
        forwarded (``forwarded``, ``forward_unknown``, ``forward_full``, ``forward_gone``,
        ``forward_unavailable``) and what its inbox got (``inbox_received``, ``inbox_delivered``,
        ``inbox_dropped``, ``inbox_malformed``, ``inbox_forged``) and what it did with sessions of
        other workers and its own (``sessions_recorded`` in Redis, ``adopted``, ``released``,
        ``lost``, ``records_forged``, ``heartbeats_forged``, ``adopt_unknown``, ``adopt_unavailable``,
        ``confirmed``, ``confirm_lost``, ``heartbeats_changed``, and ``draining``)."""
        stats: dict[str, Any] = {
            "state": self._state,
            "url": redact(self.url),
            "channel": self.channel,
            "instance_id": self.instance_id,
            "key_id": self._keys.key_id,
            "subscribers": len(self),
            "last_error": self._last_error,
            **self._counts,
        }
        if self.worker_link.worker_id is not None:
            stats.update(self.worker_link.statistics())
            stats.update(self.session_leases.statistics())
            stats["draining"] = self.heart.draining
        return stats

    # -- publishing ----------------------------------------------------------------------------

    async def publish(self, message: dict[str, Any], uri: str | None = None) -> None:
        self.deliver(message, uri)  # this worker's peers first, without waiting for Redis
        self._forward(message, uri)
        await trio.lowlevel.checkpoint()

    def _forward(self, message: dict[str, Any], uri: str | None) -> None:
        if self._state != "connected":
            self._counts["local_only"] += 1
            if not self._running and not self._warned_not_running:
                self._warned_not_running = True
                logger.warning(
                    "the Redis notification bus is not running (MCPApp.run runs it): notifications "
                    "reach this process's peers only"
                )
            return
        data = encode_bus_message(self.instance_id, message, uri)
        if data is None:
            self._counts["local_only"] += 1
            return
        try:
            self._outbox_send.send_nowait(seal_bus_message(self._keys, self.channel, data, time.time()))
        except trio.WouldBlock:
            self._counts["dropped"] += 1

    # -- the connection ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a connection to Redis (subscriber and publisher) until cancelled, reconnecting as
        needed.  Reports started at once: the app does not wait for Redis.  One app runs a bus."""
        if self._running:
            raise RuntimeError("this RedisNotificationBus is already running (one app runs a bus)")
        await self._keep_connected(self._connect_and_serve, task_status)

    def _disconnected(self) -> None:
        self._discard_outbox()
        self.heart.link_lost()

    async def _connect_and_serve(self) -> bool:
        """One connection, until it fails (never raises but cancellation); whether it got connected."""
        return await self._contain_attempt(self._serve)

    async def _serve(self) -> None:
        await probe(self.url, self.connect_timeout)
        client = self._client()
        async with client:
            retry = load_coredis().retry.NoRetryPolicy()
            async with client.pubsub(
                channels=[self.channel], ignore_subscribe_messages=True, retry_policy=retry
            ) as pubsub:
                async with trio.open_nursery() as nursery:
                    if self.worker_link.worker_id is not None:
                        await nursery.start(self.worker_link.run, client)
                    self._connected(client, f" ({self.channel})")
                    nursery.start_soon(self._publisher, client)
                    async for item in pubsub:
                        self._on_item(item)
                    nursery.cancel_scope.cancel()
                raise ConnectionError("the subscription ended")

    def attach_worker(self, worker_id: str, deliver: Deliver) -> None:
        """Make this bus a worker's link (:class:`~mcp_trio.MCPApp` calls it when its config has a
        ``worker_id``).  While connected it keeps

        - the heartbeat key ``<prefix>:worker:<id>`` (signed, TTL ``heartbeat_ttl``, renewed every
          ``heartbeat_interval``);
        - the hash ``<prefix>:sessions:<id>`` of its live sessions, with the same TTL: a keyed hash
          of each session id -> a keyed hash of its principal's identity, so that another worker
          forwards only what is for a session this one has, sent by that session's principal, and
          no session id or principal is stored in Redis;
        - the records and leases of its sessions (``session_leases``);
        - and reads the stream ``<prefix>:inbox:<id>``, hands each entry signed by the key ring to
          ``deliver``, and deletes what it read.  The stream and its byte counter
          ``<prefix>:inbox-bytes:<id>`` expire ``inbox_ttl`` after the last entry added."""
        self.worker_link.attach_worker(worker_id, deliver)

    def _connected_client(self) -> coredis.Redis[bytes] | None:
        return self._live if self._state == "connected" else None

    def _client(self) -> coredis.Redis[bytes]:
        return new_client(self.url, self.connect_timeout, self.command_timeout, self.instance_id)

    async def _publisher(self, client: coredis.Redis[bytes]) -> None:
        async for data in self._outbox:
            await client.publish(self.channel, data)
            self._counts["published"] += 1

    def _discard_outbox(self) -> None:
        """What was queued but not sent when the connection went: never sent late."""
        while True:
            try:
                self._outbox.receive_nowait()
            except trio.WouldBlock:
                return
            self._counts["local_only"] += 1

    # -- receiving -----------------------------------------------------------------------------

    def _on_item(self, item: Any) -> None:
        if not isinstance(item, dict) or item.get("type") != "message":
            return  # subscription acknowledgements and the like
        try:
            found = decode_bus_message(
                open_bus_message(self._keys, self.channel, item.get("data"), time.time(), seen=self._seen)
            )
        except ReplayedMessage as exc:
            self._counts["replayed"] += 1
            what = f"message on {self.channel}"
            self._log_malformed(what, str(exc), self._counts["replayed"], replayed=True)
            return
        except ForgedMessage as exc:
            self._counts["forged"] += 1
            self._log_malformed(f"message on {self.channel}", str(exc), self._counts["forged"], forged=True)
            return
        except ValueError as exc:
            self._counts["malformed"] += 1
            self._log_malformed(f"message on {self.channel}", str(exc), self._counts["malformed"])
            return
        if found.sender == self.instance_id:
            self._counts["echoes"] += 1
            return
        self._counts["received"] += 1
        self.deliver(found.message, found.uri)

    def _log_malformed(
        self, what: str, reason: str, so_far: int, *, forged: bool = False, replayed: bool = False
    ) -> None:
        """One WARNING line per :data:`MALFORMED_LOG_INTERVAL` at most (the others are only counted):
        what was dropped, why, and how many so far."""
        now = trio.current_time()
        last = self._malformed_logged_at
        if last is None or now - last >= MALFORMED_LOG_INTERVAL:
            self._malformed_logged_at = now
            kind = "a replayed" if replayed else "an unauthenticated" if forged else "a malformed"
            logger.warning(
                "Redis notification bus: dropped %s %s (%s; %d so far)", kind, what, reason, so_far
            )


# -- tasks: RedisTaskStore ----------------------------------------------------------------------
