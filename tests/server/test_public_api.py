"""The public namespace: sorted, complete, domain names only, one exception module, imported lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mcp_trio


def test_all_is_sorted_and_importable() -> None:
    assert mcp_trio.__all__ == sorted(mcp_trio.__all__)
    for name in mcp_trio.__all__:
        assert getattr(mcp_trio, name) is not None, name


def test_every_exception_lives_in_one_module() -> None:
    errors = [getattr(mcp_trio, name) for name in mcp_trio.__all__]
    errors = [obj for obj in errors if isinstance(obj, type) and issubclass(obj, BaseException)]
    assert {error.__name__ for error in errors} >= {"MCPTrioError", "TransportError", "SessionExpired"}
    for error in errors:
        assert error.__module__ == "mcp_trio.errors", error
        assert issubclass(error, mcp_trio.MCPTrioError), error


def test_no_hypercorn_internals_in_the_public_api() -> None:
    assert not [name for name in mcp_trio.__all__ if "hypercorn_" in name and name != "hypercorn_config"]


def test_every_public_name_is_defined_where_the_package_says() -> None:
    for name in mcp_trio.__all__:
        value = getattr(mcp_trio, name)
        assert value.__module__ == f"mcp_trio.{mcp_trio._EXPORTS[name].lstrip('.')}", name
    assert set(mcp_trio._EXPORTS) == set(mcp_trio.__all__)
    assert set(mcp_trio.__all__) <= set(dir(mcp_trio))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        mcp_trio.no_such_name  # noqa: B018


HEAVY = ("mcp_types", "pydantic", "hypercorn", "httpx", "jsonschema", "h11")


def test_importing_the_package_imports_nothing_heavy() -> None:
    """``import mcp_trio`` loads names on first use: a program pays only for what it touches (each
    ``mcp-trio`` command starts a new interpreter)."""
    code = (
        "import sys, mcp_trio\n"
        f"heavy = sorted({{name.partition('.')[0] for name in sys.modules}} & set({HEAVY!r}))\n"
        "assert not heavy, heavy\n"
        "from mcp_trio import MCPServer, TransportError\n"
        "assert MCPServer.__module__ == 'mcp_trio._app.server' and 'mcp_types' in sys.modules\n"
        "assert TransportError.__module__ == 'mcp_trio.errors'\n"
        "assert 'hypercorn' not in sys.modules, 'MCPServer alone pulled in hypercorn'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
