"""Fixed-window limits and the ``daytona-tier1`` profile: Daytona's documented per-minute throttlers and headers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from emulator.faults import FaultEngine, FaultPlan, FaultPlanError, ManualClock, WindowLimit, load_plan
from emulator.faults.bodies import DAYTONA_429_BODY

CREATE = "daytona.sandbox.create"
DELETE = "daytona.sandbox.delete"
GET = "daytona.sandbox.get"


def _tier1(clock: ManualClock) -> FaultEngine:
    return FaultEngine(load_plan("daytona-tier1"), clock)


def _h(headers: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return dict(headers)


def test_301st_create_in_a_minute_is_refused_with_daytonas_headers_then_admitted_after_the_window() -> None:
    clock = ManualClock(500.0)
    engine = _tier1(clock)
    for i in range(300):  # spread over the first 57 s of the window, which opens at the first create
        d = engine.decide(CREATE, f"s{i}")
        assert not d.refused, i
        h = _h(d.limit_headers)
        assert h["X-RateLimit-Limit-sandbox-create"] == "300"
        assert h["X-RateLimit-Remaining-sandbox-create"] == str(299 - i)
        assert "X-RateLimit-Limit-authenticated" not in h  # the API's create skips the general throttler
        assert "Retry-After-sandbox-create" not in h
        engine.release(d)
        clock.advance(0.19)
    clock.set(500.0 + 59.5)
    refused = engine.decide(CREATE, "s300")
    assert refused.refused and refused.limit == "sandbox-create" and refused.status == 429
    assert refused.action is not None and refused.action.kind == "limited"
    assert refused.action.body == DAYTONA_429_BODY
    assert json.loads(refused.action.body)["message"] == "ThrottlerException: Too Many Requests"
    h = refused.action.header_dict()
    assert h["Retry-After-sandbox-create"] == "1"  # ceil(0.5 s left in the window)
    assert h["X-RateLimit-Remaining-sandbox-create"] == "0"
    assert h["X-RateLimit-Reset-sandbox-create"] == "1"
    assert "Retry-After" not in h  # named throttlers get only the suffixed header
    engine.release(refused)
    # Other control-plane routes still pass: only the create throttler is exhausted.
    listing = engine.decide(GET, "g")
    assert not listing.refused and "X-RateLimit-Limit-sandbox-create" not in _h(listing.limit_headers)
    engine.release(listing)
    clock.set(500.0 + 60.0)  # the window has run its minute: a new one opens
    again = engine.decide(CREATE, "s300")
    assert not again.refused
    assert _h(again.limit_headers)["X-RateLimit-Remaining-sandbox-create"] == "299"
    assert _h(again.limit_headers)["X-RateLimit-Reset-sandbox-create"] == "60"
    engine.release(again)
    assert engine.outstanding == 0


def test_retry_after_counts_down_to_the_windows_end() -> None:
    clock = ManualClock()
    engine = _tier1(clock)
    for i in range(300):
        engine.release(engine.decide(CREATE, f"s{i}"))
    for t, expected in ((0.0, "60"), (10.0, "50"), (45.2, "15"), (59.99, "1")):
        clock.set(t)
        d = engine.decide(CREATE, "late")
        assert d.refused and d.action is not None
        assert d.action.header_dict()["Retry-After-sandbox-create"] == expected
        assert d.action.retry_after == pytest.approx(60.0 - t)
        engine.release(d)


def test_lifecycle_and_general_throttlers_cover_their_routes() -> None:
    clock = ManualClock()
    engine = _tier1(clock)
    delete = engine.decide(DELETE, "d")
    h = _h(delete.limit_headers)
    assert h["X-RateLimit-Limit-sandbox-lifecycle"] == "10000" and "X-RateLimit-Limit-authenticated" not in h
    assert "X-RateLimit-Limit-sandbox-create" not in h
    assert _h(engine.decide(GET, "g").limit_headers)["X-RateLimit-Limit-authenticated"] == "10000"
    for route in ("daytona.sandbox.start", "daytona.sandbox.stop"):
        assert "X-RateLimit-Limit-sandbox-lifecycle" in _h(engine.decide(route, "x").limit_headers)
    assert "X-RateLimit-Limit-sandbox-lifecycle" not in _h(engine.decide(GET, "x").limit_headers)
    toolbox = engine.decide("daytona.toolbox.code_run", "t")  # toolbox traffic is not throttled
    assert toolbox.admission is None and toolbox.limit_headers == ()


def test_general_throttler_refuses_the_10001st_control_plane_request() -> None:
    clock = ManualClock()
    engine = _tier1(clock)
    for i in range(10_000):
        d = engine.decide(GET, f"k{i}")
        assert not d.refused
        engine.release(d)
        if i % 2:  # lifecycle calls between them do not count (the API's lifecycle routes skip this throttler)
            engine.release(engine.decide(DELETE, f"d{i}"))
    refused = engine.decide(GET, "one-more")
    assert refused.refused and refused.limit == "authenticated"
    assert refused.action is not None and refused.action.header_dict()["Retry-After-authenticated"] == "60"
    engine.release(refused)
    clock.advance(60)
    assert not engine.decide(GET, "one-more").refused


def test_window_limit_with_plain_retry_after_and_refusals_not_counted() -> None:
    clock = ManualClock()
    plan = FaultPlan.from_dict({"limits": [{"name": "w", "route": "sandbox_fusion.*", "max_requests": 2, "per": 10}]})
    engine = FaultEngine(plan, clock)
    rc = "sandbox_fusion.run_code"
    assert [engine.decide(rc, k).refused for k in "abc"] == [False, False, True]
    clock.advance(3)
    d = engine.decide(rc, "d")
    assert d.refused and d.action is not None and d.action.header_dict()["Retry-After"] == "7"
    clock.advance(7)
    assert [engine.decide(rc, k).refused for k in "efg"] == [False, False, True]


def test_window_limit_syntax() -> None:
    plan = FaultPlan.from_dict(
        {"limits": [{"name": "w", "route": ["a.*", "b.c"], "max_requests": 5, "per": 1.5, "headers_style": "daytona"}]}
    )
    assert plan.limits == (WindowLimit("w", "a.*|b.c", 5, 1.5, "daytona"),)
    assert FaultPlan.from_dict(plan.to_dict()) == plan
    bad: list[tuple[dict[str, Any], str, str]] = [
        ({"max_requests": 5}, "limits[0].per", "missing"),
        ({"max_requests": 0, "per": 1}, "limits[0].max_requests", ">= 1"),
        ({"max_requests": 5, "per": 0}, "limits[0].per", "> 0"),
        ({"max_requests": 5, "per": 1, "rate": 2}, "limits[0]", "not several"),
        ({"max_requests": 5, "per": 1, "retry_after": 2}, "limits[0].retry_after", "unknown key"),
        ({"max_requests": 5, "per": 1, "route": []}, "limits[0].route", "empty list"),
        ({"max_requests": 5, "per": 1, "route": "a||b"}, "limits[0].route", "empty alternatives"),
    ]
    for limit, path, fragment in bad:
        with pytest.raises(FaultPlanError) as info:
            FaultPlan.from_dict({"limits": [limit]})
        assert info.value.path == path and fragment in str(info.value), str(info.value)


def test_the_profiles_throttlers_cover_the_routes_the_services_own_cover() -> None:
    """Each throttler of ``daytona-tier1`` limits the gate routes that the Daytona service's own throttler of that
    name limits (the 501 of a route not served included), so a fault plan and ``--daytona-tier 1`` agree."""
    from emulator.daytona.config import AUTHENTICATED
    from emulator.daytona.service import CONTROL_ROUTES, ROUTE_NOT_EMULATED

    served: dict[str, set[str]] = {AUTHENTICATED: {ROUTE_NOT_EMULATED}}
    for _method, _path, route, throttlers in CONTROL_ROUTES:
        for name in throttlers:
            served.setdefault(name, set()).add(route)
    profile = {limit.name: set(limit.route.split("|")) for limit in load_plan("daytona-tier1").limits}
    assert profile == served
