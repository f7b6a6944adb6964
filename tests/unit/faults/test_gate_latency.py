"""How much of an injected latency is left to wait when the gate gets a request, and when it ends."""

from __future__ import annotations

import pytest

from emulator.faults import FaultEngine, FaultPlan, ManualClock, RealClock
from emulator.gate import FaultGate
from emulator.journal import Journal

PLAN = {"rules": [{"id": "slow", "route": "sandbox_fusion.run_code", "latency": {"fixed": 0.5}}]}


class _At(RealClock):
    """The real clock, stopped at one instant."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def _gate(clock: RealClock | ManualClock) -> FaultGate:
    return FaultGate(FaultEngine(FaultPlan.from_dict(PLAN), clock=clock), Journal())


@pytest.mark.parametrize(
    ("arrived", "wait", "deadline"),
    [
        (99.8, 0.3, 100.3),  # 0.2 s since its first bytes: that much less to wait
        (None, 0.5, 100.5),  # no arrival known (an ASGI transport): the whole latency from now
        (100.2, 0.5, 100.5),  # an arrival after now is not to be believed
        (99.0, -0.5, 99.5),  # longer ago than the latency: nothing left (sleeping a negative time returns at once)
    ],
)
def test_on_the_real_clock_the_latency_runs_from_the_arrival(
    arrived: float | None, wait: float, deadline: float
) -> None:
    gate = _gate(_At(100.0))
    decision = gate.engine.decide("sandbox_fusion.run_code", "k")
    got_wait, got_deadline = gate._latency(decision, arrived)
    assert got_wait == pytest.approx(wait) and got_deadline == pytest.approx(deadline)


def test_on_a_virtual_clock_the_whole_latency_is_waited() -> None:
    gate = _gate(ManualClock(start=100.0))
    decision = gate.engine.decide("sandbox_fusion.run_code", "k")
    assert gate._latency(decision, 99.8) == (pytest.approx(0.5), None)
