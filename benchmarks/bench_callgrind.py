"""Instructions per request of whole servers (HTTP server, ASGI, app), counted by callgrind.

    python3 benchmarks/bench_callgrind.py [--era 2026|2025] [--sessions] [--servers mcp-trio,bare-asgi]

Each server runs under ``valgrind --tool=callgrind`` twice, once serving ``--low`` and once ``--high``
``tools/call`` requests (2026-07-28 stateless POSTs, or calls on 2025 sessions with SSE answers) from
``--concurrency`` keep-alive connections, every answer checked as ``bench_server.py`` checks it; with
``--sessions``, whole 2025 sessions instead (POST initialize, POST notifications/initialized, DELETE),
one after the other on each connection.  The
difference of the two totals divided by the difference of the counts is what one request costs the
server process, start-up and shutdown cancelled out.  The same count comes back for the same code
whatever else the machine does, so it answers "did this change make the server cheaper" where timings
on a shared machine cannot; it does not see cache misses or waiting, so it complements
``bench_server.py`` rather than replacing it.  ``python-sdk``, ``python-sdk-uvicorn``, ``sdk-hosted`` and
``sdk-hosted-h11`` are one python-sdk server on its own transport and hosted by mcp_trio
(``bench_hosted.py``).  Slow: a few minutes per server (valgrind runs the
interpreter some 50 times slower).  Needs ``valgrind``; the python-sdk baseline needs ``mcp`` (the
``bench`` extra).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_hosted  # noqa: E402
import bench_server as bs  # noqa: E402

SERVERS = {
    "mcp-trio": [
        "-c",
        "import sys; from mcp_trio._cli import main; main(sys.argv[1:])",
        "demo",
        "--bind",
        "127.0.0.1:0",
    ],
    # telemetry: OpenTelemetry not importable (no otel extra), or an SDK tracing and measuring everything
    "mcp-trio-no-otel": [str(HERE / "otel_demo.py"), "absent", "demo", "--bind", "127.0.0.1:0"],
    "mcp-trio-traced": [str(HERE / "otel_demo.py"), "traced", "demo", "--bind", "127.0.0.1:0"],
    # the operations listener: its Prometheus histograms recorded for every request
    "mcp-trio-admin": [
        "-c",
        "import sys; from mcp_trio._cli import main; main(sys.argv[1:])",
        "demo",
        "--bind",
        "127.0.0.1:0",
        "--admin-bind",
        "127.0.0.1:0",
    ],
    # the embedded Trio + h11 server instead of hypercorn
    "mcp-trio-h11": [
        "-c",
        "import sys; from mcp_trio._cli import main; main(sys.argv[1:])",
        "demo",
        "--bind",
        "127.0.0.1:0",
        "--http",
        "h11",
    ],
    "bare-asgi": [str(HERE / "baseline_bare_asgi.py"), "--bind", "127.0.0.1:0"],
    "bare-h11": [str(HERE / "baseline_bare_h11.py"), "--bind", "127.0.0.1:0"],
    "python-sdk": [str(HERE / "baseline_python_sdk.py"), "--bind", "127.0.0.1:0"],
    # the same python-sdk server on uvicorn (asyncio), and hosted by mcp_trio (bench_hosted.py)
    "python-sdk-uvicorn": bench_hosted.ARGV["sdk/uvicorn"],
    "sdk-hosted": bench_hosted.ARGV["hosted"],
    "sdk-hosted-h11": bench_hosted.ARGV["hosted/h11"],
}


async def load(target: bs.Target, era: str, count: int, concurrency: int, sessions: bool = False) -> None:
    """``count`` tools/call requests (or sessions) on ``concurrency`` connections; a wrong answer raises."""
    left = count

    async def worker() -> None:
        nonlocal left
        conn = bs.Connection(target)
        if sessions:
            while left > 0:
                left -= 1
                session = bs.Session(conn)
                await session.initialize()
                await session.delete()
            await conn.close()
            return
        session = bs.Session(conn) if era == "2025" else None
        client = bs.ModernClient(conn) if era == "2026" else None
        if session is not None:
            await session.initialize()
        while left > 0:
            left -= 1
            if session is not None:
                await session.call_echo()
            else:
                assert client is not None
                await client.call_echo()
        if session is not None:
            await session.delete()
        await conn.close()

    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)


def instructions(name: str, era: str, count: int, concurrency: int, sessions: bool = False) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *SERVERS[name]]
        server = bs.ServerProcess(
            bs.ServerSpec(name, argv, None), None, start_timeout=900.0, stop_timeout=600.0
        )
        try:
            target = server.start()
            trio.run(load, target, era, count, concurrency, sessions)
        finally:
            server.stop()
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"{name}: no callgrind summary")


SCENARIOS = {
    "2026": ("2026", False, "a 2026 tools/call"),
    "2025": ("2025", False, "a 2025 tools/call, SSE answer"),
    "session": ("2025", True, "a 2025 session (initialize, initialized, DELETE)"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["2026", "2025"], default="2026")
    parser.add_argument(
        "--servers", default="mcp-trio,bare-asgi", help="comma-separated: " + ",".join(SERVERS)
    )
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="whole 2025 sessions (initialize, initialized, DELETE) instead of tools/call",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every scenario (2026 call, 2025 call, 2025 session) for every server, in one table",
    )
    parser.add_argument("--low", type=int, default=300)
    parser.add_argument("--high", type=int, default=1300)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    names = args.servers.split(",")
    if unknown := [n for n in names if n not in SERVERS]:
        parser.error(f"unknown servers: {unknown}")
    if args.sessions and args.era != "2025":
        parser.error("--sessions needs --era 2025")
    if args.all:
        every(names, args.low, args.high, args.concurrency)
        return
    unit = "session" if args.sessions else "request"
    per: dict[str, float] = {}
    for name in names:
        per[name] = per_unit(name, args.era, args.sessions, args.low, args.high, args.concurrency)
        print(f"{name}: {per[name] / 1e6:.3f} M instructions per {unit}", flush=True)
    first = names[0]
    what = "2025 session" if args.sessions else f"{args.era} tools/call"
    print(f"\n| server | {what}: instructions per {unit} | relative to {first} |")
    print("|---|---|---|")
    for name in names:
        print(f"| {name} | {per[name] / 1e6:.3f} M | {per[name] / per[first]:.2f}x |")


def per_unit(name: str, era: str, sessions: bool, low: int, high: int, concurrency: int) -> float:
    """Instructions per request (or session) of one server: the difference of two runs."""
    first = instructions(name, era, low, concurrency, sessions)
    second = instructions(name, era, high, concurrency, sessions)
    return (second - first) / (high - low)


def every(names: list[str], low: int, high: int, concurrency: int) -> None:
    """One table: each server's instructions in each scenario, and a session against an SSE call."""
    rows: dict[str, dict[str, float]] = {}
    for name in names:
        rows[name] = {}
        for key, (era, sessions, _) in SCENARIOS.items():
            scale = 3 if sessions else 1  # a session is three requests: a third as many of them
            rows[name][key] = per_unit(name, era, sessions, low // scale, high // scale, concurrency)
            print(f"{name}: {SCENARIOS[key][2]}: {rows[name][key] / 1e6:.3f} M instructions", flush=True)
    labels = " | ".join(label for _, _, label in SCENARIOS.values())
    print(f"\n| server | {labels} | session / SSE call |")
    print("|---|" + "---|" * (len(SCENARIOS) + 1))
    for name, row in rows.items():
        cells = [f"{row[key] / 1e6:.3f} M" for key in SCENARIOS]
        print(f"| {name} | " + " | ".join(cells) + f" | {row['session'] / row['2025']:.2f}x |")


if __name__ == "__main__":
    main()
