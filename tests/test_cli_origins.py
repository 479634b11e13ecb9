"""``mcp-trio serve`` and ``mcp-trio demo``: --allowed-hosts, --allowed-origins,
--dns-rebinding-protection and --cors-origins reach the app's ServerConfig; bad values are usage
errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_trio import MCPApp
from mcp_trio import _cli as cli
from mcp_trio._cli import serve as cli_serve

SERVER_MODULE = """\
from mcp_trio import MCPServer

server = MCPServer("origins-test", "1.0")
"""


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[MCPApp]:
    """The apps the command would serve (run_server returns at once instead of serving)."""
    apps: list[MCPApp] = []

    async def run_server(app: MCPApp, *args: Any, **kwargs: Any) -> None:
        apps.append(app)

    monkeypatch.setattr(cli_serve, "run_server", run_server)
    return apps


def run(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 0


@pytest.fixture
def server_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "origins_test_server.py").write_text(SERVER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "origins_test_server:server"


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_options_reach_the_config(command: str, served: list[MCPApp], server_module: str) -> None:
    target = [server_module] if command == "serve" else []
    run(
        [
            command,
            *target,
            "--allowed-hosts",
            "mcp.example.com, MCP2.example.com:8443",
            "--allowed-origins",
            "https://tools.example,http://localhost:*",
            "--dns-rebinding-protection",
            "on",
            "--cors-origins",
            "https://app.example/",
        ]
    )
    (app,) = served
    config = app.config
    assert config.allowed_hosts == {"mcp.example.com", "mcp2.example.com:8443"}
    assert config.allowed_origins == {"https://tools.example", "http://localhost:*"}
    assert config.dns_rebinding_protection is True
    assert config.cors_origins == {"https://app.example"}


@pytest.mark.parametrize(("value", "setting"), [("auto", None), ("on", True), ("off", False)])
def test_protection_setting(value: str, setting: bool | None, served: list[MCPApp]) -> None:
    run(["demo", "--dns-rebinding-protection", value])
    assert served[0].config.dns_rebinding_protection is setting


def test_defaults(served: list[MCPApp]) -> None:
    run(["demo"])
    config = served[0].config
    assert config.dns_rebinding_protection is None
    assert config.allowed_hosts is None and config.allowed_origins is None and config.cors_origins is None


def test_cors_for_any_origin(served: list[MCPApp]) -> None:
    run(["demo", "--cors-origins", "*"])
    assert served[0].config.cors_origins == {"*"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--allowed-hosts", "https://mcp.example.com"], "not a host"),
        (["--allowed-hosts", " , "], "expected a comma-separated list"),
        (["--allowed-origins", "tools.example"], "not an origin"),
        (["--cors-origins", "app.example"], "not an origin"),
        (["--cors-origins", "*,https://app.example"], "'*' (any origin) stands alone"),
        (["--dns-rebinding-protection", "yes"], "invalid choice"),
    ],
)
def test_bad_values_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], served: list[MCPApp]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["demo", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not served
