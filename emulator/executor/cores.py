"""How many cores the emulator may use, and so how many warm interpreters it starts by default."""

from __future__ import annotations

import math
import os

#: Cores per warm interpreter by default: one forks about 1,500 programs a second, and keeps some five cores busy
#: doing so (itself, the programs, the server's share); past that it, not the cores, bounds the fast path.
CORES_PER_WARM_INTERPRETER = 6
#: Past two the server's event loop, not the warm interpreters, is the main bound of the fast path; three and four
#: still add a little (16 cores: 2,861 runs/s with two, 2,974 with four).
MOST_WARM_INTERPRETERS_BY_DEFAULT = 4
#: The most an executor takes: each is a process of some 20 MB, and past a few the server's loop is the bound anyway
#: (a count in the thousands is a typo that would start processes until the machine gave out).
MOST_WARM_INTERPRETERS = 64


def usable_cores() -> int:
    """The CPUs this process may run on, fewer where a cgroup quota (a container's ``--cpus``) allows less."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(cores, 1)


def default_warm_interpreters(cores: int) -> int:
    """One per six cores, at least one, at most four."""
    return max(1, min(MOST_WARM_INTERPRETERS_BY_DEFAULT, cores // CORES_PER_WARM_INTERPRETER))


def warm_interpreters(asked: int | None) -> int:
    """How many warm interpreters an executor starts: as many as asked, or (None) the default for the usable cores."""
    return asked if asked is not None else default_warm_interpreters(usable_cores())


def cgroup_quota(mounts: str = "/sys/fs/cgroup", own: str = "/proc/self/cgroup") -> float | None:
    """The tightest CPU quota, in cores, of this process's cgroup and its ancestors; None for none.

    cgroup v2: ``cpu.max`` (``<quota> <period>`` or ``max <period>``) under ``mounts``; v1: ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us`` under ``mounts/cpu`` (or ``cpu,cpuacct``). A container sees its own group as the mount's
    root, while ``own`` may still name the host's path: the path is tried, then the root."""
    v2, v1 = "/", "/"
    try:
        with open(own, encoding="utf-8") as file:
            for line in file:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "":
                    v2 = path
                elif "cpu" in controllers.split(","):
                    v1 = path
    except (OSError, ValueError):
        pass
    quotas = [_v2_quota(directory) for directory in _groups(mounts, v2)]
    for hierarchy in ("cpu", "cpu,cpuacct"):
        base = os.path.join(mounts, hierarchy)
        if os.path.isdir(base):
            quotas += [_v1_quota(directory) for directory in _groups(base, v1)]
            break
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _groups(base: str, path: str) -> list[str]:
    """The directories of ``path``'s group and its ancestors under ``base`` that exist (or just ``base``)."""
    parts = [part for part in path.split("/") if part]
    directories = [os.path.join(base, *parts[:depth]) for depth in range(len(parts), 0, -1)]
    existing = [directory for directory in directories if os.path.isdir(directory)]
    return [*existing, base]


def _v2_quota(directory: str) -> float | None:
    try:
        with open(os.path.join(directory, "cpu.max"), encoding="ascii") as file:
            quota, _, period = file.read().strip().partition(" ")
        if quota == "max":
            return None
        value = int(quota) / int(period or "100000")
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def _v1_quota(directory: str) -> float | None:
    try:
        with (
            open(os.path.join(directory, "cpu.cfs_quota_us"), encoding="ascii") as quota,
            open(os.path.join(directory, "cpu.cfs_period_us"), encoding="ascii") as period,
        ):
            value = int(quota.read()) / int(period.read())
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None  # -1: none
