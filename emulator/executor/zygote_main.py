"""Warm-interpreter zygote of the sandbox executor (a standalone script).

It runs under the *runtime* Python, which may be another version (3.8+) without our package
installed, so it imports nothing from ``emulator`` and only the standard library.

Protocol: length-prefixed frames over the AF_UNIX stream socket whose fd is ``argv[1]``.
A frame is ``<u32 body length><u32 JSON length>``, then the JSON header, then the binary
blobs whose lengths the header lists under ``"b"`` (stdin, file contents, captured output).

* ``spawn`` (server -> zygote): fork one child.  The child either execs ``argv`` (faithful
  path) or runs the Python program itself in this warm interpreter (fast path).  With a
  ``dir`` it first creates the per-execution work dir and its files (so the server does no
  file-system work), and the zygote collects the requested files and removes the dir once
  the child is gone.
* ``kill``: SIGKILL the process group of a request (and sweep its uid).
* ``started`` / ``exited`` (zygote -> server): the zygote itself reads the child's stdout and
  stderr (keeping ``KEEP`` bytes, draining up to ``ABSORB`` bytes, then no longer reading so
  that a bigger writer blocks on its full pipe; a request may set its own ``keep`` and ``absorb``,
  ``absorb`` null to read to the end), reaps the child, kills what is left of its
  process group and uid, and reports the exit code, the output, a setup failure if any and
  the fetched files in one message.  A request with ``drain`` (Daytona's toolbox: Go's
  ``cmd.Wait``) ends when every holder of its output pipes has closed them, not when the
  program exits: a background child that keeps them holds the report until it closes them or
  the run is killed (its timeout); the exited program stays unreaped meanwhile, so its pid,
  and the process group named after it, stay its own.

Setup failures in a child (before the program runs) are written, one atomic write each, to a
status pipe shared by all children, keyed by pid.

It is started by ``zygote_boot.py``, which imports this module from its cached bytecode and, in
the fast path, executes the user's code at its own top level, so that the call stack above the
user's ``<module>`` frame is as short as possible.
Everything the child needs is prepared here before the fork (the interpreter state, the
compiled code, the environment, the rlimits): work done in the child is paid again in
copy-on-write page faults, work done here is not.
"""

from __future__ import annotations

import sys

# The script directory is sys.path[0]: drop it so nothing next to us shadows the stdlib.
if sys.path and sys.path[0] == __file__.rpartition("/")[0]:
    del sys.path[0]

import _ast  # noqa: F401  (compile() builds the AST types on first use: once here, not per child)
import atexit  # not imported at startup: a child's first import of it costs 300 us of page faults
import builtins
import contextlib
import ctypes
import errno
import gc
import json
import mmap
import os
import resource
import select
import signal
import stat
import struct
import time
import types
import warnings

TYPE_CHECKING = False  # typing is not imported here: a module we hold costs every child (see _PREIMPORT)
if TYPE_CHECKING:
    from typing import Any, NoReturn

#: Our two files: their frames are not the program's (see _print_exception).
_SELF_FILES = frozenset({__file__, getattr(sys.modules["__main__"], "__file__", __file__)})
#: The __main__ the zygote runs as (zygote_boot), put back after each batch of forks.
_SELF_MODULE = sys.modules["__main__"]
_BASE_PATH = list(sys.path)
_HDR = struct.Struct("<II")
_STATUS_HDR = struct.Struct("<II")
# Binary frames for the two hot replies (the JSON length field holds a marker instead):
# started = <id, pid>; exited (no fetched file, failure or kill) = <id, rc, at, flags, stdout
# len, stderr len> followed by stdout and stderr.
_STARTED = 0xFFFFFFFF
_EXITED = 0xFFFFFFFE
_STARTED_BODY = struct.Struct("<qi")
_EXITED_BODY = struct.Struct("<qidBII")  # flags: 1 = work dir removed
_PIPE_BUF = 4096
_EOF_GRACE = 0.5
_READ_CHUNK = 65536
_READ_TURN = 16 * _READ_CHUNK  # the most one stream's read takes of a turn of the serving loop (see _read_stream)
_MAX_FD = 1 << 20
_REFREEZE_EVERY = 16384  # forks between full collections of the zygote's own heap
# A fast-path child's "done" page: <magic, exit status>, written just before it closes its standard streams and
# exits (see _finish and _done_early).
_DONE = struct.Struct("<II")
_DONE_MAGIC = 0x444F4E45
# Only while the zygote is lightly loaded (the spawns of a batch plus the children alive at most this many): the
# page costs about 0.1 ms of CPU per child (system calls, pages the child copies, an extra turn of our loop), which
# matters when the cores are busy, and what it saves (the wait for a teardown) then does not. Under load a batch holds
# tens of spawns; at concurrency 1, one.
_DONE_LOAD = 4
# Learning which pages a program's run writes (see _learn and _prefault): a sampled child scans its page map into its
# done page: <magic, bits> at offset 8, then one bit per page of the zygote's writable regions from offset 16.
_LEARN_HDR = struct.Struct("<II")
_LEARN_MAGIC = 0x4C45524E
_LEARN_BITS = (mmap.PAGESIZE - 16) * 8
_LEARN_EVERY = 4096  # forks between two samples (16 between the first ones)
_PM_PRESENT = 1 << 63
_PM_EXCLUSIVE = 1 << 56  # mapped by this process only: copied by it (or by the zygote), or its own
_MADV_POPULATE_WRITE = 23
# Output capture (see emulator/executor/capture.py): keep at most KEEP bytes per stream, read
# (and discard) up to ABSORB bytes, then stop reading so that a bigger writer blocks.
KEEP = 219264
ABSORB = 448 * 1024
# A request's ``absorb`` of null: read to the end (more than any stream holds).
_ABSORB_ALL = sys.maxsize

# Cheap, side-effect-free stdlib modules that a fast-path child finds imported: each is imported here the first time a
# program names it (see _note_imports), not at start-up, because every module held here costs every child whether it
# uses it or not (its memory's page tables are copied by each fork and torn down by each exit: all of these together
# cost print(2 + 2) about 0.2 ms of its 2 ms of CPU at concurrency 128), while a program that imports one pays its
# import only until the warm interpreter holds it. Nothing that starts threads, registers atexit handlers or reads
# the env at import time belongs here (and never third-party packages such as numpy).
_PREIMPORT = (
    "collections",
    "functools",
    "itertools",
    "re",
    "math",
    "heapq",
    "bisect",
    "string",
    "json",
    "typing",
    "dataclasses",
    "enum",
    "copy",
    "operator",
    "random",
    "statistics",
    "datetime",
    "time",
    "struct",
    "textwrap",
    "fractions",
    "decimal",
    "array",
    "base64",
    "hashlib",
    "contextlib",
    "abc",
    "numbers",
    "keyword",
    "importlib.machinery",
)

# Recursion-depth calibration: user code runs one module frame (and, on some versions, one
# C-level eval entry) deeper than in ``python <file>``.  We measure the depth a recursive
# function reaches here and in a fresh interpreter, and shift the recursion limit by the
# difference (hidden by sys.get/setrecursionlimit shims), so RecursionError happens at the
# same depth (same traceback).
_CALIBRATE_SRC = (
    "def _f(n):\n    try:\n        return _f(n + 1)\n    except RecursionError:\n        return n\ndepth = _f(1)\n"
)


def _fresh_depth() -> int | None:
    """Depth reached by the calibration code in a fresh interpreter (None if unknown)."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-c", _CALIBRATE_SRC + "print(depth)\n"],
            dict(os.environ),
            file_actions=[(os.POSIX_SPAWN_DUP2, write_fd, 1), (os.POSIX_SPAWN_CLOSE, read_fd)],
        )
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    try:
        return int(b"".join(chunks)) if _exit_status(status) == 0 else None
    except ValueError:
        return None


def _exit_status(status: int) -> int:
    """os.waitstatus_to_exitcode (3.9+) for any version."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _install_recursion_shim(offset: int) -> None:
    """sys.get/setrecursionlimit that hide the calibration offset from user code."""
    real_get = sys.getrecursionlimit
    real_set = sys.setrecursionlimit

    def getrecursionlimit() -> int:
        return real_get() - offset

    def setrecursionlimit(limit: int, /) -> None:
        real_set(limit)  # validates (type, >= 1) exactly like CPython
        real_set(real_get() + offset)

    for shim, real in ((getrecursionlimit, real_get), (setrecursionlimit, real_set)):
        shim.__module__ = "sys"
        shim.__doc__ = real.__doc__
    real_set(real_get() + offset)
    sys.getrecursionlimit = getrecursionlimit
    sys.setrecursionlimit = setrecursionlimit


# --- libc via ctypes (argument objects built once, reused by every child) -----------------

_PR_SET_PDEATHSIG = 1
_PR_SET_TIMERSLACK = 29
_PR_SET_DUMPABLE = 4
# A lightly loaded child that waits for a deadline wakes this much before it and spins to it: it starts on a core
# already awake, about 0.08 ms sooner at concurrency 1 (1 ms of spinning does no better).
_SPIN = 0.0002
_PR_SET_KEEPCAPS = 8
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_capset = _libc.capset
_capset.argtypes = [ctypes.POINTER(_CapHeader), ctypes.POINTER(_CapData)]
_capset.restype = ctypes.c_int
_CAP_HEADER = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
_CAP_DATA = (_CapData * 2)()
_CAP_DATA[0].effective = _CAP_DATA[0].permitted = _CAP_DATA[0].inheritable = 1 << _CAP_DAC_READ_SEARCH
_CAP_ARGS = (ctypes.byref(_CAP_HEADER), _CAP_DATA)
# The child's own copies of prctl and capset, without argtypes: each argtypes converter a child's call runs is pages
# it copies (about 12 for the first call). Their arguments are small ints (which ctypes passes sign-extended, so the
# kernel's unused unsigned long arguments read 0) and ready-made pointers.
_child_prctl = _libc["prctl"]
_child_capset = _libc["capset"]
_child_madvise = _libc["madvise"]  # its own function object: the argument converters are used before a wait only
_child_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_SIGKILL = int(signal.SIGKILL)  # a plain int: the enum member would be one more object (page) a child touches
_CLONE_NEWNS = 0x00020000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
_PTHREAD_ATTR_SIZE = 256  # generous: sizeof(pthread_attr_t) is 56 on x86_64/aarch64
_libc.pthread_attr_init.argtypes = [ctypes.c_void_p]
_libc.pthread_attr_setstacksize.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.pthread_setattr_default_np.argtypes = [ctypes.c_void_p]
_libc.pthread_attr_destroy.argtypes = [ctypes.c_void_p]
_libc.pthread_getattr_default_np.argtypes = [ctypes.c_void_p]
_libc.pthread_attr_getstacksize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
_ENVIRON = ctypes.c_void_p.in_dll(_libc, "environ")


def _check(ret: int, what: str) -> None:
    """Raise OSError with errno when a libc call failed."""
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class _PreexecError(Exception):
    """Setup failure that the real server reports as 'Exception occurred in preexec_fn.'."""


class _ExecError(Exception):
    """execve failed; the message is what subprocess would have raised."""


class _WorkdirError(Exception):
    """Creating the work dir or one of its files failed (the message is the OSError's)."""


# --- zygote state -------------------------------------------------------------------------


