"""The application's callbacks: their types, the check that refuses one that cannot be called, and the
one way they are called (plain or async alike).

Each may be a plain function or an async one (or anything callable: a ``functools.partial``, an object
with a plain or an async ``__call__``): the client calls it and awaits what it returns if that is
awaitable.  A plain callback runs directly in a Trio task of the session, so it must not block; do
blocking work in an async callback with ``await trio.to_thread.run_sync(...)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar, cast

import mcp_types as mt

from .._protocol.tasks import TaskInfo

__all__ = [
    "ElicitationHandler",
    "LogHandler",
    "NotificationHandler",
    "ProgressHandler",
    "RootsHandler",
    "SamplingHandler",
    "TaskStatusHandler",
]  # and, for the package itself, check_callback() and invoke()

SamplingHandler: TypeAlias = Callable[
    [mt.CreateMessageRequestParams], Awaitable[mt.CreateMessageResult] | mt.CreateMessageResult
]
"""``sampling=``: ``(CreateMessageRequestParams) -> CreateMessageResult``, plain or async.  Answers the
server's ``sampling/createMessage``; raise :class:`RPCError` to answer an error."""

ElicitationHandler: TypeAlias = Callable[
    [mt.ElicitRequestParams], Awaitable[mt.ElicitResult] | mt.ElicitResult
]
"""``elicitation=``: ``(ElicitRequestParams) -> ElicitResult``, plain or async (the params are an
``ElicitRequestFormParams`` or an ``ElicitRequestURLParams``).  Answers ``elicitation/create``."""

RootsHandler: TypeAlias = Callable[[], Awaitable[mt.ListRootsResult] | mt.ListRootsResult]
"""``roots=``: ``() -> ListRootsResult``, plain or async.  Answers ``roots/list``."""

LogHandler: TypeAlias = Callable[[mt.LoggingMessageNotificationParams], Awaitable[None] | None]
"""``on_log=``: ``(LoggingMessageNotificationParams) -> None``, plain or async.  Gets each
``notifications/message`` (level, logger, data)."""

NotificationHandler: TypeAlias = Callable[[dict[str, Any]], Awaitable[None] | None]
"""``on_notification=``: ``(message: dict) -> None``, plain or async.  Gets every notification the
server sends, as the JSON-RPC message (progress and log messages included)."""

ProgressHandler: TypeAlias = Callable[[float, float | None, str | None], Awaitable[None] | None]
"""``progress=`` of :meth:`ClientSession.call_tool` and :meth:`ClientSession.request`:
``(progress, total, message) -> None``, plain or async; ``total`` and ``message`` may be None."""

TaskStatusHandler: TypeAlias = Callable[[TaskInfo], Awaitable[None] | None]
"""``on_task_status=`` of :meth:`ClientSession.call_tool` and :meth:`ClientSession.task_result`:
``(TaskInfo) -> None``, plain or async.  Called with the task as created, then each time its status
or status message changes; if it raises, the wait ends with its exception."""

_SIGNATURES = {
    "progress": "(progress, total, message) -> None",
    "sampling": "(CreateMessageRequestParams) -> CreateMessageResult",
    "elicitation": "(ElicitRequestParams) -> ElicitResult",
    "roots": "() -> ListRootsResult",
    "on_log": "(LoggingMessageNotificationParams) -> None",
    "on_notification": "(message: dict) -> None",
    "on_task_status": "(TaskInfo) -> None",
}
R = TypeVar("R")


def check_callback(name: str, value: object) -> None:
    """Refuse, at once, a callback that cannot be called."""
    if value is None or callable(value):
        return
    hint = " (pass the function itself, not the result of calling it)" if inspect.isawaitable(value) else ""
    raise TypeError(f"{name}= takes a function {_SIGNATURES[name]}, plain or async{hint}; got {value!r:.200}")


async def invoke(fn: Callable[..., Awaitable[R] | R], *args: Any) -> R:
    """Call a user callback, plain or async.

    Calling it and awaiting the result if it is awaitable covers every kind at once: coroutine
    functions, ``functools.partial`` of them, objects with an async ``__call__``, plain functions that
    return an awaitable, and plain functions (whose result is used as it is)."""
    result = fn(*args)
    if inspect.isawaitable(result):
        return cast(R, await result)
    return result
