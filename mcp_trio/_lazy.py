"""Names imported on first use, for the public modules (``mcp_trio``, ``mcp_trio.server``,
``mcp_trio.client``): importing one costs almost nothing, and a program pays only for the parts it
touches (the client does not load the server, nor the h11 server hypercorn)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    module: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``module`` whose public names are ``exports`` (name ->
    the module that defines it, relative to ``module``'s package).  A name is imported on its first use
    and then kept in the module's namespace, so later uses are plain attribute reads."""
    namespace = sys.modules[module].__dict__
    package = module if namespace.get("__path__") is not None else module.rpartition(".")[0]

    def __getattr__(name: str) -> Any:
        defining = exports.get(name)
        if defining is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(defining, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
