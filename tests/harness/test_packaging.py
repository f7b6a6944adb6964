"""The wheel carries the data files: an installed package finds its tool configs, bundled problems and reference
suite as a checkout does (before, they were only in the checkout, and ``rollout`` from a wheel failed on a missing
tool config)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tracked_copy(destination: Path) -> None:
    """The checkout's tracked files (as they are in the working tree, links kept as links)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if not name:
            continue
        source, target = ROOT / name, destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.exists():
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the project's git checkout")
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    _tracked_copy(source)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (found,) = work.glob("sandbox_emulator-*.whl")
    return found


def test_the_wheel_carries_every_fixture(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    fixtures = ROOT / "fixtures"
    expected = {
        "harness/fixtures/" + path.relative_to(fixtures).as_posix() for path in fixtures.rglob("*") if path.is_file()
    }
    assert expected and expected <= names, sorted(expected - names)
    assert "harness/fixtures/tools/sandbox_fusion_tool_config.yaml" in names


def test_an_installed_package_finds_its_fixtures(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    probe = (
        "import harness, harness.paths\n"
        "from harness.rollout.job import TOOL_CONFIGS\n"
        "from harness.gsm8k.data import BUNDLED_PROBLEMS\n"
        "from harness.reference.suite import default_suite_path\n"
        "print(harness.__file__)\n"
        "print(harness.paths.FIXTURES)\n"
        "print(all(path.is_file() for path in [*TOOL_CONFIGS.values(), BUNDLED_PROBLEMS, default_suite_path()]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    module, fixtures, present = out.stdout.splitlines()
    assert module.startswith(str(target)) and fixtures == str(target / "harness" / "fixtures")
    assert present == "True"
