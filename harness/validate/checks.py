"""The per-entry checks of one dumped sample. Each records what it examined and what it found in the report.

Severity, in short: a violation is something verl itself would not have produced from an honest rollout, or an
observation that hides an infrastructure fault from the model (its reward and gradient are then built on a fake
program output); a note is legal in verl but worth a look (a call left unanswered because the budget ran out, calls
past ``max_parallel_calls``, an empty observation that may be a swallowed exception).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.validate import known
from harness.validate.parse import ParsedOutput, ToolCall, parse_output
from harness.validate.report import Report
from harness.validate.truncation import truncation_form

#: verl's strict GSM8K answer pattern (the reward only reads the last 300 characters; presence is checked anywhere).
ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
#: Keys of one ``tool_calls`` item and the types they must have (None allowed where listed).
TOOL_CALL_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "arguments": (dict,),
    "observation": (str, type(None)),
    "infra_fault": (str, type(None)),
    "attempts": (int,),
}


@dataclass
class Entry:
    """One parsed line and where it came from."""

    file: str
    line: int
    step: int | None  # from the file name; None when the name is not ``<step>.jsonl``
    data: Mapping[str, Any]


def check_entry(report: Report, entry: Entry, reward: str) -> None:
    """Run every check that applies to ``entry``; a check whose fields the schema check rejected is skipped (one
    wrong type is reported once, as a schema violation)."""
    data = entry.data
    report.checked("error")
    if data.get("error") is not None:  # a failed trajectory's row: empty by design, so its other checks say nothing
        error = data["error"]
        why = error if isinstance(error, str) else repr(error)
        report.violation(entry.file, entry.line, "error", f"the trajectory failed: {why}")
        return
    _check_schema(report, entry, reward)
    _check_step(report, entry)
    if not isinstance(data.get("output"), str):
        return
    parsed = parse_output(data["output"])
    _check_call_format(report, entry, parsed)
    _check_pairing(report, entry, parsed)
    if reward == "gsm8k" and _is_number(data.get("score")):
        _check_answer_format(report, entry)
        if "gts" in data and (data["gts"] is None or isinstance(data["gts"], str)):
            _check_score(report, entry)
    _check_num_turns(report, entry, parsed)
    records = data.get("tool_calls")
    usable = records if isinstance(records, list) and not _tool_calls_shape(records) else None
    if usable is not None:
        _check_records(report, entry, parsed, usable)
    _check_masks(report, entry, parsed, usable)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: int | float) -> float:
    """``value`` as a float; an integer too large for one is infinite (a JSON integer has no size limit)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _number_text(value: int | float) -> str:
    """``value`` as ``:g`` shows it, or the size of an integer too large for that (``:g`` goes through a float)."""
    try:
        return f"{value:g}"
    except OverflowError:
        return f"an integer of {len(str(abs(value)))} digits"


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_schema(report: Report, entry: Entry, reward: str) -> None:
    report.checked("schema")
    data = entry.data
    problems: list[str] = []
    # verl dumps whatever a data set's ground truth is (a list, a number...); GSM8K's is a string
    gts_ok: Any = (lambda v: v is None or isinstance(v, str)) if reward == "gsm8k" else (lambda v: True)
    expected: dict[str, tuple[str, Any]] = {
        "input": ("a string", lambda v: isinstance(v, str)),
        "output": ("a string", lambda v: isinstance(v, str)),
        "gts": ("a string or null", gts_ok),
        "score": ("a number", _is_number),
        "step": ("an integer", _is_int),
    }
    for key, (wanted, accepts) in expected.items():
        if key not in data:
            problems.append(f"missing {key!r}")
        elif not accepts(data[key]):
            problems.append(f"{key!r} is {_type(data[key])}, not {wanted}")
    if "request_id" in data and not isinstance(data["request_id"], str):
        problems.append(f"'request_id' is {_type(data['request_id'])}, not a string")
    if "num_turns" in data and not (_is_int(data["num_turns"]) and data["num_turns"] >= 1):
        problems.append(f"'num_turns' is {data['num_turns']!r}, not a positive integer")
    if "tool_calls" in data:
        problems += _tool_calls_shape(data["tool_calls"])
    for problem in problems:
        report.violation(entry.file, entry.line, "schema", problem)


def _tool_calls_shape(value: Any) -> list[str]:
    if not isinstance(value, list):
        return [f"'tool_calls' is {_type(value)}, not a list"]
    problems: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            problems.append(f"tool_calls[{i}] is {_type(item)}, not an object")
            continue
        for key, types in TOOL_CALL_FIELDS.items():
            if key not in item:
                problems.append(f"tool_calls[{i}] has no {key!r}")
            elif not isinstance(item[key], types) or isinstance(item[key], bool):
                problems.append(f"tool_calls[{i}].{key} is {_type(item[key])}")
        if _is_int(item.get("attempts")) and item["attempts"] < 0:
            problems.append(f"tool_calls[{i}].attempts is negative")
    return problems


