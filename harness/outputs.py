"""The files and directories users name for a command's output (``--json FILE``, ``--out DIR``): checked before the
work, so that a typo costs a clear error at once, not a traceback after minutes of measuring, and written so that
a failure at the end is one line naming the path, never a traceback."""

from __future__ import annotations

import os
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


def dir_problem(raw: str | os.PathLike[str], flag: str) -> str | None:
    """Why ``raw`` cannot be an output directory (it is created when missing), or None when it can."""
    path = Path(raw)
    if path.exists() and not path.is_dir():
        return f"{flag} {str(path)!r} exists and is not a directory"
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
    if path.is_dir():
        return f"{flag} {str(path)!r} is a directory"
    if not path.parent.is_dir():
        return f"{flag} {str(path)!r}: no such directory {str(path.parent)!r}"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{flag} {str(path)!r}: cannot write there: permission denied"
    problem = _writable_dir(path.parent)
    return None if problem is None else f"{flag} {str(path)!r}: cannot write there: {problem}"


def write_whole(raw: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``raw`` whole or not at all: a temp file beside it, renamed over it. Raises OSError."""
    path = Path(raw)
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
