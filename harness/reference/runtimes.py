"""Find Python interpreters of a given version, to run the emulator with the runtime a recording used."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(version: str) -> str | None:
    """An interpreter for ``version`` (e.g. ``"3.10"``): ``$SANDBOX_EMULATOR_PYTHON<digits>``, then ``pythonX.Y``
    on PATH, then pyenv's versions directory. Each candidate is run once to prove it works (pyenv shims of
    versions that are not active fail)."""
    candidates: list[str] = []
    env = os.environ.get("SANDBOX_EMULATOR_PYTHON" + version.replace(".", ""))
    if env:
        candidates.append(env)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", f"{version}*", "bin", f"python{version}")))
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for candidate in candidates:
        if os.path.exists(candidate) and _version_of(candidate) == version:
            return candidate
    return None
