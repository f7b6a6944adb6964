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
    from emulator.executor import cores as cores_module

    monkeypatch.setattr(cores_module, "usable_cores", lambda: cores)
    assert Executor().warm_interpreters == warm
    assert Executor(ExecutorConfig(warm_interpreters=4)).warm_interpreters == 4  # asked for: as asked


def _cgroups(root: Path, own: str, files: dict[str, str]) -> tuple[str, str]:
    """A fake ``/sys/fs/cgroup`` under ``root`` with ``files`` (path: content), and a ``/proc/self/cgroup``."""
    mounts = root / "cgroup"
    mounts.mkdir()
    for path, content in files.items():
        (mounts / path).parent.mkdir(parents=True, exist_ok=True)
        (mounts / path).write_text(content + "\n")
    (root / "self-cgroup").write_text(own)
    return str(mounts), str(root / "self-cgroup")


@pytest.mark.parametrize(
    ("own", "files", "quota"),
    [
        ("0::/\n", {}, None),  # no cgroup files at all
        ("0::/\n", {"cpu.max": "max 100000"}, None),
        ("0::/\n", {"cpu.max": "200000 100000"}, 2.0),  # a container's own group, seen as the root
        # a job's group under a slice: the slice's quota is the tighter one
        ("0::/slice/job\n", {"slice/job/cpu.max": "400000 100000", "slice/cpu.max": "150000 100000"}, 1.5),
        ("0::/slice/job\n", {"slice/job/cpu.max": "50000 100000", "slice/cpu.max": "max 100000"}, 0.5),
        # the host's path, which does not exist in the container: its root holds the quota
        ("0::/docker/abc\n", {"cpu.max": "300000 100000"}, 3.0),
        # cgroup v1 (hybrid, as here): cpu,cpuacct by its path, then up to the root
        (
            "4:memory:/x\n2:cpu,cpuacct:/job\n0::/\n",
            {"cpu,cpuacct/job/cpu.cfs_quota_us": "200000", "cpu,cpuacct/job/cpu.cfs_period_us": "100000"},
            2.0,
        ),
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ("0::/\n", {"cpu.max": "garbage"}, None),
    ],
)
def test_the_cgroup_quota_is_the_tightest_of_the_group_and_its_ancestors(
    tmp_path: Path, own: str, files: dict[str, str], quota: float | None
) -> None:
    """A container limited to two CPUs (``docker run --cpus 2``) on a big host sees all the host's CPUs in its
    affinity; its cgroup says how much it may use."""
    from emulator.executor import cores

    mounts, self_cgroup = _cgroups(tmp_path, own, files)
    assert cores.cgroup_quota(mounts, self_cgroup) == quota


@pytest.mark.parametrize(("quota", "cores"), [(None, 8), (2.0, 2), (1.5, 2), (0.5, 1), (20.0, 8)])
def test_usable_cores_heed_the_quota(monkeypatch: pytest.MonkeyPatch, quota: float | None, cores: int) -> None:
    from emulator.executor import cores as cores_module

    monkeypatch.setattr(cores_module.os, "sched_getaffinity", lambda _pid: set(range(8)))
    monkeypatch.setattr(cores_module, "cgroup_quota", lambda: quota)
    assert cores_module.usable_cores() == cores


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_close_during_the_first_starts_leaves_no_warm_interpreter_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The close waits for the starts under way, which then close what they started; a start that had not begun
    never does (before, starts that waited for the first one's namespace ran after the close had returned)."""
    from emulator.executor import zygote

    real_start = zygote.Zygote.start
    began: list[bool] = []
    started: list[zygote.Zygote] = []
    first = asyncio.Event()

    async def spy(self: zygote.Zygote) -> None:
        began.append(executor_closed[0])
        started.append(self)
        first.set()
        await real_start(self)

    monkeypatch.setattr(zygote.Zygote, "start", spy)
    executor_closed = [False]

    async def main() -> tuple[list[int], list[object]]:
        executor = Executor(ExecutorConfig(warm_interpreters=3))
        runs = [asyncio.ensure_future(_run(executor, "print(1)")) for _ in range(3)]
        await first.wait()
        await executor.aclose()
        executor_closed[0] = True
        alive = [z._proc.pid for z in started if z._proc is not None and _running(z._proc.pid)]
        outcomes = await asyncio.gather(*runs, return_exceptions=True)
        return alive, outcomes

    alive, outcomes = asyncio.run(main())
    assert alive == []
    assert True not in began
    assert all(isinstance(outcome, RuntimeError) for outcome in outcomes), outcomes


def test_a_close_ends_the_running_programs_before_it_waits_for_a_slow_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start may take up to half a minute to fail; the programs of the warm interpreters already running must not
    run on for that long after the close has begun (nor at all, were the close cancelled meanwhile)."""
    from emulator.executor import zygote

    real_start = zygote.Zygote.start
    release = asyncio.Event()
    second_waiting = asyncio.Event()
    calls: list[int] = []

    async def second_is_slow(self: zygote.Zygote) -> None:
        calls.append(1)
        if len(calls) > 1:
            second_waiting.set()
            await release.wait()
        await real_start(self)

    monkeypatch.setattr(zygote.Zygote, "start", second_is_slow)

    async def main() -> tuple[bool, bool]:
        executor = Executor(ExecutorConfig(warm_interpreters=2))
        long_run = asyncio.ensure_future(_run(executor, "import time\ntime.sleep(60)\n"))
        program = None
        for _ in range(3000):  # until the first warm interpreter reports the program started
            first = executor._zygotes[0]
            started = [p.pid for p in first._pending.values() if p.pid is not None] if first is not None else []
            if started:
                program = started[0]
                break
            await asyncio.sleep(0.01)
        assert program is not None, "the long program never started"
        waiting_run = asyncio.ensure_future(_run(executor, "print(1)"))  # to the second, which starts slowly
        await second_waiting.wait()
        closing = asyncio.ensure_future(executor.aclose())
        for _ in range(500):  # 5 s at most: the run's own time-out (10 s) would end it later
            if not _running(program):
                break
            await asyncio.sleep(0.01)
        ended_during_the_start = not _running(program)
        close_waited = not closing.done()
        release.set()
        await closing
        await asyncio.gather(long_run, waiting_run, return_exceptions=True)
        return ended_during_the_start, close_waited

    ended, waited = asyncio.run(main())
    assert ended  # before, it ran until the slow start was over
    assert waited  # and the close still waited for that start, which closes what it started


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
    from emulator.executor import executor as executor_module
    from emulator.executor import zygote

    # Long enough that no second try can fall within the test, however slow the machine.
    monkeypatch.setattr(executor_module, "_START_BACKOFF_FIRST", 3600.0)
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


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2", 65])
def test_a_count_that_is_no_count_is_refused_with_its_name(value: object) -> None:
    with pytest.raises(ValueError, match="warm_interpreters"):
        ExecutorConfig(warm_interpreters=value)  # type: ignore[arg-type]
