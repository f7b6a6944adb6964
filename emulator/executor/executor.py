"""The executor: runs a program for real, isolated, and answers like Sandbox Fusion's runner."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import fcntl
import logging
import math
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import start_gate
from .capture import ABSORB_BYTES, KEEP_BYTES
from .cores import warm_interpreters
from .holders import HOLDERS
from .model import ExecutionRequest, ExecutionResult, ExecutorConfig
from .sweep import sweep_uid_async
from .trees import chown_tree
from .workdir import DeferredWorkdir, Workdir, planned_fetch
from .zygote import Pending, Zygote, ZygoteLost

_log = logging.getLogger(__name__)


def _program_on_stdin(request: ExecutionRequest) -> bool:
    """``python -`` or ``python -u -``: the interpreter reads its program from stdin (and takes no other argument)."""
    argv = request.argv
    return request.stdin is not None and len(argv) in (2, 3) and argv[-1] == "-" and list(argv[1:-1]) in ([], ["-u"])


_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DEFAULT_UID_BASE = 200000
_DEFAULT_GID = 65534
#: A timeout beyond this (an infinite one included) is this: longer than any run, and a number every timer and
#: rlimit can hold. The real server's ``asyncio.wait_for`` lets such a program run to its end.
_LONGEST_TIMEOUT_S = 10_000_000.0
# How long we wait for the zygote to confirm a kill before answering anyway.
_KILL_GRACE = 5.0
# Below this memory limit a fresh interpreter behaves differently from a forked warm one
# (it may not even start), so such requests take the faithful path.
_FAST_MIN_MEMORY_MB = 96
#: The machine's cores, read once: os.cpu_count() reads /sys at every call, and every run asks (see _limits).
_CORES = os.cpu_count() or 1
# Seconds a zygote that failed to start gets no runs while another runs: the first wait, and the longest.
_START_BACKOFF_FIRST = 1.0
_START_BACKOFF_MOST = 30.0
# Env variables read by the interpreter at startup: their presence forces the faithful path.
_STARTUP_ENV_PREFIXES = ("PYTHON", "LC_", "LANG")
_PREEXEC_MESSAGE = "Exception occurred in preexec_fn."
# Executors (in this process or others on the host) each take their own block of sandbox uids:
# a uid sweep of one must never hit the programs of another.  The automatic base tries up to
# this many consecutive blocks, each held by an flock on a file in _LOCK_DIRS.
_UID_BLOCKS = 64
_LOCK_DIRS = ("/run/sandbox-emulator", os.path.join(tempfile.gettempdir(), "sandbox-emulator-locks"))
_claimed_uid_blocks: set[int] = set()


def _uids_in_use(uids: range) -> set[int]:
    """The uids of ``uids`` that a process holds as its real, effective, saved or file-system uid; all of them when
    /proc cannot be read (then each is swept before its first run)."""
    held: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set(uids)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as f:
                status = f.read()
        except OSError:  # gone meanwhile
            continue
        start = status.find(b"\nUid:")
        if start < 0:
            continue
        for field in status[start + 5 : status.find(b"\n", start + 1)].split():
            uid = int(field)
            if uid in uids:
                held.add(uid)
    return held


def _lock_uid_block(start: int) -> int | None:
    """flock the host-wide lock file of a uid block: its fd, None if another holds it.

    Raises OSError when no lock dir is usable (then the block is taken unlocked).
    """
    for directory in _LOCK_DIRS:
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(os.path.join(directory, f"uids-{start}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd
    raise OSError("no usable lock dir")


def _claim_uid_block(base: int, count: int, auto: bool) -> tuple[int, int | None]:
    """A uid block no other executor (here or elsewhere on the host) uses: (start, lock fd)."""
    for k in range(_UID_BLOCKS if auto else 1):
        start = base + k * count
        if start in _claimed_uid_blocks:
            continue
        try:
            fd = _lock_uid_block(start)
        except OSError:
            fd = -1
        if fd is None:
            continue
        _claimed_uid_blocks.add(start)
        return start, (fd if fd >= 0 else None)
    _log.warning("no free sandbox uid block from %d: sharing %d with another executor", base, base)
    return base, None


class WorkdirError(OSError):
    """The sandbox could not create the work dir or one of its files (``str`` is the OSError's)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _error_result(message: str) -> ExecutionResult:
    """The real server's shape for a sandbox failure before the program ran."""
    return ExecutionResult("Error", None, None, None, message)


class Executor:
    """Runs programs in isolated, rlimited, unprivileged processes via a zygote.

    One per emulator; safe for hundreds of concurrent ``run()`` calls on one event loop.
    """

    def __init__(self, config: ExecutorConfig | None = None) -> None:
        self.config = config or ExecutorConfig()
        euid = os.geteuid()
        base = self.config.sandbox_uid
        auto = base is None
        if base is None:
            base = _DEFAULT_UID_BASE if euid == 0 else None
        elif base == euid:
            base = None
        if base is not None and euid != 0:
            raise ValueError("sandbox_uid needs the emulator to run as root")
        if not self.config.private_tmp_max_age > 0:  # also NaN
            raise ValueError(
                f"private_tmp_max_age must be a positive number of seconds, not {self.config.private_tmp_max_age!r}"
            )
        ready = self.config.ready_in_latency
        if isinstance(ready, bool) or not isinstance(ready, int) or ready < 0:
            raise ValueError(f"ready_in_latency must be a whole number, 0 or more, not {ready!r}")
        self._uid_lock: int | None = None
        self._uid_block: int | None = None
        if base is not None and self.config.sandbox_uid_count > 1:
            base, self._uid_lock = _claim_uid_block(base, self.config.sandbox_uid_count, auto)
            self._uid_block = base
        self._uid_base = base
        self._gid = (
            None if base is None else (self.config.sandbox_gid if self.config.sandbox_gid is not None else _DEFAULT_GID)
        )
        count = max(self.config.sandbox_uid_count, 1) if base is not None else 0
        # Exclusive uids (count > 1) are swept (every process killed) after each execution.
        self._exclusive_uids = count > 1
        self._free_uids: collections.deque[int] = collections.deque(range(base or 0, (base or 0) + count))
        # Exclusive uids that may have processes left (from before us, or from a run whose
        # end the zygote never confirmed): the next run with one sweeps it first.  The
        # zygote sweeps every uid at the end of each run, so a confirmed run leaves it clean.
        # At the start, those that some process holds (one read of /proc, rather than a sweep,
        # which walks every process of the host, in each of the first runs).
        self._dirty_uids: set[int] = (
            _uids_in_use(range(base or 0, (base or 0) + count)) if self._exclusive_uids else set()
        )
        self._ready = 0  # runs waiting through a start gate, forked and set up (see _take_start_gate)
        self._uid_slots: asyncio.Semaphore | None = None
        self._workdirs: set[str] = set()
        self._held: dict[int, str] = {}  # uid -> the work dir its run holds (handed back at the uid's release)
        self._kept_out: dict[int, str] = {}  # uid -> the work dir it could not hand back yet
        self._handing_back: set[asyncio.Task[None]] = set()  # uids freed once their work dir is handed back
        self._nest: str | None = None
        runtime_bin = os.path.dirname(os.path.abspath(self.config.python))
        self._path_env = f"{runtime_bin}:{_SYSTEM_PATH}"
        self._zygotes: list[Zygote | None] = [None] * warm_interpreters(self.config.warm_interpreters)
        # The mount namespace with the private temp root (an fd, which keeps it, its tmpfs and what is in it, alive),
        # made by the first zygote to start and joined by every later one: one /tmp for all, as in a container.
        self._tmp_ns: int | None = None
        self._tmp_refused = False  # the first zygote could not have one: none has
        self._tmp_lock: asyncio.Lock | None = None
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._orphaned: set[str] = set()  # names of the work dirs of zygotes that died (the next sweep drops them)
        self._locks: list[asyncio.Lock | None] = [None] * len(self._zygotes)
        self._load = [0] * len(self._zygotes)  # runs given to each zygote and not ended (counted before its start)
        # A zygote whose start failed while another runs is given no run until this time (monotonic), after which
        # the next run given to it tries again; the wait doubles with each failure, up to a maximum.
        self._retry_start_at = [0.0] * len(self._zygotes)
        self._start_backoff = [_START_BACKOFF_FIRST] * len(self._zygotes)
        self._closed = False

    @property
    def sandbox_uids(self) -> range | None:
        """The uids programs run as (one per concurrent execution), None without uid change."""
        if self._uid_base is None:
            return None
        return range(self._uid_base, self._uid_base + max(self.config.sandbox_uid_count, 1))

    def workdir(self, *, nested: bool = False) -> Workdir:
        """A fresh per-execution dir (context manager); handed to the sandbox uid on each run.

        ``nested``: in a directory of the temp root that only root may change (mode 711), not in the temp root
        itself. For a long-lived dir such as a Daytona sandbox's home: its programs own the dir, and in the
        world-writable temp root they could rename it and put a link in its place, which the file API (root) and
        the clean-up would then follow. A name of the temp root itself is kept for one-shot runs, whose paths show
        in their output as the real service's ``/tmp/tmpXXXXXXXX``."""
        root = self._nest_dir() if nested else self.config.temp_root
        workdir = Workdir(root, None, on_cleanup=self._forget_workdir)
        self._workdirs.add(os.path.realpath(workdir.path))
        return workdir

    def _nest_dir(self) -> str:
        if self._nest is None or not os.path.isdir(self._nest):
            self._nest = tempfile.mkdtemp(prefix="sandbox-emulator-homes-", dir=self.config.temp_root)
            os.chmod(self._nest, 0o711)  # searchable, so a program reaches its own home; not listable, not writable
        return self._nest

    def _forget_workdir(self, real: str) -> None:
        self._workdirs.discard(real)
        HOLDERS.forget(real)
        if self._closed and self._nest is not None and os.path.dirname(real) == os.path.realpath(self._nest):
            with contextlib.suppress(OSError):
                os.rmdir(self._nest)  # the last home left a closed executor's nest

    def _our_workdir(self, cwd: str) -> str | None:
        root = os.path.realpath(cwd)
        return root if root in self._workdirs else None

    async def _hand_over(self, cwd: str, uid: int, gid: int) -> None:
        """Chown one of our work dirs (recursively) to the uid of the coming execution, which holds it until its end
        (see :mod:`.holders`: with an exclusive uid, the tree is handed back when the uid goes back to the pool)."""
        root = self._our_workdir(cwd)
        if root is None:
            return  # never chown a directory we did not create
        if self._exclusive_uids:
            self._held[uid] = root
            pending = HOLDERS.take(root, uid, gid)
            if pending is not None:
                await pending
        else:
            chown_tree(root, uid, gid)

    async def _acquire_uid(self) -> int | None:
        if self._uid_base is None:
            return None
        if not self._exclusive_uids:
            return self._uid_base
        if self._uid_slots is None:
            self._uid_slots = asyncio.Semaphore(len(self._free_uids))
        if not self._free_uids and self._kept_out:
            self._retry_kept_out()  # no release may come to do it: every uid could be a kept-out one
        await self._uid_slots.acquire()
        return self._free_uids.popleft()

    def _end_uid(self, uid: int | None, confirmed: bool) -> None:
        """A run we stopped waiting for ended: its uid is clean if the zygote confirmed it."""
        if uid is not None and confirmed:
            self._dirty_uids.discard(uid)
        elif uid is not None and self._exclusive_uids:
            self._dirty_uids.add(uid)
        self._release_uid(uid)

    def _release_uid(self, uid: int | None) -> None:
        if uid is None or not self._exclusive_uids:
            return
        self._retry_kept_out()
        held = self._held.pop(uid, None)
        if held is None:
            self._free_uid(uid)
            return
        self._hand_back(uid, held)

    def _retry_kept_out(self) -> None:
        """What could not be handed back before may be now."""
        for kept, kept_dir in list(self._kept_out.items()):
            del self._kept_out[kept]
            self._hand_back(kept, kept_dir, quiet=True, again=True)

    def _hand_back(self, uid: int, held: str, quiet: bool = False, again: bool = False) -> None:
        """Hand ``held`` back before another run, of any sandbox, can get ``uid``; then free the uid."""
        try:
            pending = HOLDERS.let_go(held, uid, again=again)
        except OSError as error:  # descriptors or processes run out
            self._keep_out(uid, held, error, quiet)
            return
        if pending is None:
            self._free_uid(uid)
            return
        task = asyncio.ensure_future(self._free_after(pending, uid, held))
        self._handing_back.add(task)
        task.add_done_callback(self._handing_back.discard)

    async def _free_after(self, handing_back: Awaitable[None], uid: int, held: str) -> None:
        try:
            await handing_back
        except Exception as error:
            self._keep_out(uid, held, error)
            return
        self._free_uid(uid)

    def _keep_out(self, uid: int, held: str, error: BaseException, quiet: bool = False) -> None:
        """A uid whose work dir could not be handed back may still own another sandbox's files: it is given to no
        run until the hand-back succeeds (tried again at each later release; logged once)."""
        if not quiet:
            why = "its work dir could not be handed back"
            _log.warning("sandbox uid %d kept out of the pool for now: %s (%s)", uid, why, error)
        self._kept_out[uid] = held

    def _free_uid(self, uid: int) -> None:
        if self._uid_slots is None:
            return
        self._free_uids.append(uid)
        self._uid_slots.release()

    def base_env(self, cwd: str) -> dict[str, str]:
        """The small fixed environment programs get (nothing from the host env)."""
        return {
            "PATH": self._path_env,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": cwd,
            "TMPDIR": cwd,
        }

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the zygotes now (otherwise each starts on its first run)."""
        for index in range(len(self._zygotes)):
            await self._ensure_zygote(index)

    async def aclose(self) -> None:
        """Kill the zygote and every running child; idempotent."""
        self._closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        zygotes, self._zygotes = self._zygotes, [None] * len(self._zygotes)
        await asyncio.gather(*(zygote.aclose() for zygote in zygotes if zygote is not None))
        if self._tmp_ns is not None:  # with the last of its processes gone, the tmpfs goes
            os.close(self._tmp_ns)  # a start under way has launched its zygote with it already, or never will
            self._tmp_ns = None
        for lock in self._locks:  # a start under way ends (and closes what it started: we are closed)
            if lock is not None:
                async with lock:
                    pass
        self._retry_kept_out()  # a last try for the uids kept out (descriptors are back now, most likely)
        if self._handing_back:
            await asyncio.gather(*self._handing_back, return_exceptions=True)
        if self._kept_out:  # they may still own files: the block stays ours (its lock goes with the process)
            _log.warning(
                "sandbox uids %s still kept out at the close: their block is not given up", sorted(self._kept_out)
            )
            return
        # The zygotes swept every uid of ours before it exited: the block is free again.
        if self._uid_block is not None:
            _claimed_uid_blocks.discard(self._uid_block)
            self._uid_block = None
        if self._uid_lock is not None:
            os.close(self._uid_lock)
            self._uid_lock = None
        if self._nest is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._nest)  # empty unless homes still live there (they leave with their sandboxes)

    async def __aenter__(self) -> Executor:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    @property
    def warm_interpreters(self) -> int:
        """How many zygotes fork the programs (``ExecutorConfig.warm_interpreters``)."""
        return len(self._zygotes)

    def _least_busy(self) -> int:
        """The zygote for the next run: the one given the fewest runs not ended yet."""
        load = self._load
        if len(load) == 1:
            return 0
        best = load.index(min(load))
        if self._retry_start_at[best] == 0.0:
            return best
        now = time.monotonic()
        waiting = [(n, i) for i, n in enumerate(load) if self._retry_start_at[i] <= now]
        return min(waiting)[1] if waiting else best

    def _live_other(self, index: int) -> int | None:
        """A started zygote other than ``index``'s, the least busy of them (for a run whose own cannot start)."""
        live = [(self._load[i], i) for i, z in enumerate(self._zygotes) if i != index and z is not None and z.alive]
        return min(live)[1] if live else None

    def running(self) -> bool:
        """Whether a zygote is starting or a program runs (one held before its start by a gate does not count)."""
        if any(lock is not None and lock.locked() for lock in self._locks):
            return True
        return any(zygote is not None and zygote.in_flight > zygote.holding for zygote in self._zygotes)

    async def _ensure_zygote(self, index: int = 0) -> Zygote:
        if self._closed:
            raise RuntimeError("executor is closed")
        zygote = self._zygotes[index]
        if zygote is not None and zygote.alive:
            return zygote
        lock = self._locks[index]
        if lock is None:
            lock = self._locks[index] = asyncio.Lock()
        async with lock:
            zygote = self._zygotes[index]
            if zygote is not None and zygote.alive:
                return zygote
            if self._closed:
                raise RuntimeError("executor is closed")
            if zygote is not None:
                await zygote.aclose()
                if zygote.private_tmp is not None:
                    self._orphaned.update(os.path.basename(path) for path in zygote.orphaned_workdirs)
            if time.monotonic() < self._retry_start_at[index] and self._live_other(index) is not None:
                raise ZygoteLost("it failed to start a moment ago")  # the runs that waited for that start
            try:
                zygote = await self._start_zygote()
            except Exception:  # not a cancel: the start did not fail, the run that waited for it went
                self._retry_start_at[index] = time.monotonic() + self._start_backoff[index]
                self._start_backoff[index] = min(self._start_backoff[index] * 2, _START_BACKOFF_MOST)
                raise
            self._retry_start_at[index] = 0.0
            self._start_backoff[index] = _START_BACKOFF_FIRST
            if self._closed:
                await zygote.aclose()
                raise RuntimeError("executor is closed")
            self._zygotes[index] = zygote
            return zygote

    async def _start_zygote(self) -> Zygote:
        """A new zygote, started: in the private temp root's namespace if there is one (the first to start makes it,
        while the others wait, then join it). A zygote that should be in it and is not is a failed start."""
        if self._closed:
            raise RuntimeError("executor is closed")
        env = {"PATH": self._path_env, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/nonexistent"}
        private = self.config.private_tmp and self.config.temp_root is None and os.geteuid() == 0
        root = tempfile.gettempdir() if private else None
        if root is None or self._tmp_refused:
            return await _started(Zygote(self.config.python, env))
        if self._tmp_ns is None:
            if self._tmp_lock is None:
                self._tmp_lock = asyncio.Lock()
            async with self._tmp_lock:
                if self._closed:
                    raise RuntimeError("executor is closed")
                if self._tmp_ns is None and not self._tmp_refused:
                    zygote = await _started(Zygote(self.config.python, env, root))
                    try:
                        self._keep_namespace(zygote, root)
                    except BaseException:
                        await zygote.aclose()
                        raise
                    return zygote
            return await self._start_zygote()
        zygote = await _started(Zygote(self.config.python, env, root, self._tmp_ns))
        if zygote.private_tmp is None:  # its runs would see the host's /tmp, the others' runs the private one
            await zygote.aclose()
            raise OSError(f"it could not join the private {root}: {zygote.private_tmp_error}")
        return zygote

    def _keep_namespace(self, zygote: Zygote, root: str) -> None:
        """Hold the mount namespace of the private temp root that ``zygote`` made; OSError if it made none for a
        passing reason, or its namespace cannot be held (the start then counts as failed, and is tried again)."""
        if zygote.private_tmp is None:
            if not zygote.private_tmp_never:
                raise OSError(f"it could not make the private {root}: {zygote.private_tmp_error}")
            _log.info("work dirs on the host's %s: %s", root, zygote.private_tmp_error)
            self._tmp_refused = True  # and never will: every zygote runs without one
            return
        ns = os.open(f"/proc/{zygote.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        if os.fstat(ns).st_ino != zygote.mnt_ns or zygote.mnt_ns == os.stat("/proc/self/ns/mnt").st_ino:
            os.close(ns)  # its pid is another process's by now, or it is not private after all
            raise OSError(f"the namespace of the private {root} could not be held")
        if self._closed:
            os.close(ns)
            return
        self._tmp_ns = ns
        self._schedule_sweep()

    def _schedule_sweep(self) -> None:
        """Sweep the private temp root every half of ``private_tmp_max_age`` (every minute at most)."""
        interval = min(60.0, self.config.private_tmp_max_age / 2)
        self._sweep_timer = asyncio.get_running_loop().call_later(interval, self._sweep_private_tmp)

    def _sweep_private_tmp(self) -> None:
        """Have one zygote (the least busy) sweep the root all share, keeping every zygote's live work dirs."""
        self._sweep_timer = None
        if self._closed:
            return
        live = [(self._load[i], i) for i, z in enumerate(self._zygotes) if z is not None and z.alive and z.private_tmp]
        if live:
            keep = {os.path.basename(path) for z in self._zygotes if z is not None for path in z.workdirs()}
            zygote = self._zygotes[min(live)[1]]
            assert zygote is not None
            drop, self._orphaned = self._orphaned, set()
            zygote.sweep(keep, self.config.private_tmp_max_age, drop - keep)
        self._schedule_sweep()

    @property
    def private_tmp(self) -> str | None:
        """The temp root that one-shot runs see as a private tmpfs (see ``ExecutorConfig.private_tmp``), or None
        (also until the first zygote has started). Every zygote runs in it: one that could not join it did not
        start."""
        return tempfile.gettempdir() if self._tmp_ns is not None else None

    @property
    def zygote_pid(self) -> int | None:
        """Pid of the first zygote (for tests and diagnostics)."""
        zygote = self._zygotes[0]
        return zygote.pid if zygote is not None and zygote.alive else None

    # --- running -------------------------------------------------------------------------

    def _use_fast_path(self, request: ExecutionRequest) -> bool:
        if self.config.python_mode != "fast":
            return False
        argv = list(request.argv)
        if request.python_script is None:
            if not _program_on_stdin(request):
                return False
        elif len(argv) != 2 or argv[1] != request.python_script:
            return False
        if argv[0] != self.config.python and argv[0] not in ("python", "python3"):
            return False
        if 0 < request.memory_limit_mb < _FAST_MIN_MEMORY_MB:
            return False
        return not (request.extra_env and any(key.startswith(_STARTUP_ENV_PREFIXES) for key in request.extra_env))

    def _limits(self, request: ExecutionRequest) -> dict[str, int]:
        mib = 1024 * 1024
        cores = _CORES
        return {
            "memory": request.memory_limit_mb * mib if request.memory_limit_mb > 0 else 0,
            "as_cap": max(self.config.max_address_space_mb, 0) * mib,
            # A backstop only (the wall clock decides): generous for multi-threaded code.
            "cpu": math.ceil(request.timeout * cores) + 2,
            "fsize": max(self.config.max_file_size_mb, 0) * mib,
            "nproc": max(self.config.max_processes, 0),
        }

    def deferred_workdir(self) -> DeferredWorkdir:
        """A work dir for one program that the sandbox itself creates and removes.

        Use it like :meth:`workdir`, set ``fetch``, and pass ``setup()`` in the request; the
        program's result then carries the fetched files (see :class:`DeferredWorkdir`).
        """
        return DeferredWorkdir(
            self.config.temp_root, on_materialize=self._workdirs.add, on_cleanup=self._workdirs.discard
        )

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one program; never raises for anything the program does.

        With ``request.setup`` a failure to create the work dir or its files raises
        :class:`WorkdirError` (as the server-side :class:`Workdir` calls would have).
        """
        if request.timeout > _LONGEST_TIMEOUT_S:  # infinity included: the program runs to its end, as with wait_for
            request = dataclasses.replace(request, timeout=_LONGEST_TIMEOUT_S)
        if not request.timeout > 0:  # NaN too
            # The real server's wait_for(timeout=0) (or NaN) gives up at once.
            # Its files are restored before the program starts, and fetched after the timeout as after any end.
            t0 = time.monotonic()
            await asyncio.sleep(0)
            files = None if request.setup is None else planned_fetch(request.setup)
            return ExecutionResult(
                "TimeLimitExceeded", time.monotonic() - t0, None, "", "", files, workdir_removed=files is not None
            )
        gate = await self._take_start_gate()
        if gate is None:
            return await self._run(request, None)
        self._ready += 1
        try:
            return await self._run(request, gate)
        finally:
            self._ready -= 1

    async def _take_start_gate(self) -> start_gate.StartGate | None:
        """The start gate offered to this run, if it may wait ready (forked and set up) through it.

        Beyond ``config.ready_in_latency`` runs waiting so, a run waits first and forks after, as with no gate: each
        ready one holds a process, a sandbox uid and a few of the zygote's descriptors for the whole wait.
        """
        gate = start_gate.take()
        if gate is None or gate.over():
            return None
        if self._ready >= self.config.ready_in_latency:
            await gate.until_over()
            return None
        return gate

    async def _run(self, request: ExecutionRequest, gate: start_gate.StartGate | None) -> ExecutionResult:
        fast = self._use_fast_path(request)
        env = self.base_env(request.cwd)
        if request.extra_env:
            env.update(request.extra_env)
        msg: dict[str, Any] = {
            "mode": "python" if fast else "exec",
            "argv": list(request.argv),
            "script": request.python_script,
            "cwd": request.cwd,
            "env": env,
            "uid": None,
            "gid": self._gid,
            "sweep": self._exclusive_uids,
            "presweep": False,
            "limits": self._limits(request),
        }
        capture = request.capture
        if capture.keep != KEEP_BYTES or capture.absorb != ABSORB_BYTES:  # the zygote's default is Sandbox Fusion's
            msg["keep"] = capture.keep
            msg["absorb"] = capture.absorb  # None: to the end
        if capture.until_closed:
            msg["drain"] = True
        blobs: list[bytes] = []
        if fast and request.python_script is None:  # ``python -``: the program is the stdin, the program's is empty
            msg["program_on_stdin"] = True
            msg["source"] = len(blobs)
            blobs.append(request.stdin or b"")
        elif request.stdin:
            msg["stdin"] = len(blobs)
            blobs.append(request.stdin)
        setup = request.setup
        if setup is not None:
            files = []
            for target, data, exclusive in setup.files:
                if fast and target == request.python_script:
                    msg["source"] = len(blobs)  # the zygote compiles it before the fork
                files.append((target, len(blobs), exclusive))
                blobs.append(data)
            msg["dir"] = {"path": setup.path, "files": files, "fetch": list(setup.fetch), "real": setup.real_path}
            script = request.python_script
            if fast and script is not None and setup.real_path and os.path.dirname(script) == setup.path:
                msg["script_dir"] = setup.real_path
        uid = await self._acquire_uid()
        unconfirmed: list[Pending] = []
        try:
            if uid is not None and self._gid is not None:
                msg["uid"] = uid
                if uid in self._dirty_uids:
                    msg["presweep"] = True
                    if setup is None and self._our_workdir(request.cwd) is not None:
                        # What is left under this uid (another sandbox's run) dies before the dir is handed to it,
                        # not at the spawn, after.
                        await sweep_uid_async(uid)
                if setup is None:
                    await self._hand_over(request.cwd, uid, self._gid)
            return await self._run_attempts(msg, blobs, request, unconfirmed, gate)
        finally:
            # The zygote kills every process of this uid before it reports the exit; a run we
            # stopped waiting for (cancelled, or no confirmation after a kill) keeps its uid
            # until the report comes.  A child that outlived a lost zygote is swept by the
            # next execution with this uid.
            if unconfirmed:
                unconfirmed[0].on_end.append(lambda confirmed: self._end_uid(uid, confirmed))
            else:
                self._release_uid(uid)

    async def _run_attempts(
        self,
        msg: dict[str, Any],
        blobs: list[bytes],
        request: ExecutionRequest,
        unconfirmed: list[Pending],
        gate: start_gate.StartGate | None,
    ) -> ExecutionResult:
        index = self._least_busy()
        self._load[index] += 1
        try:
            for attempt in range(3):
                try:
                    zygote = await self._ensure_zygote(index)
                except (OSError, ZygoteLost, asyncio.TimeoutError) as exc:
                    _log.error("cannot start the zygote: %s", exc)
                    other = self._live_other(index)
                    if other is None:
                        return _error_result(f"sandbox executor unavailable: {exc}")
                    # One that cannot start sends its runs to one that runs, which counts them: the next runs then
                    # go to the one that cannot start only when it is the least busy.
                    self._load[index] -= 1
                    index = other
                    self._load[index] += 1
                    live = self._zygotes[index]
                    assert live is not None
                    zygote = live
                try:
                    return await self._run_once(zygote, request, msg, blobs, unconfirmed, gate)
                except ZygoteLost as exc:
                    if exc.args and exc.args[0] == "started":
                        if msg["uid"] is not None and self._exclusive_uids:
                            self._dirty_uids.add(msg["uid"])  # what it started may still run
                        return _error_result("sandbox executor restarted while the program ran (or was about to)")
                    _log.warning("zygote lost before start, retrying (%d)", attempt + 1)
            return _error_result("sandbox executor unavailable")
        finally:
            self._load[index] -= 1

    async def _run_once(
        self,
        zygote: Zygote,
        request: ExecutionRequest,
        msg: dict[str, Any],
        blobs: list[bytes],
        unconfirmed: list[Pending],
        gate: start_gate.StartGate | None = None,
    ) -> ExecutionResult:
        loop = asyncio.get_running_loop()
        hold: asyncio.Future[object] | None = None
        start_at: float | None = None
        if gate is not None and not gate.over():
            # Forked and set up now; the program starts when the wait is over: at ``start_at`` by the child's own
            # clock when the wait is one of real time (no message, no timer of ours in between), else on go().
            if gate.deadline is not None:
                start_at = gate.deadline
                msg["start_at"] = start_at
            else:
                hold = gate.wait
                assert hold is not None
                msg["hold"] = True
        else:
            msg.pop("hold", None)
            msg.pop("start_at", None)
        t0 = time.monotonic()
        try:
            req_id, pending = zygote.spawn(msg, blobs)
        except ZygoteLost:
            raise ZygoteLost("not started") from None
        if start_at is not None:
            t0 = max(t0, start_at)
        if hold is not None:
            zygote.holding += 1
            try:
                await asyncio.shield(hold)
            except asyncio.CancelledError:
                # The client went away during the wait (or the wait was called off): the program never starts.
                zygote.kill(req_id)
                unconfirmed.append(pending)
                raise
            finally:
                zygote.holding -= 1
            zygote.go(req_id)
            t0 = time.monotonic()
        deadline = t0 + request.timeout
        timed_out: list[float] = []

        def on_timeout(again: Callable[[Any], None]) -> None:
            # Wall clock from our side: kill the group now; the zygote reports the exit (with
            # the output so far) once it is gone, and we stop waiting after a grace period.
            now = time.monotonic()
            if now < deadline:
                # uvloop's timers count whole milliseconds and can fire up to one early: a kill
                # then would end the program before its deadline, and it would read as Finished, -9.
                timers.append(loop.call_at(loop.time() + (deadline - now), again, again))
                return
            timed_out.append(now)
            zygote.kill(req_id)
            timers.append(loop.call_later(_KILL_GRACE, _give_up, pending, unconfirmed))

        # on_timeout gets itself as an argument rather than naming itself: a closure that names itself is a cycle.
        timers = [loop.call_at(loop.time() + (deadline - time.monotonic()), on_timeout, on_timeout)]
        try:
            reply = await pending.exited
        except asyncio.CancelledError:
            # The client went away: never leave the program running.  (Cancelling us cancelled
            # the future we awaited; a reply that had arrived would have resolved it first.)
            if pending.exited.cancelled():
                zygote.kill(req_id)
                unconfirmed.append(pending)
            raise
        except OSError as exc:  # the zygote could not fork
            return _error_result(str(exc))
        finally:
            for handle in timers:
                handle.cancel()
            # uvloop's cancelled handles keep their callback: on_timeout -> its cell -> timers -> the handles would be
            # a cycle per run, left to the garbage collector with the run's pending reply and future.
            timers.clear()
        if reply is None:  # killed, but the zygote did not confirm in time
            return ExecutionResult("TimeLimitExceeded", timed_out[0] - t0, None, "", "")
        info = reply.msg
        if msg["uid"] is not None:
            self._dirty_uids.discard(msg["uid"])  # the zygote swept it after the exit
        files: dict[str, bytes] | None = None
        fetched = info.get("files")
        if fetched is not None:
            files = {name: reply.blobs[index] for name, index in fetched.items()}
        removed = bool(info.get("removed"))
        failure = info.get("fail")
        if failure is not None:
            kind, _, detail = failure.partition("\n")
            if kind == "workdir":
                raise WorkdirError(detail)
            if kind == "exec":
                return self._with_files(_error_result(detail), files, removed)
            _log.warning("sandbox setup failed: %s", detail)
            return self._with_files(_error_result(_PREEXEC_MESSAGE), files, removed)
        decode = request.capture.decode
        stdout = decode(reply.blobs[0])
        stderr = decode(reply.blobs[1])
        if timed_out and info["at"] >= deadline:
            return ExecutionResult("TimeLimitExceeded", timed_out[0] - t0, None, stdout, stderr, files, removed)
        return ExecutionResult("Finished", info["at"] - t0, info["rc"], stdout, stderr, files, removed)

    @staticmethod
    def _with_files(result: ExecutionResult, files: dict[str, bytes] | None, removed: bool) -> ExecutionResult:
        if files is None and not removed:
            return result
        return dataclasses.replace(result, files=files, workdir_removed=removed)


async def _started(zygote: Zygote) -> Zygote:
    await zygote.start()
    return zygote


def _give_up(pending: Pending, unconfirmed: list[Pending]) -> None:
    """Stop waiting for the zygote to confirm a kill (the uid stays taken until it does)."""
    if not pending.exited.done():
        unconfirmed.append(pending)
        pending.exited.set_result(None)
