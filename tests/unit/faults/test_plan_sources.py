"""Where a plan comes from (YAML, JSON, a decision log, the control plane) and what its errors say about it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.faults import Decision, FaultEngine, FaultPlan, FaultPlanError, ManualClock
from emulator.faults.log import dump_jsonl, load_jsonl
from emulator.faults.replay import ReplayEngine


def _error(call: object) -> str:
    with pytest.raises(FaultPlanError) as caught:
        call()  # type: ignore[operator]
    text = str(caught.value)
    assert "\n" not in text
    return text


def test_a_key_twice_in_one_yaml_mapping_is_refused_where_it_is() -> None:
    """yaml.safe_load kept the last of the two: the first fault vanished without a word."""
    text = "rules:\n  - fault: 503\n    fault: 504\n"
    assert _error(lambda: FaultPlan.from_yaml(text)) == (
        "<yaml>:3:5: not valid YAML: duplicate key 'fault' (also on line 2)"
    )
    assert "seed" in _error(lambda: FaultPlan.from_yaml("seed: 1\nseed: 2\n"))


def test_a_yaml_merge_still_overrides_what_it_merges() -> None:
    plan = FaultPlan.from_yaml("rules:\n  - fault: {<<: {status: 503, retry_after: 1}, retry_after: 2}\n")
    assert plan.rules[0].fault is not None and plan.rules[0].fault.retry_after == 2.0


def test_a_key_twice_in_a_json_plan_file_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"rules": [{"fault": {"status": 503, "status": 504}}]}')
    assert _error(lambda: FaultPlan.from_file(path)) == f"{path}:rules[0].fault: duplicate key 'status'"
    path.write_text('{"seed": 1, "seed": 2}')
    assert _error(lambda: FaultPlan.from_file(path)) == f"{path}: duplicate key 'seed'"


def test_a_key_twice_in_a_decision_log_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    record = '{"route": "r", "key": "k", "attempt": 1, "ordinal": 1, "action": {"kind": "reset", "kind": "hang"}}'
    path.write_text('{"route": "r", "key": "k", "attempt": 1, "ordinal": 1}\n' + record + "\n")
    assert _error(lambda: load_jsonl(path)) == f"{path}:2: duplicate key 'kind' in action"


def test_a_decision_log_keeps_unicode_line_separators_inside_its_records(tmp_path: Path) -> None:
    # written with ensure_ascii=False, so a key may hold U+2028 or U+0085 raw: only "\n" ends a record
    records = [{"route": "r", "key": "a\u2028b\x85c", "attempt": 1, "ordinal": 1}]
    path = dump_jsonl(records, tmp_path / "log.jsonl")
    assert "\u2028" in path.read_text(encoding="utf-8")
    assert load_jsonl(path) == records


def test_a_decision_log_that_is_not_utf8_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"route": "r\xff"}\n')
    assert (
        _error(lambda: load_jsonl(path))
        == f"{path}: not a decision log: not UTF-8 text (invalid start byte at byte 12)"
    )


def test_yaml_syntax_errors_are_one_line_naming_the_file_and_position(tmp_path: Path) -> None:
    """PyYAML's message spans lines and names '<unicode string>'."""
    path = tmp_path / "broken.yaml"
    path.write_text("rules:\n  - fault: 503\n   latency: 1\n")
    text = _error(lambda: FaultPlan.from_file(path))
    assert text.startswith(f"{path}:3:4: not valid YAML: ") and "unicode string" not in text
    path.write_text("rules:\n\t- fault: 503\n")
    assert _error(lambda: FaultPlan.from_file(path)).startswith(f"{path}:2:1: not valid YAML: found character")