def _check_step(report: Report, entry: Entry) -> None:
    step = entry.data.get("step")  # missing or not an int: a schema violation already
    if entry.step is None or not _is_int(step):
        return
    report.checked("step")
    if step != entry.step:
        report.violation(entry.file, entry.line, "step", f"step is {step} but the file is for step {entry.step}")


def _check_call_format(report: Report, entry: Entry, parsed: ParsedOutput) -> None:
    """Malformed calls are the model's: verl's Hermes parser logs and skips such a block (a turn left with no call
    ends the trajectory), so each is a note. A tool turn that no parsed call asked for is ``tool_pairing``'s."""
    report.checked("tool_call_format")
    last = len(parsed.turns) - 1
    for turn in parsed.turns:
        where = f"turn {turn.index + 1}"
        for call in turn.calls:
            if call.error is not None:
                skipped = "" if call.parsed_by_verl else " (verl's parser skips it)"
                report.note(
                    entry.file,
                    entry.line,
                    "tool_call_format",
                    f"{where}, call {call.index + 1}: {call.error}{skipped}: {_excerpt(call.raw)}",
                )
        if turn.stray_call_tags:
            report.note(
                entry.file,
                entry.line,
                "tool_call_format",
                f"{where}: {turn.stray_call_tags} <tool_call>/</tool_call> tag(s) outside a complete block",
            )
        if turn.unclosed_call_at_end:
            budget = " (the response budget ran out)" if turn.index == last else ""
            report.note(
                entry.file, entry.line, "tool_call_format", f"{where} ends inside an unclosed <tool_call>{budget}"
            )


def _check_pairing(report: Report, entry: Entry, parsed: ParsedOutput) -> None:
    report.checked("tool_pairing")
    for turn in parsed.turns:
        where = f"turn {turn.index + 1}"
        if turn.stray_response_tags:
            report.violation(
                entry.file,
                entry.line,
                "tool_pairing",
                f"{where}: the model's own text holds {turn.stray_response_tags} <tool_response> tag(s) (a response "
                "no tool gave)",
            )
        made = [call for call in turn.calls if call.parsed_by_verl]
        if turn.responses is None:  # the last turn: nothing answered it
            if made:
                report.note(
                    entry.file,
                    entry.line,
                    "tool_pairing",
                    f"{where} (the last): {len(made)} call(s) left unanswered: the loop stopped (response length, "
                    "turn limit)",
                )
            continue
        answers = len(turn.responses)
        if answers > len(made):
            report.violation(
                entry.file,
                entry.line,
                "tool_pairing",
                f"{where}: {answers} tool response(s) for {len(made)} call(s): a response without a call",
            )
        elif answers < len(made):
            report.note(
                entry.file,
                entry.line,
                "tool_pairing",
                f"{where}: {len(made)} calls, {answers} answered: verl runs only the first max_parallel_calls",
            )


def _check_answer_format(report: Report, entry: Entry) -> None:
    """Only for an entry whose ``output`` is a string and ``score`` a number (``check_entry`` makes sure)."""
    score = entry.data["score"]
    if not (score > 0):
        return
    report.checked("answer_format")
    if ANSWER.search(entry.data["output"]) is None:
        report.violation(
            entry.file, entry.line, "answer_format", f"score {score} but the output has no '#### <number>' answer"
        )


def _check_score(report: Report, entry: Entry) -> None:
    """Only for an entry with a string ``output``, a number ``score`` and a ``gts`` (``check_entry`` makes sure)."""
    gts = entry.data["gts"]
    if gts is None:
        report.note(entry.file, entry.line, "score", "gts is null: the score cannot be recomputed")
        return
    report.checked("score")
    expected = known.gsm8k_score()(entry.data["output"], gts)
    score = entry.data["score"]
    if not math.isclose(_as_float(score), expected, rel_tol=0.0, abs_tol=1e-6):
        report.violation(
            entry.file,
            entry.line,
            "score",
            f"score is {_number_text(score)} but verl's GSM8K reward gives {expected:g}",
        )
    acc: Any = entry.data.get("acc")
    if _is_number(acc) and not math.isclose(_as_float(acc), expected, rel_tol=0.0, abs_tol=1e-6):
        report.violation(
            entry.file, entry.line, "score", f"acc is {_number_text(acc)} but verl's GSM8K reward gives {expected:g}"
        )


def _check_num_turns(report: Report, entry: Entry, parsed: ParsedOutput) -> None:
    num_turns = entry.data.get("num_turns")
    if not _is_int(num_turns):
        return
    report.checked("num_turns")
    expected = 1 + len(parsed.turns) + parsed.tool_turns
    if num_turns != expected:
        report.violation(
            entry.file,
            entry.line,
            "num_turns",
            f"num_turns is {num_turns} but the output has {len(parsed.turns)} model turn(s) and "
            f"{parsed.tool_turns} tool turn(s) (verl counts {expected})",
        )


