"""Entries that lack keys or hold the wrong types: schema violations in the normal report (exit 1), never a crash.

No later check may assume a key the schema check found missing or wrongly typed; any JSON object on a line is read
without an exception, whatever it holds.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main as run  # the command line as users run it
from harness.validate import Report, UsageError, validate_dir, validate_file

#: ``--reward gsm8k`` scores with verl; without the extra only ``none`` can run every check.
REWARDS_HERE = ["none", "gsm8k"] if importlib.util.find_spec("verl") is not None else ["none"]
REQUIRED = ("input", "output", "gts", "score", "step")
GOOD = {"input": "What is 1 + 2?", "output": "3\n#### 3", "gts": "3", "score": 1.0, "step": 1}


def dump(directory: Path, *lines: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "1.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return directory


def schema_messages(report: Report) -> set[str]:
    return {f.message for f in report.by_check("schema")}


@pytest.mark.parametrize("reward", ["gsm8k", "none"])
def test_an_empty_object_is_schema_violations_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reward: str
) -> None:
    directory = dump(tmp_path / "vbad", "{}")
    assert run(["validate", str(directory), "--reward", reward]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err == ""
    for key in REQUIRED:
        assert f"1.jsonl:1: schema: missing '{key}'" in captured.out
    assert captured.out.startswith(f"FAILED: {directory}: 1 file(s), 1 line(s), 1 entries; 5 violation(s)")


@pytest.mark.parametrize("reward", ["gsm8k", "none"])
@pytest.mark.parametrize("key", REQUIRED)
def test_each_missing_key_is_one_schema_violation(tmp_path: Path, reward: str, key: str) -> None:
    entry = {k: v for k, v in GOOD.items() if k != key}
    report = validate_dir(dump(tmp_path / "d", json.dumps(entry)), reward=reward)
    assert [(f.line, f.check, f.message) for f in report.violations] == [(1, "schema", f"missing {key!r}")]
    assert report.entries == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("step", "1", "'step' is str, not an integer"),
        ("step", True, "'step' is bool, not an integer"),
        ("gts", 3, "'gts' is int, not a string or null"),
        ("score", "1", "'score' is str, not a number"),
        ("output", None, "'output' is null, not a string"),
    ],
)
def test_a_wrong_type_is_reported_once_and_its_checks_skipped(
    tmp_path: Path, field: str, value: Any, message: str
) -> None:
    entry = {**GOOD, field: value}
    reward = "gsm8k" if field == "gts" else "none"  # with --reward none any ground truth goes
    report = validate_dir(dump(tmp_path / "d", json.dumps(entry)), reward=reward)
    assert [(f.check, f.message) for f in report.violations] == [("schema", message)]


def test_a_score_too_large_for_a_float_is_a_violation_not_a_crash(tmp_path: Path) -> None:
    pytest.importorskip("verl", reason="the score check needs the [verl] extra")
    huge = "1" + "0" * 400
    line = json.dumps(GOOD)[:-1] + f', "acc": {huge}}}'
    line = line.replace('"score": 1.0', f'"score": {huge}')
    report = validate_dir(dump(tmp_path / "d", line))
    assert {f.message for f in report.by_check("score")} == {
        "score is an integer of 401 digits but verl's GSM8K reward gives 1",
        "acc is an integer of 401 digits but verl's GSM8K reward gives 1",
    }


def test_json_nested_too_deeply_for_python(tmp_path: Path) -> None:
    # a line too deep to decode is a violation; a call too deep is the model's, skipped by verl's parser: a note
    deep_call = "<tool_call>" + "[" * 5000 + "</tool_call>\n#### 3"
    report = validate_dir(dump(tmp_path / "d", "[" * 100_000, json.dumps({**GOOD, "output": deep_call})), reward="none")
    assert [(f.line, f.check) for f in report.violations] == [(1, "json")]
    assert "nested too deeply" in report.violations[0].message
    [note] = [n for n in report.notes if n.check == "tool_call_format"]
    assert note.line == 2 and "nested too deeply" in note.message and "verl's parser skips it" in note.message


# --- any JSON object, property-tested -------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(exclude_categories=()), max_size=8)  # lone surrogates too
)
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
# Pieces of text the parser looks for, so that outputs reach the tool-call checks, not only the schema check.
PIECES = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        '\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}\n',
        '{"name": 1, "arguments": []}',
        "\nuser\n<tool_response>\n",
        "\n</tool_response>",
        "\nassistant\n",
        "#### 3",
        "no stdout here",
        "Error executing tool 'x'",
        "...(truncated)",
        "",
    ]
)
OUTPUTS = st.lists(PIECES | st.text(max_size=6), max_size=12).map("".join)
CALL_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "name": st.sampled_from(["code_interpreter", "calc"]) | ANY_JSON,
    "arguments": st.just({"code": "print(1)"}) | ANY_JSON,
    "observation": st.sampled_from(["1\n", "", "no stdout here", None]) | ANY_JSON,
    "infra_fault": st.sampled_from([None, "HTTP 504"]) | ANY_JSON,
    "attempts": st.integers(min_value=-1, max_value=3) | ANY_JSON,
    "error": st.none() | st.text(max_size=6) | ANY_JSON,
}
TOOL_CALLS = st.lists(st.fixed_dictionaries({}, optional=CALL_VALUES) | ANY_JSON, max_size=3) | ANY_JSON
ENTRY_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "input": st.text(max_size=6) | ANY_JSON,
    "output": OUTPUTS | ANY_JSON,
    "gts": st.sampled_from(["3", None]) | ANY_JSON,
    "score": st.sampled_from([0.0, 1.0, 0, 1]) | ANY_JSON,
    "acc": st.sampled_from([0.0, 1.0]) | ANY_JSON,
    "step": st.sampled_from([1, 2]) | ANY_JSON,
    "request_id": st.text(max_size=4) | ANY_JSON,
    "num_turns": st.integers(min_value=-1, max_value=6) | ANY_JSON,
    "tool_calls": TOOL_CALLS,
}
ENTRIES = st.fixed_dictionaries({}, optional=ENTRY_VALUES).flatmap(
    lambda known: st.dictionaries(st.text(max_size=4), ANY_JSON, max_size=2).map(lambda extra: {**extra, **known})
)


@settings(max_examples=300, deadline=None)
@given(ENTRIES, st.sampled_from(REWARDS_HERE))
def test_any_json_object_is_reported_never_raised(entry: dict[str, Any], reward: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = validate_dir(dump(Path(tmp), json.dumps(entry)), reward=reward)
    assert report.entries == 1
    missing = {f"missing {key!r}" for key in REQUIRED if key not in entry}
    assert missing <= schema_messages(report)
    assert report.ok == (not report.violations)
    # what the CLI prints can be printed (messages quote the dump's text with repr, surrogates escaped)
    report.render(max_shown=1000).encode("utf-8")
    report.to_json().encode("utf-8")


def test_validate_file_reads_one_file_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    directory = dump(tmp_path / "d", json.dumps(GOOD))
    (directory / "2.jsonl").write_text("not json\n")  # a neighbour it must not read
    report = validate_file(directory / "1.jsonl", reward="none")
    assert report.ok and report.files == ["1.jsonl"] and report.entries == 1
    for path, reason in ((directory / "3.jsonl", "no such file"), (directory, "not a regular file")):
        with pytest.raises(UsageError, match=reason):
            validate_file(path)


@pytest.mark.parametrize("gts", [["a", "b"], 7, {"answer": 3}])
def test_any_ground_truth_with_reward_none(tmp_path: Path, gts: Any) -> None:
    # verl dumps a data set's ground truth as it is; only GSM8K's reward needs a string
    directory = dump(tmp_path / "d", json.dumps({**GOOD, "gts": gts}))
    assert validate_dir(directory, reward="none").ok
    assert {f.check for f in validate_dir(directory).violations} == {"schema"}
