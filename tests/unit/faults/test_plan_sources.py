"""Where a plan comes from (YAML, JSON, a decision log, the control plane) and what its errors say about it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.faults import FaultPlan, FaultPlanError
from emulator.faults.log import load_jsonl


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
