"""The connection to Redis that a bus and a task store share: coredis, loaded on first use, and
:class:`RedisLink`, a connection kept until cancelled (reconnecting with backoff, an outage reported
once).

Only this package imports coredis, and only once a bus or a store is made: ``import mcp_trio`` never
does.
"""

from __future__ import annotations

import contextvars
import logging
import math
import random
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import trio

from .._runtime.containment import contained, split_fatal

if TYPE_CHECKING:
    from types import ModuleType

    import coredis

logger = logging.getLogger("mcp_trio.redis")
"""One logger for the whole package (what operators filter on)."""

State = Literal["stopped", "connecting", "connected", "disconnected"]
_T = TypeVar("_T")
MALFORMED_LOG_INTERVAL = 10.0
"""Seconds between two log lines about malformed messages (the ones between are only counted)."""
_URL = re.compile(r"(rediss?|unix)://", re.IGNORECASE)
_USERINFO = re.compile(r"//[^/@]*@")


IN_BUS: contextvars.ContextVar[bool] = contextvars.ContextVar("mcp_trio_redis_bus", default=False)
"""True in a bus's (and a task store's) tasks, and so in the tasks coredis starts for them."""


class _BusConnectionLogs(logging.Filter):
    """On the ``coredis`` logger: what coredis logs about a bus's connections (an error per failed
    attempt while Redis is down) becomes a DEBUG line of ``mcp_trio.redis``, which reports outages
    itself, once.  Records of other coredis clients pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not IN_BUS.get():
            return True
        logger.debug("coredis: %s", record.getMessage())
        return False


_FILTER = _BusConnectionLogs()


def load_coredis() -> ModuleType:
    try:
        import coredis
    except ImportError as exc:
        raise ImportError(
            "mcp_trio.redis needs coredis: install the extra with pip install 'mcp_trio[redis]'"
        ) from exc
    coredis_logger = logging.getLogger("coredis")
    if _FILTER not in coredis_logger.filters:
        coredis_logger.addFilter(_FILTER)
    return coredis


def redact(url: str) -> str:
    """``url`` without its password (what logs and statistics show)."""
    return _USERINFO.sub("//***@", url)


def check_url(url: str) -> None:
    """ValueError unless ``url`` is a Redis URL this package connects to."""
    if not isinstance(url, str) or not _URL.match(url):
        raise ValueError("a Redis URL starts with redis://, rediss:// or unix://")


class CallFailed(Exception):
    """A command that :meth:`RedisLink._call` could not complete (already counted and described)."""


class RedisLink:
    """A connection to Redis kept until cancelled: what :class:`~mcp_trio.redis.RedisNotificationBus`
    and :class:`~mcp_trio.redis.RedisTaskStore` share.  Each attempt (one connection, run by
    :meth:`_contain_attempt`) lasts until its connection fails; the next one follows with exponential backoff
    (``retry_initial`` doubling up to ``retry_max`` seconds, with jitter).  An outage is logged once,
    and its end once."""

    _name: str
    """How log lines name the link (``Redis notification bus``)."""
    _outage_effect: str
    """What an outage means for the app, in the log line that reports it."""
    _back_effect: str
    """What the end of an outage means, in the log line that reports it ('' for nothing)."""
    _live: coredis.Redis[bytes] | None
    _counts: dict[str, int]
    """The subclass's counters, ``connects`` and ``failures`` among them (and ``unavailable``, for a
    store that uses :meth:`_call`)."""
    timeout: float
    """Of one command of :meth:`_call` (a store's)."""

    def _client(self) -> coredis.Redis[bytes]:
        raise NotImplementedError

    def __init__(self, url: str, retry_initial: float, retry_max: float) -> None:
        """Checks what every link needs (coredis importable, the URL, the backoff), so that a wrong
        one fails where the link is made, not in the app's nursery; a subclass calls it first."""
        load_coredis()
        check_url(url)
        if not 0 < retry_initial <= retry_max:
            raise ValueError("0 < retry_initial <= retry_max")
        self.url = url
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._state: State = "stopped"
        self._running = False
        self._outage_logged = False
        self._outage_since: float | None = None
        self._last_error: str | None = None
        self._attempt_connected = False

    @property
    def state(self) -> State:
        """``stopped`` (not running), ``connecting`` (the first attempt), ``connected`` or
        ``disconnected`` (Redis unreachable: retrying)."""
        return self._state

    @property
    def link_up(self) -> bool:
        """Whether the link is connected to Redis now (what an operations listener's ``/readyz``
        asks: not while it connects for the first time, nor while Redis is unreachable)."""
        return self._state == "connected"

    async def _keep_connected(
        self, serve_once: Callable[[], Awaitable[bool]], task_status: trio.TaskStatus[None]
    ) -> None:
        """Run ``serve_once`` (one connection until it fails; whether it got connected) again and
        again until cancelled.  Reports started at once: the app does not wait for Redis."""
        self._running = True
        self._state = "connecting"
        self._outage_logged = False
        in_bus = IN_BUS.set(True)  # coredis's tasks for this link inherit it (see _BusConnectionLogs)
        attempt = 0
        try:
            task_status.started()
            while True:
                connected = await serve_once()
                self._state = "disconnected"
                self._disconnected()
                attempt = 1 if connected else attempt + 1
                delay = min(self.retry_max, self.retry_initial * 2 ** (attempt - 1))
                await trio.sleep(delay * random.uniform(0.5, 1.0))
        finally:
            IN_BUS.reset(in_bus)
            self._live = None
            self._running = False
            self._state = "stopped"
            self._disconnected()

    def _disconnected(self) -> None:
        """Called each time the connection is gone (and when the link stops)."""

    async def _call(self, call: Callable[[coredis.Redis[bytes]], Awaitable[_T]]) -> _T:
        """``call`` on the connected client (or, while there is none, on a connection of its own), within
        ``timeout`` (a store's commands and reads).  A failure is counted (``unavailable``), kept as
        ``last_error`` and raised as :class:`CallFailed`; one that broke the connected client (not an
        error answer of Redis) drops it and calls :meth:`_live_lost`: the next calls connect on their own
        until :meth:`_keep_connected` is connected again."""
        client = self._live
        in_store = IN_BUS.set(True)  # what coredis logs of a connection of its own is ours to report
        try:
            with trio.fail_after(self.timeout):
                if client is not None:
                    return await call(client)
                await probe(self.url, self.timeout)
                async with self._client() as own:
                    return await call(own)
        except BaseException as exc:
            fatal, rest = split_fatal(exc)
            if fatal is not None:
                raise
            assert rest is not None
            leaf = leaf_of(rest)
            self._counts["unavailable"] += 1
            self._last_error = describe(leaf, self.timeout)
            if client is not None and self._live is client and not isinstance(leaf, response_error()):
                self._live = None
                self._live_lost()
            raise CallFailed(self._last_error) from None
        finally:
            IN_BUS.reset(in_store)

    def _live_lost(self) -> None:
        """:meth:`_call` dropped the connected client, which failed."""

    async def _contain_attempt(self, serve: Callable[[], Awaitable[None]]) -> bool:
        """Run one connection (``serve``, which calls :meth:`_connected` once connected and raises
        when the connection ends) until it fails; never raises but cancellation.  Whether it got
        connected."""
        self._attempt_connected = False
        try:
            with contained(self._name, report=False) as failure:
                await serve()
        finally:
            self._live = None
        if failure.caught is not None:
            if trio.current_effective_deadline() == -math.inf:
                # The app is ending: coredis's cleanup can fail on a connection it is tearing down
                # (and its error hides the cancellation).  Not an outage: let the cancellation on.
                logger.debug("%s: error while shutting down", self._name, exc_info=failure.caught)
                await trio.lowlevel.checkpoint()
            self._on_failure(failure.caught, was_connected=self._attempt_connected)
        return self._attempt_connected

    def _connected(self, client: coredis.Redis[bytes], where: str) -> None:
        """The attempt is connected (``where``: what the info line adds after the URL)."""
        self._attempt_connected = True
        self._live = client
        self._state = "connected"
        self._counts["connects"] += 1
        if self._outage_logged:
            down = trio.current_time() - (self._outage_since or trio.current_time())
            logger.warning(
                "%s: connected to %s again after %.1f s%s",
                self._name,
                redact(self.url),
                down,
                self._back_effect,
            )
        else:
            logger.info("%s: connected to %s%s", self._name, redact(self.url), where)
        self._outage_logged = False
        self._outage_since = None

    def _describe_failure(self, leaf: BaseException) -> str:
        """A failure as ``last_error`` and the log lines show it."""
        return f"{type(leaf).__name__}: {leaf}"[:300]

    def _on_failure(self, exc: BaseException, *, was_connected: bool) -> None:
        leaf = leaf_of(exc)
        self._counts["failures"] += 1
        self._last_error = self._describe_failure(leaf)
        if self._outage_logged:
            logger.debug("%s: still unreachable (%s)", self._name, self._last_error)
            return
        self._outage_logged = True
        self._outage_since = trio.current_time()
        what = "lost its connection to" if was_connected else "cannot reach"
        expected = isinstance(leaf, expected_errors())
        logger.log(
            logging.WARNING if expected else logging.ERROR,
            "%s %s %s (%s): %s until it is back; retrying",
            self._name,
            what,
            redact(self.url),
            self._last_error,
            self._outage_effect,
            exc_info=None if expected else exc,
        )


async def probe(url: str, seconds: float) -> None:
    """Open and close a plain connection first: a refused one raises OSError here.  (A coredis
    connection that fails to connect leaves memory streams unclosed behind it, a ResourceWarning
    each; a worker retrying while Redis is down would make one per attempt.)"""
    parts = urlsplit(url)
    try:
        with trio.fail_after(seconds):
            if parts.scheme.lower() == "unix":
                stream: trio.abc.Stream = await trio.open_unix_socket(parts.path)
            else:
                stream = await trio.open_tcp_stream(parts.hostname or "localhost", parts.port or 6379)
            await stream.aclose()
    except OSError as exc:  # trio's "all attempts failed" says less than its cause
        cause = leaf_of(exc.__cause__) if exc.__cause__ is not None else exc
        raise OSError(str(cause if isinstance(cause, OSError) else exc)) from exc


def new_client(
    url: str, connect_timeout: float, command_timeout: float, instance_id: str
) -> coredis.Redis[bytes]:
    module = load_coredis()
    client: coredis.Redis[bytes] = module.Redis.from_url(
        url,
        retry_policy=module.retry.NoRetryPolicy(),
        connect_timeout=connect_timeout,
        stream_timeout=command_timeout,
        client_name=f"mcp-trio-{instance_id}",
    )
    return client


class _WrongType:
    """What :func:`get_value` reads from a key that holds something else than a string."""


async def get_value(client: coredis.Redis[bytes], key: str) -> object:
    try:
        return await client.get(key)
    except load_coredis().exceptions.WrongTypeError:
        return _WrongType()


_CLOSING_CLASSES: dict[type, type] = {}


def closing_connections(client: coredis.Redis[bytes]) -> coredis.Redis[bytes]:
    """``client``, whose pool makes connections that close their memory streams however they end.

    A coredis connection opens its buffers (AnyIO memory streams) when it is made, but closes them
    only once it is connected: one that fails to connect (refused, or cancelled by a timeout) leaves
    them to the garbage collector, a ResourceWarning each.  A store's commands may make a connection
    right when Redis goes away, so its pool's connections close them when they end."""
    pool = client.connection_pool
    base = pool.connection_class
    closing = _CLOSING_CLASSES.get(base)
    if closing is None:
        import anyio  # coredis's own dependency
        import anyio.streams.memory as memory

        streams = (memory.MemoryObjectSendStream, memory.MemoryObjectReceiveStream)

        async def run(self: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            try:
                await base.run(self, task_status=task_status)
            finally:
                for value in list(vars(self).values()):
                    if isinstance(value, streams):
                        value.close()

        closing = _CLOSING_CLASSES[base] = type(f"Closing{base.__name__}", (base,), {"run": run})
    pool.connection_class = closing
    return client


def describe(error: BaseException, timeout: float) -> str:
    """A failure in a log line or ``last_error`` (a timeout of ours says what it waited for)."""
    if isinstance(error, trio.TooSlowError):
        return f"no answer within {timeout:g} s"
    return f"{type(error).__name__}: {error}"[:300]


def token(name: str) -> Any:
    return getattr(load_coredis().tokens.PureToken, name)


def response_error() -> type[BaseException]:
    """An error Redis answered (not a lost connection)."""
    error: type[BaseException] = load_coredis().exceptions.ResponseError
    return error


def as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def stream_id(value: bytes) -> tuple[int, int]:
    millis, _, seq = value.partition(b"-")
    try:
        return int(millis), int(seq or b"0")
    except ValueError:
        return (0, 0)


def expected_errors() -> tuple[type[BaseException], ...]:
    """What a lost or refused connection raises (logged as a warning, without a traceback)."""
    import anyio  # coredis's own dependency

    redis_error: type[BaseException] = load_coredis().exceptions.RedisError
    closed = (anyio.ClosedResourceError, anyio.BrokenResourceError)
    return (OSError, TimeoutError, trio.TooSlowError, redis_error, *closed)


def leaf_of(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, for a short log line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
