#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, then lints, type-checks, builds
# the docs, checks the import contracts and runs pytest with branch coverage.  `.ci/run` calls exactly this.
#
# Needs: Python >= 3.11 with pip (a virtual environment is best), npm (any version: it only downloads),
# and nginx, caddy, haproxy, redis-server, chromium and prometheus, or root / passwordless sudo to install
# them from Debian's packages.  It installs:
#   - pip 25.1 or newer (it reads pyproject.toml's dependency groups), then this package with its `dev`
#     group (pytest, mypy, ruff, hypothesis, Sphinx, trustme, build, twine, the OpenTelemetry SDK, the
#     python-sdk as an interop peer; about 70 MB);
#   - in .venv-lowest/, this package with its extras, every runtime dependency at the lowest version
#     pyproject.toml allows (scripts/lowest_deps.py), and the `test` group (about 60 MB, the same packages
#     as above in older releases): the quick part of the suite runs there too, the dependency policy's
#     low end (docs/installation.md);
#   - from Debian's packages, if missing: nginx, caddy and haproxy (real reverse proxies), redis-server
#     (the shared store of several workers), chromium (a real browser, headless) and prometheus (a real
#     scraper of the operations listener), about 250 MB;
#   - Node 22 into .node22/ (about 185 MB, once), the TypeScript SDK peers (2 x 29 MB) and the official
#     conformance suite (2 x 52 MB) under .conformance/, all from the npm registry;
#   - the Python SDK 1.x (mcp 1.30.0 and websockets, about 40 MB) in a venv of its own, .interop/mcp1/,
#     the WebSocket interop peer (the 2.x SDK in the dev group has no WebSocket transport).
# A first run downloads about 500 MB and takes about 15-20 minutes on 2 cores; later runs skip the installs.
# Any install that fails stops the run with its error.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    missing+=("Python >= 3.11 as python3 (found: $(python3 --version 2>&1 || echo none))")
fi
if ! command -v npm >/dev/null 2>&1; then
    missing+=("npm, to download Node 22 and the conformance suite (e.g. 'apt-get install npm', or Node.js from https://nodejs.org)")
fi
# Real servers and a real browser from Debian's packages: binary -> package.
declare -A PACKAGES=([nginx]=nginx-light [caddy]=caddy [haproxy]=haproxy [redis-server]=redis-server [chromium]=chromium [prometheus]=prometheus)
to_install=()
for binary in "${!PACKAGES[@]}"; do
    if ! command -v "$binary" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$binary" ]; then
        to_install+=("${PACKAGES[$binary]}")
    fi