def executed_calls(parsed: ParsedOutput) -> list[ToolCall]:
    """The answered calls that reached a tool (verl rejects unknown tools and bad JSON without calling one)."""
    rejected = (known.VERL_UNKNOWN_FUNCTION, known.VERL_INVALID_ARGUMENTS)
    return [
        call
        for call in parsed.calls
        if call.parsed_by_verl and call.response is not None and not call.response.startswith(rejected)
    ]


def _check_records(report: Report, entry: Entry, parsed: ParsedOutput, records: list[Any]) -> None:
    """Only for ``records`` that passed the schema check: every key of ``TOOL_CALL_FIELDS`` there, of its type."""
    report.checked("tool_calls")
    calls = executed_calls(parsed)
    if len(calls) != len(records):
        report.violation(
            entry.file,
            entry.line,
            "tool_calls",
            f"the output shows {len(calls)} executed call(s) but tool_calls has {len(records)}",
        )
        return
    report.checked("observation")
    report.checked("infra_fault")
    for i, (call, record) in enumerate(zip(calls, records, strict=True)):
        where = f"call {i + 1}"
        if call.name != record["name"]:
            report.violation(
                entry.file, entry.line, "tool_calls", f"{where}: output names {call.name!r}, dump {record['name']!r}"
            )
        if call.arguments != record["arguments"]:
            report.violation(
                entry.file,
                entry.line,
                "tool_calls",
                f"{where}: arguments differ: output {_excerpt(repr(call.arguments))}, dump "
                f"{_excerpt(repr(record['arguments']))}",
            )
        body = call.response or ""
        _check_observation(report, entry, where, body, record)
        _check_infra_fault(report, entry, where, body, record)


def _check_observation(report: Report, entry: Entry, where: str, body: str, record: Mapping[str, Any]) -> None:
    observation = record["observation"]
    if isinstance(record.get("error"), str):  # the tool raised: verl shows its own exception text instead
        if not body.startswith(known.VERL_091_TOOL_EXCEPTION):
            report.violation(
                entry.file,
                entry.line,
                "observation",
                f"{where}: the tool raised ({_excerpt(record['error'])}) but the response is {_excerpt(body)}",
            )
        return
    if truncation_form(body, observation or "") is None:
        report.violation(
            entry.file,
            entry.line,
            "observation",
            f"{where}: response {_excerpt(body)} is neither the tool's observation {_excerpt(observation or '')} nor "
            "a truncation of it",
        )


def _check_infra_fault(report: Report, entry: Entry, where: str, body: str, record: Mapping[str, Any]) -> None:
    fault = record["infra_fault"]
    templates = known.infra_templates()
    if fault is not None:
        shown = [template.render(fault) for template in templates]
        if not any(truncation_form(body, text) is not None for text in shown):
            report.violation(
                entry.file,
                entry.line,
                "infra_fault",
                f"{where}: infrastructure fault {fault!r} shown to the model as {_excerpt(body)} instead of the "
                "infra-fault observation",
            )
        return
    observation = record["observation"] or ""
    if any(template.resembles(body) or template.matches(observation) for template in templates):
        report.violation(
            entry.file,
            entry.line,
            "infra_fault",
            f"{where}: shows the infra-fault observation but the call has no infra_fault recorded",
        )


def _check_masks(report: Report, entry: Entry, parsed: ParsedOutput, records: list[Any] | None) -> None:
    answered = [call for call in parsed.calls if call.response is not None]
    report.checked("infra_mask")
    by_call: dict[int, Mapping[str, Any]] = {}
    if records is not None:
        calls = executed_calls(parsed)
        if len(calls) == len(records):
            by_call = {id(call): record for call, record in zip(calls, records, strict=True)}
    no_stdout = known.no_stdout_text()
    for number, call in enumerate(answered, start=1):
        body = call.response or ""
        record = by_call.get(id(call))
        where = f"response {number}"
        if body == no_stdout:
            if record is not None and record["infra_fault"] is None and record["observation"] == no_stdout:
                report.note(
                    entry.file,
                    entry.line,
                    "infra_mask",
                    f"{where}: {no_stdout!r}: a timeout, compile error or unsupported language, per the tool's record",
                )
            else:
                report.violation(
                    entry.file,
                    entry.line,
                    "infra_mask",
                    f"{where}: {no_stdout!r} is verl 0.7.1's mask for any failed run, API failures included; the "
                    "model cannot tell a sandbox outage from its own program",
                )
        elif body.startswith((known.VERL_071_TOOL_EXCEPTION, known.VERL_091_TOOL_EXCEPTION)):
            report.violation(
                entry.file,
                entry.line,
                "infra_mask",
                f"{where}: the tool raised and verl showed the exception to the model: {_excerpt(body)}",
            )
        elif body == "" and (record is None or record["observation"] is None):
            report.note(
                entry.file,
                entry.line,
                "infra_mask",
                f"{where}: empty observation (a program that printed nothing, or verl 0.7.1's swallowed tool error)",
            )


def _excerpt(text: str, limit: int = 80) -> str:
    shown = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(shown)
