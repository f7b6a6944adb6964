"""Plans that parsed but could not be sent or computed: headers, statuses, digits, ignored keys, unbounded numbers."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.faults import FaultEngine, FaultPlan, FaultPlanError, ManualClock

RC = "sandbox_fusion.run_code"


def _fault(fault: Any) -> dict[str, Any]:
    return {"rules": [{"route": RC, "fault": fault}]}


def _limit(**limit: Any) -> dict[str, Any]:
    return {"limits": [{"name": "l", "route": RC, **limit}]}


REFUSED: list[tuple[str, Any, str]] = [
    # headers the server could not send: an empty reply (CR/LF, a space in a name) or a 500 (beyond Latin-1)
    (
        "CR LF in a value",
        _fault({"status": 503, "headers": {"X-A": "a\r\nSet-Cookie: x"}}),
        "rules[0].fault.headers.X-A",
    ),
    ("a space in a name", _fault({"status": 503, "headers": {"X A": "v"}}), "rules[0].fault.headers.X A"),
    ("an empty name", _fault({"status": 503, "headers": {"": "v"}}), "rules[0].fault.headers."),
    ("a name beyond ASCII", _fault({"status": 503, "headers": {"X-ü": "v"}}), "rules[0].fault.headers.X-ü"),
    ("a value beyond Latin-1", _fault({"status": 503, "headers": {"X-A": "ü€"}}), "rules[0].fault.headers.X-A"),
    ("a value with a NUL", _fault({"malformed": {}, "headers": {"X-A": "a\x00b"}}), "rules[0].fault.headers.X-A"),
    ("a value ending in a space", _fault({"status": 503, "headers": {"X-A": "a "}}), "rules[0].fault.headers.X-A"),
    ("a daytona limit's name", _limit(max_in_flight=1, headers_style="daytona", name="a b"), "limits[0].name"),
    # statuses that break the wire
    ("a 100", _fault(100), "rules[0].fault"),
    ("a 101", _fault({"status": 101}), "rules[0].fault.status"),
    ("a 199 after a hang", _fault({"hang": {"seconds": 1, "then": 199}}), "rules[0].fault.hang.then"),
    ("a 204", _fault(204), "rules[0].fault"),
    ("a 304", _fault({"status": 304}), "rules[0].fault.status"),
    # digits of other scripts, a leading zero
    ("Arabic-Indic digits", _fault("\u0665\u0660\u0663"), "rules[0].fault"),
    ("a leading zero", _fault({"status": "0503"}), "rules[0].fault.status"),
    ("an Arabic-Indic attempt", {"rules": [{"route": RC, "attempts": "\u0661", "fault": 503}]}, "rules[0].attempts"),
    ("a fullwidth range", {"rules": [{"route": RC, "requests": "\uff11-2", "fault": 503}]}, "rules[0].requests"),
    # keys that would be ignored
    ("a reset hang's body", _fault({"hang": {"seconds": 1, "then": "reset"}, "body": "x"}), "rules[0].fault.body"),
    ("a reset hang's headers", _fault({"hang": {"seconds": 1, "then": "reset"}, "headers": {"A": "1"}}), "headers"),
    # numbers no refusal could be computed or sent with
    ("a retry_after of 1e300", _fault({"status": 429, "retry_after": 1e300}), "rules[0].fault.retry_after"),
    ("a cap's retry_after beyond a day", _limit(max_in_flight=1, retry_after=86_401), "limits[0].retry_after"),
    ("a rate of 1e-320", _limit(rate=1e-320, burst=1), "limits[0].rate"),
    ("a rate below a token a day", _limit(rate=1 / 86_401, burst=1), "limits[0].rate"),
    ("a window of 1e308 s", _limit(max_requests=1, per=1e308), "limits[0].per"),
]


@pytest.mark.parametrize(("data", "path"), [(d, p) for _, d, p in REFUSED], ids=[n for n, _, _ in REFUSED])
def test_refused_with_a_one_line_error_naming_the_key(data: Any, path: str) -> None:
    with pytest.raises(FaultPlanError) as caught:
        FaultPlan.from_dict(data)
    assert caught.value.path == path or caught.value.path.endswith(path)
    assert "\n" not in str(caught.value)


ACCEPTED: list[tuple[str, Any]] = [
    ("a tab and Latin-1 in a value", _fault({"status": 503, "headers": {"X-A": "caf\xe9\tau lait", "X-B": ""}})),
    ("a token with its odd characters", _fault({"status": 503, "headers": {"X-!#$%&'*+-.^_`|~1": "v"}})),
    ("a 200, a 205 and a 3xx", {"rules": [{"route": RC, "fault": s} for s in (200, 205, 302, "599")]}),
    ("a daytona limit's token name", _limit(max_in_flight=1, headers_style="daytona", name="sandbox-create")),
    ("any name without daytona headers", _limit(max_in_flight=1, name="gateway cap")),
    (
        "a day's retry_after and window, a token a day",
        {
            "rules": [{"route": RC, "fault": {"status": 429, "retry_after": 86_400}}],
            "limits": [{"route": RC, "max_requests": 1, "per": 86_400}, {"route": RC, "rate": 1 / 86_400, "burst": 1}],
        },
    ),
]


@pytest.mark.parametrize("data", [d for _, d in ACCEPTED], ids=[n for n, _ in ACCEPTED])
def test_accepted_and_round_trips(data: Any) -> None:
    plan = FaultPlan.from_dict(data)
    assert FaultPlan.from_dict(plan.to_dict()) == plan


def test_the_slowest_bucket_refuses_with_a_wait_of_at_most_a_day() -> None:
    """A rate of 1e-320 made the refusal's Retry-After infinite: OverflowError in decide()."""
    engine = FaultEngine(FaultPlan.from_dict(_limit(rate=1 / 86_400, burst=1)), ManualClock())
    engine.release(engine.decide(RC, "a"))
    refused = engine.decide(RC, "b")
    assert refused.refused and refused.action is not None
    assert dict(refused.action.headers)["Retry-After"] == "86400"