class _OffHeap:
    """Output kept out of the zygote's heap, in an anonymous map its forked children do not get (``MADV_DONTFORK``).

    A capture larger than Sandbox Fusion's (a Daytona command's, up to tens of MiB) kept in the heap would be in every
    child forked meanwhile: in its address space (against a ``memory_limit_MB``) and write-protected at each fork.
    """

    __slots__ = ("map", "size")

    def __init__(self, capacity: int, first: bytes | bytearray) -> None:
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
        self.map = mmap.mmap(-1, capacity, flags=flags)
        self.map.madvise(mmap.MADV_DONTFORK)
        self.size = 0
        self.append(first)

    def __len__(self) -> int:
        return self.size

    def append(self, data: bytes | bytearray) -> None:
        end = self.size + len(data)
        self.map[self.size : end] = data
        self.size = end

    def view(self) -> memoryview:
        """What was kept, without a copy (the map lives as long as the view)."""
        return memoryview(self.map)[: self.size]


#: Kept output past this moves out of the heap (see _OffHeap); Sandbox Fusion's capture never gets there.
_OFF_HEAP_FROM = KEEP


class _Stream:
    """One output pipe of a child, read by the zygote within the keep/absorb budgets."""

    __slots__ = ("absorb", "absorbed", "eof", "fd", "keep", "kept", "reading")

    def __init__(self, fd: int, keep: int = KEEP, absorb: int = ABSORB) -> None:
        self.fd = fd
        self.keep = keep
        self.absorb = absorb
        self.kept: bytearray | _OffHeap = bytearray()
        self.absorbed = 0
        self.reading = True
        self.eof = False  # every writer has closed it (not just our budget used up)


class _Child:
    """A running (or just exited) child."""

    __slots__ = (
        "deadline",
        "done",
        "drain",
        "draining",
        "err",
        "exited_at",
        "hold_w",
        "killed",
        "learning",
        "out",
        "pid",
        "pidfd",
        "rc",
        "reported",
        "req_id",
        "stdin_data",
        "stdin_fd",
        "uid",
        "workdir",
    )

    def __init__(self, req_id: int, pid: int) -> None:
        self.req_id = req_id
        self.pid = pid
        self.pidfd = -1
        self.out: _Stream | None = None
        self.err: _Stream | None = None
        self.stdin_fd = -1
        self.stdin_data = memoryview(b"")
        self.uid: int | None = None  # exclusive uid to sweep when it ends
        self.workdir: dict[str, Any] | None = None
        self.killed = False
        self.exited_at = 0.0
        self.rc: int | None = None
        self.deadline = 0.0
        self.hold_w = -1  # our end of a held child's start pipe (see _go)
        self.done: mmap.mmap | None = None  # a fast-path child's done page (see _done_early)
        self.reported = False  # its exit went to the executor before we reaped it
        self.learning: list[tuple[int, int]] | None = None  # the regions a sampled child scanned (see _learn)
        self.drain = False  # it ends when its output pipes close, not at its exit (see _hold_for_eof)
        self.draining = False  # exited, unreaped, its pipes still held open by what it left


class _Plan:
    """Everything a child needs, prepared by the zygote before the fork."""

    __slots__ = (
        "cwd",
        "failure",
        "gid",
        "hold_fd",
        "nproc_own",
        "presweep",
        "req",
        "rlimits",
        "start_at",
        "stderr_fd",
        "stdin_fd",
        "stdout_fd",
        "sweep",
        "thread_stack",
        "uid",
        "workdir",
        "workdir_error",
    )

    def __init__(self) -> None:
        self.req: dict[str, Any] = {}
        # The child's ends of its pipes: three ints, not a tuple, which would be a tracked object made after the
        # batch's gc.freeze() (see _fork_run): each child's collection would walk those of its batch.
        self.stdin_fd = self.stdout_fd = self.stderr_fd = -1
        # A held child's end of its start pipe: it waits there, ready, until the executor's go (or EOF: never).
        self.hold_fd = -1
        # Or the instant (time.monotonic()) before which its program must not start: it sleeps until then.
        self.start_at = 0.0
        self.cwd = "/"
        self.rlimits: list[tuple[int, tuple[int, int]]] = []
        self.nproc_own = 0
        self.failure: str | None = None
        self.thread_stack = 0
        self.uid: int | None = None
        self.gid = 0
        self.sweep = False
        self.presweep = False
        self.workdir: tuple[str, list[tuple[str, bytes, bool]]] | None = None
        # Why the zygote could not make the work dir before the fork (the child reports it), None when it did.
        self.workdir_error: str | None = None


class _Job:
    """A Python program prepared for execution in a forked child (fast path)."""

    def __init__(
        self,
        namespace: dict[str, Any],
        code: types.CodeType | None,
        error: BaseException | None,
        argv0: str,
    ) -> None:
        self.namespace = namespace
        self.code = code
        self.error = error
        self.argv0 = argv0
        self.load = code is None and error is None  # the child reads and compiles the file
        self.source: bytes | None = None  # a program read from stdin: what the child compiles, with no file
        # Its own modules beside it (request files) named as modules we may hold: the child forgets ours (see _unshadow)
        self.shadows: tuple[str, ...] = ()
        self.gc_counts = (0, 0)  # gc.get_count()[1:] at the fork
        self.done: mmap.mmap | None = None  # the page shared with the zygote only (see _done_early)
        self.learn: list[tuple[int, int]] | None = None  # sampled: the regions to scan (see _learn)
        # Forked while the zygote was lightly loaded: before a wait for its start it copies the hot pages (see
        # _prefault) and spins through the wait's last moment (see _SPIN).
        self.light = False


class _Main:
    """What makes this interpreter look like ``python <script>`` just started, for one child."""

    __slots__ = ("argv", "environ", "job", "module", "orig_argv", "path")

    def __init__(self) -> None:
        self.argv: list[str] = []
        self.orig_argv: list[str] = []
        self.path: list[str] = []
        self.environ: _Environ | None = None
        self.module: types.ModuleType | None = None
        self.job: _Job | None = None


class _Prepared:
    """One spawn request made ready before its batch's forks; the fork fills in the pid and the zygote's ends of
    the pipes, and :func:`_register` does the rest once the batch is forked."""

    __slots__ = ("err_r", "fetch", "hold", "hold_w", "in_w", "main", "out_r", "pid", "plan", "req_id", "stdin")

    def __init__(self, req_id: int, plan: _Plan, main: _Main | None, stdin: bytes) -> None:
        self.req_id = req_id
        self.plan = plan
        self.main = main
        self.stdin = stdin
        self.fetch: dict[str, Any] | None = None  # what _complete needs of the work dir
        self.pid = -1
        self.in_w = self.out_r = self.err_r = -1
        self.hold = False
        self.hold_w = -1


class _State:
    """Mutable zygote state (module-level singletons, kept in one place)."""

    sock = -1
    epoll: Any = None
    status_r = -1
    status_w = -1
    wake_r = -1
    handlers: dict[int, tuple[int, Any]] = {}  # fd -> (kind, child or stream owner)
    children: dict[int, _Child] = {}  # pid -> child
    by_id: dict[int, _Child] = {}  # request id -> child
    lingering: list[_Child] = []  # exited, waiting for EOF on their pipes
    inbuf = bytearray()
    outbuf = bytearray()
    writing = False
    failures: dict[int, str] = {}  # pid -> setup failure reported on the status pipe
    forks = 0
    root = False
    use_pidfd = False
    # The host's mount namespace (an fd) while the zygote lives in one of its own with a private temp root (see
    # _private_tmp); children without a work dir of their own go back to it.
    host_ns = -1
    private_tmp_error = ""  # why there is no private temp root ("" when there is one)
    private_tmp_never = False  # and whether that will stay so (no root, the runtime under it: not a passing failure)
    sweep_root = ""  # the private temp root, swept of what programs leave there (see _sweep)


#: Held here, not in locals, so that a child returning up the stack releases nothing (each release writes, and so
#: copies, a page); and written by item, never as class attributes, whose assignment between two forks costs about
#: 25 page copies (the type's caches are invalidated): [0] the poll's last event list, [1] the batch being forked,
#: [2] the children forked but not yet registered, [3] the children completed in this turn of the serving loop (freed
#: after its forks: memory freed before a fork is where its child's new objects go, each in a page it then copies;
#: about 8 pages per child), [4] the run of spawns being forked.
#: The zygote's pid (set at start; a child compares it with its parent's).
_ZYGOTE_PID = [0]
#: Default thread stack sizes: [the zygote's own at start, the one set now] (see :func:`_stack_for_fork`).
_THREAD_STACK = [0, 0]
_HAS_ORIG_ARGV = hasattr(sys, "orig_argv")
_SWAP_OS_ENVIRON = isinstance(getattr(os.environ, "_data", None), dict)

_HELD: list[Any] = [None, None, [], [], None]

_K_SOCK, _K_OUT, _K_ERR, _K_PIDFD, _K_STDIN, _K_WAKE = range(6)


def _frame(msg: dict[str, Any], blobs: list[bytes | memoryview] | list[bytes]) -> bytes:
    if blobs:
        msg["b"] = [len(b) for b in blobs]
    head = json.dumps(msg, separators=(",", ":")).encode()
    body_len = len(head) + sum(len(b) for b in blobs)
    return b"".join([_HDR.pack(body_len, len(head)), head, *blobs])


def _send(msg: dict[str, Any], blobs: list[bytes | memoryview] | list[bytes] | None = None) -> None:
    """Queue one frame; flushed once per loop iteration."""
    _State.outbuf.extend(_frame(msg, blobs or []))  # in place: no class attribute is assigned


def _flush() -> None:
    out = _State.outbuf
    while out:
        try:
            n = os.write(_State.sock, out)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            _shutdown()
        del out[:n]
    want = bool(out)
    if want != _State.writing:
        _State.writing = want
        events = select.EPOLLIN | (select.EPOLLOUT if want else 0)
        _State.epoll.modify(_State.sock, events)


# --- child side ---------------------------------------------------------------------------


def _count_user_tasks(uid: int) -> int:
    """Number of tasks (threads) owned by ``uid``: what RLIMIT_NPROC counts."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                data = f.read()
        except OSError:
            continue
        owner = -1
        threads = 1
        for line in data.split(b"\n"):
            if line.startswith(b"Uid:"):
                owner = int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
        if owner == uid:
            total += threads
    return total


def _plan_rlimits(plan: _Plan, req: dict[str, Any]) -> None:
    """The request's rlimits (memory limit exactly like the real server's preexec)."""
    lim: dict[str, int] = req["limits"]
    out = plan.rlimits
    memory = lim["memory"]
    if memory > 0:
        for res in (resource.RLIMIT_AS, resource.RLIMIT_DATA, resource.RLIMIT_STACK):
            _soft, hard = resource.getrlimit(res)
            # The real server cannot raise a hard limit (no CAP_SYS_RESOURCE in its container),
            # so a request above the hard limit fails in preexec_fn. It sets the soft limit alone:
            # the program may raise it again, up to the hard limit it inherited.
            if hard != resource.RLIM_INFINITY and memory > hard:
                plan.failure = "memory limit above hard rlimit"
            cap = lim["as_cap"]
            if res == resource.RLIMIT_AS and cap > 0 and (hard == resource.RLIM_INFINITY or hard > cap):
                hard = max(cap, memory)  # raised again, it stays under the emulator's safety cap (a deliberate limit)
            out.append((res, (memory, hard)))
        if req["mode"] == "python":
            page = resource.getpagesize()
            size = max(memory, 16384)
            plan.thread_stack = (size + page - 1) // page * page
    elif lim["as_cap"] > 0:
        out.append((resource.RLIMIT_AS, (lim["as_cap"], lim["as_cap"])))
    if lim["cpu"] > 0:
        out.append((resource.RLIMIT_CPU, (lim["cpu"], lim["cpu"] + 1)))
    if lim["fsize"] > 0:
        out.append((resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"])))
    out.append((resource.RLIMIT_CORE, (0, 0)))
    nproc = lim["nproc"]
    if nproc > 0:
        if req["uid"] is None:
            plan.nproc_own = nproc  # on top of our own uid's tasks: counted by the child
        else:
            out.append((resource.RLIMIT_NPROC, (nproc, nproc)))


def _set_default_thread_stack(size: int) -> None:
    """Make glibc's default thread stack size follow the (new) soft RLIMIT_STACK.

    A fresh process gets this at startup from glibc; a forked child keeps the zygote's, so
    without this Python and native (OpenBLAS) threads would not fail as on the real server.
    """
    attr = ctypes.create_string_buffer(_PTHREAD_ATTR_SIZE)
    _check(_libc.pthread_attr_init(attr), "pthread_attr_init")
    try:
        _check(_libc.pthread_attr_setstacksize(attr, size), "pthread_attr_setstacksize")
        _check(_libc.pthread_setattr_default_np(attr), "pthread_setattr_default_np")
    finally:
        _libc.pthread_attr_destroy(attr)


def _default_thread_stack() -> int:
    """glibc's default thread stack size now (set at start from RLIMIT_STACK)."""
    attr = ctypes.create_string_buffer(_PTHREAD_ATTR_SIZE)
    size = ctypes.c_size_t()
    _check(_libc.pthread_getattr_default_np(attr), "pthread_getattr_default_np")
    try:
        _check(_libc.pthread_attr_getstacksize(attr, ctypes.byref(size)), "pthread_attr_getstacksize")
    finally:
        _libc.pthread_attr_destroy(attr)
    return size.value


