"""``mcp-trio serve`` and ``mcp-trio demo``: --server-card and --server-card-url reach the app's
ServerConfig (off without them); a URL that is not one is a usage error."""

from __future__ import annotations

import pytest

from mcp_trio import MCPApp
from mcp_trio import _cli as cli
from mcp_trio.server import ServerCard

from .test_cli_origins import run, served, server_module  # noqa: F401  (fixtures)


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_the_card_is_off_unless_asked_for(
    command: str,
    served: list[MCPApp],  # noqa: F811
    server_module: str,  # noqa: F811
) -> None:
    target = [server_module] if command == "serve" else []
    run([command, *target])
    run([command, *target, "--server-card"])
    run([command, *target, "--server-card-url", "https://mcp.example.com/mcp"])
    off, on, with_url = (app.config.server_card for app in served)
    assert off is None
    assert on == ServerCard()
    assert with_url == ServerCard(url="https://mcp.example.com/mcp")


def test_a_url_that_is_not_one_is_a_usage_error(
    served: list[MCPApp],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["demo", "--server-card-url", "mcp.example.com/mcp"])
    assert exited.value.code == 2
    assert "server card url must be an http(s) URL" in capsys.readouterr().err
    assert served == []


def test_not_over_stdio(served: list[MCPApp], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    with pytest.raises(SystemExit) as exited:
        cli.main(["demo", "--stdio", "--server-card"])
    assert exited.value.code == 2
    assert "--server-card is for HTTP" in capsys.readouterr().err
    assert served == []
