"""The public namespaces: sorted, complete, domain names only, one exception module, imported lazily.

The front door (``mcp_trio``) holds the tutorial's names; ``mcp_trio.server`` the server's extension
points, ``mcp_trio.client`` the client, ``mcp_trio.errors`` the exceptions; ``mcp_trio.auth``,
``mcp_trio.redis`` and ``mcp_trio.testing`` are the optional parts."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import pytest

import mcp_trio
import mcp_trio.client
import mcp_trio.errors
import mcp_trio.server

LAZY = [mcp_trio, mcp_trio.server, mcp_trio.client]
PUBLIC = ["mcp_trio", "mcp_trio.server", "mcp_trio.client", "mcp_trio.errors", "mcp_trio.auth",
          "mcp_trio.redis", "mcp_trio.testing"]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__), name
    assert len(module.__all__) == len(set(module.__all__)), name
    for public in module.__all__:
        assert getattr(module, public) is not None, f"{name}.{public}"


def test_every_exception_lives_in_one_module() -> None:
    errors = [getattr(module, name) for module in [*LAZY, mcp_trio.errors] for name in module.__all__]
    errors = [obj for obj in errors if isinstance(obj, type) and issubclass(obj, BaseException)]
    assert {error.__name__ for error in errors} >= {"MCPTrioError", "TransportError", "SessionExpired"}
    for error in errors:
        assert error.__module__ == "mcp_trio.errors", error
        assert issubclass(error, mcp_trio.errors.MCPTrioError), error
    # ... and that module names every exception it defines
    defined = {
        name for name, obj in vars(mcp_trio.errors).items()
        if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == "mcp_trio.errors"
    }
    assert defined == set(mcp_trio.errors.__all__)


def test_the_front_door_holds_only_the_tutorials_exceptions() -> None:
    """Exceptions are imported from mcp_trio.errors; the front door keeps the two the tutorial's
    handlers raise: RPCError (a JSON-RPC error) and ToolError (a tool's error result)."""
    exceptions = [
        name for name in mcp_trio.__all__
        if isinstance(getattr(mcp_trio, name), type) and issubclass(getattr(mcp_trio, name), BaseException)
    ]
    assert exceptions == ["RPCError", "ToolError"]
    assert mcp_trio.RPCError is mcp_trio.errors.RPCError
    assert mcp_trio.ToolError is mcp_trio.errors.ToolError


def test_no_hypercorn_internals_in_the_public_api() -> None:
    for module in LAZY:
        assert not [name for name in module.__all__ if "hypercorn_" in name and name != "hypercorn_config"]
    assert "hypercorn_config" not in mcp_trio.__all__  # it returns hypercorn's type: mcp_trio.server


@pytest.mark.parametrize("module", LAZY, ids=lambda module: module.__name__)
def test_every_public_name_is_defined_where_the_package_says(module: ModuleType) -> None:
    exports = vars(module)["_EXPORTS"]
    package = module.__name__.rpartition(".")[0] or module.__name__
    for name in module.__all__:
        value = getattr(module, name)
        assert value.__module__ == f"{package}.{exports[name].lstrip('.')}", name
    assert set(exports) == set(module.__all__)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_one_thing_reachable_two_ways_is_one_object() -> None:
    for name in set(mcp_trio.__all__) & set(mcp_trio.client.__all__):
        assert getattr(mcp_trio, name) is getattr(mcp_trio.client, name), name


HEAVY = ("mcp_types", "pydantic", "hypercorn", "httpx", "jsonschema", "h11")


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_importing_the_package_imports_nothing_heavy() -> None:
    """``import mcp_trio`` loads names on first use: a program pays only for what it touches (each
    ``mcp-trio`` command starts a new interpreter)."""
    _run(
        "import sys, mcp_trio, mcp_trio.server, mcp_trio.client\n"
        f"heavy = sorted({{name.partition('.')[0] for name in sys.modules}} & set({HEAVY!r}))\n"
        "assert not heavy, heavy\n"
        "from mcp_trio import MCPServer\n"
        "from mcp_trio.errors import TransportError\n"
        "assert MCPServer.__module__ == 'mcp_trio._app.server' and 'mcp_types' in sys.modules\n"
        "assert TransportError.__module__ == 'mcp_trio.errors'\n"
        "assert 'hypercorn' not in sys.modules, 'MCPServer alone pulled in hypercorn'\n"
    )


def test_the_client_loads_no_server_code() -> None:
    _run(
        "import sys\n"
        "from mcp_trio.client import ClientSession, TaskInfo, open_client_session\n"
        "from mcp_trio.errors import TaskError, TransportError\n"
        "server = sorted(m for m in sys.modules if m.startswith(('mcp_trio._transport', 'mcp_trio._app',"
        " 'mcp_trio._http', 'hypercorn')))\n"
        "assert not server, server\n"
    )
