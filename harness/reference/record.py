"""``sandbox-emulator record``: run the reference suite against a real service and store its answers as a snapshot
(``DIR/<service>.json``) for ``check-reference`` to compare with.

Exit status: 0 when every case got an HTTP answer, 1 when some did not (the others are still stored), 2 on bad
input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.reference.check import add_common_options
from harness.reference.snapshots import Snapshot, from_answers, write_snapshot
from harness.reference.suite import SERVICES, SuiteError, Target, load_suite, run_suite, select
from harness.urls import url_problem


def record(target: Target, out: Path, suite_path: Path | None = None, patterns: list[str] | None = None) -> Snapshot:
    """Run the suite's cases for ``target.service`` against it and write the snapshot into ``out``."""
    cases = select(load_suite(suite_path)[target.service], patterns)
    answers = run_suite(target, cases)
    snapshot = from_answers(target.service, target.url, answers)
    write_snapshot(out, snapshot)
    missing = [cid for cid, a in answers.items() if a.status is None]
    for cid in missing:
        print(f"sandbox-emulator record: {cid}: no answer ({answers[cid].error})", file=sys.stderr)
    return snapshot


def main(args: argparse.Namespace) -> int:
    problem = url_problem(args.target)
    if problem is not None:
        print(f"sandbox-emulator record: --target: {problem}", file=sys.stderr)
        return 2
    target = Target(args.service, args.target.rstrip("/"), args.api_key)
    try:
        cases = select(load_suite(args.suite)[args.service], args.cases)
        if not cases:
            print("sandbox-emulator record: no case matches --cases", file=sys.stderr)
            return 2
        snapshot = record(target, args.out, args.suite, args.cases)
    except SuiteError as exc:
        print(f"sandbox-emulator record: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sandbox-emulator record: cannot write into {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"recorded {len(snapshot.cases)} of {len(cases)} {args.service} cases from {target.url} into {args.out}")
    return 0 if len(snapshot.cases) == len(cases) else 1


def register_cli(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("record", help="record the reference suite's answers from a real service")
    parser.add_argument(
        "--target",
        required=True,
        metavar="URL",
        help="the service: Sandbox Fusion's root URL, or Daytona's API URL (e.g. https://app.daytona.io/api)",
    )
    parser.add_argument("--service", choices=SERVICES, default="sandbox-fusion", help="default: sandbox-fusion")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="snapshot directory to write into")
    add_common_options(parser)
    parser.set_defaults(func=main)
