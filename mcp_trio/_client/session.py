"""The MCP client: :class:`ClientSession`, and the one way a session is opened over any transport,
behind :func:`open_client_session` (Streamable HTTP), :func:`open_stdio_client` (a child process) and
:func:`open_websocket_client`, async context managers that each own a nursery."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Unpack

import httpx
import trio

from .._observe.telemetry import SessionClock
from .._protocol import versions
from .._protocol.tasks import TaskInfo
from ..errors import SessionExpired, TaskCancelled, TaskError, TransportError
from . import callbacks
from .api import TypedAPI
from .callbacks import ElicitationHandler as ElicitationHandler
from .callbacks import LogHandler as LogHandler
from .callbacks import NotificationHandler as NotificationHandler
from .callbacks import ProgressHandler as ProgressHandler
from .callbacks import RootsHandler as RootsHandler
from .callbacks import SamplingHandler as SamplingHandler
from .callbacks import TaskStatusHandler as TaskStatusHandler
from .core import Transport
from .http import HTTPTransport
from .listen import ListenAPI, Subscription
from .messages import MessageTransport
from .observe import error_type
from .options import SessionOptions, checked
from .renewal import Renewal
from .retry import DEFAULT_RETRY_ATTEMPTS, DEFAULT_RETRY_BUDGET, RetryPolicy
from .skills import SkillsAPI
from .stdio import StdioTransport, start_process
from .websocket import WebSocketTransport
from .wire import MAX_MESSAGE_SIZE

GET_STREAM_WAIT = 5.0
"""How long opening a 2025-era session waits for the GET stream's first answer before going on."""

__all__ = [
    "ClientSession",
    "SessionExpired",
    "SessionOptions",
    "Subscription",
    "TaskCancelled",
    "TaskError",
    "TaskInfo",
    "TransportError",
    "open_client_session",
    "open_stdio_client",
    "open_websocket_client",
]
__all__ += callbacks.__all__  # the callbacks' types

logger = logging.getLogger(__name__)


class ClientSession(TypedAPI, ListenAPI, SkillsAPI):
    """A conversation with one MCP server, in the era the server speaks (see :func:`open_client_session`)."""


