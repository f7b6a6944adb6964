"""Hypothesis search over ``DaytonaTool`` (the real daytona SDK) against the emulator served in a virtual-time loop:
generated fault schedules on sandbox create, delete, list and the interpreter (Daytona-style 429 with
``Retry-After-<throttler>``, 500, 502, 503, resets, truncated answers), latency, and calls in both sandbox scopes.
Checked after every call: nothing escapes the tool, no fault is shown as program output, the fault observation only
once the budget is spent, attempts within the budget, no blind re-create, ``Retry-After`` waited out, and no sandbox
left behind once released or closed unless its deletion spent the budget. Violations are saved as regressions.

A gateway 504 is left out: the SDK turns it into ``DaytonaTimeoutError``, which the tool takes for the program's own
timeout; the schedules that show it are saved regressions (``tool-daytona-real-*``), replayed as expected failures
by ``test_regressions.py`` until the tool is fixed. Each call costs real time (the sandbox's interpreter is a real
process), so walks are short: at most three operations after the setup."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from harness.chaos.regressions import REGRESSIONS_DIR
from harness.chaos.search import (
    DaytonaEnv,
    DaytonaScenario,
    daytona_ops,
    daytona_setup,
    search_machine,
)

pytest.importorskip("daytona", reason="needs the [daytona] extra")

EXAMPLES = 200


@pytest.fixture(scope="module")
def env() -> Iterator[DaytonaEnv]:
    shared = DaytonaEnv()
    try:
        yield shared
    finally:
        shared.close()


def test_daytona_tool_search(env: DaytonaEnv) -> None:
    machine = search_machine(
        "tool-daytona", lambda: DaytonaScenario(env), daytona_setup(), daytona_ops(), regression_dir=REGRESSIONS_DIR
    )
    started = time.perf_counter()
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=3, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
    print(f"{EXAMPLES} Daytona examples in {time.perf_counter() - started:.1f} s")
