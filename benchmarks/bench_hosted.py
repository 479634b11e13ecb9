"""The same python-sdk server on its own transport and hosted by mcp_trio, side by side, wall clock.

    python3 benchmarks/bench_hosted.py [--era 2025|2026] [--quick] [--runs 3] [--json-response] [--json FILE]

One server, ``baseline_python_sdk.build_server`` (an ``mcp.server.mcpserver.MCPServer`` with ``echo`` and
an input-required tool), served four ways, interleaved run by run with fresh processes:

- ``sdk/hypercorn``: the SDK's own Streamable HTTP app (``streamable_http_app()``, its session manager) on
  hypercorn's trio worker, with mcp_trio's CLOSE_WAIT fix and fast path (the same hypercorn as ``hosted``);
- ``sdk/uvicorn``: the same app on uvicorn (asyncio), what the SDK's ``run("streamable-http")`` uses;
- ``hosted``: ``mcp-trio serve baseline_python_sdk:build_server``, the server hosted by mcp_trio
  (``mcp_trio.sdk.hosted_app``) on hypercorn's trio worker;
- ``hosted/h11``: the same on mcp_trio's embedded h11 server (``--http h11``).

The scenarios, the load generator, the checks and the columns are ``bench_server.py``'s (its README
section); the ratios are each hosted server over each of the SDK's own (rate above 1x: hosted faster;
latency and cpu ms/op below 1x: hosted cheaper).  ``--servers`` picks some of the four.  The exit status is
1 if any request failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_server as bs  # noqa: E402

CLI = f"import sys; sys.path.insert(0, {str(HERE)!r}); from mcp_trio._cli import main; main(sys.argv[1:])"
HOSTED = ["-c", CLI, "serve", "baseline_python_sdk:build_server", "--bind", "127.0.0.1:0"]
SDK = [str(HERE / "baseline_python_sdk.py"), "--bind", "127.0.0.1:0"]
ARGV = {  # what each server runs, after the interpreter (bench_callgrind.py uses the same)
    "hosted": [*HOSTED, "--http", "hypercorn"],
    "hosted/h11": [*HOSTED, "--http", "h11"],
    "sdk/hypercorn": SDK,
    "sdk/uvicorn": [*SDK, "--server", "uvicorn"],
}
OURS = ("hosted", "hosted/h11")


def specs(names: list[str], json_response: bool) -> list[bs.ServerSpec]:
    out = []
    for name in names:
        argv = [sys.executable, *ARGV[name]]
        if json_response:
            argv.append("--json-response")
        if name in OURS:  # every load client is 127.0.0.1: no per-address quota; /stats for the checks
            argv += ["--max-sessions-per-address", "0", "--stats-path", "/stats"]
        out.append(bs.ServerSpec(name, argv, "/stats" if name in OURS else None))
    return out


def ratios(summary: list[dict[str, Any]], names: list[str]) -> list[str]:
    """One line per scenario and (hosted, sdk) pair: rate, p50 and cpu ms/op, hosted over the SDK's own."""
    pairs = [(h, s) for h in names if h in OURS for s in names if s not in OURS]
    lines = ["| scenario | hosted / SDK's own | rate | p50 | cpu ms/op |", "|---|---|---|---|---|"]
    for row in summary:
        for ours, theirs in pairs:
            a, b = row["servers"].get(ours), row["servers"].get(theirs)
            if a is None or b is None:
                continue
            cells = [
                bs.fmt(bs.ratio(a[k], b[k]), 2) + "x"
                for k in ("rate_median", "p50_ms_median", "server_cpu_ms_per_op_median")
            ]
            lines.append(f"| {row['scenario']} | {ours} / {theirs} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--era", choices=["2025", "2026"], default="2025")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--runs", type=int, default=None, help="runs per server (default 3; 1 with --quick)")
    parser.add_argument("--servers", default=",".join(ARGV), help="comma-separated: " + ",".join(ARGV))
    parser.add_argument("--json-response", action="store_true", help="servers answer with JSON, not SSE")
    parser.add_argument("--json", metavar="FILE", help="also write all results as JSON to FILE")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and load generator to CPUs")
    args = parser.parse_args(argv)
    names = args.servers.split(",")
    if unknown := [n for n in names if n not in ARGV]:
        parser.error(f"unknown servers: {unknown}")
    plan = bs.QUICK if args.quick else bs.FULL
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    server_cpu, client_cpu = bs.pin_cpus(args)
    servers = specs(names, args.json_response)
    mode = "json" if args.json_response else "sse"
    print(f"bench_hosted: era={args.era} mode={mode} runs={runs} servers={','.join(names)}", flush=True)
    print("versions: " + " ".join(f"{k}={v}" for k, v in bs.versions().items()), flush=True)
    results: list[bs.ScenarioResult] = []
    warmups: list[bs.ScenarioResult] = []
    started = time.monotonic()
    for run in range(1, runs + 1):
        for spec in servers:  # interleaved: each server once per run
            with bs.running(spec, server_cpu, stop_timeout=15.0) as server:
                assert server.target is not None
                ctx = bs.Context(
                    server.target, server.pid, spec.name, run, plan.request_timeout, plan.settle_seconds,
                    spec.stats_path,
                )  # fmt: skip
                if args.era == "2026":
                    done, warmup = trio.run(bs.run_modern_scenarios, ctx, plan, spec.modern)
                else:
                    done, warmup = trio.run(bs.run_scenarios, ctx, plan, spec.churn)
            results += done
            warmups.append(warmup)
            line = ", ".join(
                f"{r.scenario} {r.rate:.1f}/s" + f" ({r.errors} err)" * bool(r.errors)
                for r in done
            )
            print(f"run {run} {spec.name:<13} {line}", flush=True)
    summary = bs.summarize(results, names)
    if args.era == "2026":
        units = {"calls": "tools/call per s", "discover": "server/discover per s"}
        units |= {"mrtr": "round trips per s", "listen": "streams opened per s"}
    else:
        units = {"churn": "sessions/s", "calls": "tools/call per s"}
    table = bs.render(summary, units, names, args.era).split("\n")
    print("\n" + "\n".join(line for line in table if not line.lstrip().startswith(("ours/", "ours/X"))))
    print("\n" + "\n".join(ratios(summary, names)))
    print(f"\ntotal wall time {time.monotonic() - started:.1f}s")
    if args.json:
        document = {
            "era": args.era,
            "mode": mode,
            "runs": runs,
            "pinning": {"server_cpu": server_cpu, "client_cpu": client_cpu},
            "versions": bs.versions(),
            "summary": summary,
            "results": [asdict(r) for r in results],
        }
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
    failed = [r for r in results + warmups if r.errors]
    for r in failed:
        for message in r.error_messages:
            print(f"  {r.server} run {r.run} {r.scenario}: {message}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