@asynccontextmanager
async def open_client_session(
    url: str,
    *,
    http: httpx.AsyncClient | None = None,
    auth: httpx.Auth | None = None,
    get_stream: bool = True,
    delete_grace: float = 2.0,
    max_message_size: int = MAX_MESSAGE_SIZE,
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
    renew_on_expiry: bool = True,
    **options: Unpack[SessionOptions],
) -> AsyncIterator[ClientSession]:
    """Open a session with the MCP server at ``url``; it ends when the block does.

    ``mode="auto"`` tries the 2026-07-28 era (``server/discover``) and falls back to ``initialize``;
    ``"modern"`` and ``"legacy"`` choose.  A 2025-era session opens the standalone GET stream before the
    block starts (a 405 or a failure there never harms requests; a server slow to answer it holds the
    opening for at most ``GET_STREAM_WAIT`` seconds) and sends DELETE on exit, bounded by
    ``delete_grace`` seconds.
    Requests still running when the block ends are cancelled.  The session owns a nursery: handlers of
    server-to-client requests and the GET stream run in it.

    The keyword arguments every opener takes (``**options``, typed as ``SessionOptions``), each optional:

    - ``mode``: ``"auto"`` (the default), ``"modern"`` or ``"legacy"``, as above;
    - ``client_info``: the ``Implementation`` the client names itself with (default
      ``{"name": "mcp-trio", "version": ...}``);
    - ``sampling``, ``elicitation``, ``roots``: the callbacks that answer the server's requests (None,
      the default: the capability is not declared);
    - ``on_notification``, ``on_log``: the callbacks that get the server's notifications;
    - ``log_level``: the server's logs from this level up (in both eras; None: the server's default);
    - ``legacy_version``: the version ``initialize`` asks for (default: the latest 2025-era one);
    - ``tasks``: whether a 2026-era session declares the tasks extension (default True, see below);
    - ``client_session_id``: the UUID the session names its conversation with (default: a fresh
      random one; :attr:`ClientSession.client_session_id`), sent as ``Mcp-Client-Session-Id`` on every
      HTTP request and as ``_meta.clientSessionId`` in every request, on every transport (following
      SEP-2822, a proposal that may change); pass one to keep a conversation's id across sessions.

    An unknown keyword is a :class:`TypeError`, as with any function.

    The callbacks (``sampling``, ``elicitation``, ``roots``, ``on_log``, ``on_notification``, and
    ``progress=`` of :meth:`ClientSession.call_tool`) may be plain or async functions; a plain one runs
    in a Trio task of the session and must not block.  Anything that is not callable is refused with
    :class:`TypeError` before anything is sent.  An exception from ``sampling``, ``elicitation`` or
    ``roots`` is the error answer to the server's request (2025 era), or is raised out of the call
    whose input it was to provide (2026 era); one from ``progress`` is raised out of its call; one from
    ``on_log`` or ``on_notification`` out of the call whose answer carried the notification, or, for a
    notification that arrived outside any call, out of this block, which it ends.

    ``auth`` authenticates every request of the session (the POSTs, the GET stream, the DELETE):
    :class:`mcp_trio.auth.OAuth` for an OAuth-protected server, or any ``httpx.Auth``.  With ``http``
    too, it is applied per request and takes the place of that client's own ``auth``.

    ``tasks``: a 2026-era session declares the tasks extension (``io.modelcontextprotocol/tasks``) in
    every request, so a server may answer ``tools/call`` with a task, which
    :meth:`ClientSession.call_tool` then waits for; ``tasks=False`` declares nothing (a tool that
    requires a task is then refused with :class:`RPCError` -32021).

    The server is not trusted: a JSON answer or an SSE event longer than ``max_message_size`` bytes
    (default 4 MiB), or one that is not JSON the client accepts (nested deeper than 128 levels, a
    number over 1000 characters or out of range, a lone surrogate, bytes that are not UTF-8), fails its
    call with :class:`TransportError` (an event of the kind is skipped and logged); an HTTP error
    answer's body is read up to 64 KiB.

    The client recovers by itself (docs/client.md, "Recovery"):

    - every message (a request, a notification, an answer to the server, the GET stream, a
      resumption, the DELETE) answered 503 or 429 is sent again after the wait the answer's
      ``Retry-After`` asks for (seconds or an HTTP date; without one, 0.5 s doubling up to 8 s), plus
      jitter: at most ``retry_attempts`` times in all (default 10), waiting at most ``retry_budget``
      seconds in all (default 30).  Then, or at once if ``Retry-After`` asks for more than is left,
      the call raises :class:`~mcp_trio.errors.ServerBusy` (a :class:`TransportError` with ``status``
      and ``retry_after``).  ``retry_attempts=1`` retries nothing.
    - a 2025-era session the server answers 404 for (to any message, or to a reconnection of the GET
      stream) is renewed: a new ``initialize`` with the same options (the log level and the resource
      subscriptions applied again, the GET stream reopened) serves the calls that follow, however
      many calls met the 404 (one renewal; calls made meanwhile wait for it).  The requests of the
      old session raise :class:`SessionExpired`: the one answered 404 (the server processed none of
      it), and one still in flight that needs the old session again (to resume its stream).  What
      the server kept for the old session is lost (its state, the events of its streams, tasks).
      :attr:`ClientSession.session_id` is the new id, :attr:`ClientSession.renewals` counts the
      renewals.  ``renew_on_expiry=False``: no renewal; every call the server answers 404 raises
      :class:`SessionExpired` (open a new session).
    """
    checked("open_client_session", options)
    retry = RetryPolicy(retry_attempts, retry_budget)
    if auth is not None and not isinstance(auth, httpx.Auth):
        raise TypeError(f"auth= takes an httpx.Auth (e.g. mcp_trio.auth.OAuth(...)), not {auth!r:.200}")
    client = http or httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None))
    transport = HTTPTransport(client, url, auth=auth, max_message_size=max_message_size, retry=retry)

    async def finish() -> None:
        if not transport.modern:  # a 2025-era session ends with DELETE
            with trio.CancelScope(shield=True), trio.move_on_after(delete_grace):
                try:
                    await transport.delete()
                except TransportError as exc:
                    logger.info("DELETE failed: %r", exc)

    async def close() -> None:
        if http is None:  # the client is ours
            with trio.CancelScope(shield=True):
                await client.aclose()

    async with _open(
        transport, options, get_stream=get_stream, finish=finish, close=close, renew=renew_on_expiry
    ) as session:
        yield session


@asynccontextmanager
async def open_stdio_client(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    terminate_grace: float = 2.0,
    **options: Unpack[SessionOptions],
) -> AsyncIterator[ClientSession]:
    """Start ``command`` as an MCP server speaking stdio and open a session with it.

    On exit the child's stdin is closed; a child still running ``terminate_grace`` seconds later gets
    SIGTERM, then SIGKILL after as long again.  The child is always reaped.  The keyword arguments
    every opener takes (``mode``, the callbacks, ``tasks``, ...) are those of
    :func:`open_client_session`; everything a stdio server sends outside a response arrives outside
    any call, so an exception from ``on_log`` or ``on_notification`` ends the session."""
    checked("open_stdio_client", options)
    transport = StdioTransport(await start_process(command, env))

    close = partial(transport.aclose, terminate_grace)
    async with _open(transport, options, get_stream=False, finish=close, close=close) as session:
        yield session


