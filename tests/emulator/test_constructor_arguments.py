"""The public constructors refuse arguments of the wrong kind at once, naming them, instead of failing later."""

from __future__ import annotations

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
    ],
)
def test_executor_config_refuses_what_would_fail_later(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExecutorConfig(**arguments)
