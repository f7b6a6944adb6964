"""The reference suite's Daytona cases, sent to the emulator (or the live Daytona given with ``--reference-url ...
--reference-service daytona``) and compared with the Daytona snapshot, as ``check-reference`` does."""

from __future__ import annotations

from harness.reference.check import Report, check_service, render
from harness.reference.registry import load_registry
from harness.reference.snapshots import read_snapshot
from harness.reference.suite import Target, default_fixtures_dir, load_suite, run_suite


def test_daytona_suite_answers_as_recorded(reference_daytona: Target) -> None:
    cases = load_suite()["daytona"]
    snapshot = read_snapshot(default_fixtures_dir() / "snapshots", "daytona")
    assert snapshot is not None
    answers = run_suite(reference_daytona, cases)
    service = check_service("daytona", cases, snapshot, answers, load_registry(), reference_daytona.shown)
    report = Report(services=[service])
    assert report.passed, render(report)
    assert report.compared == len(cases)
