"""The executor: runs a program for real, isolated, and answers like Sandbox Fusion's runner."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import time
from typing import Any

from .capture import StdinFeeder, StreamCapture, decode_output
from .model import ExecutionRequest, ExecutionResult, ExecutorConfig
from .workdir import Workdir
from .zygote import Pending, Zygote, ZygoteLost

_log = logging.getLogger(__name__)

_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DEFAULT_UID_BASE = 200000
_DEFAULT_GID = 65534
# After the child exited, how long we wait for EOF on its pipes (an escaped grandchild
# may hold them open); whatever is in the pipes is taken anyway.
_EOF_GRACE = 0.5
# How long we wait for the zygote to confirm a kill before answering anyway.
_KILL_GRACE = 5.0
# Below this memory limit a fresh interpreter behaves differently from a forked warm one
# (it may not even start), so such requests take the faithful path.
_FAST_MIN_MEMORY_MB = 96
# Env variables read by the interpreter at startup: their presence forces the faithful path.
_STARTUP_ENV_PREFIXES = ("PYTHON", "LC_", "LANG")
_PREEXEC_MESSAGE = "Exception occurred in preexec_fn."


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
        if base is None:
            base = _DEFAULT_UID_BASE if euid == 0 else None
        elif base == euid:
            base = None
        if base is not None and euid != 0:
            raise ValueError("sandbox_uid needs the emulator to run as root")
        self._uid_base = base
        self._gid = (
            None if base is None else (self.config.sandbox_gid if self.config.sandbox_gid is not None else _DEFAULT_GID)
        )
        count = max(self.config.sandbox_uid_count, 1) if base is not None else 0
        # Exclusive uids (count > 1) are swept (every process killed) after each execution.
        self._exclusive_uids = count > 1
        self._free_uids: collections.deque[int] = collections.deque(range(base or 0, (base or 0) + count))
        self._uid_slots: asyncio.Semaphore | None = None
        self._workdirs: set[str] = set()
        runtime_bin = os.path.dirname(os.path.abspath(self.config.python))
        self._path_env = f"{runtime_bin}:{_SYSTEM_PATH}"
        self._zygote: Zygote | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False

    @property
    def sandbox_uids(self) -> range | None:
        """The uids programs run as (one per concurrent execution), None without uid change."""
        if self._uid_base is None:
            return None
        return range(self._uid_base, self._uid_base + max(self.config.sandbox_uid_count, 1))

    def workdir(self) -> Workdir:
        """A fresh per-execution dir (context manager); handed to the sandbox uid on each run."""
        workdir = Workdir(self.config.temp_root, None, on_cleanup=self._workdirs.discard)
        self._workdirs.add(os.path.realpath(workdir.path))
        return workdir

    def _hand_over(self, cwd: str, uid: int, gid: int) -> None:
        """Chown one of our work dirs (recursively) to the uid of the coming execution."""
        root = os.path.realpath(cwd)
        if root not in self._workdirs:
            return  # never chown a directory we did not create
        os.chown(root, uid, gid)
        for parent, dirs, files in os.walk(root):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    os.chown(os.path.join(parent, name), uid, gid, follow_symlinks=False)

    async def _acquire_uid(self) -> int | None:
        if self._uid_base is None:
            return None
        if not self._exclusive_uids:
            return self._uid_base
        if self._uid_slots is None:
            self._uid_slots = asyncio.Semaphore(len(self._free_uids))
        await self._uid_slots.acquire()
        return self._free_uids.popleft()

    def _release_uid(self, uid: int | None) -> None:
        if uid is None or not self._exclusive_uids or self._uid_slots is None:
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
        """Start the zygote now (otherwise it starts on the first run)."""
        await self._ensure_zygote()

    async def aclose(self) -> None:
        """Kill the zygote and every running child; idempotent."""
        self._closed = True
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            await zygote.aclose()

    async def __aenter__(self) -> Executor:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def _ensure_zygote(self) -> Zygote:
        if self._closed:
            raise RuntimeError("executor is closed")
        zygote = self._zygote
        if zygote is not None and zygote.alive:
            return zygote
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            zygote = self._zygote
            if zygote is not None and zygote.alive:
                return zygote
            if zygote is not None:
                await zygote.aclose()
            env = {"PATH": self._path_env, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
            env["HOME"] = "/nonexistent"
            zygote = Zygote(self.config.python, env)
            await zygote.start()
            if self._closed:
                await zygote.aclose()
                raise RuntimeError("executor is closed")
            self._zygote = zygote
            return zygote

    @property
    def zygote_pid(self) -> int | None:
        """Pid of the current zygote (for tests and diagnostics)."""
        zygote = self._zygote
        return zygote.pid if zygote is not None and zygote.alive else None

    # --- running -------------------------------------------------------------------------

    def _use_fast_path(self, request: ExecutionRequest) -> bool:
        if self.config.python_mode != "fast" or request.python_script is None:
            return False
        argv = list(request.argv)
        if len(argv) != 2 or argv[1] != request.python_script:
            return False
        if argv[0] != self.config.python and argv[0] not in ("python", "python3"):
            return False
        if 0 < request.memory_limit_mb < _FAST_MIN_MEMORY_MB:
            return False
        return not (request.extra_env and any(key.startswith(_STARTUP_ENV_PREFIXES) for key in request.extra_env))

    def _limits(self, request: ExecutionRequest) -> dict[str, int]:
        mib = 1024 * 1024
        cores = os.cpu_count() or 1
        return {
            "memory": request.memory_limit_mb * mib if request.memory_limit_mb > 0 else 0,
            "as_cap": max(self.config.max_address_space_mb, 0) * mib,
            # A backstop only (the wall clock decides): generous for multi-threaded code.
            "cpu": math.ceil(request.timeout * cores) + 2,
            "fsize": max(self.config.max_file_size_mb, 0) * mib,
            "nproc": max(self.config.max_processes, 0),
        }

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one program; never raises for anything the program does."""
        t0 = time.monotonic()
        if request.timeout <= 0:
            # The real server's wait_for(timeout=0) gives up at once.
            await asyncio.sleep(0)
            return ExecutionResult("TimeLimitExceeded", time.monotonic() - t0, None, "", "")
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
            "limits": self._limits(request),
        }
        uid = await self._acquire_uid()
        try:
            if uid is not None and self._gid is not None:
                msg["uid"] = uid
                self._hand_over(request.cwd, uid, self._gid)  # a few chown calls: cheaper inline
            return await self._run_attempts(msg, request)
        finally:
            # The zygote killed every process of this uid before reporting the exit; a child
            # that outlived a lost zygote is swept by the next execution with this uid.
            self._release_uid(uid)

    async def _run_attempts(self, msg: dict[str, Any], request: ExecutionRequest) -> ExecutionResult:
        for attempt in range(3):
            try:
                zygote = await self._ensure_zygote()
            except (OSError, ZygoteLost, asyncio.TimeoutError) as exc:
                _log.error("cannot start the zygote: %s", exc)
                return _error_result(f"sandbox executor unavailable: {exc}")
            try:
                return await self._run_once(zygote, request, msg)
            except ZygoteLost as exc:
                if exc.args and exc.args[0] == "started":
                    return _error_result("sandbox executor restarted while the program ran")
                _log.warning("zygote lost before start, retrying (%d)", attempt + 1)
        return _error_result("sandbox executor unavailable")

    async def _run_once(self, zygote: Zygote, request: ExecutionRequest, msg: dict[str, Any]) -> ExecutionResult:
        loop = asyncio.get_running_loop()
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        child_ends = [stdin_r, out_w, err_w, status_w]
        ours = [stdin_w, out_r, err_r, status_r]
        t0 = time.monotonic()
        try:
            req_id, pending = zygote.spawn(msg, child_ends)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise ZygoteLost("not started") from None
        finally:
            for fd in child_ends:
                os.close(fd)
        feeder = StdinFeeder(loop, stdin_w, request.stdin)
        out = StreamCapture(loop, out_r)
        err = StreamCapture(loop, err_r)
        try:
            return await self._supervise(zygote, request, req_id, pending, t0, out, err, status_r)
        except BaseException:
            # Cancelled (client went away) or an internal error: never leave the program running.
            if not pending.exited.done():
                zygote.kill(req_id)
            raise
        finally:
            feeder.close()
            out.close()
            err.close()
            with contextlib.suppress(OSError):
                os.close(status_r)

    async def _supervise(
        self,
        zygote: Zygote,
        request: ExecutionRequest,
        req_id: int,
        pending: Pending,
        t0: float,
        out: StreamCapture,
        err: StreamCapture,
        status_r: int,
    ) -> ExecutionResult:
        deadline = t0 + request.timeout
        timed_out = False
        rc: int | None = None
        try:
            rc = await asyncio.wait_for(asyncio.shield(pending.exited), max(deadline - time.monotonic(), 0))
        except asyncio.TimeoutError:
            timed_out = True
        except ZygoteLost:
            raise ZygoteLost("started" if pending.pid else "not started") from None
        except OSError as exc:  # the zygote could not fork
            return _error_result(str(exc))
        if timed_out:
            elapsed = time.monotonic() - t0
            zygote.kill(req_id)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(pending.exited), _KILL_GRACE)
        else:
            elapsed = pending.exited_at - t0
        failure = self._setup_failure(status_r)
        if failure is not None:
            return failure
        if not timed_out:
            # The process group is dead: EOF comes at once unless an escaped grandchild
            # holds a pipe; the real server also reads only what is there at exit.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(out.done, err.done), _EOF_GRACE)
        stdout = decode_output(out.close())
        stderr = decode_output(err.close())
        if timed_out:
            return ExecutionResult("TimeLimitExceeded", elapsed, None, stdout, stderr)
        return ExecutionResult("Finished", elapsed, rc, stdout, stderr)

    @staticmethod
    def _setup_failure(status_r: int) -> ExecutionResult | None:
        """Read the child's setup-status pipe: a message means it never ran the program."""
        try:
            os.set_blocking(status_r, False)
            data = os.read(status_r, 65536)
        except OSError:  # EAGAIN: still held open, so no failure was reported
            return None
        if not data:
            return None
        kind, _, detail = data.decode("utf-8", "replace").partition("\n")
        if kind == "exec":
            return _error_result(detail)
        _log.warning("sandbox setup failed: %s", detail)
        return _error_result(_PREEXEC_MESSAGE)
