"""Plan parsing: accepted syntaxes, round-trips, and helpful errors for bad plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.faults import (
    ConcurrencyLimit,
    FaultPlan,
    FaultPlanError,
    FixedLatency,
    IntRange,
    LognormalLatency,
    ParetoLatency,
    TokenBucketLimit,
    UniformLatency,
    load_plan,
)
from emulator.faults.plan import parse_ranges


def test_full_plan_parses() -> None:
    plan = FaultPlan.from_dict(
        {
            "seed": 7,
            "rules": [
                {"route": "sandbox_fusion.*", "latency": {"fixed": 0.2}},
                {"id": "first-504", "route": "sandbox_fusion.run_code", "attempts": 1, "fault": {"status": 504}},
                {"route": "*", "requests": [3, 5], "probability": 0.5, "fault": {"status": 429, "retry_after": 2}},
                {"route": "*", "fault": {"hang": {"seconds": 3, "then": "reset"}}},
                {"route": "*", "fault": {"sandbox_error": {"message": "boom"}}},
                {"route": "*", "fault": "null_stdout", "latency": {"uniform": [0.1, 0.5]}},
                {"route": "*", "fault": {"malformed": True, "body": "<html>", "headers": {"X-A": 1}}},
                {"route": "*", "fault": {"truncate": {"keep_fraction": 0.25}}},
            ],
            "limits": [
                {"route": "sandbox_fusion.*", "max_in_flight": 4},
                {
                    "name": "sandbox-create",
                    "route": "daytona.sandbox.create",
                    "rate": 5,
                    "burst": 10,
                    "headers_style": "daytona",
                },
            ],
        }
    )
    assert plan.seed == 7
    assert [r.id for r in plan.rules][:2] == ["r0", "first-504"]
    assert plan.rules[0].latency == FixedLatency(0.2)
    assert plan.rules[1].attempts == (IntRange(1, 1),)
    assert plan.rules[2].requests == (IntRange(3, 5),)
    assert plan.rules[2].fault is not None and plan.rules[2].fault.retry_after == 2.0
    assert plan.rules[3].fault is not None and plan.rules[3].fault.then_reset
    assert plan.rules[5].latency == UniformLatency(0.1, 0.5)
    assert plan.rules[6].fault is not None and plan.rules[6].fault.headers == (("X-A", "1"),)
    assert isinstance(plan.limits[0], ConcurrencyLimit) and plan.limits[0].max_in_flight == 4
    assert isinstance(plan.limits[1], TokenBucketLimit) and plan.limits[1].headers_style == "daytona"
    assert FaultPlan.from_dict(plan.to_dict()) == plan
    assert FaultPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_yaml_and_files(tmp_path: Path) -> None:
    text = """
seed: 3
rules:
  - route: sandbox_fusion.run_code
    requests: "3-5"
    fault: 504
  - route: "*"
    latency: {lognormal: {p50: 0.05, p99: 0.8}}
    fault: {pareto_is_not_a_fault: 1}
