"""The package as a user gets it: the sdist and the wheel built from this tree as they would be
published (``python -m build``: the wheel is built from the sdist, so the sdist is complete), checked as
PyPI checks them (``twine check``) and by their metadata, then the wheel installed into a fresh virtual
environment (no dev tools, no source tree on the path) runs ``mcp-trio demo`` and the README's quick
start commands against it; so does an editable install of the tree in another fresh venv (``pip install
-e .``, the README's way from a clone).  A type checker finds the package in both."""

from __future__ import annotations

import email.parser
import email.policy
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import venv
import zipfile
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import httpx
import pytest
from tests.docs.test_readme import QUICK_START

from mcp_trio import __version__

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = {"auth", "redis", "otel", "sdk"}


def run(*cmd: str | Path, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
    env.pop("PYTHONPATH", None)
    # Under the test command's `coverage run`, a Python subprocess measures coverage: not pip's.
    env.pop("COVERAGE_PROCESS_CONFIG", None)
    env.pop("COVERAGE_PROCESS_START", None)
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, cwd="/"
    )
    if check:
        assert done.returncode == 0, f"{cmd}: {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built as for publishing: {"sdist": ..., "wheel": ...}."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    (sdist,) = out.glob("mcp_trio-*.tar.gz")
    (wheel,) = out.glob("mcp_trio-*-py3-none-any.whl")
    return {"sdist": sdist, "wheel": wheel}


def _metadata(text: str) -> Message:
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text)


@pytest.fixture(scope="module")
def metadata(dist: dict[str, Path]) -> Message:
    with zipfile.ZipFile(dist["wheel"]) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return _metadata(zf.read(name).decode())


