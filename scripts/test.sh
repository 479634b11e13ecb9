#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, then lints, type-checks and
# runs pytest with branch coverage.  `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]' 2>&1 | grep -v "Running pip as the 'root' user" || true

# A real reverse proxy for the proxy tests: nginx from Debian's packages.
if ! command -v nginx >/dev/null 2>&1 && ! [ -x /usr/sbin/nginx ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null \
            || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
    else
        sudo apt-get update -qq >/dev/null && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
    fi
fi

# Node 22 + the official TypeScript SDK client (interop tests) and the MCP conformance suite.
bash scripts/install-node-deps.sh
bash scripts/conformance.sh install

echo "== ruff"; python3 -m ruff check src tests benchmarks
echo "== mypy"; python3 -m mypy
echo "== pytest"
python3 -m coverage erase
python3 -m coverage run -m pytest -q -p no:cacheprovider "$@"
if [ $# -eq 0 ]; then
    # The real-socket tests once more with the demo on the embedded Trio + h11 server (serve_h11):
    # every behaviour of the ASGI path must hold on both HTTP servers.
    echo "== pytest (tests/integration on the embedded h11 server)"
    MCP_TRIO_TEST_HTTP=h11 python3 -m coverage run -m pytest -q -p no:cacheprovider tests/integration \
        --ignore=tests/integration/test_hypercorn_close_wait.py --ignore=tests/integration/test_h11_server.py \
        --ignore=tests/integration/test_hypercorn_fast_path.py --ignore=tests/integration/test_hostile_peers.py
fi
python3 -m coverage combine -q
python3 -m coverage report --fail-under=90 --skip-covered | tail -n 15
