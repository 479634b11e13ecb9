"""``PeerLog``: what peers do wrong is one log line per kind and interval, never a traceback."""

from __future__ import annotations

import logging

import pytest

from mcp_trio._server.peerlog import PeerLog


def test_one_line_per_kind_and_interval_then_a_count_of_those_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    log = PeerLog(logging.getLogger("test.peerlog"), interval=60.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="test.peerlog")
    assert log("refused", "refused a request (%d)", 400)
    for _ in range(499):
        assert not log("refused", "refused a request (%d)", 400)
    assert log("timeout", "a write timed out")  # another kind has its own interval
    now[0] += 59.0
    assert not log("refused", "refused a request (%d)", 431)
    now[0] += 1.0
    assert log("refused", "refused a request (%d)", 431)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "refused a request (400)",
        "a write timed out",
        "refused a request (431) (500 more like it in the last 60 s)",
    ]
    assert all(record.levelno == logging.INFO and record.exc_info is None for record in caplog.records)


def test_nothing_is_counted_or_logged_below_the_loggers_level(caplog: pytest.LogCaptureFixture) -> None:
    log = PeerLog(logging.getLogger("test.peerlog.quiet"), clock=lambda: 0.0)
    caplog.set_level(logging.WARNING, logger="test.peerlog.quiet")
    assert not log("refused", "refused a request")
    assert caplog.records == []
