"""A hosted handler that calls asyncio gets an error that says what to use instead.

The python-sdk's server core is anyio, so it runs on Trio; a handler written for asyncio (``await
asyncio.sleep(1)``, ``asyncio.create_task``, ``loop.run_in_executor``) does not.  Left alone it fails
obscurely (``no running event loop``, or Trio's ``unrecognized yield message``).  :func:`on_trio` runs a
hosted server's coroutine step by step: while a step runs (and only then, so nothing else in the process
sees it) asyncio's running loop is a guard whose every use raises :class:`AsyncioOnTrio`, and a step that
hands an asyncio future to the event loop gets the same error thrown into it.  Tasks a handler starts
itself (an anyio task group) run outside this: there the plain asyncio error remains.
"""

from __future__ import annotations

import asyncio
import asyncio.events
from collections.abc import Awaitable, Generator
from typing import Any, NoReturn, TypeVar, cast

__all__ = ["AsyncioOnTrio", "on_trio"]

T = TypeVar("T")

ADVICE = (
    "mcp_trio runs python-sdk servers on Trio: use anyio instead of asyncio (anyio.sleep, "
    "anyio.create_task_group, anyio.to_thread.run_sync, anyio.Event, anyio.fail_after)"
)


class AsyncioOnTrio(RuntimeError):
    """A hosted server's code called asyncio, which does not run under mcp_trio (use anyio)."""


class _Guard:
    """asyncio's running loop while a hosted step runs: any use says what to do instead."""

    __slots__ = ()

    def __getattr__(self, name: str) -> NoReturn:
        raise AsyncioOnTrio(f"asyncio loop.{name}() called: {ADVICE}")

    def __repr__(self) -> str:
        return "<mcp_trio: no asyncio loop here, use anyio>"


_GUARD: Any = cast(Any, _Guard())
_get_loop = asyncio.events._get_running_loop
_set_loop = asyncio.events._set_running_loop


class _OnTrio:
    __slots__ = ("_coro",)

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self._coro = awaitable

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            previous = _get_loop()
            _set_loop(_GUARD)
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                _set_loop(previous)
                value = error = None
            if yielded is None or isinstance(yielded, asyncio.Future):  # asyncio.sleep(0), an asyncio future
                error = AsyncioOnTrio(f"awaited an asyncio future or asyncio.sleep(0): {ADVICE}")
                continue
            try:
                value = yield yielded
            except BaseException as exc:  # a cancellation, thrown in by Trio: into the coroutine
                error = exc


def on_trio(awaitable: Awaitable[T]) -> Awaitable[T]:
    """``await on_trio(call)``: await ``call`` (a coroutine) with asyncio guarded (see the module's text)."""
    return _OnTrio(awaitable)
