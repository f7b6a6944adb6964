"""A start gate: the sandbox gets ready during a wait, and the program starts only when the wait is over."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig, start_gate

from .conftest import Runner, dead

# The program reports when it started (CLOCK_MONOTONIC is the same clock in every process here).
_STAMP = "import time\nprint(time.monotonic())\n"


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(entry))
    return kids


async def _until_held_child(executor: Executor, within: float = 10.0) -> int:
    """Poll /proc (no fixed delay) until the zygote has a live child: the held one."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pid = executor.zygote_pid
        kids = _children_of(pid) if pid is not None else []
        if kids:
            return kids[0]
        await asyncio.sleep(0.005)
    raise AssertionError("no child was forked during the wait")


async def _run(executor: Executor, code: str, timeout: float = 10.0) -> ExecutionResult:
    with executor.deferred_workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), code.encode())
        setup = wd.setup()
        request = ExecutionRequest(
            argv=[executor.config.python, script], cwd=wd.path, timeout=timeout, python_script=script, setup=setup
        )
        result = await executor.run(request)
        wd.complete(result.files, result.workdir_removed)
        return result


def test_the_program_is_forked_during_the_wait_and_starts_after_it(runner: Runner) -> None:
    executor = runner.executor

    async def scenario() -> tuple[ExecutionResult, float]:
        release = asyncio.Event()
        with start_gate.offered(release.wait()) as gate:
            run = asyncio.ensure_future(_run(executor, _STAMP, timeout=1.0))
            await _until_held_child(executor)
            assert not run.done() and gate.taken
            released_at = time.monotonic()
            release.set()
            result = await run
            await gate.finish()
        return result, released_at

    result, released_at = runner.call(scenario())
    assert (result.status, result.return_code) == ("Finished", 0), result.stderr
    assert float(result.stdout or "nan") >= released_at  # it did not start before the wait ended
    # The timeout counts from the start: a wait longer than it would otherwise have ended the run.
    assert result.execution_time is not None and result.execution_time < 1.0


@pytest.mark.parametrize("timed", [False, True], ids=["go", "deadline"])
def test_a_run_cancelled_during_the_wait_never_starts_and_leaves_nothing(
    runner: Runner, tmp_path: Path, timed: bool
) -> None:
    executor = runner.executor
    marker = tmp_path / "started"
    tmp_path.chmod(0o777)  # the program runs as a sandbox uid when we are root

    async def scenario() -> int:
        # A wait that never ends by itself (with a deadline a minute away: the child sleeps until then).
        with start_gate.offered(asyncio.Event().wait(), time.monotonic() + 60 if timed else None):
            run = asyncio.ensure_future(_run(executor, f"open({str(marker)!r}, 'w').write('ran')"))
            held = await _until_held_child(executor)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
        # The held child is killed; the executor still serves, without a wait now.
        after = await _run(executor, "print('after')")
        assert after.stdout == "after\n"
        return held

    held = runner.call(scenario())
    assert not marker.exists()
    # killed: the warm interpreter kills it when the cancel reaches it, which may come after the next run's answer
    # (once in some thousand runs it was still alive when read at once)
    assert dead(held)


def test_only_the_first_run_takes_the_wait(runner: Runner) -> None:
    """A compile step takes it, not the run after it; a run with no gate offered does not wait at all."""
    executor = runner.executor

    async def scenario() -> tuple[list[ExecutionResult], float]:
        release = asyncio.Event()
        with start_gate.offered(release.wait()) as gate:
            first = asyncio.ensure_future(_run(executor, _STAMP))
            await _until_held_child(executor)
            second = await _run(executor, _STAMP)  # not held: runs while the first still waits
            assert not first.done()
            released_at = time.monotonic()
            release.set()
            done = [await first, second]
            await gate.finish()
        return done, released_at

    (first, second), released_at = runner.call(scenario())
    assert float(second.stdout or "nan") < released_at <= float(first.stdout or "nan")


@pytest.mark.parametrize("timed", [False, True], ids=["go", "deadline"])
def test_the_timeout_counts_from_the_start_not_from_the_fork(runner: Runner, timed: bool) -> None:
    """A 0.6 s wait (an injected latency) before a program with a 0.5 s timeout: it runs, timed from its start."""
    executor = runner.executor

    async def scenario() -> ExecutionResult:
        with start_gate.offered(asyncio.sleep(0.6), time.monotonic() + 0.6 if timed else None) as gate:
            result = await _run(executor, "print('in time')", timeout=0.5)
            assert gate.taken
            return result

    result = runner.call(scenario())
    assert (result.status, result.stdout) == ("Finished", "in time\n")
    assert result.execution_time is not None and result.execution_time < 0.5


def test_with_a_deadline_the_child_starts_itself_at_that_instant(runner: Runner) -> None:
    """A wait of real time: the child sleeps until the deadline by itself, and the program starts no sooner."""
    executor = runner.executor

    async def scenario() -> tuple[ExecutionResult, float]:
        deadline = time.monotonic() + 0.2
        with start_gate.offered(asyncio.Event().wait(), deadline) as gate:  # only the deadline says when
            result = await _run(executor, _STAMP)
            assert gate.taken and not gate.wait.done()
        return result, deadline

    result, deadline = runner.call(scenario())
    assert result.return_code == 0, result.stderr
    assert deadline <= float(result.stdout or "nan") < deadline + 0.15