def test_json_plan_file_errors_name_the_file(tmp_path: Path) -> None:
    """A JSON file's plan errors lacked the file name that a YAML file's had."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"rules": [{"fault": {"status": 9}}]}))
    assert _error(lambda: FaultPlan.from_file(path)).startswith(f"{path}:rules[0].fault.status: expected")
    path.write_text('{"rules": [\n  {"fault": }]}')
    assert _error(lambda: FaultPlan.from_file(path)) == f"{path}:2:13: not valid JSON: Expecting value"
    yaml_path = tmp_path / "p.yaml"
    yaml_path.write_text("rules:\n  - fault: {status: 9}\n")
    assert _error(lambda: FaultPlan.from_file(yaml_path)).startswith(f"{yaml_path}:rules[0].fault.status: expected")


GOOD_RECORD = {"route": "sandbox_fusion.run_code", "key": "k", "attempt": 1, "ordinal": 1}
HANG = {"kind": "hang", "status": 504, "hang_seconds": 1.0}

BAD_RECORDS: list[tuple[str, dict[str, object], str]] = [
    ("load as a list", {"load": [1]}, "load"),  # was AttributeError: 'list' object has no attribute 'items'
    ("action as text", {"action": "status"}, "action"),  # was AttributeError: 'str' object has no attribute 'get'
    ("a hang of 1e12 s", {"action": {**HANG, "hang_seconds": 1e12}}, "action.hang_seconds"),
    ("a negative latency", {"latency": -5}, "latency"),
    ("latency as text", {"latency": "nan"}, "latency"),
    ("a NaN latency", {"latency": float("nan")}, "latency"),
    ("attempt 0", {"attempt": 0}, "attempt"),
    ("attempt as text", {"attempt": "1"}, "attempt"),
    ("key as a number", {"key": 5}, "key"),
    ("a 101", {"action": {"kind": "status", "status": 101}}, "action.status"),
    ("a header with CR LF", {"action": {"kind": "status", "status": 503, "headers": [["X", "a\r\nb"]]}}, "headers[0]"),
    ("a header not a pair", {"limit_headers": [["X-A"]]}, "limit_headers[0]"),
    ("then_reset as text", {"action": {**HANG, "then_reset": "no"}}, "action.then_reset"),
    ("keep_fraction 1", {"action": {"kind": "truncate", "keep_fraction": 1.0}}, "action.keep_fraction"),
    ("body as a number", {"action": {"kind": "malformed", "status": 200, "body": 5}}, "action.body"),
    ("rules as text", {"rules": "r0"}, "rules"),
    ("a load below 0", {"load": {"r0": -1}}, "load.r0"),
    ("a retry_after of 1e300", {"action": {"kind": "status", "status": 429, "retry_after": 1e300}}, "retry_after"),
]


@pytest.mark.parametrize(("change", "path"), [(c, p) for _, c, p in BAD_RECORDS], ids=[n for n, _, _ in BAD_RECORDS])
def test_a_decision_record_with_a_wrong_field_is_refused_naming_it(change: dict[str, object], path: str) -> None:
    """The plugin's --chaos-replay catches FaultPlanError only: a wrong type gave a traceback, and values beyond a
    plan's bounds (a hang of 1e12 s) were replayed."""
    with pytest.raises(FaultPlanError) as caught:
        ReplayEngine([GOOD_RECORD, {**GOOD_RECORD, "attempt": 2, "ordinal": 2, **change}])
    assert caught.value.path.startswith("record 2: ") and caught.value.path.endswith(path)
    assert "\n" not in str(caught.value)


def test_a_decision_record_written_by_the_engine_reads_back_equal() -> None:
    engine = FaultEngine(
        FaultPlan.from_dict(
            {
                "rules": [
                    {"route": "sandbox_fusion.ping", "fault": {"hang": {"seconds": 2, "then": 503}}},
                    {"route": "sandbox_fusion.run_code", "latency": 0.5, "fault": {"status": 429, "retry_after": 3}},
                ],
                "limits": [
                    {"name": "w", "route": "daytona.*", "max_requests": 1, "per": 60, "headers_style": "daytona"}
                ],
            }
        ),
        ManualClock(),
    )
    decisions = [engine.decide(route, "k") for route in ("sandbox_fusion.ping", "sandbox_fusion.run_code")]
    decisions += [engine.decide("daytona.sandbox.create", "k") for _ in range(2)]
    for decision in decisions:
        assert Decision.from_record(json.loads(json.dumps(decision.to_record()))) == decision
