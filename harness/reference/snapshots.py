"""Snapshot files: what one service answered to the reference suite, one JSON file per service in a directory.

Bodies are stored raw (not normalised) so that a better normaliser later still works on old recordings. A case
recorded with ``"body"`` absent is compared on its status only (the Daytona traffic recorded against a stub kept
no bodies).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.outputs import write_whole
from harness.reference.suite import Answer
from harness.urls import without_userinfo


class SnapshotError(ValueError):
    """A snapshot file is missing or malformed."""


@dataclass
class Snapshot:
    """One service's recorded answers: case id -> ``{"status": int, "body": ...}`` (``body`` optional)."""

    service: str
    source: str
    recorded_at: str
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"service": self.service, "source": self.source, "recorded_at": self.recorded_at, "cases": self.cases}


def snapshot_path(directory: Path, service: str) -> Path:
    return directory / f"{service}.json"


def from_answers(service: str, source: str, answers: dict[str, Answer]) -> Snapshot:
    """A snapshot of answers just received (cases with no HTTP answer are left out: nothing to compare with)."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    cases = {cid: {"status": a.status, "body": a.body} for cid, a in answers.items() if a.status is not None}
    return Snapshot(service, source, now, cases)


def merge_into(previous: Snapshot | None, new: Snapshot) -> tuple[Snapshot, list[str]]:
    """``new`` laid over ``previous``: a case answered now replaces its earlier answer, and an earlier case that was
    not answered now (not selected, or no HTTP answer) is kept. Returns the merged snapshot and the kept case ids.

    A kept case carries the ``source`` and ``recorded_at`` of the file it came from (unless it has its own), since
    the file's now say where the new answers came from.
    """
    if previous is None:
        return new, []
    kept = [cid for cid in previous.cases if cid not in new.cases]
    cases: dict[str, dict[str, Any]] = {}
    for cid in kept:
        case = dict(previous.cases[cid])
        case.setdefault("source", previous.source)
        case.setdefault("recorded_at", previous.recorded_at)
        cases[cid] = case
    cases.update(new.cases)
    return Snapshot(new.service, new.source, new.recorded_at, cases), kept


def write_snapshot(directory: Path, snapshot: Snapshot) -> Path:
    """Write ``DIR/<service>.json`` whole or not at all (a temp file renamed over it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(directory, snapshot.service)
    write_whole(path, json.dumps(snapshot.to_dict(), indent=1, ensure_ascii=False, sort_keys=False) + "\n")
    return path


def read_snapshot(directory: Path, service: str) -> Snapshot | None:
    """The service's snapshot in ``directory``; None when there is none."""
    path = snapshot_path(directory, service)
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"cannot read the snapshot {path}: {exc}") from exc
    cases = raw.get("cases") if isinstance(raw, dict) else None
    if not isinstance(cases, dict) or not all(isinstance(c, dict) and "status" in c for c in cases.values()):
        raise SnapshotError(f"the snapshot {path} must hold 'cases': {{id: {{'status': ..., 'body': ...}}}}")
    for case in cases.values():  # a file written before credentials were stripped must not carry them on
        if isinstance(case.get("source"), str):
            case["source"] = without_userinfo(case["source"])
    source = without_userinfo(str(raw.get("source", "")))
    return Snapshot(str(raw.get("service", service)), source, str(raw.get("recorded_at", "")), cases)
