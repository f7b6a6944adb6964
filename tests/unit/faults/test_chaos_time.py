"""Time-dependent faults on the ManualClock: rule windows, latency ramps, and their replay."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from emulator.faults import (
    FaultEngine,
    FaultPlan,
    FaultPlanError,
    ManualClock,
    RampLatency,
    ReplayEngine,
    TimeWindow,
    keyed_uniform,
    load_plan,
)

RC = "sandbox_fusion.run_code"


def _engine(rules: list[dict[str, Any]], clock: ManualClock, seed: int = 0) -> FaultEngine:
    return FaultEngine(FaultPlan.from_dict({"seed": seed, "rules": rules}), clock)


def test_window_boundaries_are_half_open_and_relative_to_engine_start() -> None:
    clock = ManualClock(1000.0)  # the clock's origin is arbitrary: windows count from the engine's start
    engine = _engine([{"id": "down", "window": {"start": 60, "end": 660}, "fault": 503}], clock)
    seen: dict[float, str] = {}
    for t in (0.0, 59.999, 60.0, 300.0, 659.999, 660.0, 5000.0):
        clock.set(1000.0 + t)
        d = engine.decide(RC, f"k{t}")
        assert d.time == pytest.approx(t)
        seen[t] = d.kind
    assert seen == {
        0.0: "pass",
        59.999: "pass",
        60.0: "status",
        300.0: "status",
        659.999: "status",
        660.0: "pass",
        5000.0: "pass",
    }


def test_reset_restarts_plan_time() -> None:
    clock = ManualClock()
    engine = _engine([{"id": "down", "window": {"start": 60, "end": 120}, "fault": 503}], clock)
    clock.advance(90)
    assert engine.decide(RC, "a").status == 503
    engine.reset()
    assert engine.plan_time() == 0.0
    assert engine.decide(RC, "a").kind == "pass"
    clock.advance(61)
    assert engine.decide(RC, "a").status == 503


def test_open_ended_window_and_window_with_probability_use_keyed_draws() -> None:
    clock = ManualClock()
    rules = [{"id": "late", "window": {"start": 10}, "probability": 0.5, "fault": 502}]
    engine = _engine(rules, clock, seed=3)
    assert all(engine.decide(RC, f"k{i}").kind == "pass" for i in range(50))
    clock.advance(1e6)
    for i in range(200):
        key = f"z{i}"
        fires = keyed_uniform(3, 0, RC, key, 1, "fire") < 0.5
        assert (engine.decide(RC, key).status == 502) is fires


def test_window_syntax_errors_name_the_path() -> None:
    bad: list[tuple[Any, str, str]] = [
        ({"start": 10, "end": 10}, "rules[0].window.end", "after its start"),
        ({"start": -1}, "rules[0].window.start", ">= 0"),
        ({}, "rules[0].window", "start"),
        ({"begin": 1}, "rules[0].window.begin", "unknown key"),
        ("60-660", "rules[0].window", "mapping"),
    ]
    for window, path, fragment in bad:
        with pytest.raises(FaultPlanError) as info:
            FaultPlan.from_dict({"rules": [{"window": window, "fault": 503}]})
        assert info.value.path == path and fragment in str(info.value), str(info.value)


def test_window_round_trips() -> None:
    plan = FaultPlan.from_dict({"rules": [{"id": "w", "window": {"start": 5, "end": 7.5}, "fault": 503}]})
    assert plan.rules[0].window == TimeWindow(5.0, 7.5)
    assert FaultPlan.from_dict(plan.to_dict()) == plan
    assert 5.0 in TimeWindow(5.0, 7.5) and 7.5 not in TimeWindow(5.0, 7.5) and True not in TimeWindow(0.0)


@pytest.mark.parametrize(
    ("t", "expected"),
    [(0.0, 0.05), (60.0, 0.05), (210.0, 0.05 + 2.95 * 0.25), (360.0, 1.525), (660.0, 3.0), (10_000.0, 3.0)],
)
def test_ramp_values_at_several_times(t: float, expected: float) -> None:
    clock = ManualClock(42.0)
    engine = _engine([{"id": "ramp", "latency": {"ramp": {"from": 0.05, "to": 3.0, "over": 600, "start": 60}}}], clock)
    clock.advance(t)
    assert engine.decide(RC, "k").latency == pytest.approx(expected)


def test_ramp_can_fall_and_jitter_stays_within_its_band() -> None:
    falling = RampLatency(2.0, 0.0, over=10.0)
    assert [falling.value_at(t) for t in (0, 5, 10, 20)] == pytest.approx([2.0, 1.0, 0.0, 0.0])
    clock = ManualClock()
    engine = _engine([{"id": "j", "latency": {"ramp": {"from": 1.0, "to": 1.0, "over": 1, "jitter": 0.2}}}], clock, 9)
    values = [engine.decide(RC, f"k{i}").latency for i in range(300)]
    assert all(0.8 <= v <= 1.2 for v in values)
    assert min(values) < 0.85 and max(values) > 1.15  # spread over the band, not a constant
    for i, v in enumerate(values):
        u = keyed_uniform(9, 0, RC, f"k{i}", 1, "latency")
        assert v == pytest.approx(1.0 + 0.2 * (2 * u - 1))


def test_ramp_syntax_errors_and_round_trip() -> None:
    with pytest.raises(FaultPlanError, match=r"rules\[0\]\.latency\.ramp\.over"):
        FaultPlan.from_dict({"rules": [{"latency": {"ramp": {"from": 0, "to": 1}}}]})
    with pytest.raises(FaultPlanError, match="fraction"):
        FaultPlan.from_dict({"rules": [{"latency": {"ramp": {"from": 0, "to": 1, "over": 5, "jitter": 1.5}}}]})
    with pytest.raises(FaultPlanError, match="over"):
        FaultPlan.from_dict({"rules": [{"latency": {"ramp": {"from": 0, "to": 1, "over": 0}}}]})
    plan = FaultPlan.from_dict({"rules": [{"latency": {"ramp": {"from": 0, "to": 1, "over": 5, "start": 2}}}]})
    assert FaultPlan.from_dict(plan.to_dict()) == plan


def test_outage_profile_story_on_virtual_time() -> None:
    clock = ManualClock()
    engine = FaultEngine(load_plan("outage", seed=5), clock)
    before = {engine.decide(RC, f"a{i}").kind for i in range(100)}
    clock.advance(60)
    during = [engine.decide(RC, f"b{i}") for i in range(400)]
    clock.advance(600)
    after = {engine.decide(RC, f"c{i}").kind for i in range(100)}
    assert before == {"pass"} and after == {"pass"}
    kinds = [d.kind for d in during]
    assert set(kinds) == {"reset", "status"}
    assert 0.2 < kinds.count("reset") / len(kinds) < 0.4
    for d in during:
        if d.kind == "status":
            assert d.status == 503 and d.action is not None and d.action.header_dict()["Retry-After"] == "10"


def test_brownout_profile_latency_rises_then_holds() -> None:
    clock = ManualClock()
    engine = FaultEngine(load_plan("brownout"), clock)
    means = []
    for _ in range(12):  # every minute for twelve minutes
        means.append(sum(engine.decide(RC, f"k{clock.monotonic()}-{i}").latency for i in range(200)) / 200)
        clock.advance(60)
    assert means[0] == pytest.approx(0.05, rel=0.05) and means[1] == pytest.approx(0.05, rel=0.05)
    assert all(b > a for a, b in itertools.pairwise(means[1:]))
    assert means[11] == pytest.approx(3.0, rel=0.05)
    assert {engine.decide(RC, f"x{i}").kind for i in range(100)} == {"pass"}


def test_time_dependent_decisions_replay_exactly(tmp_path: Path) -> None:
    plan = FaultPlan.from_dict(
        {
            "seed": 11,
            "rules": [
                {"id": "ramp", "latency": {"ramp": {"from": 0.1, "to": 2.0, "over": 100, "jitter": 0.1}}},
                {"id": "storm", "window": {"start": 30, "end": 70}, "probability": 0.6, "fault": {"status": 429}},
            ],
        }
    )
    clock = ManualClock()
    engine = FaultEngine(plan, clock)
    original = []
    for _ in range(20):
        for i in range(5):
            original.append(engine.decide(RC, f"k{i}"))  # five logical requests, retried every 5 s
        clock.advance(5)
    path = engine.log.dump_jsonl(tmp_path / "log.jsonl")
    replay = ReplayEngine(path, strict=True)  # a real clock that never reaches these plan times
    replayed = [replay.decide(RC, f"k{i}") for _ in range(20) for i in range(5)]
    assert replayed == original
    assert {d.kind for d in original} == {"pass", "status"}
    assert len({d.latency for d in original}) > 20
    # A fresh engine at a different time would decide differently: the log, not the clock, is what replays.
    fresh = FaultEngine(plan, ManualClock())
    assert [fresh.decide(RC, f"k{i}") for _ in range(20) for i in range(5)] != original