def _stack_for_fork(plan: _Plan) -> None:
    """Give the next fork the plan's default thread stack, set in the zygote (which starts no threads).

    Set in the child, the ctypes calls cost each child about 40 copied pages (0.19 ms); here they run only when the
    size changes, which under one memory limit is once. A plan without a memory limit gets the zygote's own default
    back. If the zygote cannot set it, the plan keeps ``thread_stack`` and its child fails trying, as before.
    """
    want = plan.thread_stack or _THREAD_STACK[0]
    try:
        _set_default_thread_stack(want)
    except OSError:
        return
    _THREAD_STACK[1] = want
    plan.thread_stack = 0


def _drop_process_privileges() -> None:
    """Zygote start (root): shrink the bounding set and forbid new privileges, once for all.

    Both are inherited by every child and do not touch the zygote's own capabilities.  Only
    CAP_DAC_READ_SEARCH stays (the interpreter lives under /root, mode 0700).  KEEPCAPS lets
    a child keep that one capability across its uid change.
    """
    for cap in range(64):
        if cap == _CAP_DAC_READ_SEARCH:
            continue
        if _prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability the kernel knows
            _check(-1, "PR_CAPBSET_DROP")
    _check(_prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "PR_SET_KEEPCAPS")
    _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def _private_tmp(root: str, join: int = -1) -> str | None:
    """Move the zygote into a mount namespace with a private tmpfs at ``root``; None, or why not.

    ``join``: an fd of such a namespace that the executor holds (made by its first warm interpreter), joined rather
    than made anew, so that all its warm interpreters, restarted ones included, share one ``/tmp`` as the programs of
    the real server's container do. Without it, a fresh namespace and tmpfs are made.
    One-shot runs make their work dirs in it: the paths are those of the host's temp root, none of the host's files
    there are visible (as in the real server's container), and making and removing a dir costs no disk journal.
    Children without such a dir (Daytona sandboxes, dirs the server made) go back to the host's namespace.
    """
    why = _no_private_tmp(root)
    if why is not None:
        _State.private_tmp_never = True
        if join >= 0:
            os.close(join)
        return why
    if join >= 0:
        return _join_private_tmp(os.path.realpath(root), join)
    real = os.path.realpath(root)
    # A helper process makes the namespace, so that a step that fails leaves the zygote where it was.
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    hold_r, hold_w = os.pipe2(os.O_CLOEXEC)
    helper = os.fork()
    if helper == 0:
        try:
            os.close(status_r)
            os.close(hold_w)
            _check(_libc.unshare(_CLONE_NEWNS), "unshare")
            _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
            _check(_libc.mount(b"tmpfs", os.fsencode(real), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=1777"), "mount")
            os.write(status_w, b"ok")
            os.read(hold_r, 1)  # until the zygote has moved in
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                number = exc.errno if isinstance(exc, OSError) and exc.errno else 0
                os.write(status_w, f"{number}\n{exc}".encode("utf-8", "replace")[:4000])
        os._exit(0)
    os.close(status_w)
    os.close(hold_r)
    try:
        answer = os.read(status_r, 4096).decode("utf-8", "replace")
        if answer != "ok":
            code, _, why = answer.partition("\n")
            _State.private_tmp_never = _never(code)
            return why or "the namespace helper died"
        try:
            private = os.open(f"/proc/{helper}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            return str(exc)
        return _join_private_tmp(real, private)  # with the same checks as a namespace made by another
    finally:
        os.close(status_r)
        os.close(hold_w)
        os.waitpid(helper, 0)


#: Errors of the namespace's making that pass (descriptors, memory, processes run out for a while): a later start
#: may make it. Any other (not allowed, no mount namespaces left, no tmpfs in this kernel) stays.
_PASSING_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EINTR})


def _never(code: str) -> bool:
    """Whether a failure to make the namespace, reported as its errno (``""`` or ``"0"``: none, the helper died or
    failed otherwise), would fail again at every later start."""
    return code.isdigit() and int(code) != 0 and int(code) not in _PASSING_ERRNOS


#: ``statfs``'s ``f_type`` of a tmpfs.
_TMPFS_MAGIC = 0x01021994


def _is_tmpfs(path: str) -> bool:
    """Whether ``path`` is on a tmpfs (``f_type``, the first field of ``struct statfs``, a C long)."""
    buf = ctypes.create_string_buffer(512)
    if _libc.statfs(os.fsencode(path), buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value == _TMPFS_MAGIC


def _no_private_tmp(root: str) -> str | None:
    """Why ``root`` cannot be a private tmpfs, or None."""
    if not os.path.isabs(root) or not os.path.isdir(root):
        return f"{root!r} is not a directory"
    real = os.path.realpath(root)
    for used in (sys.executable, sys.prefix, sys.base_prefix, *sys.path):
        if not used:
            continue
        for path in (os.path.abspath(used), os.path.realpath(used)):
            if (path + os.sep).startswith((root.rstrip(os.sep) + os.sep, real + os.sep)):
                return f"the runtime Python uses {used}, under {root}"
    return None


def _join_private_tmp(real: str, join: int) -> str | None:
    """Join the namespace ``join`` (see _private_tmp), after checking that it is not the host's: there, ``real``
    would be the host's temp root, which the sweep must never touch."""
    try:
        host = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        os.close(join)
        return str(exc)
    try:
        host_dev = os.stat(real).st_dev
        if os.fstat(join).st_ino == os.fstat(host).st_ino:
            raise OSError("the namespace to join is the host's")
        _check(_libc.setns(join, _CLONE_NEWNS), "setns")
        if os.stat(real).st_dev == host_dev or not _is_tmpfs(real):
            _check(_libc.setns(host, _CLONE_NEWNS), "setns")
            raise OSError(f"the namespace to join has no tmpfs at {real}")
    except OSError as exc:
        os.close(host)
        return str(exc)
    finally:
        os.close(join)
    _State.host_ns = host
    return None


def _make_workdir(path: str, files: list[tuple[str, bytes, bool]], owner: tuple[int, int] | None) -> None:
    """Create the work dir and its files as the server's Workdir would (then hand them over)."""
    try:
        os.mkdir(path, 0o700)
        if owner is not None:
            os.chown(path, *owner)
        for target, data, exclusive in files:
            if exclusive:  # mkstemp's file, then written
                fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            else:
                parent = os.path.dirname(target)
                missing = []
                while not os.path.isdir(parent):
                    missing.append(parent)
                    parent = os.path.dirname(parent)
                for directory in reversed(missing):
                    os.mkdir(directory)
                    if owner is not None:
                        os.chown(directory, *owner)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if owner is not None:
                    os.fchown(fd, *owner)
            finally:
                os.close(fd)
    except OSError as exc:
        raise _WorkdirError(str(exc)) from None


def _child_fail(exc: BaseException) -> NoReturn:
    """Report a setup/exec failure on the shared status pipe and exit."""
    if isinstance(exc, _ExecError):
        msg = f"exec\n{exc}"
    elif isinstance(exc, _WorkdirError):
        msg = f"workdir\n{exc}"
    else:
        msg = f"preexec\n{type(exc).__name__}: {exc}"
    data = msg.encode("utf-8", "replace")[: _PIPE_BUF - _STATUS_HDR.size]
    with contextlib.suppress(OSError):
        os.write(_State.status_w, _STATUS_HDR.pack(os.getpid(), len(data)) + data)
    os._exit(1)


def _child(plan: _Plan, zygote_pid: int, job: _Job | None) -> _Job | None:
    """Sandbox setup in the forked child; returns the job (fast path) or execs."""
    try:
        if _State.wake_r >= 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if _State.host_ns >= 0 and plan.workdir is None:
            _check(_libc.setns(_State.host_ns, _CLONE_NEWNS), "setns")
        os.setsid()
        os.dup2(plan.stdin_fd, 0)
        os.dup2(plan.stdout_fd, 1)
        os.dup2(plan.stderr_fd, 2)
        # The zygote's fds, the epoll object's included: it is referenced by _State until os._exit, so it never closes
        # its (by then reused) fd number itself. Closing it here as a number touches no object.
        status_w = _State.status_w
        hold_fd = plan.hold_fd
        if hold_fd < 0:
            os.closerange(3, status_w)
            os.closerange(status_w + 1, _MAX_FD)
        else:
            low, high = (status_w, hold_fd) if status_w < hold_fd else (hold_fd, status_w)
            os.closerange(3, low)
            os.closerange(low + 1, high)
            os.closerange(high + 1, _MAX_FD)
        uid = plan.uid
        if plan.workdir_error is not None:
            raise _WorkdirError(plan.workdir_error)
        os.chdir(plan.cwd)
        if plan.failure is not None:
            raise _PreexecError(plan.failure)
        setrlimit = resource.setrlimit
        for res, limits in plan.rlimits:
            setrlimit(res, limits)
        if plan.nproc_own:
            nproc = plan.nproc_own + _count_user_tasks(os.getuid())
            setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if plan.thread_stack:
            _set_default_thread_stack(plan.thread_stack)
        if uid is not None:
            os.setgroups([])
            os.setresgid(plan.gid, plan.gid, plan.gid)
            os.setresuid(uid, uid, uid)
            _check(_child_capset(*_CAP_ARGS), "capset")
            _check(_child_prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0), "PR_CAP_AMBIENT")
            # The uid change made us undumpable (its /proc files root's); a program exec'd, as on the real server,
            # is dumpable again. So is this one.
            _check(_child_prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "PR_SET_DUMPABLE")
            if plan.presweep:
                # Leftovers of an earlier execution with this uid (e.g. after a zygote crash).
                with contextlib.suppress(OSError):
                    os.kill(-1, signal.SIGKILL)
        # Die with the zygote (set after the uid change, which clears it).
        _check(_child_prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
        if os.getppid() != zygote_pid:
            os._exit(1)
        if job is not None:
            # Before any wait for the start (no program sees when its generator was seeded).
            for seed, inst in _RESEED:
                seed(inst, None)
            if job.light and _HOT and (hold_fd >= 0 or plan.start_at):
                _prefault()
            if job.learn is not None:
                _LEARNER[0] = os.getpid()
        if hold_fd >= 0:
            # Ready: wait for the go (EOF instead: the run was called off, or the zygote is gone).
            if os.read(hold_fd, 1) != b"g":
                os._exit(1)
            os.close(hold_fd)
        elif plan.start_at:
            delay = plan.start_at - time.monotonic()
            if delay > 0:
                # Woken at the instant, not up to the default 50 us of timer slack later; the program gets the default.
                _child_prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
                spin = _SPIN if job is not None and job.light else 0.0
                if delay > spin:
                    time.sleep(delay - spin)
                if spin:
                    start_at = plan.start_at
                    monotonic = time.monotonic
                    while monotonic() < start_at:
                        pass
                _child_prctl(_PR_SET_TIMERSLACK, 0, 0, 0, 0)
        if job is None:
            _child_exec(plan.req)
        os.close(status_w)
    except BaseException as exc:
        _child_fail(exc)
    if job is not None and job.shadows:
        _unshadow(job.shadows)
    if job is not None and job.load:
        _child_load(job)
    return job


def _child_exec(req: dict[str, Any]) -> NoReturn:
    """Faithful path: exec the command (signals restored as subprocess does)."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    argv: list[str] = req["argv"]
    try:
        os.execvpe(argv[0], argv, req["env"])
    except OSError as exc:
        raise _ExecError(f"[Errno {exc.errno}] {os.strerror(exc.errno or 0)}: {argv[0]!r}") from None
    raise AssertionError("unreachable")


# --- zygote side: preparing a fast-path run ------------------------------------------------


class _Environ:
    """One child's environment, built before its batch's forks: a C ``environ`` array we own (setenv would leak a
    string per request) and the matching ``os.environ`` data."""

    __slots__ = ("address", "array", "data", "entries", "env")

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.entries = [f"{k}={v}".encode("utf-8", "surrogateescape") for k, v in env.items()]
        self.array = (ctypes.c_char_p * (len(self.entries) + 1))(*self.entries)
        self.address = ctypes.addressof(self.array)
        encode, encode_value = os.environ.encodekey, os.environ.encodevalue
        self.data = {encode(k): encode_value(v) for k, v in env.items()}


#: The environment installed last (the C ``environ`` points into it, so it is kept alive here): installed by
#: :func:`_fork_run` with two pointer swaps, no allocation. The zygote itself never reads its environment.
_CURRENT_ENVIRON: list[_Environ | None] = [None]


def _build_main(req: dict[str, Any], source: bytes | None, own: frozenset[str] = frozenset()) -> _Main:
    """Everything :func:`_fork_run` installs for one fast-path child, built without touching the interpreter's
    state (so a whole batch is built before its first fork).

    ``program_on_stdin``: the child looks like ``python [-u] -`` reading ``source`` from its stdin (``<stdin>`` in
    tracebacks, ``sys.argv == ['-']``, the current directory first on ``sys.path``), and its own stdin is empty, as
    the real one's is once the interpreter has read the program to its end.

    ``own``: the names of the modules the request's files put first on the program's ``sys.path``."""
    on_stdin = bool(req.get("program_on_stdin"))
    path: str = "<stdin>" if on_stdin else req["script"]
    main = _Main()
    argv0: str = req["argv"][0]
    main.argv = ["-"] if on_stdin else [path]
    main.orig_argv = list(req["argv"]) if on_stdin else [argv0, path]
    script_dir = "" if on_stdin else req.get("script_dir") or os.path.dirname(os.path.realpath(path))
    main.path = [script_dir, *_BASE_PATH]
    main.environ = _Environ(req["env"])
    import importlib.machinery

    # Same keys, in the same order, as the __main__ of ``python <file>`` (of ``python -``).
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__annotations__"] = {}
    namespace["__builtins__"] = builtins
    namespace["__file__"] = path
    namespace["__cached__"] = None
    namespace["__loader__"] = (
        importlib.machinery.BuiltinImporter if on_stdin else importlib.machinery.SourceFileLoader("__main__", path)
    )
    main.module = module
    if source is None:
        main.job = _Job(namespace, None, None, argv0)
    else:
        code, error = _compile(source, path)
        if code is not None and _PENDING:
            _note_imports(code, own)
        main.job = _Job(namespace, code, error, argv0)
        if on_stdin:
            main.job.source = source  # no file to read it again from, should the child compile it itself
    if own:
        main.job.shadows = tuple(own)
    return main


def _compile(source: bytes, path: str) -> tuple[types.CodeType | None, BaseException | None]:
    """The program compiled here, or the error compiling it raised; (None, None): the child compiles it itself.

    A compile-time warning (SyntaxWarning, ...) belongs on the child's stderr: if one is shown, the child compiles
    again itself. (Only the display hook is swapped: filters and registries behave as in the child.)
    """
    caught: list[object] = []
    show = warnings._showwarnmsg  # type: ignore[attr-defined]
    warnings._showwarnmsg = caught.append  # type: ignore[attr-defined]
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except BaseException as exc:  # SyntaxError, ValueError (null bytes), ...
        exc.__traceback__ = None
        return None, (_as_read_from_a_file(exc, source, path) if not caught else None)
    finally:
        warnings._showwarnmsg = show  # type: ignore[attr-defined]
    if caught:
        return None, None
    return code, None


def _child_load(job: _Job) -> None:
    """In the child: read and compile the script when the zygote did not."""
    path = job.namespace["__file__"]
    source = job.source
    try:
        if source is None:
            with open(path, "rb") as f:
                source = f.read()
    except OSError as exc:
        sys.stderr.write(f"{job.argv0}: can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(2)
    try:
        job.code = compile(source, path, "exec", dont_inherit=True)
    except BaseException as exc:  # SyntaxError, ValueError (null bytes), ...
        job.error = _as_read_from_a_file(exc, source, path)


def _as_read_from_a_file(exc: BaseException, source: bytes, path: str) -> BaseException:
    """The error ``python <file>`` (or ``python -``) reports where ``compile`` gave ``exc``: for a null byte, the
    tokenizer's, which names the line and shows it up to the byte (``compile`` names neither)."""
    if not isinstance(exc, (SyntaxError, ValueError)) or "null bytes" not in str(exc) or b"\0" not in source:
        return exc
    at = source.index(b"\0")
    before = source[:at]
    start = max(before.rfind(b"\n"), before.rfind(b"\r")) + 1  # a line ends at \n, \r\n or a lone \r
    line = before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1
    text = source[start:at].decode("utf-8", "replace")
    return SyntaxError("source code cannot contain null bytes", (path, line, None, text))


# --- zygote side: requests -------------------------------------------------------------------


def _prepare(req: dict[str, Any], blobs: list[bytes]) -> _Prepared:
    """Everything a spawn request's child needs that can be made before the batch's first fork."""
    plan = _Plan()
    plan.req = req
    plan.cwd = req["cwd"]
    plan.uid = req["uid"]
    plan.gid = req["gid"] or 0
    plan.sweep = bool(req.get("sweep"))
    plan.presweep = bool(req.get("presweep"))
    plan.start_at = req.get("start_at") or 0.0
    _plan_rlimits(plan, req)
    workdir = req.get("dir")
    if workdir is not None:
        plan.workdir = (workdir["path"], [(t, blobs[i], bool(x)) for t, i, x in workdir["files"]])
        # Made here, before the batch's forks, rather than in the child: the same system calls, but the Python
        # around them writes pages that the child would each copy (about 40 per child).
        try:
            _make_workdir(plan.workdir[0], plan.workdir[1], None if plan.uid is None else (plan.uid, plan.gid))
        except _WorkdirError as exc:
            plan.workdir_error = str(exc)
    main = None
    if req["mode"] == "python":
        source_index = req.get("source")
        own = _own_modules(req, plan.workdir[1]) if plan.workdir is not None else frozenset()
        main = _build_main(req, None if source_index is None else blobs[source_index], own)
    stdin_index = req.get("stdin")
    prepared = _Prepared(req["id"], plan, main, b"" if stdin_index is None else blobs[stdin_index])
    prepared.hold = bool(req.get("hold"))
    if workdir is not None:
        # What _complete needs: the dir, the names to fetch, the files we made (removed first).
        prepared.fetch = {
            "path": workdir["path"],
            "fetch": workdir.get("fetch", ()),
            "files": [t for t, _i, _x in workdir["files"]],
        }
    return prepared


def _done_page() -> mmap.mmap | None:
    """A page shared with one child only: made not inherited, and inherited just for its own fork (_fork_run).

    The child writes its exit status there, then closes its standard streams, then exits (_finish). The end of
    those streams tells us it is done before its exit does: the kernel reports an exit only after it has torn the
    child's address space down (about 0.4 ms on a VM, most of what a short program costs after its start). A page
    rather than a pipe, so the program sees no file descriptor of ours; its own, so it cannot speak for another.
    None when no page could be made: that child's exit is waited for.
    """
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE)
        page.madvise(mmap.MADV_DONTFORK)
    except (OSError, ValueError):
        return None
    return page


def _spawn_failed(prepared: _Prepared, error: str, fds: tuple[int, ...]) -> None:
    """A spawn that failed before its child ran: close the pipes made for it (-1: not made), report, and remove the
    work dir made for it."""
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    job = prepared.main.job if prepared.main is not None else None
    if job is not None and job.done is not None:
        job.done.close()
        job.done = None
    _send({"op": "spawn_failed", "id": prepared.req_id, "error": error})
    if prepared.plan.workdir is not None and prepared.plan.workdir_error is None:
        _rmtree(prepared.plan.workdir[0])


def _fork_run(run: list[_Prepared]) -> _Job | None:
    """Fork the children of consecutive spawn requests; their job inside a fast-path child, None in the zygote (the
    forked ones are left in ``_HELD[2]`` for :func:`_register`).

    Every fork makes each page of the zygote shared again, so each page the zygote writes before the next fork costs
    a copy-on-write fault (about 2 us on a VM). So the collector is frozen once, before the first fork (objects made
    since are the child's business only: its gc.collect() stays away from the zygote's heap; nothing the loop makes
    is tracked), and between two forks the zygote only makes the pipes, installs the child's ``__main__`` (inline:
    each call is a frame written) and forks.
    """
    gc.freeze()
    counts = gc.get_count()[1:]
    for prepared in run:
        if prepared.main is not None and prepared.main.job is not None:
            prepared.main.job.gc_counts = counts
    del counts
    for prepared in run:
        # The child's pipes, made just before its fork (made for the whole run first, every child would inherit
        # them all: each fork would then copy a bigger fd table and each child close them again).
        in_r = in_w = out_r = out_w = err_r = err_w = hold_r = hold_w = -1
        try:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            if prepared.hold:
                hold_r, hold_w = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:
            _spawn_failed(prepared, f"pipe failed: {exc}", (in_r, in_w, out_r, out_w, err_r, err_w, hold_r, hold_w))
            continue
        main = prepared.main
        job = None
        if main is not None:
            # Make this interpreter look like ``python <script>`` just started (inherited by the fork).
            sys.argv = main.argv
            if _HAS_ORIG_ARGV:
                sys.orig_argv = main.orig_argv
            sys.path = main.path  # a list of its own, as in a fresh interpreter
            environ = main.environ
            _ENVIRON.value = environ.address  # type: ignore[union-attr]
            _CURRENT_ENVIRON[0] = environ
            if _SWAP_OS_ENVIRON:
                os.environ._data = environ.data  # type: ignore[attr-defined,union-attr]
            else:  # pragma: no cover - other implementations
                os.environ.clear()
                os.environ.update(environ.env)  # type: ignore[union-attr]
            sys.modules["__main__"] = main.module  # type: ignore[assignment]
            job = main.job
        plan = prepared.plan
        plan.stdin_fd, plan.stdout_fd, plan.stderr_fd = in_r, out_w, err_w
        plan.hold_fd = hold_r
        if (plan.thread_stack or _THREAD_STACK[0]) != _THREAD_STACK[1]:
            _stack_for_fork(plan)
        else:
            plan.thread_stack = 0
        done = job.done if job is not None else None
        if done is not None:
            done.madvise(mmap.MADV_DOFORK)
        try:
            pid = os.fork()
        except OSError as exc:
            _spawn_failed(prepared, f"fork failed: {exc}", (in_r, in_w, out_r, out_w, err_r, err_w, hold_r, hold_w))
            continue
        if pid == 0:
            return _child(plan, _ZYGOTE_PID[0], job)
        if done is not None:
            done.madvise(mmap.MADV_DONTFORK)
        os.close(in_r)
        os.close(out_w)
        os.close(err_w)
        if hold_r >= 0:
            os.close(hold_r)
            prepared.hold_w = hold_w
        prepared.pid, prepared.in_w, prepared.out_r, prepared.err_r = pid, in_w, out_r, err_r
        _HELD[2].append(prepared)
    return None


def _register(forked: _Prepared) -> None:
    """The zygote's side of a forked child: tables, pipes, pidfd, the ``started`` reply."""
    pid = forked.pid
    plan = forked.plan
    child = _Child(forked.req_id, pid)
    if plan.sweep and plan.uid is not None:
        child.uid = plan.uid
    child.workdir = forked.fetch
    child.hold_w = forked.hold_w
    if plan.req.get("drain"):
        child.drain = True
    if forked.main is not None and forked.main.job is not None:
        child.done = forked.main.job.done
        child.learning = forked.main.job.learn
    _State.children[pid] = child
    _State.by_id[forked.req_id] = child
    epoll = _State.epoll
    handlers = _State.handlers
    if _State.use_pidfd:
        try:
            child.pidfd = os.pidfd_open(pid)
        except OSError:
            _State.use_pidfd = False
            _install_sigchld()
        else:
            epoll.register(child.pidfd, select.EPOLLIN)
            handlers[child.pidfd] = (_K_PIDFD, child)
    out_r, err_r, in_w = forked.out_r, forked.err_r, forked.in_w
    req = plan.req
    if "keep" in req:  # a capture of its own (not Sandbox Fusion's)
        keep = req["keep"]
        absorb = req["absorb"]
        if absorb is None:
            absorb = _ABSORB_ALL
        child.out = _Stream(out_r, keep, absorb)
        child.err = _Stream(err_r, keep, absorb)
    else:
        child.out = _Stream(out_r)
        child.err = _Stream(err_r)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    epoll.register(out_r, select.EPOLLIN)
    epoll.register(err_r, select.EPOLLIN)
    handlers[out_r] = (_K_OUT, child)
    handlers[err_r] = (_K_ERR, child)
    if forked.stdin:
        child.stdin_fd = in_w
        child.stdin_data = memoryview(forked.stdin)
        os.set_blocking(in_w, False)
        if not _feed_stdin(child):
            epoll.register(in_w, select.EPOLLOUT)
            handlers[in_w] = (_K_STDIN, child)
    else:
        os.close(in_w)
    _State.outbuf.extend(_HDR.pack(_STARTED_BODY.size, _STARTED) + _STARTED_BODY.pack(forked.req_id, pid))
    _State.forks += 1  # counted here, after the batch's forks: a class attribute written between two forks costs
    # about 25 page copies (the type's caches are invalidated)
    if _State.forks % _REFREEZE_EVERY == 0:
        # Cyclic garbage of the zygote itself would otherwise stay frozen forever.
        gc.unfreeze()
        gc.collect()


def _register_forked() -> None:
    """Register every child of the batch forked so far."""
    forked: list[_Prepared] = _HELD[2]
    if forked:
        for one in forked:
            _register(one)
        forked.clear()


def _feed_stdin(child: _Child) -> bool:
    """Write what the pipe takes; True (and the pipe closed) when done or the child is gone."""
    view = child.stdin_data
    while view:
        try:
            n = os.write(child.stdin_fd, view[:_READ_CHUNK])
        except (BlockingIOError, InterruptedError):
            child.stdin_data = view
            return False
        except OSError:  # EPIPE: the child exited or closed stdin
            break
        view = view[n:]
    _close_stdin(child)
    return True


def _close_stdin(child: _Child) -> None:
    fd = child.stdin_fd
    if fd < 0:
        return
    child.stdin_fd = -1
    child.stdin_data = memoryview(b"")
    if _State.handlers.pop(fd, None) is not None:
        _State.epoll.unregister(fd)
    os.close(fd)


def _read_stream(stream: _Stream) -> bool:
    """Read what is available within budget; True when the stream is finished for us.

    At most ``_READ_TURN`` bytes a call: a writer as fast as we read, on a stream read to its end, would otherwise
    keep us here; the rest is read in the next turns of the serving loop (the pipe stays readable).
    """
    if not stream.reading:
        return True
    fd = stream.fd
    kept = stream.kept
    turn = _READ_TURN
    while True:
        room = stream.absorb - stream.absorbed
        if room <= 0:
            break
        if turn <= 0:
            return False
        turn -= _READ_CHUNK
        try:
            chunk = os.read(fd, _READ_CHUNK if room > _READ_CHUNK else room)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            break
        if not chunk:
            stream.eof = True
            break
        stream.absorbed += len(chunk)
        missing = stream.keep - len(kept)
        if missing > 0:
            piece = chunk[:missing]
            if isinstance(kept, bytearray) and len(kept) + len(piece) > _OFF_HEAP_FROM:
                kept = stream.kept = _OffHeap(stream.keep, kept)
            if isinstance(kept, bytearray):
                kept += piece
            else:
                kept.append(piece)
    # EOF or budget used up: stop reading (the fd stays open, so a writer blocks).
    stream.reading = False
    if _State.handlers.pop(fd, None) is not None:
        _State.epoll.unregister(fd)
    return True


def _kill_group(pid: int) -> None:
    """SIGKILL a child's process group (and the child itself, in case setsid did not run)."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _sweep_uid(uid: int) -> None:
    """SIGKILL every process of an exclusive sandbox uid (also those that left the group).

    kill(-1) hits all processes we may signal; with real and effective uid set to ``uid``
    (saved uid 0 so we can come back, effective capabilities dropped by the switch) that is
    exactly the processes of ``uid``.
    """
    try:
        os.setresuid(uid, uid, 0)
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
    finally:
        try:
            os.setresuid(0, 0, 0)
        except OSError:
            os._exit(70)  # cannot regain root: let the executor start a fresh zygote


def _done_early(child: _Child, now: float) -> None:
    """A stream of a fast-path child reached its end: if both have and its done page holds its exit status, the
    program is over. Report it now, as its exit would be (group killed, uid swept), and reap it when it is gone.

    A program that closed its streams itself, or left a process that holds one, has written no status yet, or
    leaves a stream open: its exit is waited for, as for any other child.
    """
    out, err, page = child.out, child.err, child.done
    assert out is not None and err is not None and page is not None
    if out.reading or err.reading or child.rc is not None or child.killed:
        return
    magic, status = _DONE.unpack_from(page, 0)
    if magic != _DONE_MAGIC:
        return
    child.rc = status
    child.exited_at = now
    child.reported = True
    _close_stdin(child)
    _complete(child)
    # The report goes out first: the kills below end what the program left, which must happen before this uid runs
    # again, and it cannot: the executor's next request is read after them, in a later turn of this loop.
    _flush()
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)
    if child.uid is not None:
        _sweep_uid(child.uid)


def _hold_for_eof(child: _Child) -> bool:
    """A ``drain`` child exited with its output pipes still open (a background process it left holds them): leave
    it unreaped, its pidfd out of the poll, until they close (:func:`_stream_ended`) or it is killed (:func:`_kill`).
    True when held. Only with a pidfd: the SIGCHLD fallback's wait for any child would find the zombie again and
    again, so there it ends at its exit as any other."""
    assert child.out is not None and child.err is not None
    if not child.drain or child.draining or child.reported or child.killed or child.pidfd < 0:
        return False
    if _read_stream(child.out) & _read_stream(child.err):
        return False  # closed already: it ends now
    child.draining = True
    if _State.handlers.pop(child.pidfd, None) is not None:
        _State.epoll.unregister(child.pidfd)  # a zombie's pidfd stays readable
    return True


def _stream_ended(child: _Child, now: float) -> None:
    """One of the child's streams is done with: a held ``drain`` child whose pipes have both closed ends now (its
    group and uid killed, it reaped and reported), a fast-path child may be over (:func:`_done_early`)."""
    if child.draining:
        assert child.out is not None and child.err is not None
        if not child.out.reading and not child.err.reading:
            child.draining = False
            _on_exit(child, now)
    elif child.done is not None:
        _done_early(child, now)


def _on_exit(child: _Child, now: float) -> None:
    """The child ended: kill its group while the zombie still pins the pgid, reap it (and report it, unless
    _done_early did). A ``drain`` child whose pipes are still held waits for them (see _hold_for_eof)."""
    if child.drain:  # (Sandbox Fusion's runs never drain: their path stays as it was)
        if _hold_for_eof(child):
            return
        child.draining = False
    pid = child.pid
    reported = child.reported
    if not reported:
        child.exited_at = now
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        if child.uid is not None:
            _sweep_uid(child.uid)
    try:
        _, status = os.waitpid(pid, 0)
        rc = _exit_status(status)
    except ChildProcessError:
        rc = -signal.SIGKILL
    if not reported:
        child.rc = rc
    if child.learning is not None and child.done is not None:
        _take_lesson(child.learning, child.done)
        child.done.close()
        child.done = None
    del _State.children[pid]
    if child.hold_w >= 0:  # it died held (killed before its go)
        os.close(child.hold_w)
        child.hold_w = -1
    if child.pidfd >= 0:
        if _State.handlers.pop(child.pidfd, None) is not None:  # a held drain child's is out of the poll already
            _State.epoll.unregister(child.pidfd)
        os.close(child.pidfd)
        child.pidfd = -1
    if reported:
        return
    _close_stdin(child)
    assert child.out is not None and child.err is not None
    done = _read_stream(child.out) & _read_stream(child.err)
    if done or child.killed:
        _complete(child)
    else:
        # An escaped grandchild may hold a pipe open: wait a little for EOF.
        child.deadline = now + _EOF_GRACE
        _State.lingering.append(child)


def _drain_status() -> None:
    data = b""
    while True:
        try:
            chunk = os.read(_State.status_r, 65536)
        except (BlockingIOError, InterruptedError):
            break
        if not chunk:
            break
        data += chunk
    pos = 0
    while pos + _STATUS_HDR.size <= len(data):
        pid, size = _STATUS_HDR.unpack_from(data, pos)
        pos += _STATUS_HDR.size
        _State.failures[pid] = data[pos : pos + size].decode("utf-8", "replace")
        pos += size


def _complete(child: _Child) -> None:
    """Report the exit with the captured output (and fetched files); forget the child (at the end of the turn)."""
    _HELD[3].append(child)
    _State.by_id.pop(child.req_id, None)
    if child.done is not None and child.learning is None:
        child.done.close()
        child.done = None
    blobs: list[bytes | memoryview] = []
    for stream in (child.out, child.err):
        assert stream is not None
        _read_stream(stream)
        if _State.handlers.pop(stream.fd, None) is not None:
            _State.epoll.unregister(stream.fd)
        os.close(stream.fd)
        kept = stream.kept
        blobs.append(bytes(kept) if isinstance(kept, bytearray) else kept.view())
    _drain_status()
    failure = _State.failures.pop(child.pid, None)
    workdir = child.workdir
    fetched: dict[str, int] = {}
    removed = False
    if workdir is not None:
        path = workdir["path"]
        room = _FETCH_LIMIT
        for rel in workdir["fetch"]:
            if rel in fetched:
                continue  # a name asked for twice is sent once
            data = _read_file(path, rel, room)
            if data is not None:
                room -= len(data)
                fetched[rel] = len(blobs)
                blobs.append(data)
        removed = _remove_workdir(path, workdir["files"])
    if failure is None and not fetched and not child.killed:
        out, err = blobs
        flags = (1 if removed else 0) | (2 if child.reported else 0)
        body = _EXITED_BODY.pack(child.req_id, child.rc or 0, child.exited_at, flags, len(out), len(err))
        outbuf = _State.outbuf
        outbuf += _HDR.pack(len(body) + len(out) + len(err), _EXITED)
        outbuf += body
        outbuf += out  # each part once: no joined copy of an output that may be tens of MiB
        outbuf += err
        return
    msg: dict[str, Any] = {"op": "exited", "id": child.req_id, "rc": child.rc, "at": child.exited_at}
    if child.killed:
        msg["killed"] = True
    if failure is not None:
        msg["fail"] = failure
    if workdir is not None:
        msg["files"] = fetched
        msg["removed"] = removed
    _send(msg, blobs)


def _resolve(real: str, rel: str) -> str | None:
    """Workdir._resolve: a path inside the dir, None for anything that would escape it."""
    if not rel or os.path.isabs(rel) or "\0" in rel:
        return None
    target = os.path.realpath(os.path.join(real, rel))
    if target == real or not target.startswith(real + os.sep):
        return None
    return target


#: The most bytes of fetched files one run sends back: a frame's length is 32 bits, and the executor holds them all.
_FETCH_LIMIT = 1 << 30


def _read_file(path: str, rel: str, room: int = _FETCH_LIMIT) -> bytes | None:
    """Workdir.read_file: contents of a regular file inside the dir, None otherwise.

    The program may have put a link in the dir's place, or a link for any directory inside it (before it ended, or
    from a process it left, while we read): the dir's own name is never followed (its parent, the temp root, is
    not the program's), and the file is opened one component at a time, none of them a link."""
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    try:
        target = _resolve(real, rel)
    except (OSError, ValueError):
        return None
    if target is None:
        return None
    fd = _open_beneath(real, os.path.relpath(target, real))
    if fd < 0:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > room:
            return None  # past what is left of the run's room: left out, as a file that is not there
        chunks: list[bytes] = []
        size = 0
        while size <= room:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        return None  # it grew past the room while we read (a process the program left writes on)
    except OSError:
        return None
    finally:
        os.close(fd)


