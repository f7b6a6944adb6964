"""``sandbox-emulator grpo``: the CPU GRPO run from the command line, its summary, its JSON and its errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from harness.cli import build_parser, main
from harness.rewards import command
from harness.rewards.command import _options
from harness.rewards.job import TrainingInterrupted, embedded_emulator, run_grpo_job


def command_args(argv: list[str]) -> argparse.Namespace:
    """The parsed ``grpo`` command line ``argv``."""
    return build_parser("grpo").parse_args(["grpo", "--quiet", *argv])


#: Creation 3 made its sandbox and lost the answer; runs 2 and 4 are refused before the program starts.
PLAN = {
    "rules": [
        {"route": "daytona.sandbox.create", "requests": "3", "fault": "truncate"},
        {"route": "daytona.interpreter.execute", "requests": "2,4", "fault": 503},
    ]
}


def test_grpo_command_trains_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    out = tmp_path / "grpo.json"
    rc = main(["grpo", "--steps", "2", "--pool", "4", "--faults", str(plan), "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    assert "step 1/2  reward" in captured.err and "step 2/2  reward" in captured.err  # a line per step
    assert "each completion ran exactly once: yes" in captured.out
    assert "sandboxes left 0 (none)" in captured.out
    figures = json.loads(out.read_text())
    assert figures["ok"] is True and figures["completions"] == 16
    assert len(figures["steps"]) == 2
    assert figures["pool"]["infra_failures"] == 2 and figures["pool"]["orphans_deleted"] == 1
    assert figures["faults_injected"] == {"status": 2, "truncate": 1}
    assert figures["sandboxes_left"] == [] and figures["never_ran"] == figures["ran_again"] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tasks", "sort_numbers,nope"], "unknown task 'nope'"),
        (["--faults", "no-such-profile"], "unknown fault profile 'no-such-profile'"),
        (["--generations", "1"], "generations at least 2"),
        (["--prompts-per-step", "0"], "prompts per step must be at least 1"),
        (["--pool", "100000"], "the pool size must be at most 1024, got 100000"),
        (["--timeout", "0"], "timeout must be a positive number"),
        (["--timeout", "inf"], "timeout must be a positive number of seconds, at most 600, got inf"),
        (["--timeout", "nan"], "at most 600, got nan"),
        (["--timeout", "1e12"], "at most 600, got 1000000000000.0"),
        (["--timeout", "0.5"], "the timeout must be whole seconds (Daytona's run_code takes no fraction), got 0.5"),
        (["--seed", "-1"], "the seed must be between 0 and 2**32 - 1 (4294967295), got -1"),
        (["--seed", "99999999999"], "the seed must be between 0 and 2**32 - 1 (4294967295), got 99999999999"),
        (["--tasks", ","], "no task given"),
        (["--json", "/no/such/dir/out.json"], "no such directory"),
        (["--api-url", "http://127.0.0.1:9/api"], "needs an API key"),
        (["--api-url", "127.0.0.1:9/api", "--api-key", "k"], "--api-url: '127.0.0.1:9/api' is not an http(s) URL"),
        (["--api-url", "http://127.0.0.1:9/api", "--api-key", "k", "--faults", "flaky"], "embedded emulator only"),
        (["--api-key", "k"], "--api-key goes with --api-url"),
        (
            ["--tasks", "sort_numbers,fizzbuzz_count"],
            "task 'fizzbuzz_count' cannot be trained here: the tiny policy writes programs for sort_numbers,"
            " max_subarray_sum only",
        ),
        (["--steps", "1000000000"], "the steps must be at most 10,000, got 1,000,000,000"),
        (["--prompts-per-step", "1025"], "the prompts per step must be at most 1,024, got 1,025"),
        (["--generations", "100000"], "the generations must be at most 1,024, got 100,000"),
        (["--prompts-per-step", "64", "--generations", "64"], "completions a step (prompts per step x generations)"),
        (["--steps", "10000", "--prompts-per-step", "11"], "the steps x prompts per step must be at most 100,000"),
    ],
)
def test_grpo_command_bad_options_are_clear_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    assert main(["grpo", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.err.count("\n") == 1 and captured.out == ""  # one line, before any training


class _Checked(Exception):
    """Raised in place of the training: every check before it passed."""


@pytest.mark.parametrize(
    "argv",
    [
        ["--timeout", "600"],
        ["--seed", str(2**32 - 1)],
        ["--steps", "10000", "--prompts-per-step", "10"],
        ["--prompts-per-step", "1", "--generations", "1024"],
        ["--prompts-per-step", "512", "--generations", "2"],
    ],
)
def test_grpo_command_takes_the_largest_timeout_and_seed(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def checked(*args: object, **kwargs: object) -> None:
        raise _Checked

    monkeypatch.setattr("harness.rewards.job._train", checked)
    with pytest.raises(_Checked):
        run_grpo_job(_options(command_args(argv)))


def test_the_embedded_emulator_does_not_throttle_creations_unless_a_plan_says_so() -> None:
    emulator = embedded_emulator()
    assert emulator.config.daytona.throttlers == ()  # a pool of more than 300 is created (Tier 1 would refuse them)
    limited = embedded_emulator("daytona-tier1").engine.plan.limits
    assert any(limit.name == "sandbox-create" and limit.max_requests == 300 for limit in limited)


#: At most two sandbox creations a minute, refused with no wait named: a pool of 3 falls short by one, whatever the
#: tries.
SHORT = {
    "limits": [
        {
            "name": "sandbox-create",
            "route": "daytona.sandbox.create",
            "max_requests": 2,
            "per": 60,
            "headers_style": "none",
        }
    ]
}


def test_a_pool_that_falls_short_is_not_a_clean_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(SHORT))
    out = tmp_path / "grpo.json"
    argv = ["grpo", "--steps", "1", "--prompts-per-step", "1", "--generations", "2", "--pool", "3"]
    argv += ["--tasks", "max_subarray_sum", "--faults", str(plan), "--json", str(out), "--quiet"]
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 1, captured.out + captured.err
    short = "only 2 of the pool's 3 sandboxes could be created (last error: DaytonaRateLimitError"
    assert f"pool short     {short}" in captured.out
    assert captured.err.startswith(f"error: {short}") and captured.err.count("\n") == 1
    figures = json.loads(out.read_text())
    assert figures["ok"] is False and figures["pool"]["not_created"] == 1
    assert figures["pool_problem"].startswith(short) and figures["sandboxes_left"] == []


@pytest.mark.parametrize(
    ("left", "said"),
    [
        (["sb-1", "sb-2"], "2 of the pool's sandboxes could not be deleted: sb-1, sb-2"),
        ([], "training stopped and the pool's sandboxes were deleted"),
    ],
)
def test_an_interrupted_run_says_which_sandboxes_its_cleanup_left(
    left: list[str], said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise TrainingInterrupted(left)

    monkeypatch.setattr(command, "run_grpo_job", interrupted)
    assert main(["grpo", "--quiet"]) == 130
    err = capsys.readouterr().err
    assert said in err
    assert ("were deleted" in err) == (not left)
