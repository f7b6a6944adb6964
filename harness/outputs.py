"""The files and directories users name for a command's output (``--json FILE``, ``--out DIR``): checked before the
work, so that a typo costs a clear error at once, not a traceback after minutes of measuring, and written so that
a failure at the end is one line naming the path, never a traceback."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _writable_dir(directory: Path) -> str | None:
    """Why no file can be created in ``directory``, or None: found by making and removing one."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return _reason(exc)
    return None


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (``.`` for a relative path with none)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def dir_problem(raw: str | os.PathLike[str], flag: str, *, create: bool = True) -> str | None:
    """Why ``raw`` cannot be an output directory, or None when it can.

    A missing directory is created now, or with ``create=False`` only checked for: its closest existing ancestor
    must be a directory one can write in (the command makes it when it writes, so a run that fails earlier leaves
    no empty directory behind).
    """
    path = Path(raw)
    try:
        if path.exists() and not path.is_dir():
            return f"{flag} {str(path)!r} exists and is not a directory"
        if not create and not path.exists():
            base = _nearest_existing(path)
            if not base.is_dir():
                return f"{flag} {str(path)!r}: {str(base)!r} is not a directory"
            problem = _writable_dir(base)
            return None if problem is None else f"{flag} {str(path)!r}: cannot create it in {str(base)!r}: {problem}"
    except OSError as exc:  # a parent that cannot be searched
        return f"{flag} {str(path)!r}: cannot look there: {_reason(exc)}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{flag} {str(path)!r}: cannot create it: {_reason(exc)}"
    problem = _writable_dir(path)
    return None if problem is None else f"{flag} {str(path)!r}: cannot write there: {problem}"


def file_problem(raw: str | os.PathLike[str], flag: str) -> str | None:
    """Why ``raw`` cannot be written as an output file, or None when it can.

    Its directory must exist (a typo in it is not made into a new tree); the file itself is not created or
    truncated, so an earlier file of that name stays as it is until the command has something to write.
    """
    path = Path(raw)
    target = Path(os.path.realpath(path))  # what a symbolic link leads to is what gets written
    try:
        if target.is_dir():
            return f"{flag} {str(path)!r} is a directory"
        if not target.parent.is_dir():
            return f"{flag} {str(path)!r}: no such directory {str(target.parent)!r}"
        if target.exists() and not os.access(target, os.W_OK):
            return f"{flag} {str(path)!r}: cannot write there: permission denied"
        if target.exists() and not target.is_file():
            return None  # a device or a pipe (/dev/stdout, /dev/null): written in place
    except OSError as exc:  # a parent that cannot be searched
        return f"{flag} {str(path)!r}: cannot look there: {_reason(exc)}"
    problem = _writable_dir(target.parent)
    return None if problem is None else f"{flag} {str(path)!r}: cannot write there: {problem}"


def write_whole(raw: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``raw`` whole or not at all: a temp file beside it, renamed over it. Raises OSError.

    A symbolic link is followed (its target is replaced, the link stays); a device or a pipe (``/dev/stdout``,
    ``/dev/null``) is written in place, never replaced by a file.
    """
    path = Path(os.path.realpath(raw))
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(partial, 0o666 & ~_umask())
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise


def write_text(raw: str | os.PathLike[str], text: str, flag: str) -> str | None:
    """:func:`write_whole` for a command's output option: the error to report, or None when written."""
    try:
        write_whole(raw, text)
    except OSError as exc:
        return f"cannot write {flag} {str(raw)!r}: {_reason(exc)}"
    return None
