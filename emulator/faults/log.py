"""The decision log: one plain JSON record per decision, dumpable to JSONL for replay."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import FaultPlanError

__all__ = ["DecisionLog", "dump_jsonl", "load_jsonl"]


class DecisionLog:
    """Append-only, thread-safe list of decision records (``Decision.to_record()`` dicts)."""

    def __init__(self, records: Iterable[Mapping[str, Any]] = ()) -> None:
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = [dict(r) for r in records]

    def append(self, record: Mapping[str, Any]) -> None:
        """Add one record."""
        with self._lock:
            self._records.append(dict(record))

    def clear(self) -> None:
        """Drop all records."""
        with self._lock:
            self._records.clear()

    @property
    def records(self) -> list[dict[str, Any]]:
        """A snapshot copy of the records."""
        with self._lock:
            return [dict(r) for r in self._records]

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def faults(self) -> list[dict[str, Any]]:
        """Only the records where something beyond latency was injected."""
        return [r for r in self.records if r.get("kind") != "pass"]

    def dump_jsonl(self, path: str | Path) -> Path:
        """Write the records as JSON lines; returns the path."""
        return dump_jsonl(self.records, path)

    @classmethod
    def load_jsonl(cls, path: str | Path) -> DecisionLog:
        """Read a log written by ``dump_jsonl``."""
        return cls(load_jsonl(path))


def dump_jsonl(records: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write records one JSON object per line (creating parent directories)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, sort_keys=True, ensure_ascii=False))
            fh.write("\n")
    return p


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read JSON lines; blank lines are skipped, a broken line raises ``FaultPlanError`` with its number."""
    p = Path(path)
    out: list[dict[str, Any]] = []
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise FaultPlanError(str(p), f"cannot read decision log: {exc}") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FaultPlanError(f"{p}:{n}", f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise FaultPlanError(f"{p}:{n}", "expected a JSON object per line")
        out.append(obj)
    return out
