"""Several warm interpreters (zygotes): runs go to the least busy one, each works alone, and all go with the executor.

One zygote forks every program; on many cores it, not the cores, bounds the fast path (about 1,600 runs a second on
a 16-core machine, with that zygote at a whole core and the machine two-thirds idle). ``warm_interpreters`` adds
more; by default one per six usable cores (they share one private /tmp).
"""

from __future__ import annotations

import asyncio
import collections
import os
from pathlib import Path

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


@pytest.mark.parametrize(
    ("cores", "warm"), [(1, 1), (2, 1), (5, 1), (6, 1), (11, 1), (12, 2), (16, 2), (18, 3), (64, 4)]
)
def test_the_default_is_one_warm_interpreter_per_six_cores_up_to_four(
    monkeypatch: pytest.MonkeyPatch, cores: int, warm: int
) -> None:
    """They share one private /tmp, so more can be the default where the cores are there to use them."""
    from emulator.executor import executor as executor_module

    monkeypatch.setattr(executor_module, "usable_cores", lambda: cores)
    assert Executor().warm_interpreters == warm
    assert Executor(ExecutorConfig(warm_interpreters=4)).warm_interpreters == 4  # asked for: as asked


@pytest.mark.parametrize(
    ("cpu_max", "cores"), [("max 100000", 8), ("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1)]
)
def test_usable_cores_heed_a_cgroup_quota(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cpu_max: str, cores: int
) -> None:
    """A container limited to two CPUs (``docker run --cpus 2``) on a big host sees all the host's CPUs in its
    affinity; its ``cpu.max`` says how much it may use."""
    from emulator.executor import cores as cores_module

    limit = tmp_path / "cpu.max"
    limit.write_text(cpu_max + "\n")
    monkeypatch.setattr(cores_module.os, "sched_getaffinity", lambda _pid: set(range(8)))
    monkeypatch.setattr(cores_module, "_cgroup_quota", lambda: cores_module._quota_in(str(limit)))
    assert cores_module.usable_cores() == cores


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


def test_a_warm_interpreter_that_failed_to_start_is_left_alone_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its runs go to the one that runs; the next runs are not each sent to try the start again first (before, half
    of them were, and a start that fails slowly, by its time-out, cost each of them that time)."""
    from emulator.executor import zygote

    tries: list[int] = []
    real_start = zygote.Zygote.start

    async def cannot_start(self: zygote.Zygote) -> None:
        tries.append(1)
        await asyncio.sleep(0)  # it fails at its first wait, as a start does, not at once
        raise OSError(11, "Resource temporarily unavailable")

    async def main() -> tuple[list[ExecutionResult], int]:
        executor = Executor(ExecutorConfig(warm_interpreters=2))
        try:
            first = await _run(executor, PROGRAM)
            pid = executor.zygote_pid
            assert first.status == "Finished" and pid is not None
            monkeypatch.setattr(zygote.Zygote, "start", cannot_start)
            results = list(await asyncio.gather(*(_run(executor, PROGRAM) for _ in range(6))))
            results += await asyncio.gather(*(_run(executor, PROGRAM) for _ in range(4)))
            monkeypatch.setattr(zygote.Zygote, "start", real_start)
            return results, pid
        finally:
            await executor.aclose()

    results, pid = asyncio.run(main())
    assert [result.status for result in results] == ["Finished"] * 10
    assert {int(str(result.stdout)) for result in results} == {pid}
    assert len(tries) == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_a_count_that_is_no_count_is_refused_with_its_name(value: object) -> None:
    with pytest.raises(ValueError, match="warm_interpreters"):
        ExecutorConfig(warm_interpreters=value)  # type: ignore[arg-type]
