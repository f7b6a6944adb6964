"""Admission control: token buckets and concurrency caps on a ManualClock."""

from __future__ import annotations

import math
import random
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.faults import AdmissionError, Decision, FaultEngine, FaultPlan, ManualClock

RC = "sandbox_fusion.run_code"


def _engine(limits: list[dict[str, Any]], clock: ManualClock, rules: list[dict[str, Any]] | None = None) -> FaultEngine:
    return FaultEngine(FaultPlan.from_dict({"limits": limits, "rules": rules or []}), clock)


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.1, 50.0),
    burst=st.integers(1, 20),
    steps=st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(0, 15)), min_size=1, max_size=25),
)
def test_token_bucket_never_exceeds_burst_plus_rate(rate: float, burst: int, steps: list[tuple[float, int]]) -> None:
    clock = ManualClock(100.0)
    engine = _engine([{"route": "sandbox_fusion.*", "rate": rate, "burst": burst}], clock)
    admitted = 0
    for dt, n in steps:
        clock.advance(dt)
        for i in range(n):
            d = engine.decide(RC, f"k{i}")
            if d.refused:
                assert d.status == 429 and d.action is not None
                ra = d.action.retry_after
                assert ra is not None and 0 < ra <= 1 / rate + 1e-9
                assert int(d.action.header_dict()["Retry-After"]) == math.ceil(ra - 1e-9)
            else:
                admitted += 1
            engine.release(d)
        elapsed = clock.monotonic() - 100.0
        assert admitted <= burst + rate * elapsed + 1e-6
    assert engine.outstanding == 0


def test_token_bucket_refills_and_retry_after_is_honest() -> None:
    clock = ManualClock()
    engine = _engine([{"route": "*", "rate": 2, "burst": 3}], clock)
    results = [engine.decide(RC, f"k{i}") for i in range(4)]
    assert [d.refused for d in results] == [False, False, False, True]
    refused = results[-1]
    assert refused.action is not None and refused.action.retry_after == pytest.approx(0.5)
    assert refused.limit == "limit0" and refused.kind == "limited"
    for d in results:
        engine.release(d)
    clock.advance(0.49)
    d = engine.decide(RC, "x")
    assert d.refused
    engine.release(d)
    clock.advance(0.02)
    d = engine.decide(RC, "x")
    assert not d.refused
    engine.release(d)


@settings(max_examples=60, deadline=None)
@given(cap=st.integers(0, 6), ops=st.lists(st.booleans(), min_size=1, max_size=80), seed=st.integers(0, 10**6))
def test_concurrency_cap_never_exceeded_and_balanced(cap: int, ops: list[bool], seed: int) -> None:
    """Random interleaving of arrivals (True) and completions (False)."""
    rng = random.Random(seed)
    clock = ManualClock()
    engine = _engine([{"name": "sf", "route": "sandbox_fusion.*", "max_in_flight": cap}], clock)
    held: list[Decision] = []
    for i, arrive in enumerate(ops):
        if arrive or not held:
            d = engine.decide(RC, f"k{i}")
            if d.refused:
                assert len(held) == cap and d.status == 429
                engine.release(d)
            else:
                held.append(d)
        else:
            engine.release(held.pop(rng.randrange(len(held))))
        assert engine.in_flight("sf") == len(held) <= cap
        assert engine.high_water("sf") <= cap
    for d in held:
        engine.release(d)
    assert engine.in_flight("sf") == 0 and engine.outstanding == 0


def test_double_release_is_an_error() -> None:
    engine = _engine([{"route": "*", "max_in_flight": 1}], ManualClock())
    d = engine.decide(RC, "k")
    assert d.admission is not None and d.admission.granted
    engine.release(d)
    with pytest.raises(AdmissionError, match="already released"):
        engine.release(d)
    refused_then_ok = engine.decide(RC, "k2")
    engine.release(refused_then_ok.admission)
    with pytest.raises(AdmissionError):
        engine.release(refused_then_ok.admission)


def test_no_limits_means_no_admission() -> None:
    engine = _engine([{"route": "daytona.*", "max_in_flight": 1}], ManualClock())
    d = engine.decide(RC, "k")
    assert d.admission is None
    engine.release(d)  # no-op
    assert engine.admit(RC) is None