"""
    with pytest.raises(FaultPlanError, match=r"rules\[1\]\.fault"):
        FaultPlan.from_yaml(text)
    good = text.replace("    fault: {pareto_is_not_a_fault: 1}\n", "")
    plan = FaultPlan.from_yaml(good)
    assert plan.rules[0].fault is not None and plan.rules[0].fault.status == 504
    assert plan.rules[1].latency == LognormalLatency(0.05, 0.8)
    y = tmp_path / "p.yaml"
    y.write_text(good)
    assert FaultPlan.from_file(y) == plan
    j = tmp_path / "p.json"
    j.write_text(json.dumps(plan.to_dict()))
    assert FaultPlan.from_file(j) == plan
    assert FaultPlan.from_yaml("{}") == FaultPlan()
    with pytest.raises(FaultPlanError, match="the plan is empty"):
        FaultPlan.from_yaml("")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, (IntRange(3, 3),)),
        ("3-5", (IntRange(3, 5),)),
        ("10-", (IntRange(10, None),)),
        ([3, 5], (IntRange(3, 5),)),
        ("1-2, 7,10-", (IntRange(1, 2), IntRange(7, 7), IntRange(10, None))),
        (["1-2", 7], (IntRange(1, 2), IntRange(7, 7))),
        ({"from": 2}, (IntRange(2, None),)),
        (None, ()),
    ],
)
def test_range_syntax(value: Any, expected: tuple[IntRange, ...]) -> None:
    assert parse_ranges(value, "x") == expected


def test_latency_forms() -> None:
    plan = FaultPlan.from_dict(
        {"rules": [{"latency": 0.3}, {"latency": {"pareto": {"scale": 0.1, "alpha": 1.5, "cap": 2}}}]}
    )
    assert plan.rules[0].latency == FixedLatency(0.3)
    assert plan.rules[1].latency == ParetoLatency(0.1, 1.5, 2.0)


BAD_PLANS: list[tuple[Any, str, str]] = [
    ([], "<plan>", "mapping"),
    ({"sed": 1}, "sed", "did you mean 'seed'"),
    ({"seed": "x"}, "seed", "integer"),
    ({"seed": True}, "seed", "integer"),
    ({"rules": {}}, "rules", "list"),
    ({"rules": [1]}, "rules[0]", "mapping"),
    ({"rules": [{"route": "*"}]}, "rules[0]", "latency"),
    ({"rules": [{"probabilty": 0.5, "fault": 500}]}, "rules[0].probabilty", "did you mean 'probability'"),
    ({"rules": [{"probability": 1.5, "fault": 500}]}, "rules[0].probability", "[0, 1]"),
    ({"rules": [{"probability": -0.1, "fault": 500}]}, "rules[0].probability", ">= 0"),
    ({"rules": [{"probability": "often", "fault": 500}]}, "rules[0].probability", "number"),
    ({"rules": [{"route": 5, "fault": 500}]}, "rules[0].route", "string"),
    ({"rules": [{"route": "", "fault": 500}]}, "rules[0].route", "non-empty"),
    ({"rules": [{"fault": 700}]}, "rules[0].fault", "status code"),
    ({"rules": [{"fault": "rest"}]}, "rules[0].fault", "did you mean 'reset'"),
    ({"rules": [{"fault": {}}]}, "rules[0].fault", "exactly one fault kind"),
    ({"rules": [{"fault": {"status": 500, "reset": True}}]}, "rules[0].fault", "exactly one"),
    ({"rules": [{"fault": {"status": "abc"}}]}, "rules[0].fault.status", "status code"),
    ({"rules": [{"fault": {"status": 429, "retry_after": -1}}]}, "rules[0].fault.retry_after", ">= 0"),
    ({"rules": [{"fault": {"reset": True, "retry_after": 1}}]}, "rules[0].fault.retry_after", "unknown key"),
    ({"rules": [{"fault": {"reset": True, "body": "x"}}]}, "rules[0].fault.body", "unknown key"),
    ({"rules": [{"fault": {"reset": False}}]}, "rules[0].fault.reset", "false"),
    ({"rules": [{"fault": {"hang": {"then": 504}}}]}, "rules[0].fault.hang.seconds", "required"),
    ({"rules": [{"fault": {"hang": {"seconds": 1, "then": "close"}}}]}, "rules[0].fault.hang.then", "'reset'"),
    ({"rules": [{"fault": {"truncate": {"keep_fraction": 1.0}}}]}, "rules[0].fault.truncate.keep_fraction", "[0, 1)"),
    ({"rules": [{"fault": {"status": 500, "headers": ["a"]}}]}, "rules[0].fault.headers", "mapping"),
    ({"rules": [{"fault": {"status": 500, "headers": {"X": None}}}]}, "rules[0].fault.headers.X", "header value"),
    ({"rules": [{"latency": {"fixed": -1}}]}, "rules[0].latency.fixed", ">= 0"),
    ({"rules": [{"latency": {"normal": 1}}]}, "rules[0].latency.normal", "unknown key"),
    ({"rules": [{"latency": {"fixed": 1, "uniform": [0, 1]}}]}, "rules[0].latency", "exactly one"),
    ({"rules": [{"latency": {"uniform": [0.5, 0.1]}}]}, "rules[0].latency.uniform", "high"),
    ({"rules": [{"latency": {"uniform": [0.5]}}]}, "rules[0].latency.uniform", "[low, high]"),
    ({"rules": [{"latency": {"lognormal": {"p50": 0.5}}}]}, "rules[0].latency.lognormal.p99", "required"),
    ({"rules": [{"latency": {"lognormal": {"p50": 0.5, "p99": 0.1}}}]}, "rules[0].latency.lognormal", "p99"),
    ({"rules": [{"latency": {"lognormal": {"p50": 0, "p99": 0.1}}}]}, "rules[0].latency.lognormal.p50", "> 0"),
    ({"rules": [{"latency": {"pareto": {"scale": 1, "alpha": 0}}}]}, "rules[0].latency.pareto.alpha", "> 0"),
    ({"rules": [{"latency": {"fixed": float("nan")}}]}, "rules[0].latency.fixed", "finite"),
    ({"rules": [{"requests": "3-1", "fault": 500}]}, "rules[0].requests", "before its start"),
    ({"rules": [{"requests": 0, "fault": 500}]}, "rules[0].requests", "start at 1"),
    ({"rules": [{"requests": [1, 2, 3], "fault": 500}]}, "rules[0].requests", "exactly 2"),
    ({"rules": [{"requests": "first", "fault": 500}]}, "rules[0].requests", "'A-B'"),
    ({"rules": [{"attempts": [], "fault": 500}]}, "rules[0].attempts", "empty"),
    ({"rules": [{"id": "a", "fault": 500}, {"id": "a", "fault": 502}]}, "rules[1].id", "duplicate"),
    ({"limits": [{"route": "*"}]}, "limits[0]", "max_in_flight"),
    ({"limits": [{"max_in_flight": 2, "rate": 1, "burst": 1}]}, "limits[0]", "either"),
    ({"limits": [{"max_in_flight": -1}]}, "limits[0].max_in_flight", ">= 0"),
    ({"limits": [{"rate": 1}]}, "limits[0].burst", "required"),
    ({"limits": [{"rate": 0, "burst": 1}]}, "limits[0].rate", "> 0"),
    ({"limits": [{"rate": 1, "burst": 0}]}, "limits[0].burst", ">= 1"),
    ({"limits": [{"rate": 1, "burst": 1, "headers_style": "nestjs"}]}, "limits[0].headers_style", "daytona"),
    ({"limits": [{"max_in_flight": 1, "rate_limit": 1}]}, "limits[0].rate_limit", "unknown key"),
    ({"limits": [{"name": "a", "max_in_flight": 1}, {"name": "a", "rate": 1, "burst": 1}]}, "limits[1].name", "dup"),
    # Delays beyond a day: no client waits them out, and near 1e9 s the event loop's timers overflow.
    ({"rules": [{"route": "*", "latency": 1e308}]}, "rules[0].latency", "at most 86400 seconds"),
    ({"rules": [{"route": "*", "latency": {"uniform": [0, 90000]}}]}, "rules[0].latency.uniform[1]", "at most"),
    (
        {"rules": [{"route": "*", "latency": {"pareto": {"scale": 1, "alpha": 2, "cap": 1e9}}}]},
        "rules[0].latency.pareto.cap",
        "at",
    ),
    ({"rules": [{"route": "*", "fault": {"hang": 1e12}}]}, "rules[0].fault.hang", "at most"),
    ({"rules": [{"route": "*", "fault": {"hang": {"seconds": 86401}}}]}, "rules[0].fault.hang.seconds", "at most"),
    (
        {"rules": [{"route": "*", "overload": {"capacity": 1, "latency_per_excess": 1e6}}]},
        "rules[0].overload.latency_per_excess",
        "at",
    ),
]


@pytest.mark.parametrize(("data", "path", "fragment"), BAD_PLANS)
def test_bad_plans_name_the_path(data: Any, path: str, fragment: str) -> None:
    with pytest.raises(FaultPlanError) as info:
        FaultPlan.from_dict(data)
    assert info.value.path == path, str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text", ["seed: [", "rules: [{route: '*', fault: {status: }}]", "- 1\n- 2"])
def test_bad_yaml(text: str) -> None:
    with pytest.raises(FaultPlanError):
        FaultPlan.from_yaml(text)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("rules: [{route: '*', latency: {fixed: 1e9}}]", "rules[0].latency.fixed"),
        ("rules: [{route: '*', latency: 2e-1}]", "rules[0].latency"),
    ],
)
def test_an_exponent_yaml_reads_as_text_gets_a_hint(text: str, path: str) -> None:
    with pytest.raises(FaultPlanError) as info:
        FaultPlan.from_yaml(text)
    assert info.value.path == path
    assert "got str" in str(info.value) and "with a dot and a sign, as 1.0e+9" in str(info.value)
    assert FaultPlan.from_yaml(text.replace("1e9", "1.0e+3").replace("2e-1", "2.0e-1")).rules  # read as numbers


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FaultPlanError, match="cannot read"):
        FaultPlan.from_file(tmp_path / "nope.yaml")


_junk = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 700) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=10,
)
_rule_keys = st.sampled_from(["id", "route", "key", "attempts", "requests", "probability", "latency", "fault"])


@given(st.dictionaries(_rule_keys, _junk, max_size=5), st.one_of(st.none(), _junk))
def test_fuzzed_plans_fail_only_with_fault_plan_error(rule: dict[str, Any], limit: Any) -> None:
    """Arbitrary junk never escapes as KeyError/TypeError/AttributeError."""
    data: dict[str, Any] = {"rules": [rule]}
    if limit is not None:
        data["limits"] = [limit]
    try:
        plan = FaultPlan.from_dict(data)
    except FaultPlanError as exc:
        assert exc.path
    else:
        assert FaultPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    ("name", "text"), [("plan.yaml", ""), ("plan.yaml", "# only a comment\n"), ("plan.json", "null")]
)
def test_an_empty_plan_file_is_refused(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(FaultPlanError, match=r"the plan is empty; write \{\}"):
        FaultPlan.from_file(path)
    with pytest.raises(FaultPlanError, match="the plan is empty"):
        load_plan(str(path))


def test_an_empty_mapping_is_a_plan_without_faults(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("{}\n")
    assert FaultPlan.from_file(path) == FaultPlan()


def test_a_directory_is_not_taken_for_a_profile_name(tmp_path: Path) -> None:
    with pytest.raises(FaultPlanError, match="is a directory, not a plan file"):
        load_plan(str(tmp_path))
    with pytest.raises(FaultPlanError, match="cannot read plan file"):
        load_plan(str(tmp_path / "missing"))
    with pytest.raises(FaultPlanError, match="unknown fault profile 'missing'"):
        load_plan("missing")


def test_a_bare_status_fault_asks_for_its_code() -> None:
    with pytest.raises(FaultPlanError, match=r"a 'status' fault needs its code: write e\.g\. 503"):
        FaultPlan.from_dict({"rules": [{"fault": "status"}]})