def _open_beneath(root: str, rel: str) -> int:
    """``root/rel`` opened for reading, no component (``root``'s own name included) a link; -1 otherwise."""
    try:
        fd = os.open(root, _DIR_NOFOLLOW)
    except OSError:
        return -1
    parts = rel.split(os.sep)
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        flags = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC) if last else _DIR_NOFOLLOW
        try:
            inner = os.open(part, flags, dir_fd=fd)
        except (OSError, ValueError):
            inner = -1
        os.close(fd)
        if inner < 0:
            return -1
        fd = inner
    return fd


def _remove_workdir(path: str, created: list[str]) -> bool:
    """Remove the work dir: what we created first (usually all there is), else a full walk. Names are removed
    through the dir's descriptor, opened without following a link: a program that put a link in the dir's place
    gets its link removed, never what it leads to."""
    try:
        fd = os.open(path, _DIR_NOFOLLOW)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            prefix = path + os.sep
            for target in created:
                name = target[len(prefix) :] if target.startswith(prefix) else ""
                if not name or os.sep in name:
                    break  # a file in a subdirectory: the walk below
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    break
        finally:
            os.close(fd)
    try:
        os.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        pass
    return _rmtree(path)


def _newest_change(path: str, limit: int = 10000) -> float:
    """The latest mtime in a tree (links not followed); infinity past ``limit`` entries (kept, then)."""
    newest = 0.0
    stack = [path]
    seen = 0
    while stack:
        current = stack.pop()
        try:
            info = os.lstat(current)
        except OSError:
            continue
        newest = max(newest, info.st_mtime)
        seen += 1
        if seen > limit:
            return float("inf")
        if stat.S_ISDIR(info.st_mode):
            with contextlib.suppress(OSError), os.scandir(current) as listing:
                stack.extend(entry.path for entry in listing)
    return newest