@pytest.fixture(scope="module")
def installed(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a fresh venv with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    # No pip of its own (seconds to set up): this interpreter's pip installs into it (--python).
    venv.create(tmp / "venv", with_pip=False, clear=True)
    bin_dir = tmp / "venv" / "bin"
    run(sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--quiet", dist["wheel"])
    return bin_dir


def test_twine_check_passes_both(dist: dict[str, Path]) -> None:
    """What PyPI's upload checks: the metadata is valid and the long description renders."""
    done = run(sys.executable, "-m", "twine", "check", "--strict", dist["sdist"], dist["wheel"])
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_wheel_holds_the_package_and_its_data(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as zf:
        names = zf.namelist()
    assert "mcp_trio/py.typed" in names  # type checkers use the package's annotations
    assert "mcp_trio/__main__.py" in names  # python -m mcp_trio
    # The hypercorn guard's expected fingerprints are package data: without them no server starts.
    assert "mcp_trio/_http/hypercorn_0_18_0.json" in names
    assert any(re.fullmatch(r"mcp_trio-[^/]+\.dist-info/licenses/LICENSE", n) for n in names), names
    top = {n.split("/")[0] for n in names} - {"mcp_trio"}  # nothing else: no tests, docs or scripts
    assert len(top) == 1 and re.fullmatch(r"mcp_trio-[\d.]+\.dist-info", top.pop()), names


def test_the_sdist_builds_the_same_package(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
        (pkg_info,) = [m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("PKG-INFO")]
        extracted = tf.extractfile(pkg_info)
        assert extracted is not None
        sdist_metadata = _metadata(extracted.read().decode())
    for name in ("pyproject.toml", "LICENSE", "README.pypi.md", "mcp_trio/py.typed", "mcp_trio/__main__.py"):
        assert name in names, name
    assert "mcp_trio/_http/hypercorn_0_18_0.json" in names
    assert sdist_metadata["License-Expression"] == "MIT"
    assert sdist_metadata.get_payload().startswith("# mcp-trio")


def test_metadata_is_ready_to_publish(metadata: Message) -> None:
    assert metadata["Name"] == "mcp-trio"
    assert float(metadata["Metadata-Version"]) >= 2.4  # PEP 639
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    classifiers = metadata.get_all("Classifier")
    wanted = {"Framework :: Trio", "Typing :: Typed", "Programming Language :: Python :: 3.11"}
    assert wanted <= set(classifiers), classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX expression says it
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["Author"] or metadata["Author-email"]
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL"))
    assert {"Source", "Issues", "Changelog", "Documentation"} <= set(urls), urls
    assert all(u.startswith("https://") for u in urls.values()), urls
    assert metadata["Keywords"]


def test_the_long_description_is_the_pypi_page(metadata: Message) -> None:
    assert metadata["Description-Content-Type"] == "text/markdown"
    description = metadata.get_payload()
    assert description.strip() == (ROOT / "README.pypi.md").read_text().strip()
    assert description.startswith("# mcp-trio\n\n```sh\npip install mcp-trio\n```")


def test_only_user_extras_are_published(metadata: Message) -> None:
    """The development tools are dependency groups, not extras: a user cannot `pip install mcp-trio[dev]`."""
    assert set(metadata.get_all("Provides-Extra")) == EXTRAS
    requires = metadata.get_all("Requires-Dist")
    names = {re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower() for r in requires}
    assert not names & {"pytest", "mypy", "ruff", "hypothesis", "sphinx", "twine", "build"}, names
    # the python-sdk only for the sdk extra (hosting), never for mcp_trio itself
    sdk = [r for r in requires if re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower() == "mcp"]
    assert sdk and all(re.search(r"""extra\s*==\s*["']sdk["']""", r) for r in sdk), sdk
    assert "hypercorn==0.18.0" in requires  # the guard's version, exactly (docs/installation.md)


def test_wheel_installs_with_only_runtime_dependencies(installed: Path) -> None:
    freeze = run(sys.executable, "-m", "pip", "--python", installed / "python", "freeze").stdout.lower()
    names = {re.split(r"==| @ ", line)[0].replace("_", "-") for line in freeze.splitlines()}
    assert {"mcp-trio", "trio", "hypercorn", "mcp-types", "httpx", "pydantic"} <= names, names
    assert not names & {"pytest", "mypy", "ruff", "hypothesis", "sphinx", "mcp", "coredis", "joserfc"}, names
    where = run(installed / "python", "-c", "import mcp_trio; print(mcp_trio.__file__)").stdout
    assert str(ROOT) not in where and "site-packages" in where
    guard = "from mcp_trio._http.hypercorn_guard import check; print(check())"
    assert run(installed / "python", "-c", guard).stdout.strip() == "None"


def test_version_from_the_script_and_from_python_m(installed: Path) -> None:
    expected = f"mcp-trio {__version__}"
    assert run(installed / "mcp-trio", "--version").stdout.strip() == expected
    assert run(installed / "python", "-m", "mcp_trio", "--version").stdout.strip() == expected
    assert "demo" in run(installed / "python", "-m", "mcp_trio", "--help").stdout


@pytest.fixture(scope="module")
def demo(installed: Path) -> Iterator[str]:
    """``mcp-trio demo`` from the wheel, as the README's quick start starts it (on a free port): its URL."""
    proc = subprocess.Popen(
        [installed / "mcp-trio", "demo", "--bind", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert match, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0
    assert "stopped" in out


def test_demo_runs_from_the_wheel(demo: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "wheel-test", "version": "1"},
        },
    }
    response = httpx.post(
        demo,
        content=json.dumps(body),
        headers={"accept": "application/json, text/event-stream", "content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200
    assert '"serverInfo"' in response.text and "mcp-session-id" in response.headers


QUICK_START_COMMANDS = [line for line in QUICK_START if line.startswith("mcp-trio ")]


def test_the_readme_has_quick_start_commands() -> None:
    assert [shlex.split(line)[1] for line in QUICK_START_COMMANDS] == ["tools", "call"]


@pytest.mark.parametrize("install", ["installed", "editable"])
@pytest.mark.parametrize("line", QUICK_START_COMMANDS)
def test_the_readme_quick_start_works(
    line: str, install: str, request: pytest.FixtureRequest, demo: str
) -> None:
    """The README's newcomer commands, run by the `mcp-trio` of the wheel's venv (`pip install mcp-trio`)
    and of a fresh clone's (`pip install -e .`), against the wheel's demo."""
    bin_dir: Path = request.getfixturevalue(install)
    argv = shlex.split(line.replace("http://127.0.0.1:8000/mcp", demo))
    done = run(bin_dir / argv[0], *argv[1:], timeout=60)
    if argv[1] == "tools":
        assert re.search(r"^add\b", done.stdout, re.M), done.stdout
    else:
        assert re.search(r"(?<![\d.])5(\.0)?(?![\d.])", done.stdout), done.stdout  # add a=2 b=3


# -- an install that type checkers see ------------------------------------------------------------------

USER_CODE = """\
import mcp_trio

server = mcp_trio.MCPServer("checked", "1.0.0")
reveal_type(server)
wrong: int = server.name
"""


@pytest.fixture(scope="module")
def editable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a fresh venv with this tree installed as `pip install -e .` does."""
    tmp = tmp_path_factory.mktemp("editable")
    venv.create(tmp / "venv", with_pip=False, clear=True)
    bin_dir = tmp / "venv" / "bin"
    run(sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--quiet", "-e", ROOT)
    return bin_dir


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for both checks: the second one reuses what the first learnt of trio, pydantic..."""
    return tmp_path_factory.mktemp("mypy_cache")


@pytest.mark.parametrize("install", ["installed", "editable"])
def test_mypy_checks_code_against_the_installed_package(
    install: str, request: pytest.FixtureRequest, tmp_path: Path, mypy_cache: Path
) -> None:
    """Another project's code, checked by mypy with the venv's interpreter: mcp_trio is found and typed
    (an editable install included: it is a plain .pth file naming the tree, not an import hook that
    type checkers cannot follow)."""
    bin_dir: Path = request.getfixturevalue(install)
    if install == "editable":
        where = run(bin_dir / "python", "-c", "import mcp_trio; print(mcp_trio.__file__)").stdout
        assert where.strip() == str(ROOT / "mcp_trio" / "__init__.py")
    (tmp_path / "app.py").write_text(USER_CODE)
    done = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(mypy_cache), "--python-executable",
            str(bin_dir / "python"), "app.py",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")},
    )
    assert 'Revealed type is "mcp_trio._app.server.MCPServer[Any]"' in done.stdout, done.stdout
    # the one error is the planted one: found by the package's annotations, nothing else complains
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "[assignment]" in errors[0] and '"str"' in errors[0], done.stdout
    assert done.returncode == 1
