"""The decision log: one plain JSON record per decision, dumpable to JSONL for replay."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import FaultPlanError
from .strict_load import DuplicateKeyError, json_loads_unique

__all__ = ["DecisionLog", "dump_jsonl", "load_jsonl"]


#: Records kept by default: a long-running server must not grow without bound.
DEFAULT_MAX_RECORDS = 200_000


class DecisionLog:
    """Append-only, thread-safe log of decision records (``Decision.to_record()`` dicts).

    It keeps the newest ``max_records`` (None: all); ``dropped`` counts the older ones it let go, which a replay of
    the whole run would then miss.
    """

    def __init__(
        self, records: Iterable[Mapping[str, Any]] = (), max_records: int | None = DEFAULT_MAX_RECORDS
    ) -> None:
        self._lock = threading.Lock()
        self._records: deque[dict[str, Any]] = deque((dict(r) for r in records), maxlen=max_records)
        self.dropped = 0

    def append(self, record: Mapping[str, Any]) -> None:
        """Add one record (the oldest goes when the log is full)."""
        with self._lock:
            if self._records.maxlen is not None and len(self._records) == self._records.maxlen:
                self.dropped += 1
            self._records.append(dict(record))

    def clear(self) -> None:
        """Drop all records."""
        with self._lock:
            self._records.clear()
            self.dropped = 0

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
        return cls(load_jsonl(path), max_records=None)


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
        # at "\n" only: the log is written with ensure_ascii=False, and a JSON string may hold U+2028 or U+0085 raw,
        # where str.splitlines() would also split
        lines = p.read_text(encoding="utf-8").split("\n")
    except OSError as exc:
        raise FaultPlanError(str(p), f"cannot read decision log: {exc}") from None
    except UnicodeDecodeError as exc:
        raise FaultPlanError(str(p), f"not a decision log: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json_loads_unique(line)
        except json.JSONDecodeError as exc:
            raise FaultPlanError(f"{p}:{n}", f"not valid JSON: {exc}") from None
        except DuplicateKeyError as exc:  # which of the two a replay would use is a guess
            raise FaultPlanError(f"{p}:{n}", str(exc)) from None
        if not isinstance(obj, dict):
            raise FaultPlanError(f"{p}:{n}", "expected a JSON object per line")
        out.append(obj)
    return out
