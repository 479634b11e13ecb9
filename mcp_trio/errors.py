"""The exceptions of mcp_trio: one tree, so ``except MCPTrioError`` catches every error it raises on
purpose.  Import them from here (``from mcp_trio.errors import TransportError``); ``RPCError``, which
handlers raise to answer with a JSON-RPC error, is also in the front door (``mcp_trio.RPCError``).

The tree::

    MCPTrioError
     +- ProtocolError            a message or an HTTP exchange broke the protocol
     |   +- LocalProtocolError   we (this process) broke it: a bug or a misuse of the API
     |   +- RemoteProtocolError  the peer broke it; carries the HTTP status and JSON-RPC code to answer with
     +- SessionError             a session is unknown, terminated or over capacity
     +- RPCError                 a JSON-RPC error response, raised to the caller that waited for the result
     +- TransportError           (client) the exchange with the server failed: a status, a broken stream
     |   +- SessionExpired       (client) the server answered 404 for our session
     |   +- ServerBusy           (client) 503 or 429 until the client's retries ran out
     |       +- RateLimited      (client) refused by the server's rate limit (429, -32023) until then
     +- ListenError              (server) a server could not listen on its address (also an OSError)
     +- SkillVerificationError   (client) a skill file does not match its entry: it must not be used
     +- TaskStoreFull            (server) no room for another task in the task store
     +- TaskStoreUnavailable     (server) the task store could not be reached
     +- ToolError                (server) raised by a tool on purpose: an ``isError`` result with its text
     +- TaskError                (client) a task ended without a result (gone: expired or lost)
         +- TaskCancelled        (client) the task was cancelled
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import mcp_types as mt

if TYPE_CHECKING:
    from ._protocol.tasks import TaskInfo

__all__ = [
    "ListenError",
    "LocalProtocolError",
    "MCPTrioError",
    "ProtocolError",
    "RPCError",
    "RateLimited",
    "RemoteProtocolError",
    "ServerBusy",
    "SessionError",
    "SessionExpired",
    "SkillVerificationError",
    "TaskCancelled",
    "TaskError",
    "TaskStoreFull",
    "TaskStoreUnavailable",
    "ToolError",
    "TransportError",
]


class MCPTrioError(Exception):
    """Base class of every error mcp_trio raises on purpose."""


class ProtocolError(MCPTrioError):
    """A protocol rule was broken."""


class LocalProtocolError(ProtocolError):
    """This side broke the protocol (a bug in the caller or in mcp_trio)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol.

    ``http_status`` and ``code`` say how a server answers it: the HTTP status of the response and
    the JSON-RPC error code of its body; ``headers`` are extra response headers (``Allow`` for 405).
    """

    def __init__(
        self,
        message: str,
        *,
        http_status: int = 400,
        code: int = mt.INVALID_REQUEST,
        request_id: mt.RequestId | None = None,
        data: Any = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers
        self.http_status = http_status
        self.code = code
        self.request_id = request_id
        self.data = data


class SessionError(MCPTrioError):
    """A session is unknown, terminated, or cannot be created."""


class RPCError(MCPTrioError):
    """A JSON-RPC error, raised by handlers to answer with that error, and to callers that receive one."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_error_data(self) -> mt.ErrorData:
        return mt.ErrorData(code=self.code, message=self.message, data=self.data)


class TransportError(MCPTrioError):
    """The exchange with the server failed (a status, a stream that ended early, a broken connection)."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class SessionExpired(TransportError):
    """The server answered 404 for our session: it is gone.  ``session_id`` is the session's id.

    Raised for the requests of that session (a 2025-era HTTP session renews itself for the calls that
    follow, unless opened with ``renew_on_expiry=False``: then open a new session)."""

    def __init__(
        self, message: str, *, status: int | None = 404, body: Any = None, session_id: str | None = None
    ) -> None:
        super().__init__(message, status=status, body=body)
        self.session_id = session_id


class ServerBusy(TransportError):
    """The server answered 503 (unavailable) or 429 (too many requests) to every attempt the client's
    retries allowed, or asked with ``Retry-After`` for a longer wait than was left of them.  ``status``
    is the last answer's; ``retry_after`` its ``Retry-After`` in seconds (None without one);
    ``attempts`` how many times the message was sent.  The server processed none of them."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        body: Any = None,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after
        self.attempts = attempts


