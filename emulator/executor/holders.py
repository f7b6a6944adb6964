"""Who holds a long-lived directory (a Daytona sandbox's home): the uids of the runs and interpreter contexts in it.

A run's uid goes back to a pool when the run ends, and the next run of any sandbox may get it. What the run left owned
by that uid would then be the other sandbox's to change: its programs reach every directory (they keep
``CAP_DAC_READ_SEARCH``), so a home's name, or its mode, protects nothing. So when a holder lets go, the tree goes to
the holder still in it (the last to come), or to root when none is left; and each run takes it when it starts.
"""

from __future__ import annotations

import contextlib
import os

from .trees import chown_tree

_ROOT = (0, 0)


class Holders:
    """The holders of each directory, the last to come last; the tree belongs to that one (root with none)."""

    def __init__(self) -> None:
        self._by_dir: dict[str, list[tuple[int, int]]] = {}

    def take(self, path: str, uid: int, gid: int) -> None:
        """Hand the tree at ``path`` to ``uid``/``gid`` (a run of it starts), which holds it until :meth:`let_go`."""
        holders = self._by_dir.setdefault(path, [])
        with contextlib.suppress(ValueError):
            holders.remove((uid, gid))
        holders.append((uid, gid))
        chown_tree(path, uid, gid)

    def let_go(self, path: str, uid: int) -> None:
        """``uid`` no longer runs in ``path`` (its processes are gone): the tree goes to the holder left, or root."""
        holders = self._by_dir.get(path)
        if holders is None:
            return
        holders[:] = [holder for holder in holders if holder[0] != uid]
        owner = holders[-1] if holders else _ROOT
        if not holders:
            del self._by_dir[path]
        if os.path.isdir(path):  # gone with its sandbox: nothing to hand back
            chown_tree(path, *owner)

    def holding(self, path: str) -> list[int]:
        """The uids that hold ``path`` now, the first to come first."""
        return [uid for uid, _gid in self._by_dir.get(path, [])]


#: The one registry of the process: a home is handed over by the executor (toolbox runs) and by the interpreter.
HOLDERS = Holders()

__all__ = ["HOLDERS", "Holders"]
