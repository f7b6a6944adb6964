"""``sandbox-emulator record``: run the reference suite against a real service and store its answers as a snapshot
(``DIR/<service>.json``) for ``check-reference`` to compare with.

The answers are merged into the snapshot already in the directory, if any: a case answered now replaces its earlier
answer, every other earlier case is kept, and when no case gets an answer the file is left as it was.

An answer that says the service refused the caller (401/403), that came from something in front of it or says it
failed (a redirect, a 5xx, an HTML page or other non-JSON body), or a 409 on Daytona's ``create`` (a sandbox of the
suite's name left running), is never stored: nothing is written (the run still sends the remaining cases, and
deletes Daytona's sandbox however it ends). Before any case, the service's probe (``suite.PROBES``) must succeed,
so that a wrong base URL, whose every answer would be the framework's 404, a refused key or a hung service stops
the run before it sends the suite. Each case is said on stderr as its answer comes; Ctrl-C drops the answers
received, the file kept as it was (exit status 130).

Exit status: 0 when every case got an HTTP answer, 1 when some did not (the others are still stored), 2 on bad
input (including a snapshot already there that cannot be read: it is not overwritten), a target where nothing
accepts a connection, whose probe fails, that refuses the key, or whose answer is refused as above (nothing is
written then); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.interrupts import INTERRUPTED
from harness.outputs import dir_problem
from harness.reference.check import add_common_options, api_key
from harness.reference.snapshots import (
    Snapshot,
    SnapshotError,
    from_answers,
    merge_into,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from harness.reference.suite import (
    SERVICES,
    Answer,
    Case,
    Progress,
    SuiteError,
    Target,
    base_url,
    key_problem,
    leftover,
    load_suite,
    phrase,
    probe,
    refusal,
    refused,
    require_cases,
    run_suite,
    select,
    unexpected,
)
from harness.urls import unreachable, url_problem


class Refused(Exception):
    """The service refused the caller (401/403) on a case, or gave an answer the suite never expects (a redirect,
    a 5xx, an HTML page, a 409 on create): that is no answer to record, so nothing is written."""


@dataclass(frozen=True)
class Recording:
    """What one ``record`` did: the answers it got, and what the snapshot file now holds."""

    answered: Snapshot
    #: Earlier cases of the file kept as they were (not selected, or not answered this time).
    kept: list[str]
    #: Whether the file was written (not when no case got an answer).
    written: bool


def record(
    target: Target,
    out: Path,
    suite_path: Path | None = None,
    patterns: list[str] | None = None,
    progress: Progress | None = None,
) -> Recording:
    """Run the suite's cases for ``target.service`` against it and merge the answers into ``out``'s snapshot.

    Recording never loses an earlier answer: a case that gets no answer now, or was not selected, keeps the one the
    file had, and when no case gets an answer the file is not touched at all. Raises :class:`Refused`, writing
    nothing, when the service refused the caller (401/403) on any case, answered one with something the suite never
    expects (:func:`~harness.reference.suite.unexpected`), or answered ``create`` with a 409 (a leftover sandbox):
    none of those is an answer to the case.
    """
    cases = select(load_suite(suite_path)[target.service], patterns)
    previous = read_snapshot(out, target.service)  # a snapshot that cannot be read is not overwritten
    answers = run_suite(target, cases, progress=progress)
    for case in cases:
        status = refused(case, answers[case.id])
        if status is not None:
            raise Refused(refusal(target, status, f"case {case.id}"))
        problem = leftover(target, case, answers[case.id])
        if problem is not None:
            raise Refused(problem)
        what = unexpected(answers[case.id])
        if what is not None:
            raise Refused(f"case {case.id} got {what}, which is no answer of the service to record")
    answered = from_answers(target.service, target.shown, answers)
    if not answered.cases:
        return Recording(answered, list(previous.cases) if previous else [], written=False)
    merged, kept = merge_into(previous, answered)
    write_snapshot(out, merged)
    return Recording(answered, kept, written=True)


def _untouched(path: Path) -> str:
    return f"{path} is untouched" if path.exists() else f"{path} was not written"


def main(args: argparse.Namespace) -> int:
    problem = url_problem(args.target)
    if problem is not None:
        print(f"sandbox-emulator record: --target: {problem}", file=sys.stderr)
        return 2
    if args.api_key is not None and args.service != "daytona":
        print(
            "sandbox-emulator record: --api-key is Daytona's (--service daytona); Sandbox Fusion takes none",
            file=sys.stderr,
        )
        return 2
    key = api_key(args.api_key) if args.service == "daytona" else None
    problem = key_problem(key)
    if problem is not None:
        print(f"sandbox-emulator record: --api-key (or $DAYTONA_API_KEY): {problem}; nothing recorded", file=sys.stderr)
        return 2
    problem = dir_problem(args.out, "--out", create=False)  # before any request: the answers must have a home
    if problem is not None:
        print(f"sandbox-emulator record: {problem}; nothing recorded", file=sys.stderr)
        return 2
    target = Target(args.service, base_url(args.service, args.target), key)
    path = snapshot_path(args.out, args.service)
    try:
        suite = load_suite(args.suite)
        require_cases(suite, [args.service], args.cases, args.suite)
        cases = select(suite[args.service], args.cases)
        read_snapshot(args.out, args.service)  # one that cannot be read is said now, and never overwritten
        problem = unreachable(args.target)
        if problem is not None:
            print(f"sandbox-emulator record: --target: {problem}; nothing recorded", file=sys.stderr)
            return 2
        problem = probe(target)
        if problem is not None:
            print(f"sandbox-emulator record: {problem}; nothing recorded", file=sys.stderr)
            return 2
        received: list[str] = []

        def said(position: int, total: int, case: Case, answer: Answer) -> None:
            """One line per case as it is answered, so that a slow service is seen to be working."""
            received.append(case.id)
            what = (
                f"no answer ({answer.error})" if answer.status is None else f"{answer.status} {phrase(answer.status)}"
            )
            print(f"sandbox-emulator record: [{position}/{total}] {case.id}: {what}", file=sys.stderr, flush=True)

        try:
            done = record(target, args.out, args.suite, args.cases, said)
        except KeyboardInterrupt:
            answers = f"{len(received)} answer{'' if len(received) == 1 else 's'}"
            print(
                f"sandbox-emulator record: interrupted; dropped the {answers} received ({_untouched(path)})",
                file=sys.stderr,
            )
            return INTERRUPTED
    except (SuiteError, SnapshotError) as exc:
        print(f"sandbox-emulator record: {exc}", file=sys.stderr)
        return 2
    except Refused as exc:
        print(f"sandbox-emulator record: {exc}; nothing written ({_untouched(path)})", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sandbox-emulator record: cannot write into {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    got = len(done.answered.cases)
    if not done.written:
        none = f"recorded none of {len(cases)} {args.service} cases from {target.shown}"
        print(f"{none}: {_untouched(path)}", file=sys.stderr)
        return 1
    print(f"recorded {got} of {len(cases)} {args.service} cases from {target.shown} into {path}")
    if done.kept:
        print(f"kept the earlier answers of {len(done.kept)} cases not recorded now: {', '.join(done.kept)}")
    return 0 if got == len(cases) else 1


def register_cli(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("record", help="record the reference suite's answers from a real service")
    parser.add_argument(
        "--target",
        required=True,
        metavar="URL",
        help="the service: Sandbox Fusion's root URL (a trailing /run_code is dropped), or Daytona's API URL (e.g."
        " https://app.daytona.io/api)",
    )
    parser.add_argument("--service", choices=SERVICES, default="sandbox-fusion", help="default: sandbox-fusion")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="snapshot directory to write into")
    add_common_options(parser)
    parser.set_defaults(func=main)
