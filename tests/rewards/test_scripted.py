"""The reward itself on scripted solutions, on both backends: good, wrong, banned, raising, looping."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

from emulator.journal import Journal
from emulator.server import EmulatorServer
from harness.chaos.judges import ChaosJudge
from harness.rewards import ExecOutcome, SandboxReward, build_program, extract_code, get_task, score_output
from harness.rewards.sandbox_reward import MAX_RETRY_AFTER, retry_after

GOOD_SORT = """```python
def sort_numbers(nums):
    out = []
    for x in nums:
        i = 0
        while i < len(out) and out[i] < x:
            i += 1
        out.insert(i, x)
    return out
```"""
# Right only when the input is already sorted or has at most one element: 2 of the 5 tests ([], [5]).
WRONG_SORT = "def sort_numbers(nums):\n    return list(nums)\n"
BANNED_SORT = "def sort_numbers(nums):\n    return sorted(nums)\n"
RAISING_SORT = "def sort_numbers(nums):\n    raise ValueError('no')\n"
LOOPING_SORT = "def sort_numbers(nums):\n    while True:\n        pass\n"
GOOD_KADANE = (
    "def max_subarray_sum(nums):\n"
    "    n = len(nums)\n"
    "    return max(sum(nums[i:j]) for i in range(n) for j in range(i + 1, n + 1))\n"
)
# Sum of the whole list: right on some tests only (the fraction is computed by the pass_fraction fixture).
WRONG_KADANE = "def max_subarray_sum(nums):\n    return sum(nums)\n"
# Counts the multiples of 3 only: right for small n.
WRONG_FIZZ = "def fizzbuzz_count(n):\n    return n // 3\n"

BACKENDS = ["daytona_reward", "fusion_reward"]
RUN_CODE = "sandbox_fusion.run_code"


@pytest.mark.parametrize("backend", BACKENDS)
def test_scripted_rewards(
    backend: str, request: pytest.FixtureRequest, pass_fraction: Callable[[str, str], float]
) -> None:
    make: Callable[..., SandboxReward] = request.getfixturevalue(backend)
    reward = make("sort_numbers", timeout=1.0)
    completions = [GOOD_SORT, WRONG_SORT, BANNED_SORT, RAISING_SORT, "", "   "]
    scores = reward(["p"] * len(completions), completions)
    wrong = pass_fraction("sort_numbers", WRONG_SORT)
    assert 0 < wrong < 1
    assert scores == [1.0, wrong, -1.0, -1.0, -1.0, -1.0]


#: Completions that try to make the checker pass wrong answers: each returns WRONG_SORT's answers (sort_numbers bans
#: imports, so those that import are fizzbuzz_count's, with WRONG_FIZZ's answers).
CHEATS = {
    "redefines the reference's old name": WRONG_SORT + "def _reference_sort_numbers(nums):\n    return list(nums)\n",
    "rebinds bool": WRONG_SORT + "bool = lambda _x: True\n",
    "always equal": "class _Yes(list):\n    def __eq__(self, other):\n        return True\n\n"
    "def sort_numbers(nums):\n    return _Yes(nums)\n",
    "patches builtins.bool": WRONG_FIZZ + "import builtins\nbuiltins.bool = lambda _x: True\n",
    "patches json.dumps": WRONG_FIZZ + "import json\njson.dumps = lambda *a, **k: '{\"results\": [true]}'\n",
    "patches sum": WRONG_FIZZ + "import builtins\nbuiltins.sum = lambda *a: 0\n",
    "replaces stdout": WRONG_FIZZ + "import io, sys\nsys.stdout = io.StringIO()\n",
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_completion_cannot_fool_the_checker(
    backend: str, request: pytest.FixtureRequest, pass_fraction: Callable[[str, str], float]
) -> None:
    """The reference and its answers are fixed before the completion runs, which runs in its own namespace; answers
    are compared as plain values. So none of the cheats scores more than the plain wrong answers it returns."""
    make: Callable[..., SandboxReward] = request.getfixturevalue(backend)
    reward = make("sort_numbers", timeout=2.0)
    wrong_sort, wrong_fizz = pass_fraction("sort_numbers", WRONG_SORT), pass_fraction("fizzbuzz_count", WRONG_FIZZ)
    assert 0 < wrong_sort < 1 and 0 < wrong_fizz < 1
    tasks = ["fizzbuzz_count" if "import" in code else "sort_numbers" for code in CHEATS.values()]
    scores = reward(["p"] * len(CHEATS), list(CHEATS.values()), task=tasks)
    assert dict(zip(CHEATS, scores, strict=True)) == {
        "redefines the reference's old name": wrong_sort,
        "rebinds bool": wrong_sort,
        "always equal": 0.0,  # not a list: no answer is taken at its word
        "patches builtins.bool": wrong_fizz,
        # Daytona's interpreter driver answers in JSON from the same process: patching it fails the run instead
        "patches json.dumps": -1.0 if backend == "daytona_reward" else wrong_fizz,
        "patches sum": wrong_fizz,  # the reference's answers were worked out before the completion ran
        "replaces stdout": wrong_fizz,
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_endless_loop_is_minus_one_after_the_timeout(backend: str, request: pytest.FixtureRequest) -> None:
    make: Callable[..., SandboxReward] = request.getfixturevalue(backend)
    reward = make("sort_numbers", timeout=1.0)
    assert reward(["p"], [LOOPING_SORT]) == [-1.0]
    assert reward.outcomes == {"timeout": 1}  # ended by its time limit, not by an error
    assert reward(["p"], [GOOD_SORT]) == [1.0]  # the pool (or service) still answers afterwards


@pytest.mark.parametrize("backend", BACKENDS)
def test_task_column_picks_the_task_per_completion(
    backend: str, request: pytest.FixtureRequest, pass_fraction: Callable[[str, str], float]
) -> None:
    make: Callable[..., SandboxReward] = request.getfixturevalue(backend)
    reward = make("sort_numbers")
    scores = reward(
        ["a", "b", "c"], [GOOD_KADANE, WRONG_KADANE, GOOD_SORT], task=["max_subarray_sum"] * 2 + ["sort_numbers"]
    )
    assert scores == [1.0, pass_fraction("max_subarray_sum", WRONG_KADANE), 1.0]


def test_references_pass_their_own_tests_locally() -> None:
    from harness.rewards.tasks import TASKS

    for task in TASKS.values():
        program = build_program(task, task.reference)
        with contextlib.redirect_stdout(io.StringIO()) as stdout:
            exec(compile(program, task.name, "exec"), {})
        out = stdout.getvalue().splitlines()
        assert out and '"results"' in out[-1] and "false" not in out[-1], task.name
        assert score_output(ExecOutcome(stdout=stdout.getvalue())) == 1.0, task.name
        assert not any(p in task.reference for p in task.banned) or task.name == "sort_numbers"


def test_extract_code_from_conversational_completion() -> None:
    msgs = [{"role": "assistant", "content": "Here:\n```python\nx = 1\n```\nDone."}]
    assert extract_code(msgs) == "x = 1"
    assert extract_code("plain code") == "plain code"


def test_unknown_task_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown task 'nope'; known tasks: "):
        get_task("nope")


@pytest.mark.faults({"rules": [{"route": "sandbox_fusion.run_code", "requests": "1-2", "fault": "sandbox_error"}]})
def test_a_sandbox_error_body_is_retried_not_scored(fusion_reward: Callable[..., SandboxReward]) -> None:
    """Sandbox Fusion's HTTP-200 SandboxError body is the service failing: retried, then scored normally."""
    reward = fusion_reward("sort_numbers")
    assert reward(["p"], [GOOD_SORT]) == [1.0]  # the third try ran
    assert reward.outcomes == {"ran": 1}


