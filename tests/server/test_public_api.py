"""The public namespace: sorted, complete, domain names only, one exception module."""

from __future__ import annotations

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
        assert error.__module__ == "mcp_trio._exceptions", error
        assert issubclass(error, mcp_trio.MCPTrioError), error


def test_no_hypercorn_internals_in_the_public_api() -> None:
    assert not [name for name in mcp_trio.__all__ if "hypercorn_" in name and name != "hypercorn_config"]