done
if [ ${#to_install[@]} -gt 0 ] && [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
    missing+=("${to_install[*]} (Debian packages), or root / passwordless sudo so that this script can apt-get install them")
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "scripts/test.sh: cannot run the test suite; missing:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
fi

export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
echo "== install: pip >= 25.1, mcp_trio and its dev group"
python3 -m pip install --quiet --upgrade 'pip>=25.1'
python3 -m pip install --quiet -e . --group dev
# The low end of the dependency policy: the quick tests below run here too.  This interpreter's pip
# installs into the venv (--python): the venv needs no pip of its own.
LOWEST=${MCP_TRIO_LOWEST_VENV:-.venv-lowest}
echo "== install: mcp_trio with its lowest dependencies ($LOWEST)"
[ -x "$LOWEST/bin/python" ] || python3 -m venv --without-pip "$LOWEST"
python3 scripts/lowest_deps.py > "$LOWEST/constraints.txt"
python3 -m pip --python "$LOWEST/bin/python" install --quiet -c "$LOWEST/constraints.txt" \
    -e '.[auth,redis,otel]' --group test

# A reverse proxy (nginx), Redis and headless Chromium for the deployment tests; Prometheus for the
# operations listener's.
if [ ${#to_install[@]} -gt 0 ]; then
    echo "== install: ${to_install[*]} (Debian)"
    SUDO=(); [ "$(id -u)" = 0 ] || SUDO=(sudo -n)
    "${SUDO[@]}" apt-get update -qq >/dev/null
    if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${to_install[@]}" >/dev/null; then
        # nginx-light is gone from newer Debian releases: nginx itself then
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${to_install[@]/nginx-light/nginx}" >/dev/null
    fi
fi

# Node 22 (once), the official TypeScript SDK peers (interop tests) and the MCP conformance suite.
echo "== install: Node 22, TypeScript SDK peers, conformance suite (npm)"
bash scripts/install-node-deps.sh
bash scripts/conformance.sh install
echo "== install: the Python SDK 1.x WebSocket peer (.interop/mcp1)"
bash scripts/install-mcp1.sh

echo "== ruff"; python3 -m ruff check mcp_trio tests benchmarks docs
echo "== mypy"; python3 -m mypy
echo "== lint-imports"; lint-imports --no-cache
echo "== docs"; bash scripts/docs.sh -q
echo "== pytest"
# Everything the tests need was installed above: a test that finds a component missing fails instead of
# skipping, and so does any skip whose reason is not "not applicable here" (tests/required.py).
export MCP_TRIO_REQUIRE_ALL=1
python3 -m coverage erase
# Two workers (pytest-xdist), each taking whole test files: most tests wait on sockets and subprocesses,
# so two share the machine's cores well (add -n 0 to run in one process).  pytest-benchmark, where it
# happens to be installed, refuses xdist: it is not used here.
PYTEST=(python3 -m coverage run -m pytest -q -p no:cacheprovider -p no:benchmark -n 2 --dist loadfile)
"${PYTEST[@]}" "$@"
if [ $# -eq 0 ]; then
    # The real-socket tests once more with the demo on the embedded Trio + h11 server (http="h11"):
    # every behaviour of the ASGI path must hold on both HTTP servers (the Redis/worker tests are about
    # Redis, not HTTP, and run once; tests that run servers of their own, not the demo, run once too:
    # tests/integration/conftest.py deselects them in this pass).
    echo "== pytest (tests/integration on the embedded h11 server)"
    MCP_TRIO_TEST_HTTP=h11 "${PYTEST[@]}" tests/integration \
        --ignore=tests/integration/test_hypercorn_close_wait.py --ignore=tests/integration/test_h11_server.py \
        --ignore=tests/integration/test_hypercorn_fast_path.py --ignore=tests/integration/test_hostile_peers.py \
        --ignore=tests/integration/test_wheel.py --ignore=tests/integration/test_deploy_workers.py \
        --ignore=tests/integration/test_redis.py --ignore=tests/integration/test_balancer_leaks.py \
        --ignore=tests/integration/test_oauth_e2e.py --ignore=tests/integration/test_cli_client_auth.py
fi
python3 -m coverage combine -q
python3 -m coverage report --fail-under=90 --skip-covered | tail -n 15
if [ $# -eq 0 ]; then
    # The quick part of the suite (CONTRIBUTING.md: nothing but Python) with every runtime dependency at
    # its lowest allowed version: a lower bound in pyproject.toml is one the tests pass with.
    mapfile -t pins < "$LOWEST/constraints.txt"
    echo "== pytest (the quick tests, lowest dependencies: ${pins[*]})"
    # (-k "not hosting.md": the python-sdk is not installed here. mcp 2.3.0, the release of the sdk
    # extra, pins mcp-types 2.3.0, above the lowest mcp-types mcp_trio itself takes; the main passes test
    # the sdk extra.)
    # (-p no:anyio: AnyIO's pytest plugin, unused here, is the release trio 0.32 allows, and it imports a
    # name that newer pytest releases deprecate, which filterwarnings=error turns into a load error)
    "$LOWEST/bin/python" -m pytest -q -p no:cacheprovider -p no:benchmark -p no:anyio -n 2 --dist loadfile \
        tests/protocol tests/server tests/client tests/docs tests/test_cli_offline.py tests/test_cli_origins.py \
        --ignore=tests/client/test_client_interop.py --ignore=tests/client/test_conformance_client.py \
        -k "not hosting.md"
fi
