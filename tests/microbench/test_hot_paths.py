"""Micro-benchmarks of the emulator's hot paths (pytest-benchmark): figures to read, never timing assertions.

Each runs a handful of rounds so the normal suite stays fast; they also pass under ``--benchmark-disable`` (the
function then runs once). What is asserted is that the measured call did its job.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from emulator.executor import ExecutionRequest, ExecutionResult, ExecutorConfig, ThreadedExecutor
from emulator.faults import FaultEngine, FaultPlan
from emulator.journal import Journal

pytest.importorskip("pytest_benchmark", reason="the [bench] extra (pytest-benchmark) is not installed")

PLAN = {
    "seed": 7,
    "rules": [
        {"id": "slow", "route": "sandbox_fusion.*", "latency": {"lognormal": {"p50": 0.05, "p99": 0.8}}},
        {"id": "gw", "route": "sandbox_fusion.run_code", "attempts": "1", "probability": 0.3, "fault": {"status": 504}},
        {"id": "daytona", "route": "daytona.*", "probability": 0.1, "fault": {"status": 429, "retry_after": 2}},
    ],
}


def test_fault_decision(benchmark: Any) -> None:
    engine = FaultEngine(FaultPlan.from_dict(PLAN))
    keys = iter(range(10**9))

    def decide() -> Any:
        return engine.decide("sandbox_fusion.run_code", f"key-{next(keys)}")

    decision = benchmark.pedantic(decide, rounds=200, iterations=5, warmup_rounds=10)
    assert decision.route == "sandbox_fusion.run_code"
    assert decision.attempt == 1
    assert "slow" in decision.rules_fired  # the latency rule fires on every arrival of the route
    assert decision.latency > 0


def test_journal_append(benchmark: Any) -> None:
    journal = Journal(max_entries=1000)
    calls = [0]

    def append() -> None:
        calls[0] += 1
        entry = journal.begin("sandbox_fusion.run_code", "POST", "/run_code", key="k")
        journal.end(entry, 200, "ok")

    benchmark.pedantic(append, rounds=200, iterations=10, warmup_rounds=10)
    entries = journal.entries()
    assert calls[0] >= 1  # once under --benchmark-disable, 2,100 times otherwise
    assert len(entries) == min(calls[0], 1000)  # capped: the newest 1000 kept
    assert journal.dropped == max(0, calls[0] - 1000)
    assert journal.in_flight() == 0
    assert entries[-1].status == 200 and entries[-1].outcome == "ok"


@pytest.fixture(scope="module")
def fast_executor() -> Iterator[ThreadedExecutor]:
    with ThreadedExecutor(ExecutorConfig(python_mode="fast")) as executor:
        yield executor


def _print_four(executor: ThreadedExecutor) -> ExecutionResult:
    with executor.workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), b"print(2+2)\n")
        request = ExecutionRequest([executor.executor.config.python, script], wd.path, 10.0, python_script=script)
        return executor.run(request, timeout=30)


def test_execution_dispatch_fast_path(benchmark: Any, fast_executor: ThreadedExecutor) -> None:
    assert _print_four(fast_executor).stdout == "4\n"  # starts the warm interpreter outside the measurement
    result = benchmark.pedantic(_print_four, args=(fast_executor,), rounds=20, iterations=1)
    assert result.status == "Finished"
    assert result.stdout == "4\n"
    assert fast_executor.executor.zygote_pid is not None  # it ran through the warm interpreter
