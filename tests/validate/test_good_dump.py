"""A dump of real trajectories (verl's ToolAgentLoop, the project's SandboxFusionTool, the emulator) passes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from emulator.journal import Journal
from harness.validate import validate_dir


def test_real_trajectories_dump_and_validate(
    tmp_path: Path,
    sandbox_emulator: Any,
    emulator_journal: Journal,
    dump_builder: Callable[[Path, Any, int], list[dict[str, Any]]],
    problem_count: int,
) -> None:
    entries = dump_builder(tmp_path / "dump", sandbox_emulator, 4)

    report = validate_dir(tmp_path / "dump")
    assert report.ok, report.render()
    assert (report.files, report.lines, report.entries) == (["4.jsonl"], problem_count, problem_count)
    # every check saw the dump; the only note is the call the turn limit left unanswered (problem p6)
    assert all(count.checked > 0 for count in report.checks.values()), report.render()
    assert [(n.line, n.check) for n in report.notes] == [(6, "tool_pairing")]

    # the observations are real program outputs, and three of them were truncated by verl, one per shape
    calls = [call for entry in entries for call in entry["tool_calls"]]
    assert [c["observation"] for c in calls[:2]] == ["72\n", "x" * 300 + "\n"]
    outputs = "".join(entry["output"] for entry in entries)
    assert "...(truncated)..." in outputs and "\n(truncated)..." in outputs and "...(truncated)\n" in outputs
    # the emulator really ran them: one request per executed call, plus the retries of the failed one
    faulted = [c for c in calls if c["infra_fault"]]
    assert [c["infra_fault"] for c in faulted] == ["HTTP 504"]
    run_code = emulator_journal.entries("sandbox_fusion.run_code")
    assert len(run_code) == len(calls) - 1 + faulted[0]["attempts"]
    assert sum(1 for e in run_code if e.status == 504) == faulted[0]["attempts"] == 3


def test_the_shared_good_dump_passes(good_dump: Path, problem_count: int) -> None:
    report = validate_dir(good_dump)
    assert report.ok, report.render()
    line = json.loads((good_dump / "1.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert list(line)[:5] == ["input", "output", "gts", "score", "step"]
    assert report.to_dict()["ok"] is True and report.checks["score"].checked == problem_count
