"""A real GRPO run on CPU (TRL's GRPOTrainer, a tiny random model) whose rewards come from the emulated Daytona pool.

Checked against three independent records: the trainer's logged metrics, the emulator's journal (which program ran how
often) and the emulator's sandbox report (what is left). The reward each completion should get is worked out here from
its token ids alone, since every token is a whole known program.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from statistics import fmean
from typing import Any

import pytest

from emulator.daytona import code_digest, interpreter_runs
from emulator.journal import Journal
from emulator.server import EmulatorServer
from harness.rewards import DaytonaPool, SandboxReward, build_program, extract_code, get_task
from harness.rewards.grpo import (
    CANDIDATES,
    GRPOOutcome,
    GRPOSettings,
    RecordingReward,
    program_tokenizer,
    train_grpo,
)
from harness.rewards.sandbox_reward import OUTCOME_KINDS

CREATE = "daytona.sandbox.create"
EXECUTE = "daytona.interpreter.execute"
METRIC = "rewards/sandbox_reward/mean"
SETTINGS = GRPOSettings(steps=3, prompts_per_step=2, generations=4, max_completion_length=2, seed=0)


def expected(ids: list[int], task_name: str, pass_fraction: Callable[[str, str], float]) -> tuple[float, str]:
    """The reward of a completion, and how its scoring ends (``OUTCOME_KINDS``), from its tokens alone: each is a whole
    candidate program, a prompt, or a special token."""
    tokenizer = program_tokenizer(SETTINGS.tasks)
    by_code = {c.code: c for c in CANDIDATES}
    pieces = [tokenizer.decode([i]) for i in ids if i not in tokenizer.all_special_ids]  # EOS, and UNK (no text)
    task = get_task(task_name)
    if not pieces or any(pattern in "".join(pieces) for pattern in task.banned):
        return -1.0, "not_run"
    if any(p not in by_code for p in pieces):
        return -1.0, "program_error"  # a prompt's prose is not Python
    defining = [by_code[p] for p in pieces if by_code[p].task == task_name]
    if not defining:
        return -1.0, "program_error"  # the function is never defined: NameError
    last = defining[-1]  # the last definition wins
    if last.kind == "loops":
        return -1.0, "timeout"
    if last.kind == "raises":
        return -1.0, "program_error"
    return pass_fraction(task_name, last.code), "ran"


def check_run(
    outcome: GRPOOutcome,
    recorder: RecordingReward,
    journal: Journal,
    pass_fraction: Callable[[str, str], float],
) -> None:
    """The rewards the trainer logged are those the sandboxes gave, each is right, and each completion ran once."""
    per_step = SETTINGS.prompts_per_step * SETTINGS.generations
    assert len(recorder.calls) == len(outcome.steps) == SETTINGS.steps
    tokenizer = program_tokenizer(SETTINGS.tasks)
    expected_runs: Counter[str] = Counter()
    for step, call in zip(outcome.steps, recorder.calls, strict=True):
        assert len(call.rewards) == len(call.completions) == len(call.completion_ids) == per_step
        assert step[METRIC] == pytest.approx(fmean(call.rewards), abs=1e-6)  # what the trainer logged
        assert step["reward"] == pytest.approx(fmean(call.rewards), abs=1e-6)
        rows = zip(call.completions, call.completion_ids, call.tasks, call.rewards, strict=True)
        kinds: Counter[str] = Counter()
        for text, ids, task, reward in rows:
            assert text == tokenizer.decode(ids, skip_special_tokens=True)
            want, kind = expected(ids, task, pass_fraction)
            assert reward == pytest.approx(want), (task, text)
            kinds[kind] += 1
            code, spec = extract_code(text), get_task(task)
            if code and not any(p in code for p in spec.banned):
                expected_runs[code_digest(build_program(spec, code))] += 1
        for kind in OUTCOME_KINDS:  # logged by the reward through TRL's log_metric
            assert step[f"sandbox/{kind}"] == pytest.approx(kinds[kind] / per_step), kind
    assert interpreter_runs(journal.entries(EXECUTE)) == expected_runs  # every completion ran, exactly once
    assert sum(expected_runs.values()) > 0
    rewards = {r for call in recorder.calls for r in call.rewards}
    assert len(rewards) > 1  # the tiny model wrote programs of several kinds
    assert any(step["reward_std"] > 0 for step in outcome.steps)
    assert outcome.weight_change > 0  # a group with different rewards moved the weights


def test_grpo_training_gets_its_rewards_from_the_pool(
    daytona_config: Any,
    sandbox_emulator: EmulatorServer,
    emulator_journal: Journal,
    pass_fraction: Callable[[str, str], float],
) -> None:
    with SandboxReward(DaytonaPool(8, daytona_config), timeout=1.0) as reward:
        recorder = RecordingReward(reward)
        outcome = train_grpo(recorder, SETTINGS)
        pool = reward.backend
    check_run(outcome, recorder, emulator_journal, pass_fraction)
    assert isinstance(pool, DaytonaPool)
    assert pool.stats.infra_failures == 0 and pool.stats.create_failures == 0
    report = sandbox_emulator.emulator.daytona_report()
    assert report.leaked == [] and len(report.sandboxes) == pool.stats.created == 8 + pool.stats.replaced
    assert pool.stats.replaced == pool.stats.timeouts  # a run that hit its time limit gave its sandbox up
    assert sum(step["sandbox/replaced"] for step in outcome.steps) == pool.stats.replaced


#: Scripted so that the run is the same every time: two creations fail (one made its sandbox, then lost the answer),
#: and three runs are refused before the program starts. With four runs allowed per completion, even a completion
#: that met all three would still run.
FAULTS = {
    "rules": [
        {"id": "create-503", "route": CREATE, "requests": "2", "fault": 503},
        {"id": "create-cut", "route": CREATE, "requests": "5", "fault": "truncate"},
        {"id": "run-503", "route": EXECUTE, "requests": "3,9", "fault": 503},
        {"id": "run-reset", "route": EXECUTE, "requests": "6", "fault": "reset"},
    ]
}


@pytest.mark.faults(FAULTS)
def test_grpo_under_faults_gets_the_same_rewards_and_leaves_no_sandbox(
    daytona_config: Any,
    sandbox_emulator: EmulatorServer,
    emulator_journal: Journal,
    pass_fraction: Callable[[str, str], float],
) -> None:
    with SandboxReward(DaytonaPool(8, daytona_config, exec_attempts=4), timeout=1.0) as reward:
        recorder = RecordingReward(reward)
        outcome = train_grpo(recorder, SETTINGS)
        pool = reward.backend
    check_run(outcome, recorder, emulator_journal, pass_fraction)  # faults cost retries, not wrong rewards
    assert isinstance(pool, DaytonaPool)
    refused = [e for e in emulator_journal.entries(EXECUTE) if e.fault is not None]
    assert len(refused) == pool.stats.infra_failures == 3
    assert sum(step["sandbox/failed_tries"] for step in outcome.steps) == 3  # in the trainer's logs too
    assert pool.stats.create_failures == 2 and pool.stats.orphans_deleted == 1
    report = sandbox_emulator.emulator.daytona_report()
    assert report.leaked == []
    assert len(report.sandboxes) == 1 + 8 + pool.stats.replaced  # the orphan, the pool, the replacements


def test_sandboxes_are_deleted_when_training_fails_midway(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    from transformers import TrainerCallback

    class Crash(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 2:
                raise RuntimeError("the trainer died at step 2")

    with (
        pytest.raises(RuntimeError, match="died at step 2"),
        SandboxReward(DaytonaPool(4, daytona_config), timeout=1.0) as reward,
    ):
        recorder = RecordingReward(reward)
        train_grpo(recorder, SETTINGS, callbacks=[Crash()])
    assert len(recorder.calls) == 2
    report = sandbox_emulator.emulator.daytona_report()
    assert len(report.sandboxes) >= 4 and report.leaked == []


def test_grpo_job_under_the_flaky_profile_keeps_its_invariants() -> None:
    """Random faults on every route (resets, 502/503, cut bodies, heavy-tailed latency): whatever they hit, no
    completion runs twice, a missing run is one the pool gave up on, and no sandbox is left."""
    from harness.rewards.job import GRPOJobOptions, run_grpo_job

    result = run_grpo_job(GRPOJobOptions(settings=SETTINGS, faults="flaky"))
    assert result.pool_id == "grpo-seed-0"  # the plan fails the same creation tries each run (a random id did not)
    assert sum(result.faults_injected.values()) > 0
    assert result.ran_again == 0
    assert result.never_ran == result.pool.gave_up
    assert result.sandboxes_left == []
    assert result.ok
    assert len(result.outcome.steps) == SETTINGS.steps and result.completions == 24
