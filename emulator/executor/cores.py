"""How many cores the emulator may use, and so how many warm interpreters it starts by default."""

from __future__ import annotations

import math
import os

#: Cores per warm interpreter by default: one forks about 1,500 programs a second, and keeps some five cores busy
#: doing so (itself, the programs, the server's share); past that it, not the cores, bounds the fast path.
CORES_PER_WARM_INTERPRETER = 6
#: Past this many the server's event loop, not the warm interpreters, bounds the fast path (16 cores: 2,861 runs/s
#: with two, 2,974 with four).
MOST_WARM_INTERPRETERS_BY_DEFAULT = 4


def usable_cores() -> int:
    """The CPUs this process may run on, fewer where a cgroup quota (a container's ``--cpus``) allows less."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(cores, 1)


def _cgroup_quota() -> float | None:
    """The CPU quota of this process's cgroup in cores, None for none: cgroup v2's ``cpu.max`` of its group (or of
    the mount's root, as a container sees its own), else v1's ``cpu.cfs_quota_us``."""
    group = "/"
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as file:
            group = next((line[3:].strip() for line in file if line.startswith("0::")), "/")
    except OSError:
        pass
    for path in dict.fromkeys((f"/sys/fs/cgroup{group.rstrip('/')}/cpu.max", "/sys/fs/cgroup/cpu.max")):
        if os.path.exists(path):
            return _quota_in(path)
    try:
        with (
            open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", encoding="ascii") as quota,
            open("/sys/fs/cgroup/cpu/cpu.cfs_period_us", encoding="ascii") as period,
        ):
            value = int(quota.read()) / int(period.read())
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None  # -1: none


def _quota_in(path: str) -> float | None:
    """The quota a ``cpu.max`` file sets (``<quota> <period>``, or ``max <period>``: none) in cores, or None."""
    try:
        with open(path, encoding="ascii") as file:
            quota, _, period = file.read().strip().partition(" ")
        if quota == "max":
            return None
        value = int(quota) / int(period or "100000")
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def default_warm_interpreters(cores: int) -> int:
    """One per six cores, at least one, at most four."""
    return max(1, min(MOST_WARM_INTERPRETERS_BY_DEFAULT, cores // CORES_PER_WARM_INTERPRETER))
