"""The emulator's open-file limit, raised to the hard limit as the Daytona daemon's Go runtime raises its own.

One emulator process holds what a real deployment spreads over many containers: each Daytona sandbox's interpreter
context keeps three pipes, each session shell five descriptors, each client connection a socket. At the soft limit
most Linux desktops start with (1,024), some 300 sandboxes with a live interpreter exhaust it, and every later
request fails with ``Too many open files``. Go programs (the daemon is one) raise their soft ``RLIMIT_NOFILE`` to the
hard limit when they start; the emulator does the same when an :class:`~emulator.app.Emulator` is made.
"""

from __future__ import annotations

import contextlib
import resource

#: The kernel's ceiling on any process's descriptors, used when the hard limit is unlimited.
_NR_OPEN = "/proc/sys/fs/nr_open"


def _ceiling(hard: int) -> int | None:
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        with open(_NR_OPEN, encoding="ascii") as source:
            return int(source.read().strip())
    except (OSError, ValueError):
        return None


def raise_open_file_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (never lower it); the soft limit after.

    A limit that cannot be raised (a sandbox refusing ``setrlimit``) is left as it is, as Go leaves it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    if target is not None and (soft == resource.RLIM_INFINITY or soft >= target):
        return soft
    if target is not None:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
