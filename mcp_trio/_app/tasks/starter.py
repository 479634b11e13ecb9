"""The tool's side of a task: what its ``task_status`` parameter gets."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["NOT_A_TASK", "TaskStarter"]


class TaskStarter:
    """What a tool's ``task_status`` parameter gets (the way :meth:`trio.Nursery.start` hands one):
    ``task_status.started()`` turns the call into a task.  Outside a task-capable call (a client without
    the extension, a 2025 session) it does nothing and the call simply goes on."""

    __slots__ = ("_on_started",)

    def __init__(self, on_started: Callable[[], None] | None = None) -> None:
        self._on_started = on_started

    @property
    def is_task(self) -> bool:
        """Whether ``started()`` makes this call a task (False where it does nothing)."""
        return self._on_started is not None

    def started(self) -> None:
        """From here on the call is a task: the client gets its ``CreateTaskResult`` and the rest runs
        in the app's nursery.  Calling it again does nothing."""
        on_started, self._on_started = self._on_started, None
        if on_started is not None:
            on_started()


NOT_A_TASK = TaskStarter()
"""What a call that cannot become a task gets: ``started()`` does nothing."""
