"""Saved chaos regressions: the minimal operation list a search shrank a violation to, as JSON, replayed forever.

A search machine records every operation it applies. When an invariant breaks it writes the operations so far to
``<directory>/<machine>-<found_with>-<invariant>.json``, overwriting: hypothesis replays the shrunk example last, so
the file left behind is the minimal one. ``tests/chaos/test_regressions.py`` replays every file in
``fixtures/chaos/regressions/`` against the real implementation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.paths import FIXTURES

__all__ = [
    "REGRESSIONS_DIR",
    "Regression",
    "Violation",
    "load_regressions",
    "save_regression",
]

#: The repository's regression directory (``fixtures/chaos/regressions`` beside the packages).
REGRESSIONS_DIR = FIXTURES / "chaos" / "regressions"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Violation(AssertionError):
    """An invariant broke; ``invariant`` is its short name (part of the regression's file name)."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant
        self.message = message


@dataclass
class Regression:
    """One saved schedule: which machine, which implementation found it, what broke, and the operations."""

    machine: str
    found_with: str
    violation: str
    ops: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"machine": self.machine, "found_with": self.found_with, "violation": self.violation, "ops": self.ops}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "<regression>") -> Regression:
        """Parse a saved regression, naming the file and key when it is malformed."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object")
        missing = [k for k in ("machine", "found_with", "violation", "ops") if k not in data]
        if missing:
            raise ValueError(f"{where}: missing keys {missing}")
        ops = data["ops"]
        if not isinstance(ops, list) or not all(isinstance(op, dict) and isinstance(op.get("op"), str) for op in ops):
            raise ValueError(f"{where}: ops must be a list of objects with an 'op' name")
        return cls(str(data["machine"]), str(data["found_with"]), str(data["violation"]), [dict(op) for op in ops])

    @classmethod
    def from_file(cls, path: Path) -> Regression:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read regression: {exc}") from None
        return cls.from_dict(data, str(path))


def regression_path(directory: Path, machine: str, found_with: str, invariant: str) -> Path:
    name = _UNSAFE.sub("_", f"{machine}-{found_with}-{invariant}")
    return directory / f"{name}.json"


def save_regression(
    directory: Path, machine: str, found_with: str, violation: Violation, ops: list[dict[str, Any]]
) -> Path:
    """Write (overwrite) the regression for this machine, implementation and invariant; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = regression_path(directory, machine, found_with, violation.invariant)
    reg = Regression(machine, found_with, str(violation), [dict(op) for op in ops])
    path.write_text(json.dumps(reg.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_regressions(directory: Path = REGRESSIONS_DIR) -> list[tuple[Path, Regression]]:
    """Every saved regression in ``directory``, sorted by file name."""
    if not directory.is_dir():
        return []
    return [(p, Regression.from_file(p)) for p in sorted(directory.glob("*.json"))]
