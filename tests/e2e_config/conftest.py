"""Fixtures for the CPU-side checks of the GPU end-to-end scripts in ``tests/special_e2e``.

The scripts are run with bash exactly as a user would, in their side modes (``--print-overrides``,
``--write-tool-config``) or with a stand-in trainer, so what is checked is what the GPU run would do.
"""

from __future__ import annotations

import itertools
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = REPO_ROOT / "tests" / "special_e2e"
SCRIPTS = {
    "sandbox_fusion": E2E_DIR / "run_gsm8k_fsdp_sgl_multiturn_sf_tool.sh",
    "daytona": E2E_DIR / "run_gsm8k_fsdp_sgl_multiturn_daytona_tool.sh",
}
FAKE_TRAINER = Path(__file__).resolve().parent / "fake_trainer.py"

RunScript = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(params=sorted(SCRIPTS))
def backend(request: pytest.FixtureRequest) -> str:
    """Each check runs against both scripts."""
    name: str = request.param
    return name


@pytest.fixture
def script(backend: str) -> Path:
    return SCRIPTS[backend]


@pytest.fixture
def no_gpu_smi(tmp_path: Path) -> str:
    """A path where no nvidia-smi exists, so the scripts see a machine without a GPU whatever this one has."""
    return str(tmp_path / "no-such-dir" / "nvidia-smi")


@pytest.fixture
def fake_smi(tmp_path: Path) -> Callable[..., str]:
    """Writes an executable nvidia-smi stand-in that prints ``listing`` and exits ``status``; returns its path."""
    made = itertools.count()

    def make(listing: str, status: int = 0) -> str:
        path = tmp_path / f"nvidia-smi-{next(made)}"
        path.write_text(f"#!/bin/sh\nprintf '%s' '{listing}'\nexit {status}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return str(path)

    return make


#: Every variable the scripts read from the environment: unset for the tests unless a test sets it.
SCRIPT_VARIABLES = (
    "PYTHON", "MODEL_PATH", "NUM_GPUS", "NVIDIA_SMI", "TRAIN_BATCH_SIZE", "ROLLOUT_N", "MICRO_BATCH_SIZE",
    "ROLLOUT_TP", "GPU_MEMORY_UTILIZATION", "MAX_PROMPT_LENGTH", "MAX_RESPONSE_LENGTH", "MAX_TURNS", "GSM8K_JSONL",
    "GSM8K_LIMIT", "FAULTS", "DATA_DIR", "ROLLOUT_DATA_DIR", "SANDBOX_EMULATOR",
)  # fmt: skip


@pytest.fixture
def script_env(tmp_path: Path, no_gpu_smi: str) -> dict[str, str]:
    """A clean environment for the scripts: this interpreter as PYTHON, no GPU, none of the user's settings."""
    env = {
        key: value for key, value in os.environ.items() if key not in SCRIPT_VARIABLES and not key.startswith("E2E_")
    }
    env.update(
        {
            "PYTHON": sys.executable,
            "NVIDIA_SMI": no_gpu_smi,
            "HOME": str(tmp_path / "home"),
            "TMPDIR": str(tmp_path),
            "SANDBOX_EMULATOR": f"{sys.executable} -m harness.cli",
        }
    )
    return env


@pytest.fixture
def run_script(script_env: dict[str, str]) -> RunScript:
    """Runs a script with bash: ``run_script(path, *args, env={...overrides}, timeout=...)``."""

    def run(
        path: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(path), *args],
            env={**script_env, **(env or {})},
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def print_overrides(run_script: RunScript) -> Callable[..., list[str]]:
    """The overrides a script passes to verl's trainer, as it prints them (``--print-overrides``)."""

    def overrides(path: Path, *extra: str, env: Mapping[str, str] | None = None) -> list[str]:
        result = run_script(path, "--print-overrides", *extra, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    return overrides


@pytest.fixture(scope="session")
def verl_config_dir() -> Path:
    """verl 0.9.1's own Hydra config directory (the one ``verl.trainer.main_ppo`` composes from)."""
    verl = pytest.importorskip("verl", reason="needs the [verl] extra")
    path = Path(verl.__file__).resolve().parent / "trainer" / "config"
    assert (path / "ppo_trainer.yaml").is_file(), path
    return path


@pytest.fixture(scope="session")
def compose_ppo(verl_config_dir: Path) -> Iterator[Callable[[Sequence[str]], Any]]:
    """Composes overrides onto verl's ``ppo_trainer`` config the way ``main_ppo``'s ``@hydra.main`` does."""
    from hydra import compose, initialize_config_dir

    def run(overrides: Sequence[str]) -> Any:
        with initialize_config_dir(config_dir=str(verl_config_dir), version_base=None):
            return compose(config_name="ppo_trainer", overrides=list(overrides))

    yield run
