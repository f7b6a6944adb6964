"""``sandbox-emulator check-reference``: run the reference suite against the emulator (started in process) or a live
service, and compare each answer with the snapshots after normalising.

Exit status: 0 when every difference is registered, 1 when one is not (or a case got no answer), 2 on bad input
(unreadable suite, snapshots or registry; no snapshot for the service asked for, or for any service under ``all``;
a live service whose probe fails or that refuses the key). Under ``all``, a service with no snapshot is not checked,
and the report says so (``unchecked``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.reference.compare import Difference, diff
from harness.reference.normalize import normalize_body
from harness.reference.registry import Divergence, RegistryError, load_registry, registered
from harness.reference.snapshots import Snapshot, SnapshotError, read_snapshot
from harness.reference.suite import (
    SERVICES,
    Answer,
    Case,
    SuiteError,
    Target,
    base_url,
    default_fixtures_dir,
    key_problem,
    load_suite,
    probe,
    require_cases,
    run_suite,
    select,
)
from harness.urls import unreachable, url_problem

OK, REGISTERED, FAILED, NO_ANSWER, UNRECORDED = "ok", "registered", "failed", "no-answer", "unrecorded"


@dataclass
class CaseResult:
    case: str
    outcome: str
    differences: list[Difference] = field(default_factory=list)
    registered: list[tuple[Difference, Divergence]] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "outcome": self.outcome,
            "differences": [d.to_dict() for d in self.differences],
            "registered": [{**d.to_dict(), "reason": r.reason, "validated": r.validated} for d, r in self.registered],
            "error": self.error,
        }


@dataclass
class ServiceReport:
    service: str
    target: str
    snapshot: str
    results: list[CaseResult] = field(default_factory=list)
    stale: list[Divergence] = field(default_factory=list)

    @property
    def failed(self) -> list[CaseResult]:
        return [r for r in self.results if r.outcome in (FAILED, NO_ANSWER)]

    def to_dict(self) -> dict[str, Any]:
        counts = {o: sum(r.outcome == o for r in self.results) for o in (OK, REGISTERED, FAILED, NO_ANSWER, UNRECORDED)}
        return {
            "service": self.service,
            "target": self.target,
            "snapshot": self.snapshot,
            "counts": counts,
            "cases": [r.to_dict() for r in self.results],
            "stale": [d.to_dict() for d in self.stale],
        }


@dataclass
class Report:
    services: list[ServiceReport] = field(default_factory=list)
    #: Services asked for that had no snapshot, so were not checked: said, so that a pass is not read as theirs.
    unchecked: list[str] = field(default_factory=list)
    snapshots: str = ""

    @property
    def compared(self) -> int:
        """Cases whose answer was compared with the snapshot (an unrecorded case is not)."""
        return sum(r.outcome in (OK, REGISTERED, FAILED) for s in self.services for r in s.results)

    @property
    def passed(self) -> bool:
        """No case failed, and at least one was compared: a run that compared nothing shows nothing."""
        return self.compared > 0 and not any(s.failed for s in self.services)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "compared": self.compared,
            "services": [s.to_dict() for s in self.services],
            "unchecked": self.unchecked,
        }


def _comparable(case: Case, status: int | None, body: Any, with_body: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status}
    if with_body:
        out["body"] = normalize_body(case.normalize, body)
    return out


def compare_case(case: Case, recorded: dict[str, Any] | None, answer: Answer, registry: list[Divergence]) -> CaseResult:
    """One case's outcome: its differences from the recording, split into registered and not."""
    if recorded is None:
        return CaseResult(case.id, UNRECORDED)
    if answer.status is None:
        return CaseResult(case.id, NO_ANSWER, error=answer.error)
    with_body = "body" in recorded
    expected = _comparable(case, recorded["status"], recorded.get("body"), with_body)
    got = _comparable(case, answer.status, answer.body, with_body)
    result = CaseResult(case.id, OK)
    for difference in diff(expected, got):
        entry = registered(registry, case.service, case.id, difference)
        if entry is None:
            result.differences.append(difference)
        else:
            result.registered.append((difference, entry))
    if result.differences:
        result.outcome = FAILED
    elif result.registered:
        result.outcome = REGISTERED
    return result


def check_service(
    service: str,
    cases: list[Case],
    snapshot: Snapshot,
    answers: dict[str, Answer],
    registry: list[Divergence],
    target: str,
) -> ServiceReport:
    report = ServiceReport(service, target, snapshot.source)
    for case in cases:
        report.results.append(compare_case(case, snapshot.cases.get(case.id), answers[case.id], registry))
    used = {id(entry) for r in report.results for _, entry in r.registered}
    checked = {r.case for r in report.results if r.outcome in (OK, REGISTERED, FAILED)}
    report.stale = [
        d for d in registry if d.service == service and id(d) not in used and any(_glob(c, d.case) for c in checked)
    ]
    return report


def _glob(case_id: str, pattern: str) -> bool:
    from fnmatch import fnmatchcase

    return fnmatchcase(case_id, pattern)


@contextlib.contextmanager
def emulator_targets() -> Iterator[dict[str, Target]]:
    """The emulator on a loopback port, as a target per service."""
    from emulator.app import Emulator
    from emulator.server import EmulatorServer

    with EmulatorServer(Emulator()) as server:
        key = server.emulator.config.daytona.api_key
        yield {
            "sandbox-fusion": Target("sandbox-fusion", server.url),
            "daytona": Target("daytona", server.url + "/api", key),
        }


