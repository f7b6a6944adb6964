"""Hypothesis search over the limiter: generated client operations (acquire, release, cancel, wrong releases,
worker death, raise inside the guarded call) times clock advances, invariants checked after every step, on the
Python core (local backend and Ray actor), the Redis Lua script (fakeredis) and the asyncio ``LocalLimiter``.
A violation shrinks and is saved under ``fixtures/chaos/regressions/``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from harness.chaos.regressions import REGRESSIONS_DIR
from harness.chaos.search import (
    CoreAdapter,
    LimiterScenario,
    LocalLimiterScenario,
    RedisAdapter,
    limiter_ops,
    limiter_setup,
    local_ops,
    search_machine,
)

EXAMPLES = 200
SETTINGS = settings(
    max_examples=EXAMPLES, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_limiter_core_search() -> None:
    machine = search_machine(
        "limiter-core",
        lambda: LimiterScenario(CoreAdapter),
        limiter_setup(),
        limiter_ops(),
        regression_dir=REGRESSIONS_DIR,
    )
    run_state_machine_as_test(machine, settings=SETTINGS)


def test_limiter_redis_search() -> None:
    pytest.importorskip("fakeredis")
    pytest.importorskip("lupa")
    machine = search_machine(
        "limiter-redis",
        lambda: LimiterScenario(RedisAdapter),
        limiter_setup(),
        limiter_ops(),
        regression_dir=REGRESSIONS_DIR,
    )
    # Each Lua call costs about 1.6 ms on fakeredis, so this machine takes shorter walks (same example count).
    run_state_machine_as_test(machine, settings=settings(SETTINGS, stateful_step_count=10))


def test_local_limiter_search() -> None:
    machine = search_machine(
        "limiter-local", LocalLimiterScenario, limiter_setup(), local_ops(), regression_dir=REGRESSIONS_DIR
    )
    run_state_machine_as_test(machine, settings=SETTINGS)
