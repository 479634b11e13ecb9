"""What a missing component does to a test: a skip when a developer runs a test by hand, a failure under
the test command.

``scripts/test.sh`` (and so CI, which runs it) sets ``MCP_TRIO_REQUIRE_ALL=1``: there every component
the suite needs (Node 22 and the npm peers, the conformance suite, nginx, caddy, haproxy, redis-server,
Prometheus, Chromium, the Python SDK 1.x venv) is installed by the command itself, so one that is missing
is a broken install, and a green run must not hide the guarantees its tests check.  A true ``CI``
variable counts the same, for a CI that calls pytest directly.

A test reports a missing component with :func:`missing`.  A skip that is right wherever the suite runs
(another platform than the one a test inspects, the other pass of the test command) gives its reason
through :func:`not_applicable`.  Under the test command ``tests/conftest.py`` turns every other skip into
a failure, so a skip added without either still cannot pass unseen.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ALL = "MCP_TRIO_REQUIRE_ALL"
NOT_APPLICABLE = "not applicable here: "
_FALSE = ("", "0", "false", "no", "off")


def required() -> bool:
    """Whether a missing component fails the test: under the test command (``MCP_TRIO_REQUIRE_ALL``) or a
    CI that sets ``CI``."""
    return any(os.environ.get(name, "").strip().lower() not in _FALSE for name in (REQUIRE_ALL, "CI"))


def missing(message: str) -> NoReturn:
    """Stop the test for want of a component: ``message`` says what is missing and how to install it.

    A skip when run by hand; a failure when :func:`required` (the test command installs everything)."""
    if required():
        pytest.fail(f"{message} (the test command requires every component: a failure, not a skip)")
    pytest.skip(message)


def not_applicable(reason: str) -> str:
    """The reason of a skip that holds wherever the suite runs, for ``pytest.skip`` or ``skipif``: the
    test command lets these through."""
    return NOT_APPLICABLE + reason
