"""The OAuth options of ``mcp-trio serve|demo`` without a server: what configuration they make, and the
usage errors (exit status 2) caught before anything listens.  The demo started with them, answering
challenges on a real socket, is in tests/integration/test_auth_server.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcp_trio._cli import _parser, config_from_args, main
from mcp_trio.auth import JWTVerifier

ISSUER = "https://as.example.com/tenant"
RESOURCE = "https://mcp.example.com/mcp"


def test_the_flags_make_a_protected_resource_with_a_jwt_verifier() -> None:
    args = _parser().parse_args(
        [
            "demo",
            "--oauth-issuer",
            ISSUER,
            "--resource",
            RESOURCE,
            "--required-scope",
            "mcp:tools",
            "--required-scope",
            "mcp:read",
        ]
    )
    oauth = config_from_args(args).oauth
    assert oauth is not None and oauth.resource == RESOURCE
    assert oauth.authorization_servers == (ISSUER,)
    assert oauth.required_scopes == oauth.scopes_supported == ("mcp:tools", "mcp:read")
    assert isinstance(oauth.verifier, JWTVerifier)
    assert oauth.verifier.issuer == ISSUER and oauth.verifier.audience == (RESOURCE,)
    other = _parser().parse_args(
        ["serve", "x:y", "--oauth-issuer", ISSUER, "--resource", RESOURCE, "--oauth-audience", "api://mcp"]
    )
    verifier = config_from_args(other).oauth.verifier  # type: ignore[union-attr]
    assert isinstance(verifier, JWTVerifier) and verifier.audience == ("api://mcp",)
    assert config_from_args(_parser().parse_args(["demo"])).oauth is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--oauth-issuer", ISSUER], "go together"),
        (["--resource", RESOURCE], "go together"),
        (["--required-scope", "x"], "need --oauth-issuer"),
        (["--oauth-issuer", ISSUER, "--resource", "http://mcp.example.com/mcp"], "https"),
        (["--oauth-issuer", "http://as.example.com", "--resource", RESOURCE], "https"),
        (["--oauth-issuer", ISSUER, "--resource", RESOURCE, "--required-scope", "a b"], "not a scope"),
        (["--oauth-issuer", ISSUER, "--resource", RESOURCE, "--stdio"], "stdio"),
    ],
)
def test_usage_errors(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", *flags])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_mcp_app_brings_its_own_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "tests.server.test_auth_cli:APP", "--oauth-issuer", ISSUER, "--resource", RESOURCE])
    assert exited.value.code == 2
    assert "brings its own ServerConfig" in capsys.readouterr().err


def _app() -> object:
    from mcp_trio import MCPApp, MCPServer

    return MCPApp(MCPServer("own"))


APP = _app()


def test_without_joserfc_the_error_names_the_extra() -> None:
    """A Python where joserfc cannot be imported (a real subprocess; this one is untouched)."""
    code = (
        "import sys; sys.modules['joserfc'] = None\n"
        "from mcp_trio._cli import main\n"
        f"main(['demo', '--oauth-issuer', {ISSUER!r}, '--resource', {RESOURCE!r}])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'mcp_trio[auth]'" in done.stderr