def _sweep_private_tmp(root: str, keep: set[str], cutoff: float) -> int:
    """Remove what programs left at the top of the private temp root that nothing changed since ``cutoff`` (wall
    clock), but for ``keep`` (the live work dirs' names). It is memory: without this, files that programs leave
    outside their work dirs would pile up for as long as the warm interpreter lives. Returns how many went."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        if entry.name in keep or _newest_change(entry.path) >= cutoff:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                removed += _rmtree(entry.path)
            else:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            pass
    return removed


def _sweep(req: dict[str, Any]) -> None:
    """Sweep the private temp root for the executor, which sends this now and then to one of its warm interpreters
    (all share the root): ``keep`` names the live work dirs of them all, ``age`` is the age a leftover goes at."""
    if _State.host_ns < 0:
        return
    keep = {os.path.basename(c.workdir["path"]) for c in _State.by_id.values() if c.workdir is not None}
    keep.update(req.get("keep") or ())
    for name in req.get("drop") or ():  # the work dirs of a warm interpreter that died, whatever their age
        if name not in keep and os.sep not in name and name not in (".", ".."):
            with contextlib.suppress(OSError):
                _rmtree(os.path.join(_State.sweep_root, name))
    _sweep_private_tmp(_State.sweep_root, keep, time.time() - float(req["age"]))


#: A directory opened without following a link (``O_NOFOLLOW`` fails on a link, ``O_DIRECTORY`` on anything else).
_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _rmtree(root: str) -> bool:
    """Remove a tree, fixing permissions on the way, never following a link, at any depth.

    A program can put a link in the place of the tree or of any directory in it (before it ends, or from a
    process that outlives it), and can nest directories past ``PATH_MAX``. So nothing here goes by a path: each
    directory is opened by one name without following a link and made the working directory (the zygote is
    single-threaded; its own is restored), and entries are removed by name. A link is removed, never followed."""
    parent, name = os.path.split(root.rstrip(os.sep))
    try:
        parent_fd = os.open(parent or os.sep, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return not os.path.lexists(root)
    try:
        fd = _open_dir_at(name, parent_fd)
        if fd < 0:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=parent_fd)  # a file, or the link a program left in the tree's place
        else:
            _clear_tree(fd)
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
    return not os.path.lexists(root)


def _open_dir_at(name: str, dir_fd: int | None) -> int:
    """The directory ``name`` (in ``dir_fd``, or the working directory) opened without following a link, made
    searchable first where a program took that away; -1 when it is no directory or cannot be opened."""
    try:
        return os.open(name, _DIR_NOFOLLOW, dir_fd=dir_fd)
    except PermissionError:
        pass
    except OSError:
        return -1
    try:
        handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return -1
    try:
        if not stat.S_ISDIR(os.fstat(handle).st_mode):
            return -1
        # Through the handle: the directory it holds, whatever now stands at its name.
        held = f"/proc/self/fd/{handle}"
        os.chmod(held, 0o700)
        return os.open(held, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return -1
    finally:
        os.close(handle)


def _clear_tree(fd: int) -> None:
    """Empty the directory ``fd`` (taken over and closed): each level entered in turn, its entries removed by name."""
    try:
        back = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # no working directory to come back to: leave the tree (the sweep gets another go)
        os.close(fd)
        return
    try:
        os.fchdir(fd)
        os.close(fd)
        frames: list[tuple[str, list[str]]] = [("", _clear_here())]  # (name in the parent, subdirs still to remove)
        while frames:
            name, subdirs = frames[-1]
            if subdirs:
                sub = subdirs.pop()
                child = _open_dir_at(sub, None)
                if child < 0:
                    _retry_fixed(os.unlink, sub)  # no longer a directory (a link put in its place): the name goes
                    continue
                os.fchdir(child)
                os.close(child)
                frames.append((sub, _clear_here()))
                continue
            frames.pop()
            if frames:
                os.chdir("..")
                _retry_fixed(os.rmdir, name)
    except OSError:
        pass
    finally:
        os.fchdir(back)
        os.close(back)


def _clear_here() -> list[str]:
    """Unlink every non-directory of the working directory; the names of its subdirectories."""
    try:
        entries = list(os.scandir("."))
    except PermissionError:
        with contextlib.suppress(OSError):
            os.chmod(".", 0o700)
        entries = list(os.scandir("."))
    subdirs = []
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            subdirs.append(entry.name)
        else:
            _retry_fixed(os.unlink, entry.name)
    return subdirs


def _retry_fixed(remove: Any, name: str) -> None:
    """``remove(name)``; on EACCES (a program made the working directory read-only), once more after fixing that."""
    try:
        remove(name)
    except PermissionError:
        with contextlib.suppress(OSError):
            os.chmod(".", 0o700)
            remove(name)
    except OSError:
        pass


def _go(req_id: int) -> None:
    """Start a held child's program: one byte down its start pipe, which we then close."""
    child = _State.by_id.get(req_id)
    if child is None or child.hold_w < 0:
        return
    with contextlib.suppress(OSError):
        os.write(child.hold_w, b"g")
    os.close(child.hold_w)
    child.hold_w = -1