def test_trl_log_metric_gets_the_outcome_fractions(daytona_reward: Callable[..., SandboxReward]) -> None:
    reward = daytona_reward("sort_numbers", size=2, timeout=1.0)
    logged: dict[str, list[float]] = {}

    def log_metric(name: str, value: float) -> None:
        logged.setdefault(name, []).append(value)

    completions = [GOOD_SORT, BANNED_SORT, RAISING_SORT, LOOPING_SORT]
    assert reward(["p"] * 4, completions, log_metric=log_metric) == [1.0, -1.0, -1.0, -1.0]
    assert {name: values[0] for name, values in logged.items()} == {
        "sandbox/ran": 0.25,
        "sandbox/not_run": 0.25,
        "sandbox/program_error": 0.25,
        "sandbox/timeout": 0.25,
        "sandbox/infra_error": 0.0,
        "sandbox/failed_tries": 0.0,
        "sandbox/replaced": 1.0,  # the timed-out sandbox
    }
    assert reward.outcomes == {"ran": 1, "not_run": 1, "program_error": 1, "timeout": 1}


def _checkpoint(signum: int, frame: object) -> None:
    """A caller's own SIGINT handler."""


@pytest.mark.parametrize("handler", [_checkpoint, signal.SIG_IGN], ids=["own handler", "ignored"])
def test_the_callers_sigint_handler_is_kept(
    handler: Any, fusion_reward: Callable[..., SandboxReward], emulator_journal: Journal
) -> None:
    """The reward handles Ctrl-C itself while it runs, then gives the caller's handler back; a SIGINT the caller
    ignores stays ignored while the reward runs."""
    original = signal.signal(signal.SIGINT, handler)
    try:
        reward = fusion_reward("fizzbuzz_count", timeout=5.0)
        assert signal.getsignal(signal.SIGINT) is handler
        slow = "def fizzbuzz_count(n):\n    import time\n    time.sleep(0.5)\n    return 0\n"
        if handler is signal.SIG_IGN:

            def interrupt_once_running() -> None:
                emulator_journal.wait_for(lambda j: j.in_flight("sandbox_fusion.run_code") >= 1, timeout=10)
                os.kill(os.getpid(), signal.SIGINT)

            threading.Thread(target=interrupt_once_running, daemon=True).start()
        assert reward(["p"], [slow]) == [0.4]  # right for n = 0 and 1; not interrupted
        assert signal.getsignal(signal.SIGINT) is handler
        reward.close()
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, original)


