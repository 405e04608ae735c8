"""CPU pinning and CPU-time sampling (Linux; degrades to no-ops elsewhere)."""

from __future__ import annotations

import os

SERVER_CPU = 0
CLIENT_CPU = 1


def can_pin() -> bool:
    """True when there are two CPUs to split between the server and the load client."""
    if not hasattr(os, "sched_getaffinity"):
        return False
    return len(os.sched_getaffinity(0)) >= 2


def pin(pid: int, cpu: int) -> bool:
    """Pins process `pid` (0: this one) to one CPU; False when that is not possible."""
    if not can_pin() or cpu not in os.sched_getaffinity(0):
        return False
    try:
        os.sched_setaffinity(pid, {cpu})
    except OSError:
        return False
    return True


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by process `pid`, from /proc; None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    fields = text[text.rindex(b")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_busy_seconds(cpu: int) -> float | None:
    """Seconds CPU `cpu` spent busy (any process, kernel included) so far; None if unknown."""
    prefix = f"cpu{cpu} ".encode()
    try:
        with open("/proc/stat", "rb") as stat:
            line = next((line for line in stat if line.startswith(prefix)), None)
    except OSError:
        return None
    if line is None:
        return None
    ticks = [int(field) for field in line.split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")
