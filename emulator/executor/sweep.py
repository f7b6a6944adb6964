"""Killing every process of a sandbox uid from the server, which is threaded and so never changes its own uid.

``kill(-1, SIGKILL)`` made by a process whose real and effective uid are the sandbox's hits every process of that
uid at once (the kernel walks them with new forks held off): a process that left its session and keeps forking is
caught too, where a pass over ``/proc`` races it. The one making it here is ``kill`` from procps, started as that
uid (or, without it, the runtime's Python).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys

_KILL = shutil.which("kill") or ""


def _argv() -> list[str]:
    if _KILL:
        return [_KILL, "-KILL", "-1"]
    return [sys.executable, "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"]


def sweep_uid(uid: int) -> None:
    """Kill every process of ``uid`` (as root), the one making the kill included; waits for it."""
    subprocess.run(
        _argv(),
        user=uid,
        group=65534,
        extra_groups=[],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


async def sweep_uid_async(uid: int) -> None:
    """:func:`sweep_uid` without holding up the event loop: in a thread, since uvloop (uvicorn's loop wherever it is
    installed) refuses ``create_subprocess_exec``'s ``user``, ``group`` and ``extra_groups``. Shielded: a cancelled
    caller does not leave the sweep half done."""
    await asyncio.shield(asyncio.to_thread(sweep_uid, uid))


__all__ = ["sweep_uid", "sweep_uid_async"]
