"""``sandbox-emulator validate DIR``: the dump validator on the command line.

Exit status: 0 when the dump has no violations, 1 when it has some, 2 when it cannot be validated (missing
directory, no ``*.jsonl`` in it, verl missing for ``--reward gsm8k``). Imports nothing heavy until it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register_cli(sub: Any) -> argparse.ArgumentParser:
    """Add the ``validate`` subcommand to ``sub`` (what ``ArgumentParser.add_subparsers()`` returned)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate",
        help="check a rollout dump directory (trainer.rollout_data_dir) line by line",
        description="Check every <step>.jsonl of a verl rollout dump: schema, tool-call pairing, observations, "
        "infrastructure faults, recomputed GSM8K scores. Exit 0 if ok, 1 on violations, 2 on a usage error.",
    )
    parser.add_argument("directory", metavar="DIR", help="the dump directory (holds 1.jsonl, 2.jsonl, ...)")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument(
        "--reward",
        choices=["gsm8k", "none"],
        default="gsm8k",
        help="gsm8k: recompute scores with verl's GSM8K reward and require '####' on positive scores; "
        "none: skip both (default: gsm8k)",
    )
    parser.add_argument(
        "--max-shown", type=int, default=20, metavar="N", help="violations and notes listed (default: 20)"
    )
    parser.set_defaults(func=run_validate)
    return parser


def run_validate(args: argparse.Namespace) -> int:
    """The subcommand's body: print the report, return the exit status."""
    from harness.validate.known import MissingExtra
    from harness.validate.validator import UsageError, validate_dir

    if args.max_shown < 0:
        print(f"validate: --max-shown must not be negative, got {args.max_shown}", file=sys.stderr)
        return 2
    try:
        report = validate_dir(args.directory, reward=args.reward)
    except (UsageError, MissingExtra) as exc:
        print(_printable(f"validate: {exc}"), file=sys.stderr)
        return 2
    print(_printable(report.to_json() if args.json else report.render(max_shown=args.max_shown)))
    return 0 if report.ok else 1


def _printable(text: str) -> str:
    """``text`` with the lone surrogates of undecodable file names as ``\\udcXX`` escapes: a strict stdout cannot
    print them, a lenient one would write bytes that are not UTF-8, and in a JSON string the escape is valid JSON."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
