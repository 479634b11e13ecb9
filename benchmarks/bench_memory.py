"""Memory benchmark: what one idle MCP session and one open GET (SSE) stream cost a server, side by side.

    python3 benchmarks/bench_memory.py [--sessions 1000] [--runs 2] [--baseline python-sdk]
                                       [--baseline ts-sdk] [--http h11] [--in-process] [--json FILE]

For each server (``mcp-trio demo`` by default, the baselines of ``bench_server.py`` on request) and each
run, interleaved (ours, baseline(s), ours, ...), a fresh server subprocess is started and:

1. warmed up (a few sessions opened, each with a GET stream, then deleted); its VmRSS is read: RSS start;
2. N idle sessions are opened (POST ``initialize`` + POST ``notifications/initialized``) over a small pool
   of keep-alive connections, which is then closed; after a pause, (RSS - RSS start) / N = KiB per idle
   session;
3. one GET SSE stream per session is opened, each on its own connection (head read, stream left open);
   after a pause, (RSS - RSS after step 2) / N = KiB per open GET stream, the server's connection and
   socket cost included;
4. every session is DELETEd and every connection closed; the server's socket count must fall back to
   its count at step 1 (within a few seconds).

``--in-process`` also measures, with ``tracemalloc`` and no sockets (``mcp_trio.testing``), the Python
allocations one idle mcp_trio session keeps alive: RSS includes allocator slack and pages, this does not.

The server machinery (``server_specs``, ``running``, ``proc_rss_kb``, ``proc_sockets``) and the raw
HTTP/1.1 client (``Connection``, ``Session``) are those of ``bench_server.py``.  See README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_server import (  # bench_server.py is a script in this folder, not a package
    BenchError,
    Connection,
    Context,
    Recorder,
    Response,
    ServerSpec,
    Session,
    Target,
    fmt,
    med,
    pin_cpus,
    proc_rss_kb,
    proc_sockets,
    running,
    server_sessions,
    server_specs,
    settle_sockets,
    step,
    versions,
)
from bench_server import table_line as bench_table_line

DEFAULT_SESSIONS = 1000
WARMUP_SESSIONS = 16
FD_MARGIN = 128  # descriptors besides the N streams: the pool, listeners, pipes, the runtime's own
SOCKETS_TOLERANCE = 2  # "back to baseline": at most this many sockets above the count at step 1


# --------------------------------------------------------------------------------------------------------
# Over sockets: one run against one server
# --------------------------------------------------------------------------------------------------------


def proc_status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


@dataclass
class MemoryRun:
    server: str
    run: int
    sessions_requested: int
    sessions_opened: int = 0
    streams_opened: int = 0
    streams_ended_by_delete: int = 0
    sessions_deleted: int = 0
    rss_kb_fresh: int = 0  # before the warm-up
    rss_kb_start: int = 0  # after the warm-up (step 1)
    rss_kb_idle: int = 0  # with N idle sessions (step 2)
    rss_kb_before_streams: int = 0  # just before step 3 (after step 2's reading and the /stats request)
    rss_kb_streams: int = 0  # with N open GET streams too (step 3)
    rss_kb_end: int = 0  # after everything was deleted and closed (step 4)
    anon_kb_start: int = 0  # RssAnon, same moments (heap and stacks only, no file-backed pages)
    anon_kb_idle: int = 0
    anon_kb_streams: int = 0
    anon_kb_end: int = 0
    kib_per_session: float = math.nan
    kib_per_stream: float = math.nan
    sockets_fresh: int = 0
    sockets_start: int = 0
    sockets_idle: int = 0
    sockets_streams: int = 0
    sockets_end: int = 0
    sockets_back: bool | None = None
    server_sessions_idle: int | None = None  # mcp-trio's /stats, None for the baselines
    server_sessions_end: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    error_messages: list[str] = field(default_factory=list)
    skipped: str | None = None  # why this server did not run at all
    steps_skipped: list[str] = field(default_factory=list)  # steps this server cannot do (n/a)


@dataclass
class Plan:
    sessions: int
    pool: int
    concurrency: int
    request_timeout: float
    pause: float  # before each RSS reading
    settle: float  # how long the server gets to close its sockets
    phase_timeout: float  # bound of each whole step


async def pool_run(target: Target, work: list[str | None], rec: Recorder, what: str, plan: Plan) -> list[str]:
    """Over ``plan.pool`` keep-alive connections: for each ``None`` in ``work``, open a new session
    (``initialize`` + ``notifications/initialized``); for each session id, DELETE it.  Returns the ids of
    the sessions opened or deleted."""
    done: list[str] = []
    it = iter(work)
    conns = [Connection(target) for _ in range(min(plan.pool, len(work)))]

    async def worker(conn: Connection) -> None:
        for sid in it:
            session = Session(conn)
            try:
                if sid is None:
                    await step("initialize", plan.request_timeout, session.initialize)
                else:
                    session.session_id = sid
                    await step("DELETE", plan.request_timeout, session.delete)
            except BenchError as exc:
                rec.fail(BenchError(f"{what}: {exc}"))
                await conn.close()  # its state is unknown; the next request reopens it
                continue
            done.append(session.session_id)

    try:
        with trio.move_on_after(plan.phase_timeout) as scope:
            async with trio.open_nursery() as nursery:
                for conn in conns:
                    nursery.start_soon(worker, conn)
        if scope.cancelled_caught:
            rec.fail(BenchError(f"{what}: not done within {plan.phase_timeout:g}s ({len(done)} done)"))
    finally:
        for conn in conns:
            await conn.close()
    return done


async def open_streams(
    target: Target, ids: list[str], rec: Recorder, plan: Plan
) -> list[tuple[Connection, Response]]:
    """One GET stream per session, each on its own connection, ``plan.concurrency`` opened at a time."""
    streams: list[tuple[Connection, Response]] = []
    limiter = trio.CapacityLimiter(plan.concurrency)

    async def open_one(sid: str) -> None:
        async with limiter:
            conn = Connection(target)
            session = Session(conn)
            session.session_id = sid
            try:
                head = await step("GET", plan.request_timeout, session.open_get, conn)
            except BenchError as exc:
                rec.fail(exc)
                await conn.close()
                return
            streams.append((conn, head))

    with trio.move_on_after(plan.phase_timeout) as scope:
        async with trio.open_nursery() as nursery:
            for sid in ids:
                nursery.start_soon(open_one, sid)
    if scope.cancelled_caught:
        rec.fail(BenchError(f"GET: not all open within {plan.phase_timeout:g}s ({len(streams)} open)"))
    return streams


async def count_ended(streams: list[tuple[Connection, Response]], limit: float) -> int:
    """How many GET streams the server ended (chunked terminator) within ``limit`` seconds."""
    ended = 0

    async def wait_end(conn: Connection, head: Response) -> None:
        nonlocal ended
        try:
            await conn.read_body(head, "GET")
        except BenchError:
            return
        ended += 1

    with trio.move_on_after(limit):
        async with trio.open_nursery() as nursery:
            for conn, head in streams:
                nursery.start_soon(wait_end, conn, head)
    return ended


async def stats_sessions(ctx: Context, rec: Recorder) -> int | None:
    try:
        return await server_sessions(ctx)
    except BenchError as exc:
        rec.fail(exc)
        return None


async def measure_server(ctx: Context, plan: Plan, result: MemoryRun) -> None:
    rec = Recorder()
    pid, target = ctx.pid, ctx.target
    result.sockets_fresh = proc_sockets(pid)
    result.rss_kb_fresh = proc_rss_kb(pid)

    # 1. warm-up: a few sessions, each with a GET stream, deleted; then the baseline reading
    warm_ids = await pool_run(target, [None] * WARMUP_SESSIONS, rec, "warm-up", plan)
    if not warm_ids:
        result.errors, result.error_messages = rec.errors, rec.messages
        result.skipped = "cannot open a session (warm-up)"
        return
    failed_before = len(rec.messages)
    warm_streams = await open_streams(target, warm_ids, rec, plan)
    if not warm_streams:  # no GET stream at all: step 3 is n/a, the rest still runs
        why = rec.messages[failed_before] if len(rec.messages) > failed_before else "no GET stream opened"
        result.steps_skipped.append(f"GET streams: {why} (warm-up)")
    await pool_run(target, list(warm_ids), rec, "warm-up", plan)
    await count_ended(warm_streams, plan.settle)
    for conn, _ in warm_streams:
        await conn.close()
    await settle_sockets(ctx, result.sockets_fresh)
    await trio.sleep(plan.pause)
    result.sockets_start = proc_sockets(pid)
    result.rss_kb_start = proc_rss_kb(pid)
    result.anon_kb_start = proc_status_kb(pid, "RssAnon")

    # 2. N idle sessions, opened over a small pool of keep-alive connections that is then closed
    t0 = time.perf_counter()
    ids = await pool_run(target, [None] * plan.sessions, rec, "idle sessions", plan)
    result.seconds["sessions"] = time.perf_counter() - t0
    result.sessions_opened = len(ids)
    await settle_sockets(ctx, result.sockets_start)
    await trio.sleep(plan.pause)
    result.sockets_idle = proc_sockets(pid)
    result.rss_kb_idle = proc_rss_kb(pid)
    result.anon_kb_idle = proc_status_kb(pid, "RssAnon")
    result.server_sessions_idle = await stats_sessions(ctx, rec)  # after the reading: it opens a connection
    if ids:
        result.kib_per_session = (result.rss_kb_idle - result.rss_kb_start) / len(ids)

    # 3. one GET stream per session, each on its own connection, left open
    streams: list[tuple[Connection, Response]] = []
    result.sockets_streams = result.sockets_idle  # the peak, if step 3 does not run
    if ids and not result.steps_skipped:
        await settle_sockets(ctx, result.sockets_idle)
        result.rss_kb_before_streams = proc_rss_kb(pid)  # after the /stats request, if any
        t0 = time.perf_counter()
        streams = await open_streams(target, ids, rec, plan)
        result.seconds["streams"] = time.perf_counter() - t0
        result.streams_opened = len(streams)
        await trio.sleep(plan.pause)
        result.sockets_streams = proc_sockets(pid)
        result.rss_kb_streams = proc_rss_kb(pid)
        result.anon_kb_streams = proc_status_kb(pid, "RssAnon")
        if streams:
            result.kib_per_stream = (result.rss_kb_streams - result.rss_kb_before_streams) / len(streams)

    # 4. DELETE every session, close every connection, the sockets must come back
    t0 = time.perf_counter()
    deleted = await pool_run(target, list(ids), rec, "close", plan)
    result.sessions_deleted = len(deleted)
    result.streams_ended_by_delete = await count_ended(streams, plan.settle)
    for conn, _ in streams:
        await conn.close()
    result.seconds["close"] = time.perf_counter() - t0
    result.server_sessions_end = await stats_sessions(ctx, rec)
    result.sockets_end = await settle_sockets(ctx, result.sockets_start)
    result.sockets_back = result.sockets_end <= result.sockets_start + SOCKETS_TOLERANCE
    await trio.sleep(plan.pause)
    result.rss_kb_end = proc_rss_kb(pid)
    result.anon_kb_end = proc_status_kb(pid, "RssAnon")
    result.errors, result.error_messages = rec.errors, rec.messages


# --------------------------------------------------------------------------------------------------------
# In process: tracemalloc around N idle mcp_trio sessions, no sockets
# --------------------------------------------------------------------------------------------------------

POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def in_process_once(n: int, json_response: bool, top: int = 8) -> dict[str, Any]:
    from bench_server import INITIALIZE_BODY, INITIALIZED_BODY, PROTOCOL_VERSION

    from mcp_trio import MCPApp, ServerConfig
    from mcp_trio.demo import build_demo_server
    from mcp_trio.testing import open_asgi_client

    filters = [
        tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<unknown>"),
    ]

    def snapshot() -> tracemalloc.Snapshot:
        gc.collect()
        return tracemalloc.take_snapshot().filter_traces(filters)

    async def settle() -> None:
        for _ in range(20):
            await trio.testing.wait_all_tasks_blocked()

    tracemalloc.start()
    try:
        app = MCPApp(build_demo_server(), ServerConfig(json_response=json_response))
        async with open_asgi_client(app) as asgi:

            async def open_session() -> str:
                response = await asgi.request("POST", headers=POST_HEADERS, body=INITIALIZE_BODY)
                body = await response.read()
                if response.status != 200 or b'"protocolVersion"' not in body:
                    raise BenchError(f"in-process initialize: HTTP {response.status} {body[:200]!r}")
                sid = response.headers["mcp-session-id"]
                headers = {**POST_HEADERS, "mcp-session-id": sid, "mcp-protocol-version": PROTOCOL_VERSION}
                response = await asgi.request("POST", headers=headers, body=INITIALIZED_BODY)
                await response.read()
                if response.status != 202:
                    raise BenchError(f"in-process notifications/initialized: HTTP {response.status}")
                return sid

            async def delete(sid: str) -> None:
                headers = {"mcp-session-id": sid, "mcp-protocol-version": PROTOCOL_VERSION}
                response = await asgi.request("DELETE", headers=headers)
                await response.read()
                if response.status != 200:
                    raise BenchError(f"in-process DELETE: HTTP {response.status}")

            for sid in [await open_session() for _ in range(WARMUP_SESSIONS)]:
                await delete(sid)
            await settle()
            before = snapshot()
            ids = [await open_session() for _ in range(n)]
            await settle()
            after = snapshot()
            live = app.statistics()["sessions"]
            # what this benchmark itself keeps: the list of ids and the id strings (decoded by the client)
            kept = sys.getsizeof(ids) + sum(sys.getsizeof(sid) for sid in ids)
            for sid in ids:
                await delete(sid)
            ids.clear()
            await settle()
            final = snapshot()
            live_end = app.statistics()["sessions"]
    finally:
        tracemalloc.stop()
    diff = after.compare_to(before, "lineno")
    grown = sum(d.size_diff for d in diff) - kept
    blocks = sum(d.count_diff for d in diff) - (n + 1)
    left_diff = final.compare_to(before, "lineno")
    left = sum(d.size_diff for d in left_diff)

    def top_sites(stats: list[tracemalloc.StatisticDiff]) -> list[dict[str, Any]]:
        return [
            {
                "where": f"{d.traceback[0].filename}:{d.traceback[0].lineno}",
                "bytes_per_session": d.size_diff / n,
                "blocks_per_session": d.count_diff / n,
            }
            for d in sorted(stats, key=lambda d: d.size_diff, reverse=True)[:top]
        ]

    return {
        "sessions": n,
        "live_sessions": live,
        "live_sessions_after_delete": live_end,
        "kib_per_session": grown / n / 1024,
        "blocks_per_session": blocks / n,
        "client_kept_bytes_subtracted": kept,
        "kib_left_after_delete": left / 1024,
        "top": top_sites(diff),
        "top_left_after_delete": top_sites(left_diff),
    }


def short_path(filename: str) -> str:
    for marker in ("/site-packages/", "/src/", "/lib/python"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


# --------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------


def finite(values: list[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)] or [math.nan]


def summarize(results: list[MemoryRun], servers: list[str]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for server in servers:
        rs = [r for r in results if r.server == server and r.skipped is None]
        if not rs:
            summary[server] = {"runs": 0}
            continue
        summary[server] = {
            "runs": len(rs),
            "rss_mib_start_median": med([r.rss_kb_start / 1024 for r in rs]),
            "rss_mib_end_median": med([r.rss_kb_end / 1024 for r in rs]),
            "kib_per_session_median": med([r.kib_per_session for r in rs]),
            "kib_per_session_min": min(finite([r.kib_per_session for r in rs])),
            "kib_per_session_max": max(finite([r.kib_per_session for r in rs])),
            "kib_per_stream_median": med([r.kib_per_stream for r in rs]),
            "kib_per_stream_min": min(finite([r.kib_per_stream for r in rs])),
            "kib_per_stream_max": max(finite([r.kib_per_stream for r in rs])),
            "sessions_opened_min": min(r.sessions_opened for r in rs),
            "streams_opened_min": min(r.streams_opened for r in rs),
            "sockets_start_median": med([r.sockets_start for r in rs]),
            "sockets_streams_median": med([r.sockets_streams for r in rs]),
            "sockets_end_median": med([r.sockets_end for r in rs]),
            "sockets_back_all": all(r.sockets_back for r in rs),
            "errors": sum(r.errors for r in rs),
        }
    return summary


RATIO_KEYS = ("rss_mib_start_median", "kib_per_session_median", "kib_per_stream_median")

COLUMNS = (  # title, width, alignment
    ("server", 16, "<"),
    ("runs", 4, ">"),
    ("RSS start MiB", 13, ">"),
    ("KiB/idle session", 16, ">"),
    ("(min-max)", 13, "<"),
    ("KiB/open GET stream", 19, ">"),
    ("(min-max)", 13, "<"),
    ("RSS end MiB", 11, ">"),
    ("sockets s>peak>e", 16, ">"),
    ("back", 4, ">"),
    ("err", 4, ">"),
)


def table_line(cells: list[str]) -> str:
    return bench_table_line(cells, COLUMNS)


def na(value: float, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else fmt(value, digits)


def spread(s: dict[str, Any], key: str) -> str:
    lo, hi = s[f"{key}_min"], s[f"{key}_max"]
    return "" if math.isnan(lo) or s["runs"] < 2 else f"({fmt(lo)}-{fmt(hi)})"


def ratio_cell(ours: float, base: float) -> str:
    if not base or math.isnan(ours) or math.isnan(base):
        return "n/a"
    return f"{ours / base:.2f}x"


def render(summary: dict[str, dict[str, Any]], servers: list[str], sessions: int) -> str:
    head = table_line([title for title, _, _ in COLUMNS])
    out = [head, "-" * len(head)]
    for server in servers:
        s = summary[server]
        if not s["runs"]:
            out.append(table_line([server, "0", "n/a"]).rstrip())
            continue
        out.append(
            table_line(
                [
                    server,
                    str(s["runs"]),
                    na(s["rss_mib_start_median"]),
                    na(s["kib_per_session_median"]),
                    spread(s, "kib_per_session"),
                    na(s["kib_per_stream_median"]),
                    spread(s, "kib_per_stream"),
                    na(s["rss_mib_end_median"]),
                    f"{fmt(s['sockets_start_median'], 0)}>{fmt(s['sockets_streams_median'], 0)}"
                    f">{fmt(s['sockets_end_median'], 0)}",
                    "yes" if s["sockets_back_all"] else "no",
                    str(s["errors"]),
                ]
            ).rstrip()
        )
    ours = summary[servers[0]]
    for baseline in servers[1:]:
        base = summary[baseline]
        if ours["runs"] and base["runs"]:
            r = {k: ratio_cell(ours[k], base[k]) for k in RATIO_KEYS}
            cells = [f"ours/{baseline}", "", r["rss_mib_start_median"], r["kib_per_session_median"], ""]
            cells.append(r["kib_per_stream_median"])
        else:
            cells = [f"ours/{baseline}", "", "n/a"]
        out.append(table_line(cells).rstrip())
    out.append("")
    out.append(
        f"N = {sessions} sessions per run; medians over runs, (min-max) their spread. RSS = the server's"
        " VmRSS (/proc/PID/status)."
    )
    out.append(
        "KiB/idle session: (RSS with N idle sessions and no open connection - RSS start) / N sessions opened."
    )
    out.append(
        "KiB/open GET stream: (RSS with one GET SSE stream per session, each on its own connection - RSS"
        " before) / streams opened; includes the server's connection and socket cost, not only the stream's."
    )
    out.append(
        f"sockets s>peak>e: the server's sockets at RSS start > with the N streams open > after every session"
        f" was deleted and every connection closed; back = e <= s + {SOCKETS_TOLERANCE} in every run."
    )
    out.append(
        "ours/X: mcp-trio divided by baseline X (below 1x: ours uses less). RSS deltas are page-granular and"
        " include allocator slack and reuse; compare ratios across runs, not single numbers."
    )
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------


def raise_fd_limit(sessions: int) -> tuple[int, tuple[int, int], tuple[int, int]]:
    """Raise this process's soft RLIMIT_NOFILE (the servers started afterwards inherit it); cap N."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = before
    need = sessions + FD_MARGIN
    if soft != resource.RLIM_INFINITY and soft < need:
        new_soft = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
        except (ValueError, OSError) as exc:
            print(f"bench_memory: cannot raise RLIMIT_NOFILE to {new_soft}: {exc}", file=sys.stderr)
    after = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = after[0]
    if soft != resource.RLIM_INFINITY and soft < need:
        capped = max(1, soft - FD_MARGIN)
        print(
            f"bench_memory: --sessions {sessions} capped to {capped}: each session's GET stream needs one"
            f" descriptor in this process and one in the server, and the file-descriptor limit is {soft}"
            f" (hard limit {hard}; raise it with `ulimit -n` to measure more)",
            file=sys.stderr,
        )
        sessions = capped
    return sessions, before, after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS, help="N idle sessions and streams")
    parser.add_argument("--runs", type=int, default=2, help="runs per server, interleaved (default 2)")
    parser.add_argument(
        "--baseline",
        action="append",
        choices=["python-sdk", "ts-sdk"],
        help="also measure a baseline server (as in bench_server.py); may be repeated",
    )
    parser.add_argument(
        "--http",
        choices=["hypercorn", "h11"],
        default="hypercorn",
        help="the HTTP server mcp-trio runs on: hypercorn's trio worker (default) or the embedded h11 server",
    )
    parser.add_argument(
        "--json-response", action="store_true", help="servers answer POSTs with JSON, not SSE"
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="also measure one idle mcp_trio session's Python allocations with tracemalloc (no sockets)",
    )
    parser.add_argument("--pool", type=int, default=16, help="keep-alive connections for the POSTs (16)")
    parser.add_argument("--concurrency", type=int, default=32, help="GET connections opened at a time (32)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds before each RSS reading (1.0)")
    parser.add_argument("--json", metavar="FILE", help="also write every run's raw numbers as JSON to FILE")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and client to CPUs")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.sessions < 1 or args.pool < 1 or args.concurrency < 1:
        parser.error("--runs, --sessions, --pool and --concurrency must be at least 1")

    # before any server starts: the subprocesses inherit this process's limit
    sessions, limit_before, limit_after = raise_fd_limit(args.sessions)
    plan = Plan(
        sessions=sessions,
        pool=args.pool,
        concurrency=args.concurrency,
        request_timeout=10.0,
        pause=args.pause,
        settle=5.0,
        phase_timeout=60.0 + 0.05 * sessions,
    )
    server_cpu, client_cpu = pin_cpus(args)
    specs: list[ServerSpec] = server_specs(args)
    servers = [s.name for s in specs]
    print(
        f"bench_memory: N={sessions} sessions runs={args.runs} servers={','.join(servers)}"
        f" mode={'json' if args.json_response else 'sse'} pool={plan.pool} get concurrency={plan.concurrency}"
        f" server cpu={server_cpu} client cpu={client_cpu}"
    )
    print(
        f"fd limit (RLIMIT_NOFILE soft, hard): {limit_before} -> {limit_after}, inherited by the servers",
        flush=True,
    )
    print("versions: " + " ".join(f"{k}={v}" for k, v in versions().items()), flush=True)

    results: list[MemoryRun] = []
    started = time.monotonic()
    for run in range(1, args.runs + 1):
        for spec in specs:  # interleaved: ours, baseline(s), ours, baseline(s), ...
            result = MemoryRun(spec.name, run, sessions)
            try:
                with running(spec, server_cpu, stop_timeout=15.0) as server:
                    assert server.target is not None
                    ctx = Context(
                        server.target,
                        server.pid,
                        spec.name,
                        run,
                        plan.request_timeout,
                        plan.settle,
                        spec.stats_path,
                    )
                    trio.run(measure_server, ctx, plan, result)
            except RuntimeError as exc:  # the server did not start
                result.skipped = str(exc).splitlines()[0]
                result.errors += 1
                result.error_messages.append(str(exc))
            results.append(result)
            if result.skipped:
                print(f"run {run} {spec.name:<16} n/a: {result.skipped}", flush=True)
                continue
            print(
                f"run {run} {spec.name:<16} rss start {result.rss_kb_start / 1024:.1f} MiB,"
                f" {result.sessions_opened} sessions {na(result.kib_per_session)} KiB each,"
                f" {result.streams_opened} streams {na(result.kib_per_stream)} KiB each,"
                f" end {result.rss_kb_end / 1024:.1f} MiB; sockets {result.sockets_start}>"
                f"{result.sockets_streams}>{result.sockets_end}"
                + (f"; {result.errors} errors" if result.errors else ""),
                flush=True,
            )

    summary = summarize(results, servers)
    print()
    print(render(summary, servers, sessions))

    in_process: list[dict[str, Any]] = []
    if args.in_process:
        for _ in range(args.runs):
            in_process.append(trio.run(in_process_once, sessions, args.json_response))
        kib = med([r["kib_per_session"] for r in in_process])
        blocks = med([r["blocks_per_session"] for r in in_process])
        left = max(r["kib_left_after_delete"] for r in in_process)
        print(
            f"\nin-process (tracemalloc, no sockets, mcp-trio app only): {kib:.2f} KiB per idle session"
            f" ({blocks:.0f} blocks), median of {len(in_process)} x {sessions} sessions;"
            f" {left:.1f} KiB still allocated after deleting them all (max over runs)"
        )
        print("  largest allocation sites per session (last run):")
        for top in in_process[-1]["top"]:
            print(
                f"    {top['bytes_per_session']:8.0f} B {top['blocks_per_session']:5.1f} blocks"
                f"  {short_path(top['where'])}"
            )
    print(f"\ntotal wall time {time.monotonic() - started:.1f}s")

    notes: list[str] = []
    for r in results:
        if r.skipped:
            continue
        who = f"{r.server} run {r.run}"
        notes.extend(f"{who}: n/a: {step}" for step in r.steps_skipped)
        if r.sessions_opened < r.sessions_requested:
            notes.append(f"{who}: {r.sessions_opened}/{r.sessions_requested} sessions opened")
        if r.streams_opened < r.sessions_opened and not r.steps_skipped:
            notes.append(f"{who}: {r.streams_opened}/{r.sessions_opened} GET streams opened")
        if r.server_sessions_idle is not None and r.server_sessions_idle != r.sessions_opened:
            notes.append(f"{who}: server reports {r.server_sessions_idle} live sessions at step 2")
        if r.server_sessions_end:
            notes.append(f"{who}: server still reports {r.server_sessions_end} sessions at the end")
        if r.streams_ended_by_delete < r.streams_opened:
            notes.append(
                f"{who}: {r.streams_opened - r.streams_ended_by_delete} GET streams not ended by the server"
                f" within {plan.settle:g}s of DELETE (closed by the client)"
            )
        if not r.sockets_back:
            notes.append(f"{who}: sockets {r.sockets_end} at the end, {r.sockets_start} at start")
    for note in notes:
        print(f"note: {note}")

    if args.json:
        document = {
            "sessions": sessions,
            "sessions_requested": args.sessions,
            "runs": args.runs,
            "mode": "json" if args.json_response else "sse",
            "plan": asdict(plan),
            "fd_limit": {"before": limit_before, "after": limit_after},
            "pinning": {"server_cpu": server_cpu, "client_cpu": client_cpu},
            "versions": versions(),
            "summary": summary,
            "results": [asdict(r) for r in results],
            "in_process": in_process,
        }
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")

    failed = [r for r in results if r.errors]
    for r in failed:
        print(f"{r.server} run {r.run}: {r.errors} failed request(s)", file=sys.stderr)
        for message in r.error_messages:
            print(f"  {message}", file=sys.stderr)
    # a baseline that cannot do a step shows n/a; only failures of ours fail the benchmark
    return 1 if any(r.server == servers[0] for r in failed) else 0


if __name__ == "__main__":
    sys.exit(main())
