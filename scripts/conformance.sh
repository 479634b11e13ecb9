#!/usr/bin/env bash
# Run the official MCP conformance suite (npm: @modelcontextprotocol/conformance) against a server.
#
#   scripts/conformance.sh install
#   scripts/conformance.sh server URL [--version V] [extra args passed to the suite]
#   scripts/conformance.sh list [--version V] [extra args passed to the suite]
#
# V is 0.1.16, 0.2.0-alpha.12 or all (default: all = both, one after the other).
#
# The suite runs on Node 22 (scripts/node22.sh: .node22/, shared with the interop tests).  The rest is
# installed, idempotently, under .conformance/ (gitignored):
#   .conformance/v0.1.16/           @modelcontextprotocol/conformance@0.1.16
#   .conformance/v0.2.0-alpha.12/   @modelcontextprotocol/conformance@0.2.0-alpha.12
#   .conformance/results/           one directory per run (the suite's checks.json files + summary)
# Each suite gets its own prefix so its dependencies can be pinned to the versions in that release's
# own package-lock.json (the suite declares `@modelcontextprotocol/sdk: ^x`, and the SDK is the
# client that drives most scenarios, so a floating SDK would change what is tested from day to day).
#
# Scenario selection when no --scenario/--suite/--spec-version/--requirements is given: every server
# scenario tagged 2025-06-18 or 2025-11-25, pending ones included, i.e.
#   0.1.16:          conformance server --url URL --suite all
#                    (all 32 server scenarios of 0.1.16 carry one of those tags)
#   0.2.0-alpha.12:  conformance server --url URL --suite all --spec-version 2025-11-25
#                    (--spec-version is cumulative: it keeps the 33 scenarios applicable at
#                    2025-11-25 and runs them on the 2025-11-25 wire: stateful initialize +
#                    Mcp-Session-Id; without it the alpha would also run the 2026-07-28 and
#                    extension scenarios, on the stateless draft wire)
# --every-spec-version leaves --spec-version out: with --suite all the alpha then runs every server
# scenario it has on the 2026-07-28 wire, the extension ones (tasks-*) included, which no
# --spec-version selects.
#
# Exit status: non-zero when the suite exits non-zero or any check in any checks.json is FAILURE.
# WARNING checks are listed in the summary but do not fail the run (that is also the suite's rule).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CONF_DIR="${CONFORMANCE_DIR:-$ROOT/.conformance}"

V016="0.1.16"
VALPHA="0.2.0-alpha.12"            # newest 0.2.0 alpha on npm (npm view ... versions --json)
# @modelcontextprotocol/sdk as locked in each release's package-lock.json (v0.1.16 tag: 1.27.1;
# 0.2.0 line: 1.29.0, the floor the alpha's package.json requires).
SDK_FOR_016="1.27.1"
SDK_FOR_ALPHA="1.29.0"

usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
}

die() { echo "conformance.sh: $*" >&2; exit 2; }

# install_prefix DIR PACKAGE_JSON: npm-install PACKAGE_JSON into DIR unless DIR already holds exactly it.
install_prefix() {
    local dir="$1" pkg="$2"
    mkdir -p "$dir"
    if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$pkg" ] && [ -d "$dir/node_modules" ]; then
        return 0
    fi
    printf '%s\n' "$pkg" >"$dir/package.json"
    rm -f "$dir/.installed"
    local log="$dir/npm-install.log"
    if ! (cd "$dir" && npm install --no-audit --no-fund --no-update-notifier --loglevel=error >"$log" 2>&1); then
        cat "$log" >&2
        die "npm install failed in $dir"
    fi
    printf '%s\n' "$pkg" >"$dir/.installed"
}

suite_pkg() {  # suite_pkg VERSION SDK_VERSION
    printf '{\n  "private": true,\n  "dependencies": {\n    "@modelcontextprotocol/conformance": "%s"\n  },\n  "overrides": {\n    "@modelcontextprotocol/sdk": "%s"\n  }\n}' "$1" "$2"
}

install_all() {
    bash "$ROOT/scripts/node22.sh" || die "Node 22 is needed"
    install_prefix "$CONF_DIR/v$V016" "$(suite_pkg "$V016" "$SDK_FOR_016")"
    install_prefix "$CONF_DIR/v$VALPHA" "$(suite_pkg "$VALPHA" "$SDK_FOR_ALPHA")"
    local nv
    nv="$("$ROOT/.node22/node_modules/node/bin/node" --version)"
    case "$nv" in v22.*) ;; *) die "expected Node 22 in $ROOT/.node22, got $nv" ;; esac
}

# Node 22 first on PATH: the suite's bin starts with `#!/usr/bin/env node`, and anything it spawns
# must get the same runtime.
node22_env() {
    export PATH="$ROOT/.node22/node_modules/node/bin:$PATH"
}

suite_js() {  # suite_js VERSION
    echo "$CONF_DIR/v$1/node_modules/@modelcontextprotocol/conformance/dist/index.js"
}

has_arg() {  # has_arg NAME ARGS...: is --NAME or --NAME=... among ARGS?
    local name="$1"; shift
    local a
    for a in "$@"; do
        case "$a" in "$name" | "$name="*) return 0 ;; esac
    done
    return 1
}

resolve_versions() {  # print the versions selected by $1
    case "$1" in
        all | both) echo "$V016 $VALPHA" ;;
        "$V016" | 0.1 | 016) echo "$V016" ;;
        "$VALPHA" | alpha | 0.2) echo "$VALPHA" ;;
        *) die "unknown --version '$1' (use $V016, $VALPHA or all)" ;;
    esac
}

