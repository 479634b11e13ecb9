#!/usr/bin/env bash
# The official Python SDK 1.x, the WebSocket interop peer of tests/integration/test_interop_websocket.py
# (tests/integration/ws_peers/py_client.py): a virtual environment of its own in .interop/mcp1/, since the
# tests' environment has mcp 2.x, which has no WebSocket transport.
#
# Installs exactly mcp==1.30.0 and websockets==15.0.1 (the floor of mcp 1.x's `ws` extra; its
# websocket_client uses websockets.asyncio.client) from PyPI with `python3 -m venv` + pip, about 40 MB.
# Idempotent and quiet: does nothing when the stamp file says these exact pins are installed.  Any
# failure prints pip's output and the reason, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=".interop/mcp1"
PINS=("mcp==1.30.0" "websockets==15.0.1")
STAMP="$VENV/.installed-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    exit 0
fi

fail() {
    echo "install-mcp1: $1" >&2
    [ -f "$LOG" ] && sed 's/^/  | /' "$LOG" >&2
    exit 1
}

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

python3 -m venv "$VENV" >"$LOG" 2>&1 || fail "python3 -m venv $VENV failed"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" >"$LOG" 2>&1 ||
    fail "pip install ${PINS[*]} into $VENV failed"
# The peer's imports, under the pinned versions: a broken install fails here, not in the test.
"$VENV/bin/python" -W ignore::DeprecationWarning -c '
import sys
from importlib.metadata import version
import mcp.client.websocket, mcp.client.session
got = [name + "==" + version(name) for name in ("mcp", "websockets")]
sys.exit(None if got == sys.argv[1:] else f"installed {got}, wanted {sys.argv[1:]}")
' "${PINS[@]}" >"$LOG" 2>&1 || fail "the installed SDK does not import or has the wrong versions"

printf '%s\n' "$WANT" >"$STAMP"
