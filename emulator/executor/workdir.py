"""Per-execution working directory laid out like the real server's temp dirs."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from types import TracebackType


class Workdir:
    """A fresh ``/tmp/tmpXXXXXXXX`` dir owned by the sandbox uid; removed on exit.

    The real server uses ``tempfile.mkdtemp()`` and a mkstemp-style file inside it, and those
    paths show up in tracebacks, so we create them the same way.
    """

    def __init__(
        self,
        root: str | None = None,
        owner: tuple[int, int] | None = None,
        on_cleanup: Callable[[str], None] | None = None,
    ) -> None:
        self._owner = owner
        self._on_cleanup = on_cleanup
        self._path = tempfile.mkdtemp(dir=root)
        self._real = os.path.realpath(self._path)
        self._closed = False
        self._chown(self._path)

    @property
    def path(self) -> str:
        """Absolute path of the directory (use it as the program's cwd)."""
        return self._path

    def _chown(self, path: str) -> None:
        if self._owner is not None:
            os.chown(path, *self._owner, follow_symlinks=False)

    def _resolve(self, rel: str) -> str:
        """Map a relative path into the dir; reject anything that would escape it."""
        if not rel or os.path.isabs(rel) or "\0" in rel:
            raise ValueError(f"invalid relative path: {rel!r}")
        target = os.path.realpath(os.path.join(self._real, rel))
        if target == self._real or not target.startswith(self._real + os.sep):
            raise ValueError(f"path escapes the work dir: {rel!r}")
        return target

    def new_script(self, suffix: str = ".py") -> str:
        """Create an empty ``tmpXXXXXXXX<suffix>`` file in the dir and return its path."""
        fd, path = tempfile.mkstemp(suffix=suffix, dir=self._path)
        os.close(fd)
        self._chown(path)
        return path

    def write_file(self, rel: str, data: bytes) -> str:
        """Write ``data`` at ``rel`` (parents created); returns the absolute path."""
        target = self._resolve(rel)
        parent = os.path.dirname(target)
        missing: list[str] = []
        while not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(missing):
            os.mkdir(directory)
            self._chown(directory)
        with open(target, "wb") as f:
            f.write(data)
        self._chown(target)
        return target

    def read_file(self, rel: str) -> bytes | None:
        """Contents of a regular file at ``rel`` inside the dir, None if absent or escaping."""
        try:
            target = self._resolve(rel)
        except ValueError:
            return None
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(fd)

    def cleanup(self) -> None:
        """Remove the dir, even if the program made parts of it unreadable (idempotent)."""
        if self._closed:
            return
        self._closed = True

        def _fix(func: object, path: str, _exc: object) -> None:
            try:
                os.chmod(os.path.dirname(path), 0o700)
                os.chmod(path, 0o700, follow_symlinks=False)
            except OSError:
                pass

        shutil.rmtree(self._path, onerror=_fix)
        shutil.rmtree(self._path, ignore_errors=True)
        if self._on_cleanup is not None:
            self._on_cleanup(self._real)

    def __enter__(self) -> Workdir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()
