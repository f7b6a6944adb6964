"""The public constructors refuse arguments of the wrong kind at once, naming them, instead of failing later."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator.app import Emulator
from emulator.executor import ExecutorConfig
from emulator.server import EmulatorServer


@pytest.mark.parametrize("config", ["calm", {"rules": []}, 3])
def test_emulator_takes_an_emulator_config(config: Any) -> None:
    with pytest.raises(TypeError, match="config must be an EmulatorConfig, got") as info:
        Emulator(config)
    assert ("faults=" in str(info.value)) == (not isinstance(config, int))  # the hint where a plan was meant


def test_emulator_server_takes_an_emulator() -> None:
    with pytest.raises(TypeError, match="EmulatorServer takes an Emulator"):
        EmulatorServer("calm")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"python_mode": "quick"}, "python_mode must be 'fast' or 'faithful', got 'quick'"),
        ({"max_processes": 0}, "max_processes must be an integer of at least 1, got 0"),
        ({"max_file_size_mb": 1.5}, "max_file_size_mb must be an integer of at least 1"),
        ({"sandbox_uid_count": True}, "sandbox_uid_count must be an integer of at least 1"),
        ({"python": "/nonexistent/python3"}, "python '/nonexistent/python3' is not an executable file"),
        ({"temp_root": "/nonexistent"}, "temp_root '/nonexistent' is not a directory"),
    ],
)
def test_executor_config_refuses_what_would_fail_later(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExecutorConfig(**arguments)


def test_a_bad_python_from_the_environment_is_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_EMULATOR_PYTHON", "/nonexistent/python3")
    with pytest.raises(ValueError, match=r"from \$SANDBOX_EMULATOR_PYTHON\) is not an executable file"):
        ExecutorConfig()


def test_a_plain_file_is_neither_a_python_nor_a_temp_root(tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("not a program")
    plain.chmod(0o644)
    with pytest.raises(ValueError, match="is not an executable file"):
        ExecutorConfig(python=str(plain))
    with pytest.raises(ValueError, match="is not a directory"):
        ExecutorConfig(temp_root=str(plain))


def test_a_bare_python_name_is_looked_up_on_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    name = os.path.basename(sys.executable)
    assert ExecutorConfig(python=name).python == name  # started as exec would: found on $PATH
    with pytest.raises(ValueError, match="python 'no-such-python3' is not found on \\$PATH"):
        ExecutorConfig(python="no-such-python3")