# Summarise every checks.json under a results directory; exit 1 if any check is FAILURE.
summarise() {  # summarise RESULTS_DIR LABEL
    node - "$1" "$2" <<'EOF'
const fs = require('fs'), path = require('path');
const [dir, label] = process.argv.slice(2);
const rows = [];
// Directory names end in the run's timestamp; sort on it to list scenarios in the order they ran.
const stamp = (d) => (d.match(/(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z)$/) || [, d])[1];
for (const d of fs.readdirSync(dir).sort((a, b) => stamp(a).localeCompare(stamp(b)))) {
  const f = path.join(dir, d, 'checks.json');
  if (!fs.existsSync(f)) continue;
  const m = d.match(/^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$/);
  const checks = JSON.parse(fs.readFileSync(f, 'utf8'));
  const n = (s) => checks.filter((c) => c.status === s).length;
  rows.push({ scenario: m ? m[1] : d, passed: n('SUCCESS'), failed: n('FAILURE'),
              warnings: n('WARNING'), skipped: n('SKIPPED'),
              problems: checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')
                .map((c) => ({ id: c.id, status: c.status, error: c.errorMessage ?? c.description })) });
}
const tot = (k) => rows.reduce((s, r) => s + r[k], 0);
const bad = rows.filter((r) => r.failed > 0);
console.log(`\n=== conformance ${label}: per-scenario results (${dir}) ===`);
for (const r of rows) {
  const mark = r.failed ? 'FAIL' : r.warnings ? 'warn' : 'ok  ';
  console.log(`${mark} ${r.scenario}  (${r.passed} ok, ${r.failed} failed, ${r.warnings} warnings` +
              `${r.skipped ? `, ${r.skipped} skipped` : ''})`);
  for (const p of r.problems) {
    const msg = String(p.error).replace(/\s+/g, ' ');
    console.log(`       ${p.status === 'FAILURE' ? 'FAILURE' : 'WARNING'} ${p.id}: ${msg.length > 300 ? msg.slice(0, 300) + '...' : msg}`);
  }
}
const summary = { label, scenarios: rows.length, scenariosFailed: bad.length,
                  checksPassed: tot('passed'), checksFailed: tot('failed'), warnings: tot('warnings'), rows };
fs.writeFileSync(path.join(dir, 'summary.json'), JSON.stringify(summary, null, 2));
console.log(`conformance ${label}: ${rows.length - bad.length}/${rows.length} scenarios clean; ` +
            `checks ok=${summary.checksPassed} failed=${summary.checksFailed} warnings=${summary.warnings}`);
process.exit(bad.length > 0 ? 1 : 0);
EOF
}

run_server() {  # run_server VERSION URL EXTRA...
    local version="$1" url="$2"; shift 2
    local args=(server --url "$url")
    if ! has_arg --scenario "$@" && ! has_arg --suite "$@" && ! has_arg --requirements "$@"; then
        args+=(--suite all)
    fi
    local every_version=0 rest=()
    for arg in "$@"; do  # --every-spec-version: no --spec-version filter (extension scenarios too)
        if [ "$arg" = --every-spec-version ]; then every_version=1; else rest+=("$arg"); fi
    done
    set -- ${rest[@]+"${rest[@]}"}
    if [ "$version" = "$VALPHA" ] && [ "$every_version" = 0 ] && ! has_arg --spec-version "$@" \
        && ! has_arg --requirements "$@"; then
        args+=(--spec-version 2025-11-25)
    fi
    local outdir=""
    if ! has_arg -o "$@" && ! has_arg --output-dir "$@"; then
        outdir="$CONF_DIR/results/$version-$(date -u +%Y%m%dT%H%M%SZ)-$$"
        mkdir -p "$outdir"
        args+=(-o "$outdir")
    fi
    args+=("$@")
    echo "=== conformance $version: node $(suite_js "$version") ${args[*]}"
    local rc=0
    node "$(suite_js "$version")" "${args[@]}" || rc=$?
    if [ -n "$outdir" ]; then
        local src=0
        summarise "$outdir" "$version" || src=$?
        if [ "$rc" = 0 ] && [ "$src" != 0 ]; then rc=$src; fi
    fi
    echo "=== conformance $version: exit $rc"
    return "$rc"
}

main() {
    local cmd="${1:-}"
    [ $# -gt 0 ] && shift
    case "$cmd" in
        install)
            install_all
            echo "conformance suites installed under $CONF_DIR"
            ;;
        server | list)
            local url=""
            if [ "$cmd" = server ]; then
                [ $# -gt 0 ] || die "usage: $0 server URL [--version V] [extra args]"
                url="$1"; shift
            fi
            local version="all" extra=()
            while [ $# -gt 0 ]; do
                case "$1" in
                    --version) [ $# -ge 2 ] || die "--version needs a value"; version="$2"; shift 2 ;;
                    --version=*) version="${1#--version=}"; shift ;;
                    *) extra+=("$1"); shift ;;
                esac
            done
            local versions
            versions="$(resolve_versions "$version")"
            install_all
            node22_env
            local v rc=0
            for v in $versions; do
                if [ "$cmd" = list ]; then
                    echo "=== conformance $v: list ${extra[*]:-}"
                    node "$(suite_js "$v")" list ${extra[@]+"${extra[@]}"} || rc=1
                else
                    run_server "$v" "$url" ${extra[@]+"${extra[@]}"} || rc=1
                fi
            done
            return "$rc"
            ;;
        -h | --help | help | "")
            usage
            ;;
        *)
            usage >&2
            exit 2
            ;;
    esac
}

main "$@"