class RateLimited(ServerBusy):
    """The server refused the message with its rate limit (following the draft SEP-3304, which may
    change: HTTP 429, or the JSON-RPC error -32023 over WebSocket and stdio, where no HTTP status says
    so) every time the client's retries allowed, or asked for a longer wait than was left of them.
    ``retry_after`` is the wait it asked for last, in seconds (its ``data.retryAfterMs`` when it gave
    one, else ``Retry-After``); ``limit`` and ``remaining`` what it said of the limit (None when it
    did not); ``status`` 429, or None without HTTP.  The server processed none of the attempts."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = 429,
        body: Any = None,
        retry_after: float | None = None,
        attempts: int = 1,
        limit: int | None = None,
        remaining: int | None = None,
    ) -> None:
        TransportError.__init__(self, message, status=status, body=body)
        self.retry_after = retry_after
        self.attempts = attempts
        self.limit = limit
        self.remaining = remaining


class ListenError(MCPTrioError, OSError):
    """A server could not listen on its address: in use, not an address of this machine, no permission.

    Raised bare (not in an exception group) by :func:`mcp_trio.serve` on either HTTP server, before it
    reports its URLs, and for the operations listener (``admin_bind``).  It is an ``OSError`` too:
    ``errno`` and ``strerror`` say why (``errno.EADDRINUSE``: the port is taken), ``address`` (also
    ``filename``) where, as given (``127.0.0.1:8000``); ``listener`` is ``"operations listener"`` for
    ``admin_bind``'s.  Its ``__cause__`` is the server's ``OSError`` for the bind."""

    def __init__(self, errno: int | None, strerror: str, address: str, listener: str = "") -> None:
        super().__init__(errno, strerror, address)
        self.address = address
        self.listener = listener

    def __str__(self) -> str:
        text = f"cannot listen on {self.address}: {self.strerror}"
        return f"{text} ({self.listener})" if self.listener else text

    def __reduce__(self) -> tuple[type[ListenError], tuple[int | None, str, str, str]]:
        return type(self), (self.errno, str(self.strerror), self.address, self.listener)

    @classmethod
    def from_os_error(cls, exc: OSError, address: str, listener: str = "") -> ListenError:
        """The error of a bind (or listen) on ``address`` that raised ``exc``."""
        # os.strerror: trio words it "error while attempting to bind on address ...: address already in use"
        if exc.errno is not None and exc.errno > 0:  # getaddrinfo's are negative: its own words then
            return cls(exc.errno, os.strerror(exc.errno), address, listener)
        return cls(exc.errno, exc.strerror or str(exc), address, listener)


class SkillVerificationError(MCPTrioError):
    """A skill file does not match its entry (digest, size or frontmatter): it must not be used."""


class TaskStoreFull(MCPTrioError):
    """A task store holds as many live tasks as it may (the call is answered -32603; try later)."""


class TaskStoreUnavailable(MCPTrioError):
    """A task store could not be reached (a Redis store whose server is down, say)."""


class ToolError(MCPTrioError):
    """A tool's failure you saw coming: raise it in a tool and the call's result has ``isError: true``
    with this exception's message as its text, for the model to read; nothing is logged.

    Any other exception a tool raises is a failure nobody expected: it is logged at ERROR with its
    traceback and a short reference, and the client gets a generic message with that reference (the
    exception's type and text too when the server was made with ``error_details=True``).  Raise
    :class:`RPCError` to answer with a JSON-RPC error instead of a result."""


class TaskError(MCPTrioError):
    """A task ended without a result: the server no longer knows it (expired, lost: ``tasks/get``
    answered -32602, which is the ``__cause__``), or it was cancelled (:class:`TaskCancelled`).
    ``task`` is the task as last seen (a :class:`~mcp_trio.client.TaskInfo`)."""

    def __init__(self, message: str, task: TaskInfo) -> None:
        super().__init__(message)
        self.message = message
        self.task = task
        self.task_id = task.task_id


class TaskCancelled(TaskError):
    """The task reached the ``cancelled`` status (by ``tasks/cancel``, from this client or another,
    or by the server); ``task.status_message`` may say why."""
