"""Without a GPU the e2e scripts say so and exit 1, or exit 0 with "skipped" when ``E2E_ALLOW_SKIP=1``; with one
they go on to their prerequisites, which fail with a message, never a traceback. Nothing is started either way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RunScript = Callable[..., Any]


def _started_nothing(tmp_path: Path) -> bool:
    """The scripts create their work dir (emulator log, data, dump) only once they start the run."""
    return not (tmp_path / "sandbox-emulator-e2e").exists()


def test_no_nvidia_smi_fails_with_a_message(script: Path, run_script: RunScript, tmp_path: Path) -> None:
    result = run_script(script)
    assert result.returncode == 1
    assert "no NVIDIA GPU found" in result.stderr
    assert "E2E_ALLOW_SKIP=1" in result.stderr
    assert "skipped" not in result.stdout
    assert "Traceback" not in result.stderr
    assert _started_nothing(tmp_path)


@pytest.mark.parametrize(("listing", "status"), [("", 0), ("", 9), ("No devices were found", 6)])
def test_nvidia_smi_without_gpus_fails(
    script: Path, run_script: RunScript, fake_smi: Callable[..., str], tmp_path: Path, listing: str, status: int
) -> None:
    result = run_script(script, env={"NVIDIA_SMI": fake_smi(listing, status)})
    assert result.returncode == 1
    assert "no NVIDIA GPU found" in result.stderr
    assert _started_nothing(tmp_path)


def test_allow_skip_exits_zero_with_skipped(script: Path, run_script: RunScript, tmp_path: Path) -> None:
    result = run_script(script, env={"E2E_ALLOW_SKIP": "1"})
    assert result.returncode == 0
    assert "skipped" in result.stdout
    assert "no NVIDIA GPU found" in result.stdout
    assert _started_nothing(tmp_path)


def test_allow_skip_other_values_do_not_skip(script: Path, run_script: RunScript) -> None:
    result = run_script(script, env={"E2E_ALLOW_SKIP": "0"})
    assert result.returncode == 1
    assert "skipped" not in result.stdout


def test_num_gpus_zero_counts_as_no_gpu(script: Path, run_script: RunScript, fake_smi: Callable[..., str]) -> None:
    result = run_script(script, env={"NVIDIA_SMI": fake_smi("0\n1\n"), "NUM_GPUS": "0"})
    assert result.returncode == 1
    assert "NUM_GPUS=0" in result.stderr


def test_with_a_gpu_a_missing_model_is_a_clear_error(
    script: Path, run_script: RunScript, fake_smi: Callable[..., str], tmp_path: Path
) -> None:
    """Past the gate (one GPU listed), the first prerequisite is the local model dir: a message, exit 1."""
    missing = tmp_path / "models" / "absent"
    result = run_script(script, env={"NVIDIA_SMI": fake_smi("0\n"), "MODEL_PATH": str(missing)})
    assert result.returncode == 1
    assert f"MODEL_PATH '{missing}' is not a directory" in result.stderr
    assert "no NVIDIA GPU" not in result.stderr
    assert "Traceback" not in result.stderr
    assert _started_nothing(tmp_path)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NUM_GPUS": "two"}, "NUM_GPUS must be a whole number"),
        ({"TRAIN_BATCH_SIZE": "0"}, "TRAIN_BATCH_SIZE must be a positive whole number"),
        ({"NUM_GPUS": "4"}, "NUM_GPUS=4 but nvidia-smi lists 1 GPU"),
    ],
)
def test_bad_settings_are_clear_errors(
    script: Path,
    run_script: RunScript,
    fake_smi: Callable[..., str],
    tmp_path: Path,
    env: dict[str, str],
    message: str,
) -> None:
    model = tmp_path / "models" / "present"
    model.mkdir(parents=True)
    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    settings = {"NVIDIA_SMI": fake_smi("0\n"), "MODEL_PATH": str(model), "GSM8K_JSONL": str(problems)}
    result = run_script(script, env={**settings, **env})
    assert result.returncode == 1
    assert message in result.stderr
    assert _started_nothing(tmp_path)


def test_unknown_option_is_a_clear_error(script: Path, run_script: RunScript) -> None:
    result = run_script(script, "--no-such-option")
    assert result.returncode == 1
    assert "unknown option '--no-such-option'" in result.stderr


def test_help_names_the_environment(script: Path, run_script: RunScript) -> None:
    result = run_script(script, "--help")
    assert result.returncode == 0
    for name in ("MODEL_PATH", "NUM_GPUS", "TRAIN_BATCH_SIZE", "FAULTS", "GSM8K_JSONL", "E2E_ALLOW_SKIP"):
        assert name in result.stdout
