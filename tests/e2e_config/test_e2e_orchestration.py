"""The e2e scripts' whole run on a CPU, with a stand-in trainer (``fake_trainer.py``) in place of verl's GPU one.

Everything else is the real thing: the GPU gate (passed with an nvidia-smi stand-in listing one GPU), the emulator
started with ``sandbox-emulator serve`` on a free port and awaited on ``/v1/ping``, ``gsm8k-convert`` on GSM8K-format
problems, the tool config written for the emulator and loaded through verl, real tool calls, verl's own dump
writer, ``sandbox-emulator validate`` deciding the exit status, and the emulator stopped however the run ends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
FAKE_TRAINER = Path(__file__).resolve().parent / "fake_trainer.py"
UP = re.compile(r"emulator up at (http://\S+)")
DEFAULT_FAULTS = {"sandbox_fusion": "vefaas-gateway", "daytona": "calm"}

PROBLEMS = [
    ("Ada has 3 boxes of 4 pens. How many pens does she have?", "3 * 4 = <<3*4=12>>12\n#### 12"),
    ("A train goes 60 km per hour for 2 hours. How far does it go?", "60 * 2 = <<60*2=120>>120\n#### 120"),
    ("Tom had 10 apples and ate 3. How many are left?", "10 - 3 = <<10-3=7>>7\n#### 7"),
    ("Five friends share 25 sweets equally. How many does each get?", "25 / 5 = <<25/5=5>>5\n#### 5"),
    ("A book costs 8 dollars. How much do 6 books cost?", "8 * 6 = <<8*6=48>>48\n#### 48"),
]


@pytest.fixture
def run_env(tmp_path: Path, fake_smi: Callable[..., str]) -> dict[str, str]:
    """Settings for a CPU run: one listed GPU, a model dir, our own GSM8K-format problems, the stand-in trainer."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in PROBLEMS))
    model = tmp_path / "model"
    model.mkdir()
    return {
        "NVIDIA_SMI": fake_smi("0\n"),
        "MODEL_PATH": str(model),
        "GSM8K_JSONL": str(problems),
        "E2E_TRAINER": f"{sys.executable} {FAKE_TRAINER}",
        "E2E_WORK_DIR": str(tmp_path / "work"),
        "TRAIN_BATCH_SIZE": "4",
        "ROLLOUT_N": "2",
    }


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/ping", timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def _emulator_url(log: str) -> str:
    match = UP.search(log)
    assert match, log
    return match.group(1)


def test_a_run_passes_and_stops_the_emulator(
    backend: str, script: Path, run_script: Callable[..., Any], run_env: dict[str, str], tmp_path: Path
) -> None:
    """With the default fault profile: veFaaS-gateway faults for Sandbox Fusion (the tool retries them), calm for
    Daytona."""
    result = run_script(script, env=run_env, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pass: the dump" in result.stderr
    assert f"(faults: {DEFAULT_FAULTS[backend]})" in result.stderr

    work = tmp_path / "work"
    assert (work / f"{backend}_tool_config.yaml").is_file()
    assert (work / "data" / "train.parquet").is_file()
    lines = (work / "rollout" / "1.jsonl").read_text().splitlines()
    assert len(lines) == 4 * 2  # TRAIN_BATCH_SIZE prompts, ROLLOUT_N responses each
    entries = [json.loads(line) for line in lines]
    assert all(entry["score"] == 1.0 and entry["step"] == 1 for entry in entries)
    assert {entry["gts"] for entry in entries} == {"12", "120", "7", "5"}

    stats = next(
        json.loads(line) for line in result.stderr.splitlines() if line.startswith("{") and '"requests"' in line
    )
    assert stats["requests"] > 4 * 2  # every trajectory's tool call reached the emulator (and the ping)
    assert not _answers(_emulator_url(result.stderr))


@pytest.mark.parametrize("backend", ["sandbox_fusion"], indirect=True)
def test_a_failing_trainer_fails_the_run(script: Path, run_script: Callable[..., Any], run_env: dict[str, str]) -> None:
    result = run_script(script, env={**run_env, "E2E_FAKE_TRAINER_FAIL": "exit"}, timeout=240)
    assert result.returncode == 1
    assert "the trainer failed (exit 3)" in result.stderr
    assert not _answers(_emulator_url(result.stderr))


@pytest.mark.parametrize("backend", ["sandbox_fusion"], indirect=True)
def test_the_exit_status_is_the_validators(
    script: Path, run_script: Callable[..., Any], run_env: dict[str, str]
) -> None:
    """A dump the validator rejects fails the run with the validator's own status."""
    result = run_script(script, env={**run_env, "E2E_FAKE_TRAINER_FAIL": "dump"}, timeout=240)
    assert result.returncode == 1
    assert "FAIL: sandbox-emulator validate exited 1" in result.stderr


@pytest.mark.parametrize("backend", ["sandbox_fusion"], indirect=True)
def test_a_terminated_run_stops_what_it_started(
    script: Path, script_env: dict[str, str], run_env: dict[str, str]
) -> None:
    """SIGTERM to the script while the trainer runs: the trainer and the emulator are stopped, exit 143."""
    with subprocess.Popen(
        ["bash", str(script)],
        env={**script_env, **run_env, "E2E_FAKE_TRAINER_FAIL": "hang"},
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        seen: list[str] = []
        trainer_pid = 0
        for line in process.stdout:
            seen.append(line)
            hanging = re.search(r"fake trainer: hanging, pid (\d+)", line)
            if hanging:
                trainer_pid = int(hanging.group(1))
                break
        assert trainer_pid, "".join(seen)
        url = _emulator_url("".join(seen))
        assert _answers(url)
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 143, "".join(seen) + rest
    assert not _answers(url)
    with pytest.raises(ProcessLookupError):
        os.kill(trainer_pid, 0)
