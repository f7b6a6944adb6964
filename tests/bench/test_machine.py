"""The machine-speed probe: figures from a fresh interpreter, and a clear error when it cannot give them."""

from __future__ import annotations

import math
import stat
from pathlib import Path

import pytest

from harness.bench import machine


def test_the_probe_measures_this_machine() -> None:
    speed = machine.measure()
    assert math.isfinite(speed.python_loop_ns) and speed.python_loop_ns > 0
    assert math.isfinite(speed.fork_exit_ms) and speed.fork_exit_ms > 0
    assert set(speed.as_dict()) == {"python_loop_ns", "fork_exit_ms"}
    assert "ns per iteration" in speed.describe() and "fork plus exit" in speed.describe()


def _program(tmp_path: Path, body: str) -> str:
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo 'Traceback: no fork here' >&2; exit 3", "exit status 3): Traceback: no fork here"),
        ("echo 'not json'", "gave no figures"),
        ("echo '{\"loop_ns\": 1}'", "gave no figures"),
    ],
)
def test_a_probe_that_fails_is_one_clear_error(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(machine.ProbeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        machine.measure(_program(tmp_path, body))


def test_a_missing_interpreter_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(machine.ProbeError, match="did not run"):
        machine.measure(str(tmp_path / "no-such-python"))


def test_a_probe_past_its_timeout_is_a_clear_error(tmp_path: Path) -> None:
    # A stand-in interpreter that hangs: only the timeout ends it.
    with pytest.raises(machine.ProbeError, match="did not run"):
        machine.measure(_program(tmp_path, "exec sleep 60"), timeout=0.2)
