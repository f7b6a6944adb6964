"""The named chaos profiles: each loads, validates, round-trips, has a description, and equals its fixture file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from emulator.faults import PROFILES, FaultEngine, FaultPlan, FaultPlanError, ManualClock, load_plan, profile_names

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "chaos"
REQUIRED = {"calm", "vefaas-gateway", "daytona-tier1", "overload", "outage", "brownout", "flaky"}
ROUTES = (
    "sandbox_fusion.run_code",
    "sandbox_fusion.run_jupyter",
    "daytona.sandbox.create",
    "daytona.sandbox.delete",
    "daytona.toolbox.code_run",
    "daytona.interpreter.execute",
)


def test_required_profiles_exist_and_calm_is_listed_first() -> None:
    assert set(PROFILES) >= REQUIRED
    names = profile_names()
    assert names[0] == "calm" and sorted(names[1:]) == names[1:] and set(names) == set(PROFILES)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_loads_validates_and_round_trips(name: str) -> None:
    plan = load_plan(name)
    assert plan == FaultPlan.from_dict(PROFILES[name])
    assert plan.description.strip(), f"profile {name!r} has no description"
    again = FaultPlan.from_dict(plan.to_dict())
    assert again == plan and again.description == plan.description
    clock = ManualClock()
    engine = FaultEngine(plan, clock)
    for t in (0.0, 61.0, 400.0, 700.0):  # the engine runs every route at several plan times without error
        clock.set(t)
        for route in ROUTES:
            engine.release(engine.decide(route, f"k{t}"))
    assert engine.outstanding == 0 and engine.load() == 0


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_fixture_file_equals_the_package_profile(name: str) -> None:
    path = FIXTURES / f"{name}.yaml"
    assert path.is_file(), f"fixtures/chaos/{name}.yaml is missing"
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == PROFILES[name]
    from_file = load_plan(path)
    assert from_file == load_plan(name) and from_file.description == load_plan(name).description


def test_every_fixture_file_is_a_profile() -> None:
    files = {p.stem for p in FIXTURES.glob("*.yaml")}
    assert files == set(PROFILES), "fixtures/chaos/*.yaml and emulator.faults.PROFILES differ"


def test_profile_seed_override_and_unknown_names() -> None:
    assert load_plan("overload", seed=77).seed == 77
    with pytest.raises(FaultPlanError, match="known profiles: calm, brownout, daytona-tier1"):
        load_plan("overlaod")
