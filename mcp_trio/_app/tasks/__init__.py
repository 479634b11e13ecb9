"""The tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28 era): long-running tool calls.

A task-capable tool called by a client that declared the extension runs as a *task*: the request is
answered with a ``CreateTaskResult`` once the task is in the store, and the handler goes on in a nursery
the app owns (:class:`TaskManager`), not the request's.  It outlives the request but not the server:
``tasks/cancel``, its TTL and shutdown cancel it, and how it ended is recorded.  While it runs, the
handler's ``ctx.elicit``/``ctx.sample``/``ctx.ask`` become ``inputRequests`` of the task, answered with
``tasks/update``.

Like :meth:`trio.Nursery.start`, a tool may take a ``task_status`` parameter (a :class:`TaskStarter`)
and call ``task_status.started()`` itself: until then it runs in the request (input it asks for is
gathered with input-required results, and a result it returns is answered directly); from then on it
is a task.  A tool without that parameter becomes a task before it starts.

The records live in a :class:`TaskStore`: :class:`MemoryTaskStore` by default, or
:class:`mcp_trio.redis.RedisTaskStore` for tasks that any worker can answer ``tasks/get`` for.

The package by job: :mod:`.record` (:class:`TaskRecord`, the extension's names), :mod:`.store`
(:class:`TaskStore`, :class:`MemoryTaskStore`), :mod:`.starter` (:class:`TaskStarter`, what a tool's
``task_status`` gets), :mod:`.run` (a running task), :mod:`.manager` (:class:`TaskManager`).
"""

from __future__ import annotations

from ...errors import TaskStoreFull, TaskStoreUnavailable
from .manager import SHUTDOWN_MESSAGE, STOPPED_MESSAGE, TaskManager
from .record import (
    TASK_METHODS,
    TASKS_EXTENSION,
    TERMINAL,
    TaskRecord,
    TaskSupport,
    declares_tasks,
    missing_extension,
)
from .run import ENDED_ELSEWHERE
from .starter import NOT_A_TASK, TaskStarter
from .store import MemoryTaskStore, TaskStore

__all__ = [
    "ENDED_ELSEWHERE",
    "NOT_A_TASK",
    "SHUTDOWN_MESSAGE",
    "STOPPED_MESSAGE",
    "TASKS_EXTENSION",
    "TASK_METHODS",
    "TERMINAL",
    "MemoryTaskStore",
    "TaskManager",
    "TaskRecord",
    "TaskStarter",
    "TaskStore",
    "TaskStoreFull",
    "TaskStoreUnavailable",
    "TaskSupport",
    "declares_tasks",
    "missing_extension",
]