class _LibraryAddsItsHandler:
    """A backend that, like the Daytona SDK's engineio at its first connection, adds a SIGINT handler to the running
    loop; each run sends SIGINT to the process and lets the loop turn a few times."""

    def __init__(self) -> None:
        self.library_handler_ran = 0

    def _library_handler(self) -> None:
        self.library_handler_ran += 1

    async def start(self) -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._library_handler)

    async def run(self, program: str, timeout: float) -> ExecOutcome:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(5):  # loop turns, for a handler woken by the signal to run
            await asyncio.sleep(0)
        return ExecOutcome(stdout='{"results": [true, true]}\n')

    async def close(self) -> None:
        return None


def test_an_ignored_sigint_stays_ignored_after_a_library_adds_a_handler() -> None:
    original = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        backend = _LibraryAddsItsHandler()
        reward = SandboxReward(backend, "fizzbuzz_count", timeout=1.0)
        reward.open()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the library's handler did not stay
        assert reward(["p"], ["def fizzbuzz_count(n):\n    return 0\n"]) == [1.0]  # not interrupted
        reward.close()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert backend.library_handler_ran == 0
    finally:
        signal.signal(signal.SIGINT, original)


@pytest.mark.faults(
    {"rules": [{"id": "busy", "route": RUN_CODE, "requests": "1-2", "fault": {"status": 429, "retry_after": 1}}]}
)
def test_sandbox_fusion_retries_wait_as_a_429_asks(
    fusion_reward: Callable[..., SandboxReward], sandbox_emulator: EmulatorServer
) -> None:
    reward = fusion_reward("sort_numbers")
    assert reward(["p"], [GOOD_SORT]) == [1.0]
    report = ChaosJudge.of(sandbox_emulator.emulator).compliance(routes=(RUN_CODE,), skip=("jitter",))
    assert report.ok, report.render()
    assert len(report.waits) == 2 and all(waited >= required for _, _, required, waited in report.waits)


def test_retry_after_reads_the_largest_wait_and_caps_it() -> None:
    assert retry_after({"Retry-After": "2"}) == 2.0
    assert retry_after({"retry-after-sandbox-create": "5", "Retry-After": "1"}) == 5.0  # Daytona's throttlers
    assert retry_after({"Retry-After": "86400"}) == MAX_RETRY_AFTER
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after({"Retry-After": "nan"}) is None
    assert retry_after({}) is None and retry_after(None) is None
