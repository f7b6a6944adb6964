"""A child that waits for its start copies, during the wait, the pages that runs are known to write.

The zygote samples some runs: at its end such a child marks in its done page the pages it holds a copy of, and the
zygote keeps those two samples agree on. These tests use a fresh executor (sampling starts with its second run).
"""

from __future__ import annotations

import asyncio
import os
import time

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig, start_gate

# Page faults of the program's own run: what it copies once it has started (plus its few first touches).
_FAULTS = (
    "import resource\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "print(sum(i * i for i in range(100)), 'x' * 10, {'a': 1})\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
)

#: The wait before each program's start. Only a run whose wait is still ahead when its child is forked prefaults;
#: the few milliseconds before the fork (the work dir, the executor's queue) must stay inside it on a loaded machine.
WAIT_S = 0.5


async def _run(executor: Executor, code: str, wait: float = 0.0) -> ExecutionResult:
    with executor.deferred_workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), code.encode())
        request = ExecutionRequest(
            argv=[executor.config.python, script], cwd=wd.path, timeout=10, python_script=script, setup=wd.setup()
        )
        if wait:
            with start_gate.offered(None, time.monotonic() + wait):
                result = await executor.run(request)
        else:
            result = await executor.run(request)
        wd.complete(result.files, result.workdir_removed)
        return result


def test_runs_are_sampled_and_a_waiting_child_copies_what_they_wrote_before_it_starts(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> tuple[list[ExecutionResult], list[int], list[int]]:
        executor = Executor(ExecutorConfig(python_mode="fast"))
        await executor.start()
        try:
            # The second run is sampled, and others after it: each ends with the right status and output.
            first = [await _run(executor, f"import sys\nprint({i})\nsys.exit({i % 4})\n") for i in range(40)]
            plain = [int((await _run(executor, _FAULTS)).stdout.split()[-1]) for _ in range(5)]  # type: ignore[union-attr]
            waited = [int((await _run(executor, _FAULTS, WAIT_S)).stdout.split()[-1]) for _ in range(5)]  # type: ignore[union-attr]
            return first, plain, waited
        finally:
            await executor.aclose()

    first, plain, waited = loop.run_until_complete(scenario())
    assert [(r.return_code, r.stdout) for r in first] == [(i % 4, f"{i}\n") for i in range(40)]
    # Its run copied most of its pages during the wait: fewer faults once started, in every run. (How many fewer is
    # the machine's: about a third of a plain run's faults on a 2-core VM, a half to two thirds on a 16-core machine.)
    assert max(waited) < min(plain), (plain, waited)