def test_after_a_timed_wait_the_program_has_the_usual_timer_slack_and_its_own_random_state(runner: Runner) -> None:
    """The child sleeps to its deadline with no timer slack (woken at the instant), then puts the usual slack back:
    the program's sleeps are as coarse as anywhere. Its random generator is seeded afresh, as in any run."""
    executor = runner.executor
    probe = "import random\nprint(open('/proc/self/timerslack_ns').read().strip(), random.random())\n"

    async def timed() -> ExecutionResult:
        with start_gate.offered(asyncio.Event().wait(), time.monotonic() + 0.05):
            return await _run(executor, probe)

    usual = runner.run(probe).stdout.split()  # type: ignore[union-attr]
    after_waits = [runner.call(timed()).stdout.split() for _ in range(3)]
    assert [slack for slack, _ in after_waits] == [usual[0]] * 3
    assert len({draw for _, draw in after_waits} | {usual[1]}) == 4


def test_beyond_the_cap_a_run_waits_first_and_forks_after(loop: asyncio.AbstractEventLoop) -> None:
    """With ``ready_in_latency=1`` a second gated run does not fork during its wait; it still starts after it."""
    executor = Executor(ExecutorConfig(python_mode="fast", ready_in_latency=1, warm_interpreters=1))
    runner = Runner(loop, executor, "fast")

    async def gated(release: asyncio.Event) -> ExecutionResult:
        with start_gate.offered(release.wait()) as gate:
            result = await _run(executor, _STAMP)
            await gate.finish()
            return result

    async def scenario() -> tuple[ExecutionResult, float, ExecutionResult, float]:
        await executor.start()
        first_release, second_release = asyncio.Event(), asyncio.Event()
        first = asyncio.ensure_future(gated(first_release))
        await _until_held_child(executor)
        second = asyncio.ensure_future(gated(second_release))
        zygote = executor.zygote_pid
        assert zygote is not None
        for _ in range(20):  # let the second run go as far as it would (it would fork within a few iterations)
            await asyncio.sleep(0)
        spawned = executor._zygotes[0]._pending if executor._zygotes[0] is not None else {}
        assert len(spawned) == 1 and len(_children_of(zygote)) == 1  # only the first is forked and held
        second_released = time.monotonic()
        second_release.set()
        second_result = await second
        assert not first.done()
        first_released = time.monotonic()
        first_release.set()
        return await first, first_released, second_result, second_released

    try:
        first, first_released, second, second_released = runner.call(scenario())
    finally:
        runner.call(executor.aclose())
    assert float(first.stdout or "nan") >= first_released
    assert float(second.stdout or "nan") >= second_released


def test_a_zygote_lost_while_its_child_waits_is_an_error_at_once(loop: asyncio.AbstractEventLoop) -> None:
    """The warm interpreter dies while a ready child sleeps towards a deadline a minute away: the run is an Error
    at once (not a minute later), the child dies with it, and the next run gets a fresh warm interpreter."""
    executor = Executor(ExecutorConfig(python_mode="fast", warm_interpreters=1))
    runner = Runner(loop, executor, "fast")

    async def scenario() -> tuple[ExecutionResult, int, ExecutionResult]:
        await executor.start()
        with start_gate.offered(asyncio.Event().wait(), time.monotonic() + 60):
            run = asyncio.ensure_future(_run(executor, "print('never')"))
            held = await _until_held_child(executor)
            zygote = executor.zygote_pid
            assert zygote is not None
            os.kill(zygote, signal.SIGKILL)
            lost = await asyncio.wait_for(run, 10)
        after = await _run(executor, "print('after')")
        return lost, held, after

    try:
        lost, held, after = runner.call(scenario())
    finally:
        runner.call(executor.aclose())
    assert (lost.status, lost.return_code, lost.stdout) == ("Error", None, None)
    assert dead(held)
    assert (after.status, after.stdout) == ("Finished", "after\n")


@pytest.mark.parametrize("value", [-1, 1.5, True, "8"])
def test_a_ready_in_latency_that_is_not_a_count_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="ready_in_latency must be a whole number"):
        Executor(ExecutorConfig(ready_in_latency=value))  # type: ignore[arg-type]


def test_a_gate_of_real_time_is_a_deadline_alone(loop: asyncio.AbstractEventLoop) -> None:
    """Nothing of the server's is scheduled for the end of a wait of real time; finishing it when no run took it
    still waits until the deadline. A gate needs a wait or a deadline."""

    async def scenario() -> tuple[bool, bool, float]:
        deadline = time.monotonic() + 0.1
        with start_gate.offered(None, deadline) as gate:
            assert gate.wait is None
            before = gate.over()
            await gate.finish()
            return before, gate.over(), time.monotonic() - deadline

    before, after, late = loop.run_until_complete(scenario())
    assert (before, after) == (False, True) and late >= 0
    with pytest.raises(ValueError):
        start_gate.StartGate(None, None)
