"""Public data types of the executor: configuration, request and result."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .capture import SANDBOX_FUSION_CAPTURE, OutputCapture
from .cores import MOST_WARM_INTERPRETERS

ExecutionStatus = Literal["Finished", "Error", "TimeLimitExceeded"]
PythonMode = Literal["fast", "faithful"]


def default_python() -> str:
    """Runtime interpreter: $SANDBOX_EMULATOR_PYTHON, else the interpreter running us."""
    return os.environ.get("SANDBOX_EMULATOR_PYTHON") or sys.executable


def _executable(program: str) -> bool:
    """Whether ``program`` can be started: an executable file, or a bare name found on ``$PATH`` (as ``exec`` does)."""
    if os.sep not in program:
        return shutil.which(program) is not None
    return os.path.isfile(program) and os.access(program, os.X_OK)


@dataclass(frozen=True)
class ExecutorConfig:
    """How programs are run and contained (the real server has no isolation; we do)."""

    python: str = field(default_factory=default_python)
    python_mode: PythonMode = "fast"
    # First uid of the sandbox uid pool.  None = auto: 200000 when running as root, no uid
    # change otherwise (a value equal to our own euid also means no change).
    sandbox_uid: int | None = None
    # Uids in the pool, one per concurrent execution: RLIMIT_NPROC then binds per execution
    # (a fork bomb cannot starve its neighbours) and every process an execution left behind,
    # even one that escaped its process group, is killed by uid when it ends.  1 = all
    # executions share ``sandbox_uid`` (no per-uid sweep).
    sandbox_uid_count: int = 1024
    # None = 65534 (nogroup).
    sandbox_gid: int | None = None
    max_processes: int = 512
    # Safety RLIMIT_AS when a request sets no memory limit (AS only, not the stack, so
    # threads keep working as on the real server).  4 GiB still lets node and java start.
    max_address_space_mb: int = 4096
    max_file_size_mb: int = 64
    # Parent of per-execution temp dirs (default: tempfile.gettempdir()).
    temp_root: str | None = None
    # One-shot runs (the sandbox makes and removes the work dir, as for Sandbox Fusion's Python) see the default
    # temp root as a private tmpfs, in a mount namespace of their own: the same paths, none of the host's files
    # there (as in the real server's container), and no disk I/O for their dirs.  Needs root (CAP_SYS_ADMIN); not
    # with ``temp_root`` set, nor when the runtime Python lives under the temp root.  Other runs see the host's.
    private_tmp: bool = True
    # What programs leave in that private temp root outside their work dirs is memory: it is removed once nothing in
    # it changed for this many seconds (checked every minute, or every half of this when shorter).
    private_tmp_max_age: float = 600.0
    # Runs that may wait through an injected latency forked and set up, their program held until it ends (see
    # ``start_gate``); beyond this many, a run waits first and forks after.  0 turns it off.
    ready_in_latency: int = 128
    # Warm interpreters (zygotes) that fork the programs; each run goes to the one with the fewest not ended. One
    # forks about 1,500 programs a second on a fast core, so on many cores it, not the cores, bounds the fast path.
    # They share one private temp root (see ``private_tmp``). None: one per six usable cores, at least one, at most
    # four (see ``cores``).
    warm_interpreters: int | None = None

    def __post_init__(self) -> None:
        """Refuse what would only fail later, request by request (or run unnoticed as something else)."""
        if self.python_mode not in ("fast", "faithful"):
            raise ValueError(f"python_mode must be 'fast' or 'faithful', got {self.python_mode!r}")
        for name in ("sandbox_uid_count", "max_processes", "max_address_space_mb", "max_file_size_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
        warm = self.warm_interpreters
        if warm is not None and (
            isinstance(warm, bool) or not isinstance(warm, int) or not 1 <= warm <= MOST_WARM_INTERPRETERS
        ):
            raise ValueError(
                f"warm_interpreters must be an integer from 1 to {MOST_WARM_INTERPRETERS} (or None), got {warm!r}"
            )
        if not (isinstance(self.python, str) and _executable(self.python)):
            from_env = self.python == os.environ.get("SANDBOX_EMULATOR_PYTHON")
            source = " (from $SANDBOX_EMULATOR_PYTHON)" if from_env else ""
            what = "an executable file" if os.sep in str(self.python) else "found on $PATH"
            raise ValueError(f"python {self.python!r}{source} is not {what}")
        if self.temp_root is not None and not (isinstance(self.temp_root, str) and os.path.isdir(self.temp_root)):
            raise ValueError(f"temp_root {self.temp_root!r} is not a directory")


@dataclass(frozen=True)
class WorkdirSetup:
    """A work dir that the sandbox creates itself, right before the program runs.

    For one-shot runs (one program per dir): the forked child creates ``path`` (mode 0700)
    and writes ``files`` in order, exactly as a server-side :class:`Workdir` would, and once
    the program ended the executor reads back ``fetch`` (into ``ExecutionResult.files``) and
    removes the dir.  The server does no file-system work at all.  Build it with
    :class:`~emulator.executor.workdir.DeferredWorkdir`.
    """

    path: str
    # (absolute target inside path, contents, exclusive): an exclusive file is created like
    # mkstemp's (O_EXCL, mode 0600), the others like ``open(target, "wb")`` with the missing
    # parent dirs made first.
    files: Sequence[tuple[str, bytes, bool]] = ()
    # Relative names read back after the run (regular files inside the dir only).
    fetch: Sequence[str] = ()
    # realpath of the dir (saves the zygote the lookups), None = compute.
    real_path: str | None = None


@dataclass(frozen=True)
class ExecutionRequest:
    """One program to run, as the real server's runner would run it."""

    argv: Sequence[str]
    cwd: str
    timeout: float
    stdin: bytes | None = None
    memory_limit_mb: int = -1
    extra_env: Mapping[str, str] | None = None
    # Set when argv runs this python file: lets the fast path run it in a warm interpreter.
    python_script: str | None = None
    # A work dir (``cwd``) to create in the sandbox first and remove afterwards.
    setup: WorkdirSetup | None = None
    # How stdout and stderr are read and decoded: by default as Sandbox Fusion's server does (truncated, a bigger
    # writer blocked, a stream that is not UTF-8 replaced by its ``[DecodeError]``).
    capture: OutputCapture = SANDBOX_FUSION_CAPTURE


@dataclass(frozen=True)
class ExecutionResult:
    """What Sandbox Fusion's CommandRunResult holds.

    ``execution_time``, ``stdout`` and ``stderr`` follow the real server: for status
    ``Error`` (sandbox failure before the program ran) ``execution_time`` and ``stdout`` are
    None and ``stderr`` holds the message.
    """

    status: ExecutionStatus
    execution_time: float | None
    return_code: int | None
    stdout: str | None
    stderr: str | None
    # With ``ExecutionRequest.setup``: the fetched files that existed (name -> contents), and
    # whether the executor removed the dir (otherwise its owner must).
    files: Mapping[str, bytes] | None = None
    workdir_removed: bool = False
