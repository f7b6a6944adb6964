"""Fixtures for the reward tests: rewards over the emulated Daytona pool and the emulated Sandbox Fusion."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from harness.rewards import DaytonaPool, FusionBackend, SandboxReward, get_task


def local_pass_fraction(task_name: str, source: str) -> float:
    """The fraction of the task's tests that ``source`` passes, computed here by running it in this process against
    the task's own reference: what a reward should come to, without a hard-coded figure. Only for programs known to
    end."""
    task = get_task(task_name)
    space: dict[str, object] = {}
    exec(compile(task.reference.replace(f"def {task.function}(", "def _ref("), "ref", "exec"), space)
    exec(compile(source, "solution", "exec"), space)
    fn = cast(Callable[..., Any], space[task.function])
    ref = cast(Callable[..., Any], space["_ref"])
    passed = sum(1 for args in task.tests if fn(*[list(a) if isinstance(a, list) else a for a in args]) == ref(*args))
    return passed / len(task.tests)


@pytest.fixture
def pass_fraction() -> Callable[[str, str], float]:
    """:func:`local_pass_fraction`, for tests."""
    return local_pass_fraction


@pytest.fixture
def open_rewards() -> Iterator[list[SandboxReward]]:
    """Rewards opened by a test's factory; every one is closed after the test."""
    made: list[SandboxReward] = []
    yield made
    for reward in made:
        reward.close()


def _opened(made: list[SandboxReward], reward: SandboxReward) -> SandboxReward:
    reward.open()
    made.append(reward)
    return reward


@pytest.fixture
def daytona_reward(daytona_config: Any, open_rewards: list[SandboxReward]) -> Callable[..., SandboxReward]:
    """A factory of open rewards over a Daytona pool."""

    def make(task: str = "sort_numbers", size: int = 4, timeout: float = 1.0, **pool: Any) -> SandboxReward:
        return _opened(open_rewards, SandboxReward(DaytonaPool(size, daytona_config, **pool), task, timeout=timeout))

    return make


@pytest.fixture
def fusion_reward(sandbox_fusion_url: str, open_rewards: list[SandboxReward]) -> Callable[..., SandboxReward]:
    """A factory of open rewards over the emulated Sandbox Fusion."""

    def make(task: str = "sort_numbers", timeout: float = 1.0) -> SandboxReward:
        return _opened(open_rewards, SandboxReward(FusionBackend(sandbox_fusion_url), task, timeout=timeout))

    return make