def _kill(req_id: int) -> None:
    child = _State.by_id.get(req_id)
    if child is None:
        return
    child.killed = True
    if child.pid not in _State.children:  # exited, waiting for EOF: answer now
        if child in _State.lingering:
            _State.lingering.remove(child)
            _complete(child)
        return
    _kill_group(child.pid)
    if child.uid is not None:
        _sweep_uid(child.uid)
    if child.draining:  # exited already, its pidfd out of the poll: nothing else ends it
        _on_exit(child, time.monotonic())


def _shutdown() -> NoReturn:
    """Kill every child group and exit (executor closed or gone)."""
    for pid in list(_State.children):
        _kill_group(pid)
    for pid in list(_State.children):
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    for child in list(_State.by_id.values()):
        if child.workdir is not None:
            _rmtree(child.workdir["path"])
    for _req, prepared in _HELD[1] or ():  # spawns of this batch not forked (their dirs are made)
        if prepared is not None and prepared.pid < 0 and prepared.plan.workdir is not None:
            _rmtree(prepared.plan.workdir[0])
    os._exit(0)


def _read_batch() -> list[tuple[dict[str, Any], _Prepared | None]]:
    """Read every complete request from the socket: (request, its prepared spawn or None), in order.

    A function of its own so that its temporaries (offsets and sizes, which are ints of their own above 256, the last
    request's blobs) die here, before any fork: left in :func:`_handle_socket`'s frame, each child would free them
    on its way up the stack, and copy the pages that writes.
    """
    inbuf = _State.inbuf
    while True:
        try:
            data = os.read(_State.sock, 1 << 20)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            _shutdown()
        if not data:
            _shutdown()
        inbuf += data
        if len(data) < (1 << 20):
            break
    batch: list[tuple[dict[str, Any], _Prepared | None]] = []
    pos = 0
    size = len(inbuf)
    while size - pos >= _HDR.size:
        body_len, head_len = _HDR.unpack_from(inbuf, pos)
        end = pos + _HDR.size + body_len
        if end > size:
            break
        start = pos + _HDR.size
        req = json.loads(bytes(inbuf[start : start + head_len]))
        blobs: list[bytes] = []
        offset = start + head_len
        for length in req.get("b", ()):
            blobs.append(bytes(inbuf[offset : offset + length]))
            offset += length
        pos = end
        batch.append((req, _prepare(req, blobs) if req.get("op") == "spawn" else None))
    del inbuf[:pos]
    return batch


