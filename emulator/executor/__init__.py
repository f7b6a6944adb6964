"""Runs user programs for real, isolated, answering like Sandbox Fusion's runner.

Two paths behind one interface: ``faithful`` (a fresh ``python <file>`` per execution, as the
real server does) and ``fast`` (the script runs in a process forked from a warm zygote
interpreter).  Both run inside their own session, with rlimits, a scrubbed environment and,
when we are root, an unprivileged uid of their own (one per concurrent execution).

Known deviations from ``python <file>`` on the real server:

* fast path: the str hash seed is the zygote's (fixed per zygote, random per fresh process);
  a few stdlib modules are already in ``sys.modules``; ``sys.get/setrecursionlimit`` are thin
  wrappers that hide the extra frames below the user's module (recursion depth is the same).
* user code cannot kill the emulator (``os.kill(os.getppid(), 9)`` gets PermissionError) and
  sees a small fixed environment; limits (CPU, file size, processes, address space) apply.
"""

from .capture import ABSORB_BYTES, KEEP_BYTES, SANDBOX_FUSION_CAPTURE, OutputCapture, decode_output
from .executor import Executor, WorkdirError
from .model import ExecutionRequest, ExecutionResult, ExecutionStatus, ExecutorConfig, PythonMode, WorkdirSetup
from .sync import ThreadedExecutor
from .workdir import DeferredWorkdir, Workdir

__all__ = [
    "ABSORB_BYTES",
    "KEEP_BYTES",
    "SANDBOX_FUSION_CAPTURE",
    "DeferredWorkdir",
    "ExecutionRequest",
    "ExecutionResult",
    "ExecutionStatus",
    "Executor",
    "ExecutorConfig",
    "OutputCapture",
    "PythonMode",
    "ThreadedExecutor",
    "Workdir",
    "WorkdirError",
    "WorkdirSetup",
    "decode_output",
]
