"""Decision log round-trip and replay, built-in profiles and load_plan, and the ManualClock."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.faults import (
    PROFILES,
    DecisionLog,
    FaultEngine,
    FaultPlan,
    FaultPlanError,
    ManualClock,
    RealClock,
    ReplayEngine,
    ReplayMissError,
    load_jsonl,
    load_plan,
)

RC = "sandbox_fusion.run_code"

PLAN: dict[str, Any] = {
    "seed": 5,
    "rules": [
        {"route": "*", "latency": {"lognormal": {"p50": 0.05, "p99": 0.8}}},
        {"route": RC, "requests": "4-6", "fault": {"hang": {"seconds": 2, "then": 504}}},
        {"route": RC, "probability": 0.3, "fault": {"status": 429, "retry_after": 1}},
        {"route": "*", "probability": 0.1, "fault": "sandbox_error"},
    ],
    "limits": [{"route": "*", "rate": 3, "burst": 4}],
}


def _record_view(d: Any) -> tuple[Any, ...]:
    return (d.route, d.key, d.attempt, d.kind, d.status, d.latency, d.rule_id, d.refused, d.action, d.limit_headers)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    arrivals=st.lists(
        st.tuples(st.sampled_from([RC, "sandbox_fusion.run_jupyter"]), st.integers(0, 8), st.floats(0, 0.5)),
        min_size=1,
        max_size=60,
    ),
    shuffle_seed=st.randoms(use_true_random=False),
)
def test_replay_from_dumped_log_reproduces(
    tmp_path: Path, arrivals: list[tuple[str, int, float]], shuffle_seed: Any
) -> None:
    clock = ManualClock()
    engine = FaultEngine(FaultPlan.from_dict(PLAN), clock)
    original = []
    for route, k, dt in arrivals:
        clock.advance(dt)
        d = engine.decide(route, f"key{k}")
        original.append(d)
        engine.release(d)
    path = engine.log.dump_jsonl(tmp_path / "run" / "decisions.jsonl")
    # Replay in a different order (per-key attempt order preserved): the logged decisions come back.
    per_key: dict[tuple[str, str], list[Any]] = {}
    for d in original:
        per_key.setdefault((d.route, d.key), []).append(d)
    queues = list(per_key.values())
    replay = FaultEngine.replaying(path, strict=True)
    while queues:
        q = shuffle_seed.choice(queues)
        want = q.pop(0)
        if not q:
            queues.remove(q)
        got = replay.decide(want.route, want.key)
        assert _record_view(got) == _record_view(want)
    assert not replay.misses


def test_replay_misses() -> None:
    engine = FaultEngine(FaultPlan.from_dict({"rules": [{"fault": 503}]}), ManualClock())
    engine.decide(RC, "a")
    lenient = ReplayEngine(engine.log)
    assert lenient.decide(RC, "a").status == 503
    d = lenient.decide(RC, "a")
    assert d.kind == "pass" and d.attempt == 2
    assert lenient.misses == [(RC, "a", 2)]
    strict = ReplayEngine(engine.log.records, strict=True)
    strict.decide(RC, "a")
    with pytest.raises(ReplayMissError):
        strict.decide(RC, "b")
    strict.reset()
    assert strict.decide(RC, "a").status == 503
    assert strict.admit(RC) is None and strict.outstanding == 0


def test_log_jsonl_round_trip_and_errors(tmp_path: Path) -> None:
    log = DecisionLog([{"a": 1}, {"b": [1, 2]}])
    p = log.dump_jsonl(tmp_path / "x.jsonl")
    assert DecisionLog.load_jsonl(p).records == log.records
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n\nnot json\n')
    with pytest.raises(FaultPlanError, match=r"bad\.jsonl:3"):
        load_jsonl(bad)
    bad.write_text("[1]\n")
    with pytest.raises(FaultPlanError, match="JSON object"):
        load_jsonl(bad)
    with pytest.raises(FaultPlanError):
        ReplayEngine([{"route": RC}])


@pytest.mark.parametrize("name", ["calm", "flaky", "vefaas-gateway"])  # stationary profiles; the time- and
def test_profiles_load_and_run(name: str) -> None:  # load-shaped ones are exercised in test_chaos_*.py
    plan = load_plan(name)
    assert plan == FaultPlan.from_dict(PROFILES[name])
    engine = FaultEngine(plan, ManualClock())
    kinds = {engine.decide(RC, f"k{i}").kind for i in range(2000)}
    if name == "calm":
        assert kinds == {"pass"}
    else:
        assert "pass" in kinds and len(kinds) > 1


def test_vefaas_gateway_profile_shapes() -> None:
    engine = FaultEngine(load_plan("vefaas-gateway", seed=1), ManualClock())
    statuses = {engine.decide(RC, f"k{i}").status for i in range(3000)}
    assert {429, 504} <= statuses
    assert engine.decide("daytona.sandbox.create", "k").kind == "pass"


def test_load_plan_variants(tmp_path: Path) -> None:
    assert load_plan(None) == FaultPlan()
    assert load_plan({"seed": 3}).seed == 3
    assert load_plan("flaky", seed=9).seed == 9
    plan = FaultPlan.from_dict({"rules": [{"fault": 502}]})
    assert load_plan(plan) is plan
    y = tmp_path / "plan.yaml"
    y.write_text("seed: 4\nrules:\n  - fault: 503\n")
    assert load_plan(y).seed == 4 and load_plan(str(y)).seed == 4
    j = tmp_path / "plan.json"
    j.write_text(json.dumps({"seed": 2}))
    assert load_plan(str(j)).seed == 2
    with pytest.raises(FaultPlanError, match="known profiles: calm, brownout, daytona-tier1, flaky"):
        load_plan("flakey")
    with pytest.raises(FaultPlanError, match="cannot read"):
        load_plan(str(tmp_path / "missing.yaml"))
    with pytest.raises(FaultPlanError, match="profile name"):
        load_plan(42)  # type: ignore[arg-type]


def test_manual_clock_sleep_and_advance() -> None:
    async def main() -> list[str]:
        clock = ManualClock(10.0)
        woke: list[str] = []

        async def sleeper(name: str, s: float) -> None:
            await clock.sleep(s)
            woke.append(f"{name}@{clock.monotonic()}")

        tasks = [asyncio.create_task(sleeper("a", 1.0)), asyncio.create_task(sleeper("b", 3.0))]
        await asyncio.sleep(0)
        assert clock.sleepers == 2
        clock.advance(0.5)
        await asyncio.sleep(0)
        assert woke == []
        clock.advance(0.5)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert woke == ["a@11.0"]
        clock.set(20.0)
        await asyncio.gather(*tasks)
        await clock.sleep(0)
        with pytest.raises(ValueError):
            clock.advance(-1)
        with pytest.raises(ValueError):
            clock.set(1.0)
        return woke

    assert asyncio.run(main()) == ["a@11.0", "b@20.0"]


def test_real_clock() -> None:
    clock = RealClock()
    t0 = clock.monotonic()
    asyncio.run(clock.sleep(0.001))
    assert clock.monotonic() >= t0


def test_a_replay_follows_a_key_the_engine_forgot() -> None:
    """With max_keys=2 the engine evicts the first key and counts its return as attempt 1 again; the replay counted
    attempt 2, found nothing and (strict) raised, or passed the request untouched where the run had faulted it."""
    plan = FaultPlan.from_dict({"rules": [{"id": "first", "attempts": "1", "fault": 503}]})
    engine = FaultEngine(plan, ManualClock(), max_keys=2)
    arrivals = [("sandbox_fusion.run_code", k) for k in ("a", "b", "c", "a", "a")]
    logged = [engine.decide(route, key) for route, key in arrivals]
    assert [(d.attempt, d.status) for d in logged] == [(1, 503), (1, 503), (1, 503), (1, 503), (2, None)]
    replay = ReplayEngine(engine.log, strict=True)
    assert [replay.decide(route, key) for route, key in arrivals] == logged
