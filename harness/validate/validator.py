"""Validate a rollout dump directory: every ``*.jsonl`` file, line by line, every check on every entry."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.validate.checks import Entry, check_entry
from harness.validate.report import Report

#: Rewards the score check knows; ``none`` skips the GSM8K-specific checks (answer format, score).
REWARDS = ("gsm8k", "none")
_STEP_FILE = re.compile(r"(0|-?[1-9][0-9]*)\.jsonl")
_TEMP_FILE = re.compile(r"\..*\.jsonl\..*\.tmp")


class UsageError(ValueError):
    """The directory cannot be validated at all (missing, not a directory, no ``*.jsonl``, unknown reward)."""


def dump_files(path: str | Path) -> list[Path]:
    """The dump's ``*.jsonl`` files, numeric steps first in step order, then any others by name."""
    if not str(path).strip():
        raise UsageError("no directory named (an empty path)")
    directory = Path(path)
    try:
        if not directory.exists():
            raise UsageError(f"{directory}: no such directory")
        if not directory.is_dir():
            raise UsageError(f"{directory}: not a directory")
        named = [p for p in directory.iterdir() if p.suffix == ".jsonl"]
        files = [p for p in named if p.is_file()]
    except OSError as exc:  # no permission to list it, or to look into a parent
        raise UsageError(f"{directory}: cannot read: {exc.strerror or exc}") from None
    if not files:
        if named:  # a directory, a FIFO, a socket by that name: say so rather than that there is none
            raise UsageError(f"{sorted(named)[0]}: not a regular file")
        raise UsageError(f"{directory}: no *.jsonl files (is this a trainer.rollout_data_dir?)")

    def order(p: Path) -> tuple[int, int, str]:
        match = _STEP_FILE.fullmatch(p.name)
        return (0, int(match.group(1)), p.name) if match else (1, 0, p.name)

    return sorted(files, key=order)


def validate_dir(path: str | Path, *, reward: str = "gsm8k") -> Report:
    """Check every line of every ``<step>.jsonl`` in ``path`` (a verl ``rollout_data_dir``, ours or a real run's).

    Raises :class:`UsageError` when there is nothing to validate; every defect of the dump itself is in the report.
    """
    if reward not in REWARDS:
        raise UsageError(f"unknown reward {reward!r}; choose one of {', '.join(REWARDS)}")
    files = dump_files(path)
    directory = Path(path)
    report = Report(directory=str(directory), reward=reward)
    try:
        leftovers = sorted(p.name for p in directory.iterdir() if _TEMP_FILE.fullmatch(p.name))
    except OSError as exc:
        raise UsageError(f"{directory}: cannot read: {exc.strerror or exc}") from None
    for leftover in leftovers:
        report.note(leftover, 0, "file", "temporary file of an interrupted atomic write (safe to delete)")
    for file in files:
        _validate_file(report, file, reward)
    return report


def validate_file(path: str | Path, *, reward: str = "gsm8k") -> Report:
    """Check one dump file alone (what a run just wrote), whatever else its directory holds.

    Raises :class:`UsageError` when it is not a readable regular file.
    """
    if reward not in REWARDS:
        raise UsageError(f"unknown reward {reward!r}; choose one of {', '.join(REWARDS)}")
    file = Path(path)
    try:
        regular = file.is_file()
    except OSError as exc:
        raise UsageError(f"{file}: cannot read: {exc.strerror or exc}") from None
    if not regular:
        raise UsageError(f"{file}: {'not a regular file' if file.exists() else 'no such file'}")
    report = Report(directory=str(file.parent), reward=reward)
    _validate_file(report, file, reward)
    return report


def _validate_file(report: Report, file: Path, reward: str) -> None:
    name = file.name
    report.files.append(name)
    report.checked("file")
    match = _STEP_FILE.fullmatch(name)
    step = int(match.group(1)) if match else None
    if step is None:
        report.violation(name, 0, "file", "not named <step>.jsonl as verl names its dump files")
    try:
        raw = file.read_bytes()
    except OSError as exc:  # not a defect of the dump: nothing of it can be checked
        raise UsageError(f"{file}: cannot read: {exc.strerror or exc}") from None
    if not raw:
        report.note(name, 0, "file", "empty file (a step with no samples)")
        return
    lines = raw.split(b"\n")
    complete = lines[-1] == b""
    if complete:
        lines.pop()
    report.checked("truncated")
    for number, line in enumerate(lines, start=1):
        report.lines += 1
        last_unterminated = not complete and number == len(lines)
        if last_unterminated:
            report.violation(
                name, number, "truncated", f"the last line has no newline: a half-written line ({len(line)} bytes)"
            )
        report.checked("json")
        try:
            data = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            report.violation(name, number, "json", f"not JSON: {exc}")
            continue
        except RecursionError:  # legal JSON, but nested deeper than Python's decoder goes
            report.violation(name, number, "json", "nested too deeply to decode")
            continue
        if not isinstance(data, dict):
            report.violation(name, number, "json", f"a JSON {type(data).__name__}, not an object")
            continue
        report.entries += 1
        check_entry(report, Entry(file=name, line=number, step=step, data=data), reward)
