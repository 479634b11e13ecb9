"""Fixtures of the real-socket tests: ``mcp-trio demo`` in a subprocess on 127.0.0.1:0.

``demo_server`` starts it with the flags of ``@pytest.mark.server_flags("--idle-timeout", "0.5", ...)``
and stops it with SIGINT afterwards, checking it exits by itself with status 0 in time (see
``mcp_http.serve_demo``).  ``baseline`` is the idle server's socket and task counts.  In a module marked
``shared_demo_server`` the tests without ``server_flags`` share one demo (``mcp_http.shared_demo``, stopped
and checked the same way after the module's last test); each still measures its own ``baseline`` first
and must leave the server at it.  ``@pytest.mark.demo_without_coverage``: under ``coverage run`` the
demo of that (volume) test measures no coverage.

``@pytest.mark.also_hosted`` (on a module or a test): every test there that uses ``demo_server`` runs
twice, on the demo and on a python-sdk server hosted by ``mcp-trio serve`` (``sdk_servers.py``,
``mcp_http.HOSTED_SDK_SERVER``): ids ``[demo]`` and ``[hosted]``; the ``served`` fixture says which.  A
test (or a ``pytest.param``) there that relies on the demo's own tools, or tries nothing a hosted server
would change, is marked ``demo_only``: its ``[hosted]`` twin is deselected.  A volume test marked
``hosted_once`` runs its ``[hosted]`` twin in the first pass only (hypercorn): the second pass (below)
runs the demo on h11, and ``test_sdk_hosted.py`` serves a hosted server on both HTTP servers.

``MCP_TRIO_TEST_HTTP=h11`` (the test command's second pass) runs the demo on the embedded h11 server;
that pass keeps only the tests that run the demo through ``mcp_http`` (the ``demo_server`` fixture, or
``serve_demo`` / ``SERVER_COMMAND`` imported by their module) and deselects the others: they run
their own servers, the same in both passes, and the first pass ran them already.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator

import pytest
from mcp_http import HOSTED_SDK_SERVER, HTTP_SERVER, Baseline, DemoServer, serve_demo, shared_demo
from tests.required import not_applicable


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "server_flags(*flags): extra command-line flags for the demo_server fixture"
    )
    config.addinivalue_line(
        "markers", "shared_demo_server: the module's tests without server_flags share one demo_server"
    )
    config.addinivalue_line(
        "markers",
        "demo_without_coverage: under coverage run, the demo_server of this volume test measures none",
    )
    config.addinivalue_line(
        "markers", "also_hosted: the demo_server tests here run on a hosted python-sdk server too"
    )
    config.addinivalue_line("markers", "demo_only: under also_hosted, this test runs on the demo only")
    config.addinivalue_line("markers", "hosted_once: under also_hosted, [hosted] runs on hypercorn only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "served" in metafunc.fixturenames and metafunc.definition.get_closest_marker("also_hosted"):
        metafunc.parametrize("served", ["demo", "hosted"], indirect=True, scope="module")


def hosted_but_demo_only(item: pytest.Item) -> bool:
    """A ``[hosted]`` test marked ``demo_only`` (on the test, or on one of its ``pytest.param``), or
    ``hosted_once`` in the second pass."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("served") != "hosted":
        return False
    once = HTTP_SERVER != "hypercorn" and item.get_closest_marker("hosted_once") is not None
    return once or item.get_closest_marker("demo_only") is not None


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> str:
    """What ``demo_server`` runs: ``demo`` (``mcp-trio demo``) or ``hosted`` (a python-sdk server hosted by
    ``mcp-trio serve``), by ``also_hosted``."""
    kind: str = getattr(request, "param", "demo")
    return kind


def _target(served: str) -> str | None:
    return HOSTED_SDK_SERVER if served == "hosted" else None


def runs_the_demo(item: pytest.Item) -> bool:
    """Whether ``item`` runs the demo through ``mcp_http`` (so on the server ``MCP_TRIO_TEST_HTTP`` picks)."""
    module = getattr(item, "module", None)
    return "demo_server" in getattr(item, "fixturenames", ()) or any(
        hasattr(module, name) for name in ("serve_demo", "SERVER_COMMAND")
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselected = [
        item
        for item in items
        if hosted_but_demo_only(item) or (HTTP_SERVER != "hypercorn" and not runs_the_demo(item))
    ]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        gone = set(deselected)
        items[:] = [item for item in items if item not in gone]


@pytest.fixture
def linux() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip(not_applicable("inspects the server's sockets through /proc (Linux only)"))


@pytest.fixture(scope="module")
def module_demo_server(served: str) -> Iterator[DemoServer]:
    """One demo (or hosted server, see ``served``) for the tests of a module marked ``shared_demo_server``."""
    if not sys.platform.startswith("linux"):
        pytest.skip(not_applicable("inspects the server's sockets through /proc (Linux only)"))
    with shared_demo(target=_target(served)) as server:
        yield server


@pytest.fixture
def shared_server(request: pytest.FixtureRequest) -> DemoServer | None:
    """The module's shared demo, if this test uses it (its module is marked ``shared_demo_server`` and
    the test asks for no ``server_flags``)."""
    node = request.node
    if node.get_closest_marker("shared_demo_server") and not node.get_closest_marker("server_flags"):
        server: DemoServer = request.getfixturevalue("module_demo_server")
        assert server.process.poll() is None, f"the shared demo exited:\n{server.log()}"
        return server
    return None


@pytest.fixture
async def demo_server(
    request: pytest.FixtureRequest, linux: None, shared_server: DemoServer | None, served: str
) -> AsyncIterator[DemoServer]:
    if shared_server is not None:
        yield shared_server
        return
    marker = request.node.get_closest_marker("server_flags")
    flags = [str(flag) for flag in marker.args] if marker else []
    measure_coverage = request.node.get_closest_marker("demo_without_coverage") is None
    async with serve_demo(*flags, measure_coverage=measure_coverage, target=_target(served)) as server:
        yield server


@pytest.fixture
async def baseline(demo_server: DemoServer) -> Baseline:
    return await Baseline.measure(demo_server)
