"""The seam guard (``mcp_trio.sdk._seams``): hosting refuses, with :class:`~mcp_trio.sdk.UntestedSDK` and a
message that says what to do, an ``mcp`` release it was not tested with, a tested one whose seams were
changed (or whose source cannot be read), and a Python without ``mcp``.  In-process through
``monkeypatch`` (undone after each test); ``mcp-trio serve`` of a python-sdk server in a subprocess with
an untested release installed (a distribution's metadata first on the path) or a seam replaced before
the command runs: one line on stderr, exit status 3, nothing served.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import mcp.server.runner
import pytest
import trio

import mcp_trio
from mcp_trio.sdk import UntestedSDK, _seams

INSTALLED = version("mcp")


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The guard as before its first check (its cache of the checked release is restored afterwards)."""
    monkeypatch.setattr(_seams, "_checked", None)
    return monkeypatch


def test_the_installed_mcp_is_the_tested_one() -> None:
    assert _seams.fingerprints() == _seams.TESTED[INSTALLED]
    _seams.check()


def test_an_untested_release_is_refused(unchecked: pytest.MonkeyPatch) -> None:
    unchecked.setattr(_seams, "TESTED", {"9.9.9": dict(_seams.TESTED[INSTALLED])})
    with pytest.raises(UntestedSDK) as refused:
        _seams.check()
    assert str(refused.value) == (
        f"mcp {INSTALLED} is not a release mcp_trio hosts servers of (tested: 9.9.9); "
        "install one of those: pip install 'mcp-trio[sdk]'"
    )
    assert _seams._checked is None  # not remembered as checked


def test_a_changed_fingerprint_is_refused_with_the_seams_named(unchecked: pytest.MonkeyPatch) -> None:
    expected = {**_seams.TESTED[INSTALLED], "ServerRunner": "0" * 16, "subscriptions": "1" * 16}
    unchecked.setitem(_seams.TESTED, INSTALLED, expected)
    with pytest.raises(UntestedSDK) as refused:
        _seams.check()
    assert str(refused.value) == (
        f"mcp {INSTALLED} differs from the tested release in what hosting relies on "
        f"(ServerRunner, subscriptions): reinstall it (pip install --force-reinstall 'mcp=={INSTALLED}')"
    )


def test_a_seam_changed_in_memory_or_without_source_is_refused(unchecked: pytest.MonkeyPatch) -> None:
    async def aclose_shielded(connection: object) -> None:  # another function in the seam's place
        pass

    unchecked.setattr(mcp.server.runner, "aclose_shielded", aclose_shielded)
    with pytest.raises(UntestedSDK, match=r"relies on \(aclose_shielded\): reinstall"):
        _seams.check()
    namespace: dict[str, object] = {}
    exec("async def serve_one(*args, **kwargs): pass", namespace)  # no source to read
    unchecked.setattr(mcp.server.runner, "serve_one", namespace["serve_one"])
    assert _seams.fingerprints()["serve_one"] == "no source"
    with pytest.raises(UntestedSDK, match=r"relies on \(aclose_shielded, serve_one\)"):
        _seams.check()


def test_without_mcp_the_message_says_which_extra(unchecked: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    unchecked.setattr(_seams, "version", missing)
    with pytest.raises(UntestedSDK, match=r"needs the mcp package: pip install 'mcp-trio\[sdk\]'"):
        _seams.check()


def test_the_guard_is_restored_after_the_tests_above() -> None:
    assert _seams._checked == INSTALLED and _seams.TESTED[INSTALLED] == _seams.fingerprints()
    assert mcp.server.runner.aclose_shielded.__module__ == "mcp.server.runner"


SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("refused")

@server.tool()
async def shout(text: str) -> str:
    return text.upper()
"""

PATCH = """
import mcp.server.runner

async def aclose_shielded(connection):
    pass

mcp.server.runner.aclose_shielded = aclose_shielded
"""


def serve_refused(
    tmp_path: Path, *, prelude: str = "", path: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "refused_server.py").write_text(SERVER)
    code = f"{prelude}from mcp_trio._cli import main; main()"
    env_path = ":".join([*(path or []), str(tmp_path), str(Path(mcp_trio.__file__).parents[1])])
    return subprocess.run(
        [sys.executable, "-c", code, "serve", "refused_server:server", "--bind", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        check=False,
    )


@pytest.mark.deadline(90)
async def test_mcp_trio_serve_refuses_an_untested_release_in_one_line(tmp_path: Path) -> None:
    dist = tmp_path / "meta" / "mcp-9.9.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mcp\nVersion: 9.9.9\n")
    result = await trio.to_thread.run_sync(lambda: serve_refused(tmp_path, path=[str(tmp_path / "meta")]))
    assert result.returncode == 3, result
    assert result.stdout == ""  # never said it was serving
    assert result.stderr == (
        "mcp-trio: mcp 9.9.9 is not a release mcp_trio hosts servers of (tested: "
        f"{', '.join(sorted(_seams.TESTED))}); install one of those: pip install 'mcp-trio[sdk]'\n"
    )


@pytest.mark.deadline(90)
async def test_mcp_trio_serve_refuses_a_changed_seam_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "patch_seam.py").write_text(textwrap.dedent(PATCH))
    result = await trio.to_thread.run_sync(lambda: serve_refused(tmp_path, prelude="import patch_seam; "))
    assert result.returncode == 3, result
    assert result.stdout == ""
    assert result.stderr == (
        f"mcp-trio: mcp {INSTALLED} differs from the tested release in what hosting relies on "
        f"(aclose_shielded): reinstall it (pip install --force-reinstall 'mcp=={INSTALLED}')\n"
    )