def test_admit_alone_and_reset_voids_tickets() -> None:
    engine = _engine([{"name": "c", "route": "*", "max_in_flight": 2}], ManualClock())
    a = engine.admit(RC, "a")
    b = engine.admit(RC, "b")
    c = engine.admit(RC, "c")
    assert a is not None and b is not None and c is not None
    assert (a.granted, b.granted, c.granted) == (True, True, False)
    assert engine.outstanding == 3 and len(engine.log) == 0
    engine.reset()
    assert engine.in_flight("c") == 0 and engine.outstanding == 0
    engine.release(a)  # void ticket from before reset: ignored
    assert engine.in_flight("c") == 0


def test_refusal_skips_rules_and_limit_checked_before_rules() -> None:
    clock = ManualClock()
    engine = _engine([{"route": "*", "rate": 1, "burst": 1}], clock, rules=[{"route": "*", "fault": 500}])
    first = engine.decide(RC, "k")
    second = engine.decide(RC, "k")
    assert first.status == 500 and not first.refused
    assert second.refused and second.status == 429 and second.rule_id is None and second.latency == 0
    assert second.attempt == 2


def test_daytona_headers() -> None:
    clock = ManualClock()
    engine = _engine(
        [
            {
                "name": "sandbox-create",
                "route": "daytona.sandbox.create",
                "rate": 5,
                "burst": 2,
                "headers_style": "daytona",
            }
        ],
        clock,
    )
    ok = engine.decide("daytona.sandbox.create", "a")
    h = dict(ok.limit_headers)
    assert h == {
        "X-RateLimit-Limit-sandbox-create": "2",
        "X-RateLimit-Remaining-sandbox-create": "1",
        "X-RateLimit-Reset-sandbox-create": "1",
    }
    engine.decide("daytona.sandbox.create", "b")
    refused = engine.decide("daytona.sandbox.create", "c")
    assert refused.refused and refused.action is not None
    rh = refused.action.header_dict()
    assert rh["Retry-After-sandbox-create"] == "1"
    assert rh["X-RateLimit-Remaining-sandbox-create"] == "0"
    assert "Retry-After" not in rh
    assert refused.action.body is not None and "ThrottlerException" in refused.action.body


def test_cap_headers_styles() -> None:
    engine = _engine(
        [
            {"name": "plain", "route": "a", "max_in_flight": 0, "retry_after": 3},
            {"name": "quiet", "route": "b", "max_in_flight": 0, "headers_style": "none"},
        ],
        ManualClock(),
    )
    a = engine.decide("a", "k").action
    b = engine.decide("b", "k").action
    assert a is not None and a.header_dict()["Retry-After"] == "3"
    assert b is not None and "Retry-After" not in b.header_dict()


def test_multiple_limits_refuse_atomically() -> None:
    """A refusal by one limit must not consume tokens or slots from the others."""
    clock = ManualClock()
    engine = _engine(
        [{"name": "cap", "route": "*", "max_in_flight": 1}, {"name": "bucket", "route": "*", "rate": 1, "burst": 5}],
        clock,
    )
    held = engine.decide(RC, "a")
    for i in range(10):
        d = engine.decide(RC, f"r{i}")
        assert d.refused and d.limit == "cap"
        engine.release(d)
    engine.release(held)
    admitted = 0
    for i in range(10):
        d = engine.decide(RC, f"s{i}")
        admitted += not d.refused
        engine.release(d)
    assert admitted == 4  # 5 tokens minus the one `held` took


def test_set_plan_carries_in_flight() -> None:
    engine = _engine([{"name": "c", "route": "*", "max_in_flight": 2}], ManualClock())
    d = engine.decide(RC, "a")
    engine.set_plan(FaultPlan.from_dict({"limits": [{"name": "c", "route": "*", "max_in_flight": 1}]}))
    assert engine.in_flight("c") == 1
    assert engine.decide(RC, "b").refused
    engine.release(d)
    assert engine.in_flight("c") == 0


def test_threads_respect_cap() -> None:
    engine = _engine([{"name": "c", "route": "*", "max_in_flight": 3}], ManualClock())
    errors: list[str] = []

    def worker(n: int) -> None:
        for i in range(300):
            d = engine.decide(RC, f"{n}-{i}")
            if engine.in_flight("c") > 3:
                errors.append("over cap")
            engine.release(d)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and engine.outstanding == 0 and engine.high_water("c") <= 3
