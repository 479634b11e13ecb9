"""Every trio test runs under a deadline: a deadlock fails fast instead of hanging CI.

The default is 30 s (virtual seconds under the autojump clock); ``@pytest.mark.deadline(S)`` changes it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import trio

import mcp_trio  # noqa: F401 - xdist's controlling process too: else coverage warns it saw no mcp_trio

DEFAULT_DEADLINE = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "deadline(seconds): fail the trio test after this many seconds")


def _with_deadline(fn: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        with trio.fail_after(seconds):
            return await fn(*args, **kwargs)

    return run


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fn = getattr(item, "obj", None)
        if isinstance(item, pytest.Function) and fn is not None and inspect.iscoroutinefunction(fn):
            marker = item.get_closest_marker("deadline")
            item.obj = _with_deadline(fn, marker.args[0] if marker else DEFAULT_DEADLINE)
