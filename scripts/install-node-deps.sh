#!/usr/bin/env bash
# The npm packages of the TypeScript-SDK interop tests, on Node 22 (scripts/node22.sh: .node22/).
#
# - `npm ci` in tests/integration/ts_client/ from its committed package-lock.json (exact versions).
# - `npm ci` in tests/client/ts_server/ (the TypeScript-SDK server of tests/client/test_client_interop.py),
#   likewise from its committed package-lock.json.
# - `npm ci` in tests/oauth_as/ (oidc-provider, the authorization server of the OAuth end-to-end tests,
#   tests/integration/test_oauth_e2e.py), likewise from its committed package-lock.json.
#
# Idempotent and quiet: does nothing when all three are already in place and up to date.  Needs a global
# `npm` (any version: it only downloads); without it, says so and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

CLIENT_DIR="tests/integration/ts_client"
STAMP="$CLIENT_DIR/node_modules/.installed-from-package-lock.json"
NPM_QUIET=(--no-audit --no-fund --loglevel=error)

bash scripts/node22.sh

if ! cmp -s "$CLIENT_DIR/package-lock.json" "$STAMP"; then
    (cd "$CLIENT_DIR" && npm ci "${NPM_QUIET[@]}" >/dev/null) || { echo "install-node-deps: npm ci failed in $CLIENT_DIR" >&2; exit 1; }
    cp "$CLIENT_DIR/package-lock.json" "$STAMP"
fi

SERVER_DIR="tests/client/ts_server"
SERVER_STAMP="$SERVER_DIR/node_modules/.installed-from-package-lock.json"
if ! cmp -s "$SERVER_DIR/package-lock.json" "$SERVER_STAMP"; then
    (cd "$SERVER_DIR" && npm ci "${NPM_QUIET[@]}" >/dev/null) || { echo "install-node-deps: npm ci failed in $SERVER_DIR" >&2; exit 1; }
    cp "$SERVER_DIR/package-lock.json" "$SERVER_STAMP"
fi

OAUTH_AS_DIR="tests/oauth_as"
OAUTH_AS_STAMP="$OAUTH_AS_DIR/node_modules/.installed-from-package-lock.json"
if ! cmp -s "$OAUTH_AS_DIR/package-lock.json" "$OAUTH_AS_STAMP"; then
    (cd "$OAUTH_AS_DIR" && npm ci "${NPM_QUIET[@]}" >/dev/null) || { echo "install-node-deps: npm ci failed in $OAUTH_AS_DIR" >&2; exit 1; }
    cp "$OAUTH_AS_DIR/package-lock.json" "$OAUTH_AS_STAMP"
fi
