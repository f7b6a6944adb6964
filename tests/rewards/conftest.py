"""Fixtures for the reward tests: rewards over the emulated Daytona pool and the emulated Sandbox Fusion."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.rewards import DaytonaPool, FusionBackend, SandboxReward


@pytest.fixture
def daytona_reward(daytona_config: Any) -> Iterator[Callable[..., SandboxReward]]:
    """A factory of open rewards over a Daytona pool; every one is closed after the test."""
    made: list[SandboxReward] = []

    def make(task: str = "sort_numbers", size: int = 4, timeout: float = 1.0, **pool: Any) -> SandboxReward:
        reward = SandboxReward(DaytonaPool(size, daytona_config, **pool), task, timeout=timeout)
        reward.open()
        made.append(reward)
        return reward

    yield make
    for reward in made:
        reward.close()


@pytest.fixture
def fusion_reward(sandbox_fusion_url: str) -> Iterator[Callable[..., SandboxReward]]:
    made: list[SandboxReward] = []

    def make(task: str = "sort_numbers", timeout: float = 1.0) -> SandboxReward:
        reward = SandboxReward(FusionBackend(sandbox_fusion_url), task, timeout=timeout)
        reward.open()
        made.append(reward)
        return reward

    yield make
    for reward in made:
        reward.close()