def run_check(
    services: list[str],
    snapshots: Path,
    registry: list[Divergence],
    targets: dict[str, Target],
    suite_path: Path | None = None,
    patterns: list[str] | None = None,
) -> Report:
    """Run the suite against ``targets`` and compare with the snapshots in ``snapshots``."""
    suite = load_suite(suite_path)
    found = {s: read_snapshot(snapshots, s) for s in services}
    if not any(found.values()):
        raise SnapshotError(f"no snapshot for {', '.join(services)} in {snapshots}")
    report = Report(unchecked=[s for s in services if found[s] is None], snapshots=str(snapshots))
    for service in services:
        snapshot = found[service]
        if snapshot is None:
            continue
        cases = select(suite[service], patterns)
        answers = run_suite(targets[service], cases)
        report.services.append(check_service(service, cases, snapshot, answers, registry, targets[service].shown))
    return report


def render(report: Report) -> str:
    """The human report: a summary line per service, a diff per failing case, stale registry entries."""
    lines: list[str] = []
    for service in report.services:
        counts = service.to_dict()["counts"]
        summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no case selected"
        lines.append(f"{service.service} against {service.target}: {summary}")
        for result in service.results:
            if result.outcome == NO_ANSWER:
                lines.append(f"  FAIL {result.case}: no answer ({result.error})")
            elif result.outcome == FAILED:
                lines.append(f"  FAIL {result.case}: {len(result.differences)} unregistered difference(s)")
                lines += ["    " + d.describe().replace("\n", "\n    ") for d in result.differences]
            elif result.outcome == UNRECORDED:
                lines.append(f"  note {result.case}: not in the snapshot, not compared")
        for entry in service.stale:
            lines.append(
                f"  stale registry entry {entry.case} {entry.field} (validated {entry.validated}): the divergence no"
                " longer occurs; remove the entry or re-validate it"
            )
    for name in report.unchecked:
        lines.append(f"note: {name} not checked: no {name}.json snapshot in {report.snapshots}")
    if report.compared == 0:
        unanswered = sum(r.outcome == NO_ANSWER for s in report.services for r in s.results)
        if unanswered:
            lines.append(f"no case was compared: none of the {unanswered} recorded cases selected got an answer")
        else:
            lines.append("no case was compared: none of those selected is recorded in the snapshot")
    lines.append("PASSED" if report.passed else "FAILED")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.reference_url and args.service == "all":
        print("sandbox-emulator check-reference: --reference-url needs one --service", file=sys.stderr)
        return 2
    problem = (url_problem(args.reference_url) or unreachable(args.reference_url)) if args.reference_url else None
    if problem is not None:
        print(f"sandbox-emulator check-reference: --reference-url: {problem}", file=sys.stderr)
        return 2
    service = args.service or ("sandbox-fusion" if args.reference_url else "all")
    if args.api_key is not None and not (args.reference_url and service == "daytona"):
        print(
            "sandbox-emulator check-reference: --api-key is for a live Daytona (--reference-url with --service "
            "daytona); the emulator uses its own",
            file=sys.stderr,
        )
        return 2
    key = api_key(args.api_key) if args.reference_url and service == "daytona" else None
    problem = key_problem(key)
    if problem is not None:
        print(f"sandbox-emulator check-reference: --api-key (or $DAYTONA_API_KEY): {problem}", file=sys.stderr)
        return 2
    if not args.reference_url:  # the emulator runs the cases: its runtime Python must work
        from harness.runtime import python_problem

        problem = python_problem()
        if problem is not None:
            print(f"sandbox-emulator check-reference: {problem}", file=sys.stderr)
            return 2
    services = list(SERVICES) if service == "all" else [service]
    try:
        registry = load_registry(args.registry)
        require_cases(load_suite(args.suite), services, args.cases, args.suite)
        with contextlib.ExitStack() as stack:
            if args.reference_url:
                targets = {service: Target(service, base_url(service, args.reference_url), key)}
                problem = probe(targets[service])
                if problem is not None:
                    print(f"sandbox-emulator check-reference: {problem}; nothing checked", file=sys.stderr)
                    return 2
            else:
                targets = stack.enter_context(emulator_targets())
            report = run_check(services, args.snapshots, registry, targets, args.suite, args.cases)
    except (SuiteError, SnapshotError, RegistryError) as exc:
        print(f"sandbox-emulator check-reference: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=1) if args.json else render(report))
    return 0 if report.passed else 1


def api_key(given: str | None) -> str | None:
    """A live Daytona's bearer key: ``--api-key``, else ``$DAYTONA_API_KEY`` (as bench and the pytest plugin read
    it). Only for a live Daytona: the emulator has its own key, and Sandbox Fusion takes none."""
    return given if given is not None else (os.environ.get("DAYTONA_API_KEY") or None)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", type=Path, metavar="FILE", help="the suite (default: fixtures/reference/suite.yaml)")
    parser.add_argument(
        "--api-key", metavar="KEY", help="Daytona bearer key of the live service (default: $DAYTONA_API_KEY)"
    )
    parser.add_argument("--cases", nargs="+", metavar="GLOB", help="only the cases whose id matches")


def register_cli(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("check-reference", help="compare the emulator (or a live service) with the recordings")
    parser.add_argument(
        "--snapshots",
        type=Path,
        default=default_fixtures_dir() / "snapshots",
        metavar="DIR",
        help="snapshot directory, one <service>.json each (default: fixtures/reference/snapshots)",
    )
    parser.add_argument(
        "--reference-url",
        metavar="URL",
        help="check this live service instead of the emulator (for Sandbox Fusion, a trailing /run_code is dropped)",
    )
    parser.add_argument("--service", choices=[*SERVICES, "all"], help="default: all (sandbox-fusion with a URL)")
    parser.add_argument("--registry", type=Path, metavar="FILE", help="default: fixtures/reference/divergences.yaml")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_common_options(parser)
    parser.set_defaults(func=main)
