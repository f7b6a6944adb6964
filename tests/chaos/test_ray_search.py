"""Hypothesis search over the ``ray`` limiter backend with its named actor killed and restarted mid-run, besides
acquire, release, double release and cancelled waits, on the session's local Ray cluster. The promises checked (see
``RayLimiterScenario``): the cap and counters on the live actor, FIFO grants, refused over-releases, every wait on a
killed actor ends in an error, and a killed actor's tickets cannot be released into its successor.

Ray is slow: every operation is a round trip to the actor (a few milliseconds) and a kill and restart costs a new
actor process (tenths of a second), so in the default suite this machine runs 12 examples of at most 8 steps, not the
200 of the in-process machines (the rules it shares with them, ``LimiterCore``, are searched 200 times there). Set
``CHAOS_RAY_EXAMPLES=200`` for the full search (about 3 minutes; ``make explore`` does)."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from harness.chaos.regressions import REGRESSIONS_DIR
from harness.chaos.search import RayLimiterScenario, limiter_setup, ray_ops, search_machine

EXAMPLES = int(os.environ.get("CHAOS_RAY_EXAMPLES", "12"))


@pytest.mark.slow
def test_ray_limiter_search_with_actor_kill_and_restart(ray_session: dict[str, str]) -> None:
    namespace = ray_session["namespace"]
    machine = search_machine(
        "limiter-ray",
        lambda: RayLimiterScenario(namespace),
        limiter_setup(),
        ray_ops(),
        regression_dir=REGRESSIONS_DIR,
    )
    started = time.perf_counter()
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
    print(f"{EXAMPLES} Ray examples in {time.perf_counter() - started:.1f} s")