def _handle_socket() -> _Job | None:
    """Read and process every complete request; returns a job only inside a fast-path child.

    The batch is parsed before the first fork and the children are registered after the last one, so that the work
    between two forks (each of which makes the zygote's pages shared again) stays small. What this frame holds when
    a child returns through it is held elsewhere too (``_HELD``), so that the return frees nothing.
    """
    batch = _read_batch()
    if _WANTED:
        _import_wanted()
    spawns = [one for _req, one in batch if one is not None]
    if spawns and len(spawns) + len(_State.children) <= _DONE_LOAD:
        for one in spawns:
            if one.main is not None and one.main.job is not None:
                one.main.job.done = _done_page()
                one.main.job.light = True
    if spawns and _State.forks >= _LEARN_AT[0]:
        _sample(spawns)
    del spawns
    _HELD[1] = batch  # a child keeps it referenced: returning up the stack then frees nothing
    run: list[_Prepared] = []  # consecutive spawns, forked together
    _HELD[4] = run
    for req, prepared in batch:
        if prepared is not None:
            run.append(prepared)
            continue
        if run:
            job = _fork_run(run)
            if job is not None:
                return job  # in the child
            run = []
            _HELD[4] = run
            _register_forked()  # a kill may name a child of this very batch
        op = req.get("op")
        if op == "go":
            _go(req["id"])
        elif op == "kill":
            _kill(req["id"])
        elif op == "sweep":
            _sweep(req)
        elif op == "shutdown":
            _shutdown()
    if run:
        job = _fork_run(run)
        if job is not None:
            return job
    _register_forked()
    sys.modules["__main__"] = _SELF_MODULE
    _HELD[1] = _HELD[4] = None
    return None


def _reap_all(now: float) -> None:
    """SIGCHLD fallback (no pidfd): find exited children without reaping them yet."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == 0:
            return
        child = _State.children.get(info.si_pid)
        if child is None:
            with contextlib.suppress(OSError):
                os.waitpid(info.si_pid, 0)
            continue
        _on_exit(child, now)


def _install_sigchld() -> None:
    if _State.wake_r >= 0:
        return
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    _State.wake_r = wake_r
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    signal.set_wakeup_fd(wake_w)
    _State.epoll.register(wake_r, select.EPOLLIN)
    _State.handlers[wake_r] = (_K_WAKE, None)


def _default_signals() -> None:
    """Every signal at its default, as the real server's programs find them, whatever the emulator's process
    inherited (a background job of a shell starts with SIGINT and SIGQUIT ignored, ``nohup`` ignores SIGHUP): an
    ignored signal stays ignored through fork and exec. SIGPIPE and SIGXFSZ stay as Python sets them for itself (a
    faithful run restores them before its exec), and SIGINT raises KeyboardInterrupt, as in a fresh interpreter.

    Kept the same as ``emulator/daytona/interp_driver.py``'s (a test compares them): both scripts run alone under the
    runtime Python and import nothing of ours.
    """
    kept = {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ}
    for number in signal.valid_signals():
        if number in kept:
            continue
        try:
            if signal.getsignal(number) == signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    if signal.getsignal(signal.SIGINT) == signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _serve_setup(sock_fd: int) -> None:
    """Set up the serving loop (whose turns ``_serve_once`` takes) and tell the executor we are ready."""
    _default_signals()
    _State.sock = sock_fd
    _ZYGOTE_PID[0] = os.getpid()
    _THREAD_STACK[0] = _THREAD_STACK[1] = _default_thread_stack()
    os.set_blocking(sock_fd, False)
    epoll = select.epoll()
    _State.epoll = epoll
    epoll.register(sock_fd, select.EPOLLIN)
    handlers = _State.handlers
    handlers[sock_fd] = (_K_SOCK, None)
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(status_r, False)
    _State.status_r, _State.status_w = status_r, status_w
    _State.use_pidfd = hasattr(os, "pidfd_open")
    if _State.use_pidfd:
        try:
            os.close(os.pidfd_open(os.getpid()))
        except OSError:
            _State.use_pidfd = False
    if not _State.use_pidfd:
        _install_sigchld()
    _send(
        {
            "op": "ready",
            "pid": os.getpid(),
            "version": list(sys.version_info[:3]),
            "executable": sys.executable,
            "private_tmp": _State.private_tmp_error or True,
            "private_tmp_never": _State.private_tmp_never,
            "mnt_ns": _mnt_ns() if _State.host_ns >= 0 else 0,
        }
    )
    _flush()


def _mnt_ns() -> int:
    """The inode of our mount namespace (0: unknown)."""
    try:
        return os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return 0


def _poll() -> list[tuple[int, int]]:
    """Wait for events (until the next lingering child's deadline, if any); held in _HELD[0]."""
    lingering = _State.lingering
    timeout = -1.0
    if lingering:
        timeout = max(min(c.deadline for c in lingering) - time.monotonic(), 0.0)
    events: list[tuple[int, int]]
    try:
        events = _State.epoll.poll(timeout)
    except InterruptedError:
        events = []
    _HELD[0] = events
    return events


def _dispatch(events: list[tuple[int, int]]) -> int:
    """Handle the children's events (output, exits, stdin) and lingering children; the socket's events, for last."""
    lingering = _State.lingering
    now = time.monotonic()
    handlers = _State.handlers
    sock_events = 0
    for fd, _ev in events:
        entry = handlers.get(fd)
        if entry is None:
            continue
        kind, child = entry
        if kind == _K_SOCK:
            sock_events = _ev  # after the others (see below)
        elif kind == _K_OUT:
            if _read_stream(child.out) and (child.done is not None or child.draining):
                _stream_ended(child, now)
        elif kind == _K_ERR:
            if _read_stream(child.err) and (child.done is not None or child.draining):
                _stream_ended(child, now)
        elif kind == _K_PIDFD:
            _on_exit(child, now)
        elif kind == _K_STDIN:
            _feed_stdin(child)
        else:
            try:
                while os.read(fd, 4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            _reap_all(now)
    if lingering:
        now = time.monotonic()
        for child in list(lingering):
            assert child.out is not None and child.err is not None
            if (not child.out.reading and not child.err.reading) or child.deadline <= now:
                lingering.remove(child)
                _complete(child)
    return sock_events


def _serve_once() -> _Job | None:
    """One turn of the serving loop: a job only inside a forked fast-path child.

    ``zygote_boot`` runs the loop at its top level, so a child returns from this turn straight to where it runs the
    program: the fewer frames it unwinds, the fewer objects it releases, and the fewer pages it copies. So the poll
    and the children's events are handled in functions of their own: their temporaries (the times, floats of their
    own) die before any fork, and this frame holds nothing a child would free.
    """
    sock_events = _dispatch(_poll())
    # The results go out before the requests that came with them are forked: forking a batch takes a while (tens of
    # ms at concurrency 128, the children competing for the cores), and a result held back that long holds back the
    # server, its client and so the next requests: the two sides would take turns, leaving a core idle.
    if _State.outbuf:
        _flush()
    if sock_events:
        if sock_events & select.EPOLLOUT:
            _flush()
        if sock_events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            job = _handle_socket()
            if job is not None:
                return job
            if _State.outbuf:
                _flush()
    _HELD[3].clear()
    return None


# --- fast-path finalisation (what Py_RunMain + Py_FinalizeEx do) --------------------------


def _exit_code_of(exc: SystemExit) -> int:
    """Exit status for SystemExit, as CPython's handle_system_exit computes it."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        if -(1 << 63) <= code < (1 << 63):
            return code & 0xFF
        return 0xFF
    try:
        stream = sys.stderr
        if stream is not None:
            stream.write(str(code))
            stream.write("\n")
    except BaseException:
        pass
    return 1


def _print_exception(exc: BaseException) -> None:
    """Display an uncaught exception via sys.excepthook without the zygote's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _SELF_FILES:
        tb = tb.tb_next
    exc.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    hook = getattr(sys, "excepthook", None)
    if hook is None:
        if sys.__stderr__ is not None:
            sys.__stderr__.write("sys.excepthook is missing\n")
        return
    try:
        hook(type(exc), exc, tb)
    except BaseException as hook_exc:
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(hook_exc), hook_exc, hook_exc.__traceback__)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(exc), exc, tb)


def _flush_std() -> bool:
    """Flush stdout/stderr like flush_std_files(); False when stdout could not be flushed."""
    ok = True
    for stream, is_stdout in ((sys.stdout, True), (sys.stderr, False)):
        if stream is None:
            continue
        try:
            if not stream.closed:
                stream.flush()
        except BaseException as exc:
            if is_stdout:
                ok = False
                try:
                    import traceback

                    err = sys.stderr
                    if err is not None:
                        err.write(f"Exception ignored in: {stream!r}\n")
                        err.write("".join(traceback.format_exception_only(type(exc), exc)))
                except BaseException:
                    pass
    return ok


def _clear_namespace(namespace: dict[str, Any]) -> None:
    """Clear __main__'s globals as module finalisation does (so __del__/file flushes run)."""
    for name in list(namespace):
        if name.startswith("_") and not name.startswith("__"):
            namespace[name] = None
    for name in list(namespace):
        if name != "__builtins__":
            namespace[name] = None


def _finish(exc: BaseException | None, job: _Job) -> NoReturn:
    """Exit the fast-path child exactly as a fresh interpreter would end."""
    code = 0
    sigint = False
    if exc is not None:
        if isinstance(exc, SystemExit):
            code = _exit_code_of(exc)
        else:
            _print_exception(exc)
            code = 1
            sigint = isinstance(exc, KeyboardInterrupt)
        exc = None
    # try/except rather than contextlib.suppress: each object touched here is a page the child copies.
    threading = sys.modules.get("threading")
    if threading is not None:
        try:  # noqa: SIM105
            threading._shutdown()
        except BaseException:
            pass
    try:  # noqa: SIM105
        atexit._run_exitfuncs()
    except BaseException:
        pass
    if not _flush_std():
        code = 120
    try:
        _clear_namespace(job.namespace)
        if gc.get_count()[1:] == job.gc_counts:
            # No collection ran since the fork: every object of ours is in the youngest
            # generation (the zygote's were frozen), so collecting it is collecting all.
            gc.collect(0)
        else:
            gc.collect()
    except BaseException:
        pass
    if not _flush_std():
        code = 120
    if sigint:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    done = job.done
    if done is not None and job.learn is not None:
        if os.getpid() == _LEARNER[0]:  # not a process the program forked, which ends here too
            _learn(job.learn, done)  # no early report: the exit reports this run, the zygote reads the page then
    elif done is not None:
        # Done: tell the zygote (see _done_early), which learns of an exit only after the teardown.
        _DONE.pack_into(done, 0, _DONE_MAGIC, code & 0xFF)
        os.closerange(0, 3)
        # On our core the zygote would otherwise wait behind our teardown: it was woken "sync", as if we would
        # sleep now (0.4 ms at concurrency 1).
        os.sched_yield()
    os._exit(code)


def _import_for_programs(names: list[str]) -> None:
    """Import ``names`` (for the children to find imported), with ``random``'s after-fork reseed swapped for a cheaper
    call of the same C seeding.

    ``random`` registers ``_inst.seed`` to run in every forked child. That Python-level method touches about 30 pages
    that each child then copies (about 0.1 ms); a fast-path child calls the C ``seed`` itself instead (``_RESEED``, in
    ``_child``), which is what the method does for a seed of None (``gauss_next`` is None here already). A child that
    execs does not reseed at all. (``random`` comes in by a name of its own or through another, ``statistics``.)
    """
    real = os.register_at_fork
    held: list[dict[str, Any]] = []
    os.register_at_fork = lambda **hooks: held.append(hooks)
    try:
        for name in names:
            with contextlib.suppress(Exception):  # not there, or failing: the child's own import will say so
                __import__(name)
    finally:
        os.register_at_fork = real
    inst: Any = getattr(sys.modules.get("random"), "_inst", None)
    for hooks in held:
        if inst is not None and hooks == {"after_in_child": inst.seed} and inst.gauss_next is None:
            c_seed: Any = type(inst).__mro__[1]  # _random.Random, whose seed() the Python method calls
            _RESEED.append((c_seed.seed, inst))
        else:
            real(**hooks)


