"""Load-dependent (closed-loop) faults: latency and 429 probability grow with requests in flight beyond a capacity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.faults import (
    AdmissionError,
    Decision,
    FaultEngine,
    FaultPlan,
    FaultPlanError,
    ManualClock,
    OverloadSpec,
    ReplayEngine,
    keyed_uniform,
    load_plan,
)

RC = "sandbox_fusion.run_code"
JUP = "sandbox_fusion.run_jupyter"
OVERLOAD = {"capacity": 2, "latency_per_excess": 0.1, "p429_per_excess": 0.25, "max_probability": 0.6}


def _engine(rules: list[dict[str, Any]], *, limits: list[dict[str, Any]] | None = None, seed: int = 0) -> FaultEngine:
    return FaultEngine(FaultPlan.from_dict({"seed": seed, "rules": rules, "limits": limits or []}), ManualClock())


def _expected_fault(seed: int, index: int, key: str, load: int) -> bool:
    p = min(0.6, 0.25 * max(0, load - 2))
    return keyed_uniform(seed, index, RC, key, 1, "overload") < p


def test_latency_and_fault_follow_the_load_up_and_back_down() -> None:
    engine = _engine([{"id": "ov", "route": "sandbox_fusion.*", "overload": OVERLOAD}], seed=4)
    held: list[Decision] = []
    for n in range(1, 13):  # the n-th concurrent request sees load n (itself included)
        d = engine.decide(RC, f"up{n}")
        held.append(d)
        assert d.load == (("ov", n),)
        assert d.latency == pytest.approx(0.1 * max(0, n - 2))
        assert (d.status == 429) is _expected_fault(4, 0, f"up{n}", n)
        assert engine.load() == n
    for d in held[:-1]:
        engine.release(d)
    assert engine.load() == 1
    calm = engine.decide(RC, "down")
    assert calm.load == (("ov", 2),) and calm.latency == 0.0 and calm.kind == "pass"
    engine.release(calm)
    engine.release(held[-1])
    assert engine.load() == 0 and engine.outstanding == 0


@pytest.mark.parametrize(("load", "p"), [(2, 0.0), (3, 0.25), (4, 0.5), (5, 0.6), (40, 0.6)])
def test_fault_probability_at_fixed_load(load: int, p: float) -> None:
    engine = _engine([{"id": "ov", "overload": OVERLOAD}], seed=7)
    n = 4000
    faults = sum(engine.preview(RC, f"k{i}", 1, 1, in_flight=load).status == 429 for i in range(n))
    assert faults / n == pytest.approx(p, abs=0.03)


def test_load_counts_only_the_rules_routes_and_granted_requests() -> None:
    rules = [{"id": "ov", "route": RC, "overload": OVERLOAD}]
    engine = _engine(rules, limits=[{"name": "cap", "route": "sandbox_fusion.*", "max_in_flight": 3}])
    other = engine.decide(JUP, "j")  # covered by the cap, not by the overload rule: not in its load
    a = engine.decide(RC, "a")
    b = engine.decide(RC, "b")
    assert a.load == (("ov", 1),) and b.load == (("ov", 2),)
    refused = engine.decide(RC, "c")  # the cap is full: refused at the gateway, never in flight, not counted
    assert refused.refused and refused.load == () and engine.load(RC) == 2
    for d in (other, a, b, refused):
        engine.release(d)
    assert engine.load() == 0 and engine.outstanding == 0 and engine.in_flight("cap") == 0


def test_overload_admissions_must_be_released_once_and_reset_voids_them() -> None:
    engine = _engine([{"id": "ov", "overload": OVERLOAD}])
    d = engine.decide(RC, "k")
    assert d.admission is not None and d.admission.loaded and engine.outstanding == 1
    engine.release(d)
    with pytest.raises(AdmissionError):
        engine.release(d)
    late = engine.decide(RC, "k2")
    engine.reset()
    assert engine.load() == 0
    engine.release(late)  # voided by reset: a silent no-op
    assert engine.load() == 0 and engine.outstanding == 0


def test_plans_without_overload_keep_no_admission() -> None:
    engine = _engine([{"id": "slow", "latency": 0.1}])
    d = engine.decide(RC, "k")
    assert d.admission is None and d.load == () and engine.outstanding == 0


def test_overload_fault_overrides_and_order_with_other_rules() -> None:
    rules = [
        {"id": "ov", "overload": {"capacity": 0, "p429_per_excess": 1.0}, "fault": {"status": 503, "retry_after": 2}},
        {"id": "never", "fault": 500},
    ]
    engine = _engine(rules)
    d = engine.decide(RC, "k")
    assert d.status == 503 and d.rule_id == "ov" and d.action is not None
    assert d.action.header_dict()["Retry-After"] == "2"
    # Below capacity the overload rule adds nothing and evaluation goes on to the next rule.
    engine2 = _engine([{"id": "ov", "overload": {"capacity": 5, "p429_per_excess": 1.0}}, {"id": "then", "fault": 500}])
    d2 = engine2.decide(RC, "k")
    assert d2.status == 500 and d2.rule_id == "then" and d2.rules_fired == ("ov", "then")


def test_default_overload_fault_is_a_plain_429_with_the_routes_body() -> None:
    engine = _engine([{"id": "ov", "overload": {"capacity": 0, "p429_per_excess": 1.0}}])
    sf = engine.decide(RC, "k")
    assert sf.status == 429 and sf.action is not None and "Retry-After" not in sf.action.header_dict()
    assert sf.action.body is not None and "429" in sf.action.body
    dt = engine.decide("daytona.toolbox.code_run", "k")
    assert dt.action is not None and dt.action.body is not None and "ThrottlerException" in dt.action.body


def test_overload_syntax_errors_name_the_path() -> None:
    bad: list[tuple[Any, str, str]] = [
        ({"latency_per_excess": 0.1}, "rules[0].overload.capacity", "missing"),
        ({"capacity": 2}, "rules[0].overload", "does nothing"),
        ({"capacity": 2, "p429_per_excess": 1.5}, "rules[0].overload.p429_per_excess", "probability"),
        ({"capacity": -1, "latency_per_excess": 1}, "rules[0].overload.capacity", ">= 0"),
        ({"capacity": 2, "p429_per_exces": 0.1}, "rules[0].overload.p429_per_exces", "did you mean 'p429_per_excess'"),
    ]
    for overload, path, fragment in bad:
        with pytest.raises(FaultPlanError) as info:
            FaultPlan.from_dict({"rules": [{"overload": overload}]})
        assert info.value.path == path and fragment in str(info.value), str(info.value)
    plan = FaultPlan.from_dict({"rules": [{"id": "o", "overload": OVERLOAD, "fault": 503}]})
    assert plan.rules[0].overload == OverloadSpec(2, 0.1, 0.25, 0.6)
    assert FaultPlan.from_dict(plan.to_dict()) == plan


def test_overload_profile_sheds_under_load_and_recovers() -> None:
    engine = FaultEngine(load_plan("overload", seed=2), ManualClock())
    crowd = [engine.decide(RC, f"k{i}") for i in range(40)]
    tail = crowd[20:]  # 13 to 32 beyond capacity: 95% shed
    assert sum(d.status == 429 for d in tail) >= 15
    assert all(d.latency >= 0.05 * (dict(d.load)["sandbox-fusion-overload"] - 8) for d in crowd)
    assert all(d.kind == "pass" for d in crowd[:8])
    toolbox = engine.decide("daytona.toolbox.code_run", "t")  # a separate service with its own load
    assert toolbox.load == (("daytona-toolbox-overload", 1),) and toolbox.kind == "pass"
    for d in (*crowd, toolbox):
        engine.release(d)
    after = [engine.decide(RC, f"r{i}") for i in range(8)]
    assert all(d.kind == "pass" for d in after)


def test_load_dependent_decisions_replay_exactly_in_another_order(tmp_path: Path) -> None:
    rules = [{"id": "base", "latency": {"uniform": [0.0, 0.2]}}, {"id": "ov", "overload": OVERLOAD}]
    engine = _engine(rules, seed=13)
    original: list[Decision] = []
    open_: list[Decision] = []
    for wave in range(6):  # waves of growing concurrency, each retrying the same logical requests
        for i in range(wave + 2):
            d = engine.decide(RC, f"k{i}")
            original.append(d)
            open_.append(d)
        while open_:
            engine.release(open_.pop())
    assert {d.kind for d in original} == {"pass", "status"}
    path = engine.log.dump_jsonl(tmp_path / "load.jsonl")
    records = engine.log.records
    loads = [i + 1 for wave in range(6) for i in range(wave + 2)]
    assert [r["load"] for r in records] == [{"ov": n} for n in loads]
    replay = ReplayEngine(path, strict=True)
    by_identity = {(d.key, d.attempt): d for d in original}
    # Replay with no concurrency at all, keys in reverse order: every identity gets its logged decision.
    replayed: dict[tuple[str, int], Decision] = {}
    for i in reversed(range(7)):
        for _ in range(sum(1 for d in original if d.key == f"k{i}")):
            d = replay.decide(RC, f"k{i}")
            replayed[(d.key, d.attempt)] = d
    assert replayed == by_identity
