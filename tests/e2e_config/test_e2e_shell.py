"""The e2e scripts parse, are executable, and are shellcheck-clean (when shellcheck is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = REPO_ROOT / "tests" / "special_e2e"
SHELL_FILES = sorted(E2E_DIR.glob("*.sh"))


def test_scripts_exist_and_are_executable() -> None:
    runnable = [path.name for path in SHELL_FILES if path.name.startswith("run_")]
    assert runnable == ["run_gsm8k_fsdp_sgl_multiturn_daytona_tool.sh", "run_gsm8k_fsdp_sgl_multiturn_sf_tool.sh"]
    for name in runnable:
        path = E2E_DIR / name
        assert os.access(path, os.X_OK), f"{name} is not executable"
        head = path.read_text().splitlines()
        assert head[0] == "#!/usr/bin/env bash"
        assert "set -euo pipefail" in head


@pytest.mark.parametrize("path", SHELL_FILES, ids=lambda path: path.name)
def test_bash_parses(path: Path) -> None:
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(
    shutil.which("shellcheck") is None, reason="shellcheck is not installed (apt-get install shellcheck)"
)
def test_shellcheck_clean() -> None:
    result = subprocess.run(
        ["shellcheck", "-x", *(str(path.relative_to(REPO_ROOT)) for path in SHELL_FILES)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
