"""Several warm interpreters (zygotes): runs go to the least busy one, each works alone, and all go with the executor.

One zygote forks every program; on many cores it, not the cores, bounds the fast path (about 1,600 runs a second on
a 16-core machine, with that zygote at a whole core and the machine two-thirds idle). ``warm_interpreters`` adds
more; one by default (each has a private /tmp of its own).
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


def test_one_warm_interpreter_by_default() -> None:
    """Each has a private /tmp of its own: more than one, and a file a run leaves there is not there for every later
    run, as it is in the real server's container. So more are asked for, never assumed."""
    assert Executor().warm_interpreters == 1
    assert Executor(ExecutorConfig(warm_interpreters=4)).warm_interpreters == 4


def test_a_run_whose_warm_interpreter_cannot_start_goes_to_one_that_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.executor import zygote

    async def cannot_start(self: zygote.Zygote) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    async def main() -> tuple[list[ExecutionResult], int]:
        executor = Executor(ExecutorConfig(warm_interpreters=2))
        try:
            first = await _run(executor, PROGRAM)  # the first warm interpreter starts
            pid = executor.zygote_pid
            assert first.status == "Finished" and pid is not None
            monkeypatch.setattr(zygote.Zygote, "start", cannot_start)  # the second never will
            results = list(await asyncio.gather(*(_run(executor, PROGRAM) for _ in range(4))))
            return results, pid
        finally:
            await executor.aclose()

    results, pid = asyncio.run(main())
    assert [result.status for result in results] == ["Finished"] * 4  # before: half were "executor unavailable"
    assert {int(str(result.stdout)) for result in results} == {pid}


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_a_count_that_is_no_count_is_refused_with_its_name(value: object) -> None:
    with pytest.raises(ValueError, match="warm_interpreters"):
        ExecutorConfig(warm_interpreters=value)  # type: ignore[arg-type]
