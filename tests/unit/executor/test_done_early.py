"""A fast-path run is reported when its program ends, before the kernel has torn its process down.

The child writes its exit status to a page it shares with the zygote alone, closes its standard streams and exits;
the end of both streams tells the zygote. These tests check that the result is the one its exit would have given
(status, output), that the early report happens, and that a run whose streams end otherwise is waited for as before.
"""

from __future__ import annotations

import asyncio

import pytest

from emulator.executor import ExecutionResult, Executor

from .conftest import Runner, dead, wait_until_reaped

# (program, exit status, stdout, text that stderr holds)
PROGRAMS = [
    ("import sys\nprint('a')\nprint('b', file=sys.stderr)\n", 0, "a\n", "b\n"),
    ("import sys\nsys.exit(3)\n", 3, "", ""),
    ("import sys\nsys.exit(256 + 5)\n", 5, "", ""),
    ("import sys\nsys.exit('bye')\n", 1, "", "bye\n"),
    ("raise ValueError('boom')\n", 1, "", "ValueError: boom"),
    ("import sys\nsys.stdout.write('x' * 200_000)\n", 0, "x" * 200_000, ""),
    ("import os\nprint('flushed?')\nos._exit(7)\n", 7, "", ""),
    (
        "import os\npid = os.fork()\n"
        "if pid == 0:\n    print('child')\nelse:\n    os.waitpid(pid, 0)\n    print('parent')\n",
        0,
        "child\nparent\n",
        "",
    ),
    # Its streams end long before its exit, and before any status is written: the exit is waited for.
    ("import os\nos.close(1)\nos.close(2)\nsum(range(10**6))\nos._exit(4)\n", 4, "", ""),
]


@pytest.fixture
def fast(loop: asyncio.AbstractEventLoop, executors: dict[str, Executor]) -> Runner:
    """The fast path only: faithful children exec, and a page shared with the zygote does not survive an exec."""
    return Runner(loop, executors["fast"], "fast")


def _early_count(executor: Executor) -> int:
    zygote = executor._zygotes[0]
    assert zygote is not None
    return zygote.exits_before_teardown


@pytest.mark.parametrize(("code", "status", "stdout", "stderr"), PROGRAMS)
def test_the_result_is_the_one_an_exit_gives(runner: Runner, code: str, status: int, stdout: str, stderr: str) -> None:
    """On both paths (the faithful one never reports early), the same status and output."""
    got = runner.run(code)
    assert (got.status, got.return_code, got.stdout) == ("Finished", status, stdout), got.stderr
    assert stderr in (got.stderr or "")


def test_a_short_run_is_reported_before_its_teardown(fast: Runner) -> None:
    runner, executor = fast, fast.executor
    runner.run("pass")  # the zygote is up
    before = _early_count(executor)
    for i in range(5):
        assert runner.run(f"print({i})").stdout == f"{i}\n"
    assert _early_count(executor) == before + 5
    zygote = executor.zygote_pid
    assert zygote is not None
    wait_until_reaped(zygote)  # and each reported child is reaped after


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos._exit(0)\n",  # no status written
        "import subprocess\nsubprocess.Popen(['sleep', '5'])\nprint('left one')\n",  # a process holds its stdout
    ],
)
def test_a_run_whose_streams_end_otherwise_is_waited_for(fast: Runner, code: str) -> None:
    runner, executor = fast, fast.executor
    runner.run("pass")
    before = _early_count(executor)
    got = runner.run(code)
    assert (got.status, got.return_code) == ("Finished", 0), got.stderr
    assert _early_count(executor) == before


def test_the_process_it_left_holding_stdout_is_killed_with_its_group(runner: Runner) -> None:
    """As at an exit: the group goes, so what the left process would print later is never seen, and the run does not
    wait for it."""
    got: ExecutionResult = runner.run(
        "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 3; echo late'])\nprint('early')\n", timeout=10.0
    )
    assert (got.return_code, got.stdout) == (0, "early\n")
    assert got.execution_time is not None and got.execution_time < 2.5


def test_a_process_it_left_is_killed_when_it_is_reported(fast: Runner) -> None:
    """A left process that holds none of its streams does not hold the report back; it is killed then, as at an
    exit."""
    runner, executor = fast, fast.executor
    runner.run("pass")
    before = _early_count(executor)
    got = runner.run(
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '30'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,"
        " stderr=subprocess.DEVNULL)\n"
        "print(p.pid)\n"
    )
    assert got.return_code == 0, got.stderr
    assert _early_count(executor) == before + 1
    assert dead(int(got.stdout or "0"))
