"""Fixtures of the real-socket tests: ``mcp-trio demo`` in a subprocess on 127.0.0.1:0.

``demo_server`` starts it with the flags of ``@pytest.mark.server_flags("--idle-timeout", "0.5", ...)``
and stops it with SIGINT afterwards, checking it exits by itself with status 0 in time (see
``mcp_http.serve_demo``).  ``baseline`` is the idle server's socket and task counts.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest
from mcp_http import Baseline, DemoServer, serve_demo


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "server_flags(*flags): extra command-line flags for the demo_server fixture"
    )


@pytest.fixture
def linux() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("inspects the server's sockets through /proc (Linux only)")


@pytest.fixture
async def demo_server(request: pytest.FixtureRequest, linux: None) -> AsyncIterator[DemoServer]:
    marker = request.node.get_closest_marker("server_flags")
    flags = [str(flag) for flag in marker.args] if marker else []
    async with serve_demo(*flags) as server:
        yield server


@pytest.fixture
async def baseline(demo_server: DemoServer) -> Baseline:
    return await Baseline.measure(demo_server)
