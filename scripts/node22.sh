#!/usr/bin/env bash
# Node 22, once, for everything the tests run on Node (the TypeScript SDK interop peers and the official
# conformance suite): the npm registry's `node` package (it fetches the matching official binary) into
# .node22/ at the repository root; the binary is .node22/node_modules/node/bin/node.
#
# Idempotent: does nothing when that exact version is already there.  Needs a global `npm` (any
# version: it only downloads); without it, says so and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_VERSION="22.23.3"
NODE_DIR=".node22"
NODE_BIN="$NODE_DIR/node_modules/node/bin/node"

if [ -x "$NODE_BIN" ] && [ "$("$NODE_BIN" --version 2>/dev/null)" = "v$NODE_VERSION" ]; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "node22.sh: npm not found. The tests download Node $NODE_VERSION with npm (any version of npm):" >&2
    echo "  install it first, e.g. 'apt-get install npm' on Debian/Ubuntu or Node.js from https://nodejs.org" >&2
    exit 1
fi
mkdir -p "$NODE_DIR"
[ -f "$NODE_DIR/package.json" ] || echo '{"private": true}' >"$NODE_DIR/package.json"
if ! npm install --prefix "$NODE_DIR" --save-exact --no-audit --no-fund --loglevel=error "node@$NODE_VERSION" \
        >"$NODE_DIR/npm-install.log" 2>&1; then
    cat "$NODE_DIR/npm-install.log" >&2
    echo "node22.sh: npm could not install node@$NODE_VERSION (log above)" >&2
    exit 1
fi
got="$("$NODE_BIN" --version)"
if [ "$got" != "v$NODE_VERSION" ]; then
    echo "node22.sh: expected Node v$NODE_VERSION in $NODE_DIR, got $got" >&2
    exit 1
fi
