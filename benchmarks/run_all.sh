#!/usr/bin/env bash
# Every measurement of docs/performance.md, in one command (on 2 cores about 12 minutes with RUNS=2, 16 with 3,
# and 25 more for the instruction counts of table 10):
#
#   bash benchmarks/run_all.sh [RUNS]        # RUNS per server per invocation, default 3
#
# Writes each table to benchmarks/results/<UTC timestamp>/ (git-ignored) and prints them as it goes.
#   1-2. hypercorn's trio worker: mcp-trio vs the official python-sdk vs a bare ASGI app (the floor),
#        with SSE answers, then with JSON answers; table 1 also has the python-sdk on hypercorn as shipped
#        (python-sdk-shipped: what its users run), the others run on mcp_trio's hypercorn like ours;
#   3-4. the embedded Trio + h11 server (mcp-trio --http h11) vs the official TypeScript SDK on Node vs a
#        bare Trio + h11 loop (the floor), SSE then JSON;
#   5-6. memory per idle session and per open GET stream: mcp-trio (hypercorn) vs python-sdk vs
#        ts-sdk, then mcp-trio on h11; plus the in-process tracemalloc figure;
#   7.   2026 tools/call through HAProxy to 1 and 2 workers vs direct (needs haproxy, redis-server);
#   8.   the 2026-07-28 era (stateless POSTs: tools/call, server/discover, an input-required round trip,
#        subscriptions/listen opened and dropped) on hypercorn: mcp-trio vs python-sdk (both ways) vs bare-asgi;
#   9.   the same on the embedded h11 server: mcp-trio vs bare-h11 (the TypeScript SDK 1.32.2 does not
#        serve 2026-07-28: its column is skipped with a note);
#  10.   instructions per request counted by callgrind (noise-free, unlike the wall clock): a 2026 call, a
#        2025 SSE call and a 2025 session on mcp-trio and its floor, on hypercorn and on the embedded h11
#        server (needs valgrind; about 25 more minutes; CALLGRIND=0 skips it);
#  11-12. one python-sdk server on its own transport (hypercorn's trio worker, uvicorn) and hosted by
#        mcp_trio (hypercorn, h11), 2025 then 2026 (bench_hosted.py; about 4 minutes each with RUNS=3); with
#        valgrind also their instructions per request (13, about 40 more minutes; CALLGRIND=0 skips it).
# The TypeScript SDK needs Node 22 and the SDK that `bash scripts/test.sh` installs
# (scripts/install-node-deps.sh); without them its columns are skipped with a note.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
OUT="benchmarks/results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
run() {
    local name="$1"; shift
    echo "== $name: python3 $*" | tee "$OUT/$name.txt"
    python3 "$@" 2>&1 | tee -a "$OUT/$name.txt"
}
run 1-hypercorn-sse benchmarks/bench_server.py --runs "$RUNS" --baseline python-sdk --baseline python-sdk-shipped \
    --baseline bare-asgi --json "$OUT/1-hypercorn-sse.json"
run 2-hypercorn-json benchmarks/bench_server.py --runs "$RUNS" --json-response --baseline python-sdk \
    --baseline bare-asgi --json "$OUT/2-hypercorn-json.json"
run 3-h11-sse benchmarks/bench_server.py --runs "$RUNS" --http h11 --baseline ts-sdk --baseline bare-h11 \
    --json "$OUT/3-h11-sse.json"
run 4-h11-json benchmarks/bench_server.py --runs "$RUNS" --http h11 --json-response --baseline ts-sdk \
    --baseline bare-h11 --json "$OUT/4-h11-json.json"
run 5-memory-hypercorn benchmarks/bench_memory.py --baseline python-sdk --baseline ts-sdk --in-process \
    --json "$OUT/5-memory-hypercorn.json"
run 6-memory-h11 benchmarks/bench_memory.py --http h11 --json "$OUT/6-memory-h11.json"
run 7-balancer benchmarks/bench_balancer.py --runs "$RUNS" --json "$OUT/7-balancer.json"
run 8-hypercorn-2026 benchmarks/bench_server.py --runs "$RUNS" --era 2026 --baseline python-sdk \
    --baseline python-sdk-shipped --baseline bare-asgi --json "$OUT/8-hypercorn-2026.json"
run 9-h11-2026 benchmarks/bench_server.py --runs "$RUNS" --era 2026 --http h11 --baseline ts-sdk \
    --baseline bare-h11 --json "$OUT/9-h11-2026.json"
if [ "${CALLGRIND:-1}" != 0 ] && command -v valgrind > /dev/null; then
    PYTHONHASHSEED=0 run 10-instructions benchmarks/bench_callgrind.py --all \
        --servers mcp-trio,bare-asgi,mcp-trio-h11,bare-h11 --low 150 --high 750
else
    echo "== 10-instructions: skipped (CALLGRIND=0, or no valgrind)" | tee "$OUT/10-instructions.txt"
fi
run 11-hosted-2025 benchmarks/bench_hosted.py --runs "$RUNS" --json "$OUT/11-hosted-2025.json"
run 12-hosted-2026 benchmarks/bench_hosted.py --runs "$RUNS" --era 2026 --json "$OUT/12-hosted-2026.json"
if [ "${CALLGRIND:-1}" != 0 ] && command -v valgrind > /dev/null; then
    for era in 2026 2025; do
        PYTHONHASHSEED=0 run "13-hosted-instructions-$era" benchmarks/bench_callgrind.py --era "$era" \
            --servers sdk-hosted,python-sdk,sdk-hosted-h11,python-sdk-uvicorn --low 100 --high 500
    done
fi
echo "results in $OUT"