def _note_imports(code: types.CodeType, own: frozenset[str] = frozenset()) -> None:
    """Add to _WANTED the modules of _PENDING that an import statement of ``code``, or of a function or class in it,
    names (``import a.b`` names ``a.b``, so ``a`` too; ``from a import b`` names ``a``), less the program's ``own``.

    Read from the bytecode's ``IMPORT_NAME`` instructions (two bytes each, any ``EXTENDED_ARG`` before): the names
    alone would count attributes too (``d.copy()``, ``np.random``)."""
    if not _IMPORT_NAME:
        _IMPORT_NAME.extend(_import_opcodes())
    op, extended_arg = _IMPORT_NAME
    if op is None:
        return
    stack = [code]
    while stack:
        one = stack.pop()
        raw = one.co_code
        names = one.co_names
        at = raw.find(op)
        while at >= 0:
            if not at & 1:
                arg = raw[at + 1]
                shift = 8
                back = at - 2
                while back >= 0 and raw[back] == extended_arg:
                    arg |= raw[back + 1] << shift
                    shift += 8
                    back -= 2
                if arg < len(names):
                    name = names[arg]
                    top = name.partition(".")[0]
                    for candidate in (name, top):
                        if candidate in _PENDING and top not in own:
                            _WANTED.add(candidate)
            at = raw.find(op, at + 1)
        stack.extend(const for const in one.co_consts if type(const) is types.CodeType)


def _import_opcodes() -> tuple[bytes | None, int]:
    """This interpreter's ``IMPORT_NAME`` opcode (as a byte to find; None: unknown, nothing is noted) and
    ``EXTENDED_ARG``."""
    import opcode

    number = opcode.opmap.get("IMPORT_NAME")
    return (None if number is None else bytes([number])), opcode.EXTENDED_ARG


#: [IMPORT_NAME as a byte, EXTENDED_ARG], found at the first program's import (the opcode module, which we hold
#: from then on, is not imported before a program needs it).
_IMPORT_NAME: list[Any] = []


def _own_modules(req: dict[str, Any], files: list[tuple[str, bytes, bool]]) -> frozenset[str]:
    """The top-level modules that a request's files make importable from its program's directory (``x.py``,
    ``x.pyc``, an extension ``x.*.so``, a package ``x/__init__.py``), less those a fresh interpreter holds anyway
    (and the built-in ones, found before any file).

    The files' paths are real ones (the work dir's path resolved): so is the directory they are compared with."""
    fresh = _FRESH_MODULES
    if fresh is None:
        return frozenset()
    import importlib.machinery

    workdir = req["dir"]
    on_stdin = req.get("program_on_stdin")
    home = req["cwd"] if on_stdin else req.get("script_dir") or os.path.dirname(req["script"])
    if home == workdir["path"]:
        home = workdir.get("real") or home
    suffixes = importlib.machinery.all_suffixes()
    inits = {"__init__" + suffix for suffix in suffixes}
    names: set[str] = set()
    for target, _data, _exclusive in files:
        parent, _, base = target.rpartition("/")
        if parent == home:
            for suffix in suffixes:
                if base.endswith(suffix) and len(base) > len(suffix):
                    names.add(base[: -len(suffix)])
                    break
        elif base in inits:
            above, _, package = parent.rpartition("/")
            if above == home:
                names.add(package)
    return frozenset(
        name for name in names if name not in fresh and name not in sys.builtin_module_names and "." not in name
    )


def _unshadow(names: tuple[str, ...]) -> None:
    """In the child: forget the modules we hold under the names of the program's own (a ``random.py`` beside it is
    what its ``import random`` finds, as in a fresh interpreter). Modules of ours that imported ours keep theirs."""
    modules = sys.modules
    for name in names:
        if name in modules:
            prefix = name + "."
            for key in [key for key in modules if key == name or key.startswith(prefix)]:
                del modules[key]


def _import_wanted() -> None:
    """Import the modules programs named (see _note_imports), before the forks of the batch that named them.

    In our own state, not the last child's: its ``sys.path`` starts with its script's directory (a program's own
    ``random.py`` would be imported here, for every later child) and its environment is the program's (``hashlib``
    loads OpenSSL, which reads ``OPENSSL_CONF``)."""
    names = sorted(_WANTED)
    _WANTED.clear()
    sys.path = list(_BASE_PATH)
    own = _OWN_ENVIRON[0]
    if own is not None:
        _ENVIRON.value = own.address
        _CURRENT_ENVIRON[0] = own
        if _SWAP_OS_ENVIRON:
            os.environ._data = own.data  # type: ignore[attr-defined]
    _import_for_programs(names)
    # A module that is not there (or failed) is not tried again; a module imported along is not wanted any more.
    _PENDING.difference_update([name for name in _PENDING if name in sys.modules or name in names])
    gc.collect()  # the import's cycles, before the next fork run's freeze keeps them for good
    # The pages a run writes have moved: sample the next batch again.
    _LESSONS[0] = None
    _LEARN_AT[0] = _State.forks


#: What a fresh ``python <script>`` holds imported before its first line (site's imports), set by zygote_boot: a
#: program's own module of one of these names is not what its import finds in a fresh interpreter either. Unknown
#: (None): no program's module is preferred to ours.
_FRESH_MODULES: frozenset[str] | None = None
#: The modules of _PREIMPORT not imported yet, and those of them that programs parsed since our last fork named.
_PENDING: set[str] = set()
_WANTED: set[str] = set()
#: Our own environment (see _import_wanted), kept from start-up.
_OWN_ENVIRON: list[_Environ | None] = [None]

#: (C seed function, random's shared instance): a fast-path child reseeds it from the OS, as a fresh import would.
_RESEED: list[tuple[Any, Any]] = []

# --- pages a run writes, copied during a wait for its start ------------------------------
#
# A child shares every page with the zygote; each page it writes costs it a copy-on-write fault (2-4 us on a VM, on
# cold caches), and a short program's run writes about a hundred (refcounts of the interpreter's static objects, of
# builtins and modules, the output's buffers...). A child that waits for its start (an injected latency) copies them
# before its program starts, in some hundred madvise(MADV_POPULATE_WRITE) calls, and so starts and ends sooner: about
# 0.15 ms at concurrency 1. Only while the zygote is lightly loaded (as for done pages): the calls cost more CPU than
# the faults they spare (753 against 577 calls/s at concurrency 128 behind a 50 ms latency, when every child did it).
# Which pages: those that sampled runs wrote (from their page map), the stable ones (seen by the last two samples).
# Nothing a program can see: the same pages are copied, at another time.

#: (address, length) of the pages to copy before a wait, in ascending order.
_HOT: list[tuple[int, int]] = []
#: [the last sample's pages (page numbers), or None]; [the fork count at which the next child is sampled].
_LESSONS: list[Any] = [None]
_LEARN_AT = [1]
#: In a sampled child: its pid (the processes its program forks end through _finish too, and must not scan).
_LEARNER = [0]


def _writable_regions() -> list[tuple[int, int]]:
    """(first page number, page count) of the zygote's private writable mappings, at most _LEARN_BITS pages."""
    regions: list[tuple[int, int]] = []
    total = 0
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return regions
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or fields[1][1:2] != b"w" or fields[1][3:4] != b"p":
            continue
        if len(fields) > 5 and fields[5].startswith(b"[v"):  # [vvar], [vsyscall]: not ours to copy
            continue
        start, end = (int(x, 16) >> 12 for x in fields[0].split(b"-"))
        count = min(end - start, _LEARN_BITS - total)
        if count <= 0:
            break
        regions.append((start, count))
        total += count
    return regions


def _sample(spawns: list[_Prepared]) -> None:
    """Make the first fast-path spawn of this batch a sampled one (see _learn)."""
    for one in spawns:
        job = one.main.job if one.main is not None else None
        if job is None:
            continue
        page = job.done if job.done is not None else _done_page()
        regions = _writable_regions() if page is not None else []
        if page is None or not regions:
            return
        job.done = page
        job.learn = regions
        _LEARN_AT[0] = _State.forks + (_LEARN_EVERY if _LESSONS[0] is not None else 16)
        return


def _learn(regions: list[tuple[int, int]], page: mmap.mmap) -> None:
    """In a sampled child, at its end: mark in its done page the pages of ``regions`` it holds a copy of."""
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        bits = bytearray(_LEARN_BITS // 8)
        index = 0
        for start, count in regions:
            words = memoryview(os.pread(fd, count * 8, start * 8)).cast("Q")
            for offset, word in enumerate(words):
                if word & _PM_EXCLUSIVE and word & _PM_PRESENT:
                    bit = index + offset
                    bits[bit >> 3] |= 1 << (bit & 7)
            index += count
    except OSError:
        return
    finally:
        os.close(fd)
    page[16 : 16 + len(bits)] = bits
    _LEARN_HDR.pack_into(page, 8, _LEARN_MAGIC, index)


def _take_lesson(regions: list[tuple[int, int]], page: mmap.mmap) -> None:
    """At a sampled child's reap: its pages, and those it shares with the previous sample become the hot ones."""
    magic, count = _LEARN_HDR.unpack_from(page, 8)
    # The page is shared with the child, whose program can write it (it reaches our frames): trust nothing in it but
    # bits within the regions we sampled.
    if magic != _LEARN_MAGIC or count != sum(length for _start, length in regions) or 16 + (count + 7) // 8 > len(page):
        return
    bits = page[16 : 16 + (count + 7) // 8]
    pages: set[int] = set()
    index = 0
    for start, length in regions:
        for offset in range(length):
            bit = index + offset
            if bits[bit >> 3] >> (bit & 7) & 1:
                pages.add(start + offset)
        index += length
    previous = _LESSONS[0]
    _LESSONS[0] = pages
    stable = sorted(pages & previous if previous is not None else pages)
    ranges: list[tuple[int, int]] = []
    for number in stable:
        if ranges and ranges[-1][0] + ranges[-1][1] == number << 12:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + mmap.PAGESIZE)
        else:
            ranges.append((number << 12, mmap.PAGESIZE))
    _HOT[:] = ranges


def _prefault() -> None:
    """In a child about to wait for its start: copy the hot pages now (an error: that range is gone, or the kernel
    has no MADV_POPULATE_WRITE, which is older than Linux 5.14; the page is then copied when written, as ever)."""
    madvise = _child_madvise
    for address, length in _HOT:
        if madvise(address, length, _MADV_POPULATE_WRITE) != 0 and ctypes.get_errno() == errno.EINVAL:
            return


def _main(our_depth: int) -> None:
    """Start the zygote: calibrate, pre-import, freeze the heap and get ready to serve (see _serve_once)."""
    sock_fd = int(sys.argv[1])
    private_tmp = sys.argv[2] if len(sys.argv) > 2 else ""
    join = int(sys.argv[3]) if private_tmp and len(sys.argv) > 3 else -1
    for fd in (sock_fd, join):  # passed to us alone: not to the calibration's interpreter
        if fd >= 0:
            os.set_inheritable(fd, False)
    fresh = _fresh_depth()
    if fresh is not None and 0 < our_depth < fresh:
        _install_recursion_shim(fresh - our_depth)
    _State.private_tmp_error = "" if private_tmp else "not asked for"
    if private_tmp:
        _State.private_tmp_error = _private_tmp(private_tmp, join) or ""
        _State.sweep_root = private_tmp
    if os.geteuid() == 0:
        _drop_process_privileges()
    _OWN_ENVIRON[0] = _Environ(dict(os.environ))
    _PENDING.update(name for name in _PREIMPORT if name not in sys.modules)
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    _serve_setup(sock_fd)
