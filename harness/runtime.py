"""The interpreter that runs submitted Python, found and probed before any work.

It is ``--python`` where a command takes one, else ``$SANDBOX_EMULATOR_PYTHON``, else this Python (the emulator's
own rule, :func:`emulator.executor.model.default_python`). A wrong one (a typo, ``/bin/true``, a Python 2) would
start and then fail every program with a server error; probed first, it is one line naming where it came from.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

#: The oldest runtime the warm interpreter runs under (emulator/executor/zygote_main.py).
OLDEST_RUNTIME = (3, 8)
ENV_VAR = "SANDBOX_EMULATOR_PYTHON"


def runtime_python(explicit: str | None = None) -> tuple[str, str]:
    """The interpreter for submitted Python and how to name it in a message."""
    if explicit:
        return explicit, f"--python {explicit!r}"
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        return from_env, f"${ENV_VAR} {from_env!r}"
    return sys.executable, f"this Python {sys.executable!r}"


def python_problem(explicit: str | None = None) -> str | None:
    """Why the runtime interpreter cannot run submitted programs, or None: it must be a working Python 3.8+."""
    python, named = runtime_python(explicit)
    found = shutil.which(python) if os.sep not in python else python  # a bare name is looked up on $PATH
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        return f"{named} is not an executable file" if os.sep in python else f"{named} is not found on $PATH"
    if python == sys.executable:
        return None  # it is running this very check
    probe = "import sys; print('%d %d' % sys.version_info[:2])"
    try:
        done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=30)
        version = tuple(int(part) for part in done.stdout.split())
    except (OSError, subprocess.TimeoutExpired, ValueError):
        version = ()
    if len(version) != 2 or done.returncode != 0:
        return f"{named} is not a working Python interpreter"
    if version < OLDEST_RUNTIME:
        return f"{named} is Python {version[0]}.{version[1]}; submitted Python needs 3.8 or newer"
    return None


def has_ipython(explicit: str | None = None) -> bool:
    """Whether the runtime interpreter can import IPython (``/run_jupyter``'s kernel shell)."""
    python, _ = runtime_python(explicit)
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('IPython') is None)"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
