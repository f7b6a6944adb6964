"""How fast this machine is at the two things an emulated execution is made of: Python, and fork plus exit.

A shared VM's speed moves from day to day (on the 2-core development VM, a pure-Python loop ran at half the speed
one day that it ran the day before), so a throughput figure means little without the speed it was measured at.
The probe runs in a fresh ``python -I -S`` process, so what the benchmark itself has imported (verl, torch, the
SDKs) does not change what it measures, and it takes about half a second.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass

#: The probe, run as a program: best of five timings of a fixed loop, and the median of fork plus exit plus reap.
_PROBE = """
import json, os, time
def loop(n):
    total = 0
    for i in range(n):
        total += i * i
    return total
best = float("inf")
for _ in range(5):
    start = time.perf_counter()
    loop(200_000)
    best = min(best, time.perf_counter() - start)
forks = []
for _ in range(41):
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    forks.append(time.perf_counter() - start)
forks.sort()
print(json.dumps({"loop_ns": best / 200_000 * 1e9, "fork_ms": forks[len(forks) // 2] * 1e3}))
"""


class ProbeError(Exception):
    """The probe could not run or gave no answer (the benchmark goes on without its figures)."""


@dataclass(frozen=True)
class MachineSpeed:
    """Two figures of this machine's speed, lower is faster."""

    #: Nanoseconds per iteration of ``total += i * i`` over ``range(n)``, in this Python (best of five).
    python_loop_ns: float
    #: Milliseconds for a bare interpreter to fork a child that exits at once and reap it (median of 41).
    fork_exit_ms: float

    def as_dict(self) -> dict[str, float]:
        return {key: round(value, 3) for key, value in asdict(self).items()}

    def describe(self) -> str:
        loop = f"a pure-Python loop at {self.python_loop_ns:.0f} ns per iteration"
        return f"{loop}, fork plus exit {self.fork_exit_ms:.2f} ms"


def measure(python: str = sys.executable, timeout: float = 60.0) -> MachineSpeed:
    """Run the probe in a fresh interpreter (isolated, no ``site``) and read its figures."""
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeError(f"the machine-speed probe did not run: {exc}") from exc
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ProbeError(f"the machine-speed probe failed (exit status {done.returncode}): {last[0]}")
    try:
        figures = json.loads(done.stdout)
        return MachineSpeed(python_loop_ns=float(figures["loop_ns"]), fork_exit_ms=float(figures["fork_ms"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ProbeError(f"the machine-speed probe gave no figures: {done.stdout[:200]!r}") from exc
