"""Several warm interpreters (zygotes): runs go to the least busy one, each works alone, and all go with the executor.

One zygote forks every program; on many cores it, not the cores, bounds the fast path (about 1,600 runs a second on
a 16-core machine, with that zygote at a whole core and the machine two-thirds idle). ``warm_interpreters`` adds
more; by default one per 8 cores.
"""

from __future__ import annotations

import asyncio
import collections
import os

import pytest

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig

from .conftest import dead

PROGRAM = "import os, time\nprint(os.getppid())\ntime.sleep(0.3)\n"


async def _run(executor: Executor, code: str) -> ExecutionResult:
    with executor.workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), code.encode())
        request = ExecutionRequest(
            argv=[executor.config.python, script], cwd=wd.path, timeout=10.0, python_script=script
        )
        return await executor.run(request)


@pytest.mark.parametrize("mode", ["fast", "faithful"])
def test_concurrent_runs_are_shared_out_among_the_warm_interpreters(mode: str) -> None:
    async def main() -> tuple[list[ExecutionResult], int]:
        executor = Executor(ExecutorConfig(python_mode=mode, warm_interpreters=3))  # type: ignore[arg-type]
        try:
            assert executor.warm_interpreters == 3
            results = list(await asyncio.gather(*(_run(executor, PROGRAM) for _ in range(9))))
            first = executor.zygote_pid
            assert first is not None
            return results, first
        finally:
            await executor.aclose()

    results, first = asyncio.run(main())
    assert [result.status for result in results] == ["Finished"] * 9
    assert {result.return_code for result in results} == {0}
    parents = collections.Counter(int(str(result.stdout)) for result in results)
    assert sorted(parents.values()) == [3, 3, 3]  # nine at once: three each, the least busy taking the next
    assert first in parents
    for zygote in parents:  # closing the executor ended every one of them
        assert dead(zygote)


def test_one_warm_interpreter_per_eight_cores_by_default() -> None:
    assert Executor().warm_interpreters == max(1, (os.cpu_count() or 1) // 8)
    assert Executor(ExecutorConfig(warm_interpreters=1)).warm_interpreters == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_a_count_that_is_no_count_is_refused_with_its_name(value: object) -> None:
    with pytest.raises(ValueError, match="warm_interpreters"):
        ExecutorConfig(warm_interpreters=value)  # type: ignore[arg-type]
