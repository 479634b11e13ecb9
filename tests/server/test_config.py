"""ServerConfig is plain data: it imports none of the features it configures, and the values it cannot
check without them are checked where those features read them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import mcp_trio
from mcp_trio import MCPApp, MCPServer, ServerConfig

ROOT = Path(mcp_trio.__file__).resolve().parents[1]


def test_importing_the_configuration_loads_no_feature() -> None:
    code = (
        "import sys\n"
        "from mcp_trio._transport.config import ServerConfig\n"
        "ServerConfig(worker_id='w1', task_ttl=5.0, request_state_secret=b'k' * 32)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('mcp_trio.auth', 'mcp_trio._app'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    assert out.strip() == "[]", out


class LooksLikeAResource:
    """Has what a protected resource has, but is not a mcp_trio.auth.ProtectedResource."""

    resource = "https://mcp.example.com/mcp"
    authorization_servers: Sequence[str] = ("https://as.example.com",)
    required_scopes: Sequence[str] = ()
    method_scopes: dict[str, Sequence[str]] = {}

    def metadata(self) -> dict[str, Any]:  # pragma: no cover - never called
        return {}

    def scopes_for(self, method: str | None, name: str | None = None) -> tuple[str, ...]:  # pragma: no cover
        return ()


def test_an_oauth_value_of_another_type_is_refused_by_the_app() -> None:
    config = ServerConfig(oauth=LooksLikeAResource())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ProtectedResource"):
        MCPApp(MCPServer("x"), config)


def test_every_field_is_a_keyword_of_the_constructor() -> None:
    defaults = ServerConfig()
    again = ServerConfig(**{f.name: getattr(defaults, f.name) for f in dataclasses.fields(ServerConfig)})
    assert again == defaults
