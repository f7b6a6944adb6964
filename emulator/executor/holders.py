"""Who holds a long-lived directory (a Daytona sandbox's home): the uids of the runs and interpreter contexts in it.

A run's uid goes back to a pool when the run ends, and the next run of any sandbox may get it. What the run left owned
by that uid would then be the other sandbox's to change: its programs reach every directory (they keep
``CAP_DAC_READ_SEARCH``), so a home's name, or its mode, protects nothing. So when a holder lets go, the tree goes to
the holder still in it (the last to come), or to root when none is left; and each run takes it when it starts.

Changing a tree's owner walks it (about 8 us an entry): a home of a few files is changed at once, a bigger one by
``chown -R`` in a process of its own, so that the event loop serves every other request meanwhile. The changes of
one directory happen one at a time, in the order asked, each to the owner of its moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

from .trees import chown_tree

_ROOT = (0, 0)
Owner = Callable[[], tuple[int, int]]
#: A tree whose last walk met fewer entries than this is changed at once (at most about half a millisecond).
INLINE_ENTRIES = 64


def _is_dir(path: str) -> bool:
    return os.path.isdir(path)


def _walk_size(path: str) -> int:
    """How many entries a tree has (counted by its walk), to decide how the next change is made."""
    count = 0
    with contextlib.suppress(OSError, RecursionError):
        for _, dirs, files, _fd in os.fwalk(path, follow_symlinks=False):
            count += len(dirs) + len(files)
            if count >= INLINE_ENTRIES:
                break
    return count


class Holders:
    """The holders of each directory, the last to come last; the tree belongs to that one (root with none)."""

    def __init__(self) -> None:
        self._by_dir: dict[str, list[tuple[int, int]]] = {}
        self._busy: dict[str, asyncio.Lock] = {}
        self._changing: set[asyncio.Task[None]] = set()

    def take(self, path: str, uid: int, gid: int) -> Awaitable[None] | None:
        """Hand the tree at ``path`` to ``uid``/``gid`` (a run of it starts), which holds it until :meth:`let_go`.

        None when done; otherwise await the result before the run starts."""
        holders = self._by_dir.setdefault(path, [])
        with contextlib.suppress(ValueError):
            holders.remove((uid, gid))
        holders.append((uid, gid))
        # By the time a queued change runs, ``uid`` may have let go already (its run cancelled): the tree then goes
        # to whoever holds it at that moment, never to a uid back in its pool.
        return self._hand(path, lambda: self._owner(path))

    def let_go(self, path: str, uid: int, *, at_once: bool = False, again: bool = False) -> Awaitable[None] | None:
        """``uid`` no longer runs in ``path`` (its processes are gone): the tree goes to the holder left, or root.

        None when done; otherwise await the result before the uid runs anything else. ``at_once``: done here,
        whatever the tree's size (with no event loop to wait on, at a shutdown). ``again``: a let-go that failed
        part-way is tried again; the uid is no holder any more, but the tree is changed all the same."""
        holders = self._by_dir.get(path)
        if holders is None and not again:
            return None
        if holders is not None:
            holders[:] = [holder for holder in holders if holder[0] != uid]
            if not holders:
                del self._by_dir[path]
        if at_once:
            self._change(path, lambda: self._owner(path))
            return None
        return self._hand(path, lambda: self._owner(path))

    def forget(self, path: str) -> None:
        """``path`` is gone for good (its sandbox was deleted): nothing of it is kept."""
        self._by_dir.pop(path, None)
        busy = self._busy.get(path)
        if busy is not None and not busy.locked():
            del self._busy[path]

    def holding(self, path: str) -> list[int]:
        """The uids that hold ``path`` now, the first to come first."""
        return [uid for uid, _gid in self._by_dir.get(path, [])]

    def _owner(self, path: str) -> tuple[int, int]:
        holders = self._by_dir.get(path)
        return holders[-1] if holders else _ROOT

    def _hand(self, path: str, owner: Owner) -> Awaitable[None] | None:
        busy = self._busy.get(path)
        # Small now (a walk of at most INLINE_ENTRIES entries: a run may have made thousands since the last time)
        # and nothing queued before it: changed at once.
        if (busy is None or not busy.locked()) and _walk_size(path) < INLINE_ENTRIES:
            self._change(path, owner)
            return None
        task = asyncio.ensure_future(self._in_turn(path, owner))
        self._changing.add(task)
        task.add_done_callback(self._changing.discard)
        # A caller cancelled while it waits must not stop the change: the uid is freed only once it is done.
        return asyncio.shield(task)

    async def _in_turn(self, path: str, owner: Owner) -> None:
        """A big tree's change, after those asked before it: ``chown -R`` in a process of its own, on another core
        (in a thread of ours it would fight the event loop for the interpreter lock at each of its system calls,
        and take six times as long), never following a link, as :func:`chown_tree` at any depth."""
        busy = self._busy.setdefault(path, asyncio.Lock())
        try:
            async with busy:
                await self._chown_r(path, *owner())  # the owner of this moment, not of when the change was asked
        finally:
            if path not in self._by_dir and not busy.locked():
                self._busy.pop(path, None)  # nobody holds it: nothing to keep for it

    @staticmethod
    async def _chown_r(path: str, uid: int, gid: int) -> None:
        """``chown -R``, twice at most: a name another holder removed meanwhile fails the first pass, not the
        second. A failure raises: what the caller frees next (a uid) must not be freed while part of the tree
        may be its."""
        for attempt in range(2):
            if not _is_dir(path):
                return
            process = await asyncio.create_subprocess_exec(
                "chown",
                "-R",
                "-P",
                "-h",
                "--",
                f"{uid}:{gid}",
                path,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            status = await process.wait()
            if status == 0:
                return
            if attempt == 1:
                raise OSError(f"chown -R of {path} to {uid}:{gid} exited {status}")

    def _change(self, path: str, owner: Owner) -> None:
        uid, gid = owner()
        if os.path.isdir(path):  # gone with its sandbox: nothing to hand
            chown_tree(path, uid, gid)


#: The one registry of the process: a home is handed over by the executor (toolbox runs) and by the interpreter.
HOLDERS = Holders()

__all__ = ["HOLDERS", "INLINE_ENTRIES", "Holders"]
