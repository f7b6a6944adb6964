"""Per-execution working directory laid out like the real server's temp dirs."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from types import TracebackType

from .model import WorkdirSetup
from .trees import remove_tree

# tempfile's name alphabet and length (``tmp`` + 8 of these, as mkdtemp/mkstemp make them).
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
#: os.urandom bytes -> name characters (tempfile's alphabet); cheaper than random.choices on the hot path.
_NAME_TABLE = bytes(ord(_NAME_CHARS[i % len(_NAME_CHARS)]) for i in range(256))
_NAME_MAX = 255
_real_roots: dict[str, str] = {}


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may take fewer at a time)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _random_name() -> str:
    return "tmp" + os.urandom(8).translate(_NAME_TABLE).decode("ascii")


def _real_root(root: str) -> str:
    real = _real_roots.get(root)
    if real is None:
        real = _real_roots[root] = os.path.realpath(root)
    return real


def resolve_in(real: str, rel: str, *, planned: bool = False) -> str:
    """The path ``rel`` names inside the dir whose real path is ``real``; ValueError for a path that is not relative
    or would escape the dir. A ``planned`` dir holds nothing yet, so no link can redirect a path: normalising is what
    ``realpath`` would do there, without its lstat of each component."""
    if not rel or os.path.isabs(rel) or "\0" in rel:
        raise ValueError(f"invalid relative path: {rel!r}")
    joined = os.path.join(real, rel)
    target = os.path.normpath(joined) if planned else os.path.realpath(joined)
    if target == real or not target.startswith(real + os.sep):
        raise ValueError(f"path escapes the work dir: {rel!r}")
    return target


#: The most bytes of fetched files one run returns (the zygote's own bound, ``zygote_main._FETCH_LIMIT``).
FETCH_LIMIT = 1 << 30


def planned_fetch(setup: WorkdirSetup) -> dict[str, bytes]:
    """What fetching ``setup.fetch`` would read from the dir ``setup`` describes, had it been made: its files, found
    without touching the disk. For a run that ends before its dir is made (a timeout of 0), whose restored files the
    real server still returns: it restores them before it starts the program, and fetches after a timeout too."""
    real = setup.real_path or os.path.join(os.path.realpath(os.path.dirname(setup.path)), os.path.basename(setup.path))
    contents = {target: data for target, data, _exclusive in setup.files}
    fetched: dict[str, bytes] = {}
    room = FETCH_LIMIT
    for rel in setup.fetch:
        if rel in fetched:
            continue
        try:
            target = resolve_in(real, rel, planned=True)  # nothing in the dir is a link yet
        except ValueError:
            continue
        data = contents.get(target)
        if data is not None and len(data) <= room:
            room -= len(data)
            fetched[rel] = data
    return fetched


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
        path: str | None = None,
    ) -> None:
        self._owner = owner
        self._on_cleanup = on_cleanup
        if path is None:
            self._path = tempfile.mkdtemp(dir=root)
        else:  # a planned name (see DeferredWorkdir)
            os.mkdir(path, 0o700)
            self._path = path
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
        return resolve_in(self._real, rel)

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

        remove_tree(self._path)
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


class DeferredWorkdir:
    """A :class:`Workdir` for one-shot runs that the sandbox itself creates.

    Same interface and same answers: the name is planned here (``/tmp/tmpXXXXXXXX``, the
    script ``tmpXXXXXXXX<suffix>``), paths are validated here with the same errors, and the
    file writes are recorded; :meth:`setup` hands them to ``ExecutionRequest.setup``, so the
    zygote makes the dir and its files just before it forks the program (in its private temp
    root when it has one), reads back :attr:`fetch` and removes the dir when the program ended.
    A layout whose writes could fail part-way (a file where a dir must go, over-long names) is
    made here at once instead, with a real :class:`Workdir`, so that every error still surfaces
    where and as it did.
    """

    def __init__(
        self,
        root: str | None = None,
        on_materialize: Callable[[str], None] | None = None,
        on_cleanup: Callable[[str], None] | None = None,
    ) -> None:
        base = root if root is not None else tempfile.gettempdir()
        real_base = _real_root(base)
        while True:
            name = _random_name()
            path = os.path.join(base, name)
            if not os.path.lexists(path):
                break
        if sys.version_info >= (3, 12):
            path = os.path.abspath(path)
        self._path = path
        self._real = os.path.join(real_base, name)
        self._on_materialize = on_materialize
        self._on_cleanup = on_cleanup
        self._files: list[tuple[str, bytes, bool]] = []
        self._index: dict[str, int] = {}  # target -> position in _files
        self._dirs: set[str] = set()  # dirs the writes create (real paths)
        self._workdir: Workdir | None = None
        self._fetched: Mapping[str, bytes] = {}
        self._removed = False
        self._closed = False
        #: Relative names to read back after the run (set before running).
        self.fetch: list[str] = []

    @property
    def path(self) -> str:
        """Absolute path of the directory (use it as the program's cwd)."""
        return self._path

    @property
    def materialized(self) -> bool:
        """True when the dir was made here (then run with ``cwd`` only, no setup)."""
        return self._workdir is not None

    def _resolve(self, rel: str) -> str:
        """Workdir._resolve on the planned (not yet existing) dir: same checks, same errors."""
        return resolve_in(self._real, rel, planned=self._workdir is None)

    def _simple(self, target: str) -> bool:
        """Whether writing ``target`` cannot fail because of the layout (then it is deferred)."""
        try:
            parts = os.fsencode(target[len(self._real) + 1 :]).split(b"/")
        except UnicodeError:
            return False
        if any(len(part) > _NAME_MAX for part in parts) or len(os.fsencode(target)) >= 4000:
            return False
        if target in self._dirs:
            return False  # a dir of an earlier write is there
        parent = os.path.dirname(target)
        while parent != self._real:
            if parent in self._index:
                return False  # an earlier file is where a dir must go
            parent = os.path.dirname(parent)
        return True

    def _record(self, target: str, data: bytes, exclusive: bool) -> None:
        at = self._index.get(target)
        if at is not None:  # written again: the last contents win, the file stays where it was
            _old, _data, was_exclusive = self._files[at]
            self._files[at] = (target, data, was_exclusive)
            return
        self._index[target] = len(self._files)
        self._files.append((target, data, exclusive))
        parent = os.path.dirname(target)
        while parent != self._real and parent not in self._dirs:
            self._dirs.add(parent)
            parent = os.path.dirname(parent)

    def _materialize(self) -> Workdir:
        """Make the dir and the recorded files here, now (for layouts we do not defer)."""
        if self._workdir is None:
            workdir = Workdir(path=self._path, on_cleanup=self._on_cleanup)
            self._workdir = workdir
            if self._on_materialize is not None:
                self._on_materialize(self._real)
            for target, data, exclusive in self._files:
                if exclusive:
                    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                    try:
                        write_all(fd, data)
                    finally:
                        os.close(fd)
                else:
                    workdir.write_file(os.path.relpath(target, self._real), data)
        return self._workdir

    def new_script(self, suffix: str = ".py") -> str:
        """Plan an empty ``tmpXXXXXXXX<suffix>`` file in the dir and return its path."""
        if self._workdir is not None:
            return self._workdir.new_script(suffix)
        while True:
            name = _random_name() + suffix
            target = os.path.join(self._real, name)
            if target not in self._index and target not in self._dirs:
                break
        if not self._simple(target):
            return self._materialize().new_script(suffix)
        self._record(target, b"", True)
        return os.path.join(self._path, name)

    def write_file(self, rel: str, data: bytes) -> str:
        """Plan writing ``data`` at ``rel`` (parents created); returns the absolute path."""
        if self._workdir is not None:
            return self._workdir.write_file(rel, data)
        target = self._resolve(rel)
        if not self._simple(target):
            return self._materialize().write_file(rel, data)
        self._record(target, bytes(data), False)
        return target

    def setup(self) -> WorkdirSetup | None:
        """What ``ExecutionRequest.setup`` takes; None once the dir was made here."""
        if self._workdir is not None:
            return None
        return WorkdirSetup(self._path, tuple(self._files), tuple(self.fetch), self._real)

    def complete(self, files: Mapping[str, bytes] | None, removed: bool) -> None:
        """Take the run's fetched files and whether the executor removed the dir."""
        self._fetched = files or {}
        self._removed = removed

    def read_file(self, rel: str) -> bytes | None:
        """Contents of a fetched regular file at ``rel``, None if absent (or not fetched)."""
        if self._workdir is not None:
            return self._workdir.read_file(rel)
        return self._fetched.get(rel)

    def cleanup(self) -> None:
        """Remove the dir if the executor did not (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._workdir is not None:
            self._workdir.cleanup()
        elif not self._removed:
            remove_tree(self._path)

    def __enter__(self) -> DeferredWorkdir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()
