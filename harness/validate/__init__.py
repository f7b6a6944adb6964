"""Rollout-dump validator: checks a verl ``trainer.rollout_data_dir`` (ours or a real run's) line by line.

``validate_dir(path, reward="gsm8k") -> Report`` (``validate_file`` for one file); ``register_cli(subparsers)``
adds ``validate DIR``. See docs/validate.md for the checks, their severities and the report's shape.
"""

from __future__ import annotations

from harness.validate.cli import register_cli
from harness.validate.report import CHECKS, CheckCount, Finding, Report
from harness.validate.validator import REWARDS, UsageError, dump_files, validate_dir, validate_file

__all__ = [
    "CHECKS",
    "REWARDS",
    "CheckCount",
    "Finding",
    "Report",
    "UsageError",
    "dump_files",
    "register_cli",
    "validate_dir",
    "validate_file",
]
