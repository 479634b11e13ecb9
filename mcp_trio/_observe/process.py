"""The process's own metrics, named and computed as Prometheus' client libraries do, standard library
only: ``process_*`` (from ``/proc`` on Linux; elsewhere there are none) and ``python_info``.

Read at each scrape: a few small ``/proc`` files and a listing of the process's descriptors; a file
that cannot be read (another kernel's format, a sandbox hiding ``/proc``) costs its metrics, never the
scrape.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from .prometheus import Sample

__all__ = ["process_samples", "python_info"]

PROC = Path("/proc")


def process_samples(proc: Path = PROC) -> list[Sample]:
    """``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``process_virtual_memory_bytes``,
    ``process_start_time_seconds``, ``process_open_fds`` and ``process_max_fds`` of this process, read
    from ``proc`` (``/proc``): none where it has no ``self/stat`` (not Linux), and any that cannot be
    read left out."""
    found: list[Sample] = []
    stat = _read(proc / "self" / "stat")
    if stat is not None:
        found.extend(_stat_samples(stat, _read(proc / "stat")))
    try:
        open_fds = len(os.listdir(proc / "self" / "fd"))
    except OSError:
        pass
    else:
        found.append(("process_open_fds", "gauge", "Number of open file descriptors.", [({}, open_fds)]))
    limit = _max_fds(_read(proc / "self" / "limits"))
    if limit is not None:
        found.append(("process_max_fds", "gauge", "Maximum number of open file descriptors.", [({}, limit)]))
    return found


def _stat_samples(stat: str, system_stat: str | None) -> list[Sample]:
    """From ``/proc/self/stat`` (fields after the command name, which may hold spaces and parentheses:
    split after its last ``)``) and the boot time in ``/proc/stat``."""
    try:
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = os.sysconf("SC_CLK_TCK")
        page = os.sysconf("SC_PAGE_SIZE")
        # fields[0] is field 3 of proc(5): utime 14, stime 15, starttime 22, vsize 23, rss 24
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        started_ticks = int(fields[19])
        virtual = int(fields[20])
        resident = int(fields[21]) * page
    except (ValueError, IndexError, OSError):
        return []
    cpu_help = "Total user and system CPU time spent in seconds."
    found: list[Sample] = [
        ("process_cpu_seconds_total", "counter", cpu_help, [({}, cpu)]),
        ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", [({}, virtual)]),
        ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", [({}, resident)]),
    ]
    boot = _boot_time(system_stat)
    if boot is not None:
        help = "Start time of the process since unix epoch in seconds."
        found.append(("process_start_time_seconds", "gauge", help, [({}, boot + started_ticks / ticks)]))
    return found


def _boot_time(system_stat: str | None) -> float | None:
    for line in (system_stat or "").splitlines():
        if line.startswith("btime "):
            try:
                return float(line.split()[1])
            except (ValueError, IndexError):
                return None
    return None


def _max_fds(limits: str | None) -> int | None:
    """The soft limit of ``Max open files`` in ``/proc/self/limits`` (None if unlimited or absent)."""
    for line in (limits or "").splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files") :].split()[:1]
            return int(soft[0]) if soft and soft[0].isdigit() else None
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def python_info() -> Sample:
    """``python_info{implementation,major,minor,patchlevel,version} 1``, as Prometheus' client
    libraries give it."""
    info = sys.version_info
    labels = {
        "implementation": platform.python_implementation(),
        "major": str(info.major),
        "minor": str(info.minor),
        "patchlevel": str(info.micro),
        "version": platform.python_version(),
    }
    return ("python_info", "gauge", "Python platform information", [(labels, 1)])
