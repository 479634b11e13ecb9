"""The client side of the tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28 era): waiting
for a task a server answered ``tools/call`` with (``tasks/get`` at the server's pace, its input
requests answered with the session's callbacks), and ``tasks/get``, ``tasks/update``, ``tasks/cancel``
themselves.  The task as the wire has it is :class:`TaskInfo` (:mod:`mcp_trio._protocol.tasks`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import mcp_types as mt
import pydantic
import trio

from .._protocol.tasks import TaskInfo
from ..errors import MCPTrioError, RPCError, TaskCancelled, TaskError, TransportError
from .callbacks import TaskStatusHandler, check_callback, invoke
from .core import SessionCore

__all__ = ["CANCEL_GRACE", "TaskAPI"]

logger = logging.getLogger(__name__)

CANCEL_GRACE = 2.0
"""How long the ``tasks/cancel`` sent on the way out of a cancelled call may take (seconds)."""


@dataclass(eq=False)
class _Watch:
    """A task being waited for: as last seen, and whether it ended (a terminal status, or gone)."""

    task: TaskInfo
    ended: bool = False


def _task_outcome(task: TaskInfo) -> mt.CallToolResult:
    """What the call of an ended task returns or raises."""
    if task.status == "completed":
        if task.result is None:
            raise TransportError(f"task {task.task_id} completed without a result")
        return mt.CallToolResult.model_validate(task.result)
    if task.status == "failed":
        error = task.error or {}
        code, message = error.get("code"), error.get("message")
        raise RPCError(
            code if isinstance(code, int) and not isinstance(code, bool) else mt.INTERNAL_ERROR,
            message if isinstance(message, str) else task.status_message or f"task {task.task_id} failed",
            error.get("data"),
        )
    why = f": {task.status_message}" if task.status_message else ""
    raise TaskCancelled(f"task {task.task_id} was cancelled{why}", task)


class TaskAPI(SessionCore):
    """The task methods of :class:`ClientSession`."""

    async def get_task(self, task_id: str) -> TaskInfo:
        """``tasks/get``: the task as the server describes it now (:class:`RPCError` -32602 if the
        server does not know it, or no longer: tasks expire)."""
        task = TaskInfo.from_wire(await self.request("tasks/get", {"taskId": task_id}))
        if task.task_id != task_id:
            raise TransportError(f"tasks/get {task_id}: the server answered for task {task.task_id}")
        return task

    async def update_task(self, task_id: str, responses: Mapping[str, Any]) -> None:
        """``tasks/update``: answers to the task's ``input_requests``, by key (each an
        ``ElicitResult``, ``CreateMessageResult`` or ``ListRootsResult``, or its JSON).  The server
        applies them eventually: the next :meth:`get_task` may still show the old status."""
        answers = {
            key: value.model_dump(by_alias=True, exclude_none=True, mode="json")
            if isinstance(value, pydantic.BaseModel)
            else value
            for key, value in responses.items()
        }
        await self.request("tasks/update", {"taskId": task_id, "inputResponses": answers})

    async def cancel_task(self, task_id: str) -> None:
        """``tasks/cancel``: ask the server to cancel the task.  Cooperative and eventually
        consistent: the ``cancelled`` status shows in a later :meth:`get_task`, if at all (a task
        that finished first keeps its result)."""
        await self.request("tasks/cancel", {"taskId": task_id})

    async def task_result(
        self, task: TaskInfo | str, *, on_task_status: TaskStatusHandler | None = None
    ) -> mt.CallToolResult:
        """Wait for a task (a :class:`TaskInfo`, or a task id) as :meth:`call_tool` does, and end as it
        does: its result, or :class:`RPCError`, :class:`TaskCancelled`, :class:`TaskError`.  Its input
        requests are answered with the session's callbacks.

        Unlike :meth:`call_tool`, this only watches: cancelling the caller stops the wait, not the
        task (use :meth:`cancel_task` for that)."""
        check_callback("on_task_status", on_task_status)
        info = task if isinstance(task, TaskInfo) else await self.get_task(task)
        return await self._wait(info, on_task_status, owned=False)

    async def _wait(
        self, task: TaskInfo, on_status: TaskStatusHandler | None, *, owned: bool
    ) -> mt.CallToolResult:
        watch = _Watch(task)
        try:
            with trio.CancelScope() as scope:  # cancelled if the session ends first
                self._running.add(scope)
                try:
                    await self._follow(watch, on_status)
                finally:
                    self._running.discard(scope)
        except BaseException:  # cancelled, interrupted, or failed: the task is of no use to anyone
            if owned and not watch.ended and not self._closing:
                await self._cancel_quietly(watch.task.task_id)
            raise
        if not watch.ended:
            raise TransportError(f"the session ended while task {task.task_id} was running")
        return _task_outcome(watch.task)

    async def _follow(self, watch: _Watch, on_status: TaskStatusHandler | None) -> None:
        """Poll the task until it ends, answering its input requests (each key once)."""
        answered: set[str] = set()
        seen: tuple[str, str | None] | None = None
        while True:
            task = watch.task
            watch.ended = task.terminal
            if on_status is not None and (task.status, task.status_message) != seen:
                seen = (task.status, task.status_message)
                await invoke(on_status, task)
            if task.terminal:
                return
            fresh = {k: v for k, v in task.input_requests.items() if k not in answered}
            if task.status == "input_required" and fresh:
                answers = await self._gather_inputs(fresh)
                answered.update(fresh)
                try:
                    await self.update_task(task.task_id, answers)
                except RPCError:
                    watch.task = await self._poll(watch)
                    if not answers.keys() & watch.task.input_requests.keys():
                        continue  # it moved on meanwhile (ended, or answered by another client)
                    raise  # the answers themselves were refused
            else:
                await trio.sleep(task.poll_interval)
            watch.task = await self._poll(watch)

    async def _poll(self, watch: _Watch) -> TaskInfo:
        try:
            return await self.get_task(watch.task.task_id)
        except RPCError as exc:
            if exc.code != mt.INVALID_PARAMS:
                raise
            watch.ended = True
            raise TaskError(
                f"task {watch.task.task_id} is gone: the server no longer knows it ({exc.message})",
                watch.task,
            ) from exc

    async def _cancel_quietly(self, task_id: str) -> None:
        """``tasks/cancel`` on the way out of a call that gave up on its task: shielded, bounded."""
        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_GRACE):
            try:
                await self.cancel_task(task_id)
            except (MCPTrioError, httpx.HTTPError) as exc:  # best effort only
                logger.info("could not cancel task %s: %r", task_id, exc)
