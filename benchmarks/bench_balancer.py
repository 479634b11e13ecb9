"""2026-07-28 tools/call (stateless POSTs) through HAProxy to one and to two mcp-trio workers, and directly.

    python3 benchmarks/bench_balancer.py [--runs 3] [--concurrency 16] [--quick] [--json FILE]

Three setups, interleaved run by run (direct, haproxy-1, haproxy-2, direct, ...), each with fresh
processes and a short warm-up:

* ``direct``: one worker, ``mcp-trio demo --worker-id a --redis URL --stats-path /stats``, the load
  generator connects to it;
* ``haproxy-1``: the same worker behind HAProxy with docs/deploy/haproxy-workers.cfg minus its
  ``server b`` line;
* ``haproxy-2``: workers ``a`` and ``b`` behind HAProxy with the shipped config as it is.

A 2026 request carries no session id, so HAProxy balances it round robin.  The load generator is
bench_server.py's raw HTTP/1.1 client: ``--concurrency`` keep-alive connections, each in its own loop,
sending ``tools/call echo`` with the 2026 ``_meta`` and the ``mcp-protocol-version``, ``mcp-method`` and
``mcp-name`` headers, for at most ``--seconds`` (3) or 100 000 calls; every answer is checked.

Pinning on a 2-core machine (``--server-cpu`` 0, ``--client-cpu`` 1): worker ``a`` on the server CPU;
the load generator and HAProxy (one thread) on the client CPU; worker ``b`` on the client CPU too, so
in ``haproxy-2`` it shares its core with HAProxy and the load generator.  redis-server is not pinned
(the workers only heartbeat through it here).  ``--no-pin`` pins nothing.

Exit status 1 if any request failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import (  # noqa: E402
    PIN_AND_EXEC,
    BenchError,
    Budget,
    Connection,
    Recorder,
    ServerProcess,
    ServerSpec,
    Target,
    expect_result,
    fmt,
    http_request,
    med,
    percentile,
    proc_cpu_seconds,
    ratio,
    server_specs,
    step,
    versions,
)

CONFIG = HERE.parent / "docs" / "deploy" / "haproxy-workers.cfg"
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
ECHO_TEXT = "hi"
SETUPS = ("direct", "haproxy-1", "haproxy-2")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(argv: list[str], cpu: int | None) -> list[str]:
    return argv if cpu is None else [sys.executable, "-c", PIN_AND_EXEC, str(cpu), *argv]


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {within:g}s")


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT, within: float = 15.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(within)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server") or "/usr/sbin/redis-server"
    if not os.access(binary, os.X_OK):
        binary = "/usr/bin/redis-server"
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as directory:
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(argv, cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, proc, "redis-server")
            yield f"redis://127.0.0.1:{port}"
        finally:
            stop(proc, signal.SIGTERM)


@contextlib.contextmanager
def haproxy(workers: list[Target], cpu: int | None) -> Iterator[tuple[Target, int]]:
    """HAProxy with the shipped config (without ``server b`` for one worker); yields its target and pid."""
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    config = CONFIG.read_text()
    if len(workers) == 1:
        config = "\n".join(line for line in config.splitlines() if not line.strip().startswith("server b "))
    port = free_port()
    env = {**os.environ, "MCP_BIND": f"127.0.0.1:{port}"}
    for name, worker in zip("AB", workers, strict=False):
        env[f"WORKER_{name}"] = worker.host_header
    with tempfile.TemporaryDirectory(prefix="bench-haproxy-") as directory:
        cfg = Path(directory) / "haproxy.cfg"
        cfg.write_text(config + "\n")
        with open(Path(directory) / "stderr", "wb") as err:
            proc = subprocess.Popen(
                pinned([binary, "-db", "-f", str(cfg)], cpu), env=env, stdout=subprocess.DEVNULL, stderr=err
            )
        try:
            wait_port(port, proc, "haproxy")
            yield Target("127.0.0.1", port, "/mcp"), proc.pid
        finally:
            stop(proc, signal.SIGTERM)


def call_body(request_id: int) -> bytes:
    params = {"name": "echo", "arguments": {"text": ECHO_TEXT}, "_meta": META}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}, separators=(",", ":")
    ).encode()


HEADERS = [
    ("accept", "application/json, text/event-stream"),
    ("content-type", "application/json"),
    ("mcp-protocol-version", MODERN),
    ("mcp-method", "tools/call"),
    ("mcp-name", "echo"),
]


async def modern_call(conn: Connection, request_id: int) -> None:
    response = await conn.request(http_request(conn.target, "POST", HEADERS, call_body(request_id)), "POST")
    result = expect_result(response, request_id, "tools/call")
    content = result.get("content")
    if not isinstance(content, list) or not content or content[0].get("text") != ECHO_TEXT:
        raise BenchError(f"tools/call: wrong echo result {json.dumps(result)[:200]}")


@dataclass
class Result:
    setup: str
    run: int
    calls: int
    seconds: float
    rate: float
    p50_ms: float
    p99_ms: float
    cpu: dict[str, float]  # process -> CPU use over the timed part (1.0 = one core)
    errors: int
    error_messages: list[str]


async def load(target: Target, concurrency: int, count: int, seconds: float, limit: float) -> Recorder:
    rec = Recorder()
    conns = [Connection(target) for _ in range(concurrency)]

    async def worker(conn: Connection, budget: Budget, first_id: int) -> None:
        request_id = first_id
        while budget.take():
            t0 = time.perf_counter()
            try:
                await step("tools/call", limit, modern_call, conn, request_id)
            except BenchError as exc:
                rec.fail(exc)
                return
            rec.latencies.append(time.perf_counter() - t0)
            request_id += 1

    try:
        budget = Budget(count, seconds)
        async with trio.open_nursery() as nursery:
            for i, conn in enumerate(conns):
                nursery.start_soon(worker, conn, budget, 1 + i * 10_000_000)
    finally:
        for conn in conns:
            await conn.close()
    return rec


def measure(setup: str, run: int, target: Target, pids: dict[str, int], args: argparse.Namespace) -> Result:
    warm = trio.run(load, target, 4, args.warmup, 30.0, args.timeout)
    cpu0 = {name: proc_cpu_seconds(pid) for name, pid in pids.items()}
    cli0, t0 = time.process_time(), time.perf_counter()
    rec = trio.run(load, target, args.concurrency, args.count, args.seconds, args.timeout)
    t1, cli1 = time.perf_counter(), time.process_time()
    cpu = {name: (proc_cpu_seconds(pid) - cpu0[name]) / (t1 - t0) for name, pid in pids.items()}
    cpu["client"] = (cli1 - cli0) / (t1 - t0)
    latencies = sorted(rec.latencies)
    return Result(
        setup=setup,
        run=run,
        calls=len(latencies),
        seconds=t1 - t0,
        rate=len(latencies) / (t1 - t0),
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        cpu=cpu,
        errors=rec.errors + warm.errors,
        error_messages=warm.messages + rec.messages,
    )


def run_setup(
    setup: str, run: int, args: argparse.Namespace, redis: str, cpus: tuple[int | None, int | None]
) -> Result:
    server_cpu, client_cpu = cpus
    ours = server_specs(argparse.Namespace(http=args.http, json_response=False, baseline=None))[0].argv
    names = ["a", "b"] if setup == "haproxy-2" else ["a"]
    with contextlib.ExitStack() as stack:
        workers: dict[str, ServerProcess] = {}
        for name, cpu in zip(names, (server_cpu, client_cpu), strict=False):
            spec = ServerSpec(f"worker-{name}", [*ours, "--worker-id", name, "--redis", redis], "/stats")
            worker = ServerProcess(spec, cpu, start_timeout=60.0, stop_timeout=15.0)
            stack.callback(worker.stop)
            worker.start()
            workers[name] = worker
        pids = {f"worker {name}": w.pid for name, w in workers.items()}
        if setup == "direct":
            target = workers["a"].target
        else:
            targets = [w.target for w in workers.values()]
            target, haproxy_pid = stack.enter_context(haproxy(targets, client_cpu))  # type: ignore[arg-type]
            pids["haproxy"] = haproxy_pid
        assert target is not None
        return measure(setup, run, target, pids, args)


def render(results: list[Result], concurrency: int) -> str:
    rows = {s: [r for r in results if r.setup == s] for s in SETUPS}
    summary = {
        s: {
            "rate": med([r.rate for r in rs]),
            "min": min(r.rate for r in rs),
            "max": max(r.rate for r in rs),
            "p50": med([r.p50_ms for r in rs]),
            "p99": med([r.p99_ms for r in rs]),
            "cpu": {k: med([r.cpu.get(k, float("nan")) for r in rs]) for k in rs[0].cpu},
            "errors": sum(r.errors for r in rs),
        }
        for s, rs in rows.items()
        if rs
    }
    out = [
        f"{'setup':<11} {'calls/s':>8} {'(min-max)':<17} {'p50 ms':>7} {'p99 ms':>7}"
        f"  {'cpu (1 core = 100%)':<52} err",
        "-" * 112,
    ]
    for s, v in summary.items():
        cpu = ", ".join(f"{k} {100 * x:.0f}%" for k, x in v["cpu"].items())
        out.append(
            f"{s:<11} {fmt(v['rate']):>8} {'(' + fmt(v['min']) + '-' + fmt(v['max']) + ')':<17} "
            f"{fmt(v['p50'], 2):>7} {fmt(v['p99'], 2):>7}  {cpu:<52} {v['errors']}"
        )
    for name, a, b in (
        ("haproxy-1/direct", "haproxy-1", "direct"),
        ("haproxy-2/haproxy-1", "haproxy-2", "haproxy-1"),
    ):
        if a in summary and b in summary:
            cells = [fmt(ratio(summary[a][k], summary[b][k]), 2) + "x" for k in ("rate", "p50", "p99")]
            out.append(f"{name:<20} rate {cells[0]}, p50 {cells[1]}, p99 {cells[2]}")
    out.append(
        f"2026-07-28 tools/call echo, c={concurrency}; medians over runs, (min-max) the spread of the rate."
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per setup, interleaved (default 3)")
    parser.add_argument("--concurrency", type=int, default=16, help="connections sending calls (default 16)")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed part of a run (default 3)")
    parser.add_argument("--count", type=int, default=100_000, help="at most this many calls per run")
    parser.add_argument("--warmup", type=int, default=500, help="untimed calls before each run (default 500)")
    parser.add_argument("--timeout", type=float, default=10.0, help="per-request timeout (default 10 s)")
    parser.add_argument(
        "--http", choices=["hypercorn", "h11"], default="hypercorn", help="the workers' HTTP server"
    )
    parser.add_argument(
        "--setup", action="append", choices=SETUPS, help="only these setups (may be repeated)"
    )
    parser.add_argument("--quick", action="store_true", help="1 run of 0.5 s per setup, 50 warm-up calls")
    parser.add_argument("--json", metavar="FILE", help="also write every run's numbers as JSON to FILE")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--no-pin", action="store_true", help="pin nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.seconds, args.warmup = 1, 0.5, 50
    for tool in ("haproxy", "redis-server"):
        if not (
            shutil.which(tool)
            or os.access(f"/usr/sbin/{tool}", os.X_OK)
            or os.access(f"/usr/bin/{tool}", os.X_OK)
        ):
            print(f"bench_balancer: skipped, {tool} is missing (apt-get install -y haproxy redis-server)")
            return 0  # like the other optional baselines, so that run_all.sh goes on
    cpus: tuple[int | None, int | None] = (None, None)
    if not args.no_pin:
        if {args.server_cpu, args.client_cpu} <= os.sched_getaffinity(
            0
        ) and args.server_cpu != args.client_cpu:
            os.sched_setaffinity(0, {args.client_cpu})
            cpus = (args.server_cpu, args.client_cpu)
        else:
            print("warning: CPUs not both available: not pinning", file=sys.stderr)
    setups = [s for s in SETUPS if not args.setup or s in args.setup]
    print(
        f"bench_balancer: runs={args.runs} c={args.concurrency} {args.seconds:g}s per run,"
        f" setups={','.join(setups)};"
        f" worker a cpu={cpus[0]}, worker b / haproxy / load generator cpu={cpus[1]}"
    )
    print("versions: " + " ".join(f"{k}={v}" for k, v in versions().items()), flush=True)
    results: list[Result] = []
    with redis_server() as redis:
        for run in range(1, args.runs + 1):
            for setup in setups:  # interleaved
                result = run_setup(setup, run, args, redis, cpus)
                results.append(result)
                cpu = ", ".join(f"{k} {100 * v:.0f}%" for k, v in result.cpu.items())
                print(
                    f"run {run} {setup:<9} {result.rate:.1f} calls/s p50 {result.p50_ms:.2f} ms"
                    f" p99 {result.p99_ms:.2f} ms ({cpu})"
                    + (f" {result.errors} errors" if result.errors else ""),
                    flush=True,
                )
    print()
    print(render(results, args.concurrency))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    failed = [r for r in results if r.errors]
    for r in failed:
        for message in r.error_messages:
            print(f"  {r.setup} run {r.run}: {message}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
