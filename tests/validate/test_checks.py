"""One test per check: the good dump, mutated to break exactly that check, fails with that check at file:line.

Lines of the good dump (see conftest): 1 one call, right answer; 2 two calls, a middle-truncated observation,
wrong answer; 3 two parallel calls, a tail-truncated observation; 4 no call; 5 an infrastructure fault the tool gave
up on; 6 a head-truncated observation and a last call left unanswered at the turn limit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from harness.tools.observations import INFRA_FAULT_OBSERVATION, NO_STDOUT
from harness.validate import Report, validate_dir

Entries = list[dict[str, Any]]
Mutate = Callable[..., Path]


def violated(report: Report) -> set[tuple[str, int, str]]:
    return {(f.file, f.line, f.check) for f in report.violations}


def only(report: Report, *expected: tuple[int, str]) -> None:
    """The report fails with exactly these (line, check) violations, all in 1.jsonl."""
    assert not report.ok
    assert violated(report) == {("1.jsonl", line, check) for line, check in expected}, report.render()


def test_wrong_score(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[0]["score"] = 0.0
    report = validate_dir(mutated(good_entries))
    only(report, (1, "score"))
    assert "score is 0 but verl's GSM8K reward gives 1" in report.violations[0].message


def test_wrong_acc(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[1]["acc"] = 1.0
    only(validate_dir(mutated(good_entries)), (2, "score"))


def test_missing_answer_with_a_positive_score(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[3]["output"] = good_entries[3]["output"].replace("#### 3", "3")
    report = validate_dir(mutated(good_entries))
    only(report, (4, "answer_format"), (4, "score"))  # without '####' verl's reward is 0 as well
    assert validate_dir(mutated(good_entries), reward="none").ok  # the GSM8K checks are off


def format_notes(report: Report) -> list[tuple[int, str]]:
    return [(n.line, n.message) for n in report.notes if n.check == "tool_call_format"]


def test_malformed_call_json_is_the_models_note(good_entries: Entries, mutated: Mutate) -> None:
    # verl's Hermes parser logs and skips a block that is not JSON: an honest rollout writes it, so a note
    good_entries[3]["output"] = (
        '<tool_call>\n{"name": "code_interpreter", "arguments": {\n</tool_call>\n' + (good_entries[3]["output"])
    )
    report = validate_dir(mutated(good_entries))
    assert report.ok, report.render()
    [(line, message)] = format_notes(report)
    assert line == 4 and "not JSON" in message and "verl's parser skips it" in message


def test_malformed_call_beside_an_answered_one(good_entries: Entries, mutated: Mutate) -> None:
    # the skipped block takes no response: the well-formed call after it is the one the tool turn answered
    index = next(i for i, e in enumerate(good_entries) if "<tool_call>" in e["output"].split("\nuser\n", 1)[0])
    entry = good_entries[index]
    entry["output"] = "<tool_call>\nnot json\n</tool_call>\n" + entry["output"]
    report = validate_dir(mutated(good_entries))
    assert report.ok, report.render()
    assert [line for line, _ in format_notes(report)] == [index + 1]


def test_call_name_not_a_string_is_skipped_as_verl_skips_it(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[3]["output"] += '\n<tool_call>\n{"name": 7, "arguments": {"code": "1"}}\n</tool_call>'
    report = validate_dir(mutated(good_entries))
    assert report.ok, report.render()
    [(_, message)] = format_notes(report)
    assert "'name' is int" in message and "skips it" in message
    assert [n.line for n in report.notes if n.check == "tool_pairing"] == [6]  # not an unanswered call of line 4


def test_call_arguments_not_an_object(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[3]["output"] += '\n<tool_call>\n{"name": "code_interpreter", "arguments": "print(1)"}\n</tool_call>'
    report = validate_dir(mutated(good_entries))
    assert report.ok, report.render()
    [(_, message)] = format_notes(report)
    assert "'arguments' is str" in message and "skips" not in message  # verl runs it
    assert [n.line for n in report.notes if n.check == "tool_pairing"] == [4, 6]  # unanswered last call: a note


def test_response_without_a_call(good_entries: Entries, mutated: Mutate) -> None:
    entry = good_entries[3]
    entry["output"] = "Let me think.\nuser\n<tool_response>\n3\n\n</tool_response>\nassistant\n" + entry["output"]
    entry["num_turns"] += 2  # keep the turn count consistent: only the pairing is wrong
    report = validate_dir(mutated(good_entries))
    only(report, (4, "tool_pairing"))
    assert "a response without a call" in report.violations[0].message


def test_response_tag_in_the_models_own_text(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[3]["output"] = "<tool_response>\n3\n</tool_response>\n" + good_entries[3]["output"]
    only(validate_dir(mutated(good_entries)), (4, "tool_pairing"))


def test_swallowed_infra_fault_shown_as_program_output(good_entries: Entries, mutated: Mutate) -> None:
    entry = good_entries[4]
    shown = entry["tool_calls"][0]["observation"]
    assert shown == INFRA_FAULT_OBSERVATION.format(reason="HTTP 504")
    # what verl 0.7.1 did: the fault happened, the model saw an empty program output
    entry["output"] = entry["output"].replace(shown, "")
    entry["tool_calls"][0]["observation"] = ""
    report = validate_dir(mutated(good_entries))
    only(report, (5, "infra_fault"))
    assert "'HTTP 504' shown to the model as ''" in report.violations[0].message


def test_infra_text_without_a_recorded_fault(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[4]["tool_calls"][0]["infra_fault"] = None
    only(validate_dir(mutated(good_entries)), (5, "infra_fault"))


def test_no_stdout_here_in_a_foreign_dump(good_entries: Entries, mutated: Mutate) -> None:
    entry = good_entries[0]
    del entry["tool_calls"]  # a dump without our records, as verl writes it
    entry["output"] = entry["output"].replace(
        "<tool_response>\n72\n\n</tool_response>", f"<tool_response>\n{NO_STDOUT}\n</tool_response>"
    )
    report = validate_dir(mutated(good_entries))
    only(report, (1, "infra_mask"))
    assert "mask for any failed run" in report.violations[0].message


def test_no_stdout_here_recorded_as_a_program_outcome_is_a_note(good_entries: Entries, mutated: Mutate) -> None:
    entry = good_entries[0]
    entry["output"] = entry["output"].replace("\n72\n\n", f"\n{NO_STDOUT}\n")
    entry["tool_calls"][0]["observation"] = NO_STDOUT  # the project's tool: a timeout or compile error
    report = validate_dir(mutated(good_entries))
    assert report.ok, report.render()
    assert [(n.line, n.check) for n in report.notes] == [(1, "infra_mask"), (6, "tool_pairing")]


@pytest.mark.parametrize(
    "body", ["Error when executing tool: Connection reset by peer", "Error executing tool 'code_interpreter': boom"]
)
def test_tool_exception_shown_to_the_model(good_entries: Entries, mutated: Mutate, body: str) -> None:
    entry = good_entries[0]
    del entry["tool_calls"]
    entry["output"] = entry["output"].replace("\n72\n\n", f"\n{body}\n")
    only(validate_dir(mutated(good_entries)), (1, "infra_mask"))


def test_empty_observation_in_a_foreign_dump_is_a_note(good_entries: Entries, mutated: Mutate) -> None:
    entry = good_entries[0]
    del entry["tool_calls"]
    entry["output"] = entry["output"].replace("\n72\n\n", "\n\n")
    report = validate_dir(mutated(good_entries))
    assert report.ok and (1, "infra_mask") in [(n.line, n.check) for n in report.notes]


def test_observation_differs_from_the_tools(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[1]["tool_calls"][0]["observation"] = "y" * 300 + "\n"  # the output shows x...x
    only(validate_dir(mutated(good_entries)), (2, "observation"))


def test_tool_calls_arguments_differ(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[2]["tool_calls"][1]["arguments"] = {"code": "print(10)"}
    only(validate_dir(mutated(good_entries)), (3, "tool_calls"))


def test_tool_calls_count_differs(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[2]["tool_calls"].pop()
    report = validate_dir(mutated(good_entries))
    only(report, (3, "tool_calls"))
    assert "2 executed call(s) but tool_calls has 1" in report.violations[0].message


def test_num_turns_differs(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[0]["num_turns"] = 3
    only(validate_dir(mutated(good_entries)), (1, "num_turns"))


def test_wrong_step(good_entries: Entries, mutated: Mutate) -> None:
    good_entries[1]["step"] = 2
    report = validate_dir(mutated(good_entries))
    only(report, (2, "step"))
    assert report.violations[0].message == "step is 2 but the file is for step 1"


def test_file_of_another_step(good_entries: Entries, mutated: Mutate) -> None:
    directory = mutated(good_entries)
    (directory / "1.jsonl").rename(directory / "3.jsonl")
    report = validate_dir(directory)
    assert {(f.file, f.check) for f in report.violations} == {("3.jsonl", "step")}
    assert [f.line for f in report.violations] == list(range(1, len(good_entries) + 1))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("score", "1.0", "'score' is str, not a number"),
        ("gts", 72, "'gts' is int, not a string or null"),
        ("request_id", 5, "'request_id' is int, not a string"),
        ("num_turns", True, "'num_turns' is True, not a positive integer"),
        ("tool_calls", {"name": "x"}, "'tool_calls' is dict, not a list"),
    ],
)
def test_schema(good_entries: Entries, mutated: Mutate, field: str, value: Any, message: str) -> None:
    good_entries[0][field] = value
    report = validate_dir(mutated(good_entries))
    only(report, (1, "schema"))
    assert report.violations[0].message == message


def test_schema_of_a_tool_call(good_entries: Entries, mutated: Mutate) -> None:
    del good_entries[0]["tool_calls"][0]["attempts"]
    good_entries[0]["tool_calls"][0]["infra_fault"] = 504
    report = validate_dir(mutated(good_entries))
    only(report, (1, "schema"))
    assert [f.message for f in report.violations] == [
        "tool_calls[0].infra_fault is int",
        "tool_calls[0] has no 'attempts'",
    ]


def test_truncated_half_line(good_dump: Path, tmp_path: Path) -> None:
    raw = (good_dump / "1.jsonl").read_bytes()
    half = raw[: raw.rindex(b"\n", 0, len(raw) - 1) + 1 + 40]  # the first 40 bytes of the last line
    (tmp_path / "1.jsonl").write_bytes(half)
    report = validate_dir(tmp_path)
    assert violated(report) == {("1.jsonl", 6, "truncated"), ("1.jsonl", 6, "json")}
    assert report.lines == 6 and report.entries == 5


def test_a_line_that_is_not_an_object(good_dump: Path, tmp_path: Path) -> None:
    lines = (good_dump / "1.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines.insert(2, "[1, 2]\n")
    (tmp_path / "1.jsonl").write_text("".join(lines), encoding="utf-8")
    report = validate_dir(tmp_path)
    only(report, (3, "json"))
    assert report.violations[0].message == "a JSON list, not an object"


def test_badly_named_file_and_leftover_temp(good_dump: Path, tmp_path: Path) -> None:
    (tmp_path / "rollout.jsonl").write_bytes((good_dump / "1.jsonl").read_bytes())
    (tmp_path / ".2.jsonl.abc.tmp").write_text("{")
    report = validate_dir(tmp_path)
    assert violated(report) == {("rollout.jsonl", 0, "file")}
    assert ("2.jsonl" not in report.files) and (".2.jsonl.abc.tmp", 0, "file") in [
        (n.file, n.line, n.check) for n in report.notes
    ]