@asynccontextmanager
async def open_websocket_client(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    max_message_size: int = MAX_MESSAGE_SIZE,
    connect_timeout: float = 30.0,
    close_timeout: float = 2.0,
    **options: Unpack[SessionOptions],
) -> AsyncIterator[ClientSession]:
    """Open a session with the MCP server at ``url`` over WebSocket (``ws://`` or ``wss://``; an
    ``http(s)://`` URL is taken as its ``ws(s)://`` twin), subprotocol ``mcp``; it ends when the block
    does, with the WebSocket close handshake (bounded by ``close_timeout`` seconds).

    The connection is the session: a 2025-era session
    (``initialize``) or 2026-07-28 requests (``mode`` as for :func:`open_client_session`), with the same
    :class:`ClientSession` API and the keyword arguments every opener takes (those of
    :func:`open_client_session`);
    everything the server sends outside a response arrives outside any call, as over stdio.
    ``headers`` go with the upgrade request (``Authorization: Bearer ...`` for a protected server);
    ``ssl_context`` is for ``wss://``.  A refused upgrade (an HTTP answer such as 401, or a server that
    does not speak the ``mcp`` subprotocol), a message longer than ``max_message_size`` from the
    server, or no connection within ``connect_timeout`` raise :class:`TransportError`."""
    checked("open_websocket_client", options)
    if url.startswith(("http://", "https://")):
        url = "ws" + url[4:]
    try:
        with trio.fail_after(connect_timeout):
            transport = await WebSocketTransport.connect(
                url, headers=headers, ssl_context=ssl_context, max_message_size=max_message_size
            )
    except trio.TooSlowError:
        raise TransportError(f"no WebSocket connection to {url} within {connect_timeout} s") from None

    close = partial(transport.aclose, close_timeout)
    async with _open(transport, options, get_stream=False, finish=close, close=close) as session:
        yield session


@asynccontextmanager
async def _open(
    transport: Transport,
    options: SessionOptions,
    *,
    get_stream: bool,
    finish: Callable[[], Awaitable[None]],
    close: Callable[[], Awaitable[None]],
    renew: bool = False,
) -> AsyncIterator[ClientSession]:
    """The life of a session over any transport, in its own nursery: the handshake (``mode``), the
    block, ``finish`` (still in the nursery, which is cancelled by then) and, whatever happened,
    ``close``.  A 2025-era session over HTTP has a :class:`Renewal`: its GET stream (``get_stream``),
    and its renewal after a 404 (``renew``).  Timed (``mcp.client.session.duration``) from its opening
    to the end of ``close``, when the session's telemetry records (see :mod:`.observe`)."""
    mode = options.get("mode", "auto")
    body_error: BaseException | None = None
    session: ClientSession | None = None
    clock: SessionClock | None = None
    ended_by: BaseException | None = None
    try:
        try:
            async with trio.open_nursery() as nursery:
                session = ClientSession(transport, nursery, options)
                clock = session.telemetry.session(transport.carrier)
                if isinstance(transport, MessageTransport):
                    await nursery.start(transport.read_loop, session._dispatch)
                if mode == "modern" or (mode == "auto" and await session._discover()):
                    session._set_era(versions.LATEST_MODERN)
                else:
                    version = options.get("legacy_version", versions.LATEST.name)
                    await session._initialize(version)
                    if isinstance(transport, HTTPTransport):
                        session._renewal = Renewal(
                            session,
                            transport,
                            version=version,
                            enabled=renew,
                            get_stream=get_stream,
                            get_stream_wait=GET_STREAM_WAIT,
                        )
                        await session._renewal.open_get_stream()
                try:
                    yield session
                except BaseException as exc:  # re-raised below as it is, not wrapped in an ExceptionGroup
                    body_error = exc
                finally:
                    session._cancel_running()
                    nursery.cancel_scope.cancel()
                    await finish()
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1 and body_error is None:  # a failure while opening the session
                raise group.exceptions[0] from None
            raise
        failure = session._failure if session is not None else None
        if failure is not None and (body_error is None or isinstance(body_error, trio.Cancelled)):
            raise failure  # a callback failed outside any request: that ended the session
        if body_error is not None:
            raise body_error
    except BaseException as exc:
        ended_by = exc
        raise
    finally:
        try:
            await close()
        finally:
            if clock is not None and session is not None:
                ended = None if ended_by is None or isinstance(ended_by, trio.Cancelled) else ended_by
                clock.end(session.protocol_version, None if ended is None else error_type(ended))
