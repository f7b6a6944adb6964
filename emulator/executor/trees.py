"""Remove and re-own directory trees that sandbox programs built, whatever their depth.

A program can nest directories deeper than Python's recursion limit (``shutil.rmtree`` and ``os.fwalk`` recurse
once per level: ``RecursionError`` past some 1,000 levels) and deeper than ``PATH_MAX`` (a walk by path fails with
``ENAMETOOLONG``). The Python walk handles every ordinary tree; a tree it cannot finish goes to coreutils (``rm -rf``,
``chown -R``), which walks any depth through directory descriptors and never follows a link.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

#: Where coreutils is looked for (not the caller's ``PATH``: a sandbox's env never reaches here, but be explicit).
_TOOL_PATH = "/usr/bin:/bin"
#: A deep tree takes coreutils well under a second per 100,000 entries; a tree that takes longer is left.
_TOOL_TIMEOUT_S = 120.0


def _coreutils(argv: list[str]) -> None:
    tool = shutil.which(argv[0], path=_TOOL_PATH)
    if tool is None:
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [tool, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_TOOL_TIMEOUT_S,
            check=False,
        )


def remove_tree(path: str) -> bool:
    """Remove ``path`` and everything below it, even where a program made parts unreadable; never follows a link.
    ``True`` when nothing is left."""

    inside = path.rstrip(os.sep) + os.sep
    as_root = os.geteuid() == 0

    def fix(func: object, failed: str, _exc: object) -> None:
        # Permissions stop only a user without root's override, whose programs run as that same user; as root a
        # chmod by path here would follow a link a program swapped in meanwhile (its programs run as other uids).
        # And only below ``path``: a failure on ``path`` itself (it is gone, say) never touches its parent (/tmp).
        if as_root or not failed.startswith(inside):
            return
        try:
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700, follow_symlinks=False)
        except (OSError, NotImplementedError):  # no chmod of a link itself on Linux
            pass

    if not os.path.lexists(path):
        return True
    try:
        shutil.rmtree(path, onerror=fix)
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.lexists(path):
        _coreutils(["rm", "-rf", "--one-file-system", "--", path])
    return not os.path.lexists(path)


def _raise_unless_gone(error: OSError) -> None:
    if not isinstance(error, FileNotFoundError):
        raise error


def chown_tree(root: str, uid: int, gid: int) -> int:
    """Give ``root`` and everything below it to ``uid:gid``, never following a symbolic link anywhere.

    The tree belongs to a sandbox whose programs may still be running and can swap a directory for a link to any
    host path between a listing and a chown. A walk by path (``os.walk`` and ``os.chown(join(...))``) resolves every
    middle component again and would chown the host's files; ``os.fwalk`` holds each directory open and changes its
    entries through that descriptor, so a swapped name is at worst a link, which is not followed. A tree too deep
    for it goes to ``chown -R -P -h``, which does the same at any depth.

    Returns how many entries below ``root`` it met (a tree too deep: a large number), so a caller can tell a big
    tree from a small one.
    """
    with contextlib.suppress(FileNotFoundError):
        os.chown(root, uid, gid, follow_symlinks=False)
    entries = 0
    try:
        # A directory the walk cannot open (descriptors run out) must not be skipped in silence: what it holds would
        # stay the old owner's, and a caller then frees that uid. A name gone meanwhile is nothing to change.
        for _, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False, onerror=_raise_unless_gone):
            for name in dirs + files:
                entries += 1
                with contextlib.suppress(FileNotFoundError):
                    os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    except RecursionError:
        _coreutils(["chown", "-R", "-P", "-h", "--", f"{uid}:{gid}", root])
        return max(entries, 1 << 20)  # deeper than a walk goes: a big tree, whatever its count
    return entries
