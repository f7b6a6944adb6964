"""TRL-style rewards computed in code sandboxes (Daytona through its SDK, or Sandbox Fusion)."""

from harness.rewards.sandbox_reward import (
    DaytonaPool,
    ExecOutcome,
    FusionBackend,
    PoolExhaustedError,
    SandboxReward,
    build_program,
    extract_code,
    score_output,
)
from harness.rewards.tasks import TASKS, Task, get_task

__all__ = [
    "TASKS",
    "DaytonaPool",
    "ExecOutcome",
    "FusionBackend",
    "PoolExhaustedError",
    "SandboxReward",
    "Task",
    "build_program",
    "extract_code",
    "get_task",
    "score_output",
]
