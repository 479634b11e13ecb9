"""The demo server as a worker of the fencing tests (tests/integration/test_fencing.py and
test_fencing_chaos.py): ``mcp-trio serve tests.integration.fencing_worker:build --worker-id a --redis URL``
with ``MCP_TRIO_TEST_EPOCHS=DIR`` in its environment.

Besides serving the demo, the process records which epoch of which session it served: each DEBUG record
of the ``mcp_trio._transport.ownership`` logger that carries ``mcp_session``, ``mcp_epoch`` and
``mcp_worker`` (one per request admitted to a session this worker owns) becomes a JSON line in
``DIR/<pid>.jsonl``: ``{"t", "session", "epoch", "worker", "pid"}``, ``t`` the wall-clock time the
serving was decided (``mcp_decided``: just before its check passed; a pause of the process between the
check and the record would otherwise date it after the pause).  Each line is one
``write`` on a file opened for appending and reaches the kernel at once, so a worker killed with SIGKILL
leaves every record it made.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from mcp_trio import MCPServer
from mcp_trio.demo import build_demo_server

EPOCHS_ENV = "MCP_TRIO_TEST_EPOCHS"
OWNERSHIP_LOGGER = "mcp_trio._transport.ownership"


class EpochRecorder(logging.Handler):
    """Appends each epoch record of the ownership logger to a JSON-lines file."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.DEBUG)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.pid = os.getpid()
        self.write_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        epoch = getattr(record, "mcp_epoch", None)
        if epoch is None:
            return
        line = {
            "t": getattr(record, "mcp_decided", record.created),  # (when the check passed)
            "session": getattr(record, "mcp_session", None),
            "epoch": epoch,
            "worker": getattr(record, "mcp_worker", None),
            "pid": self.pid,
        }
        with self.write_lock:
            os.write(self.fd, json.dumps(line).encode() + b"\n")


def build() -> MCPServer:
    """The demo server; the epoch recorder attached once (the directory is ``$MCP_TRIO_TEST_EPOCHS``)."""
    directory = os.environ.get(EPOCHS_ENV)
    if directory:
        logger = logging.getLogger(OWNERSHIP_LOGGER)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(EpochRecorder(Path(directory) / f"{os.getpid()}.jsonl"))
    return build_demo_server()
