"""``sandbox-emulator grpo``: the CPU GRPO run from the command line, its summary, its JSON and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main

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
        (["--timeout", "0"], "timeout must be a positive number"),
        (["--tasks", ","], "no task given"),
        (["--json", "/no/such/dir/out.json"], "no such directory"),
        (["--api-url", "http://127.0.0.1:9/api"], "needs an API key"),
        (["--api-url", "127.0.0.1:9/api", "--api-key", "k"], "--api-url: '127.0.0.1:9/api' is not an http(s) URL"),
        (["--api-url", "http://127.0.0.1:9/api", "--api-key", "k", "--faults", "flaky"], "embedded emulator only"),
        (["--api-key", "k"], "--api-key goes with --api-url"),
    ],
)
def test_grpo_command_bad_options_are_clear_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    assert main(["grpo", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
