"""What the journal says about sandboxes: which leaked (never deleted), who created them, how many lived at once,
and which programs the interpreter ran.

Creates and deletes are journaled with ``detail["sandbox_id"]`` and ``detail["labels"]``, so the report works on any
journal (in process, or the list ``GET /_emulator/journal`` answers) without asking the service.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from emulator.journal import JournalEntry

CREATE = "daytona.sandbox.create"
DELETE = "daytona.sandbox.delete"
INTERPRETER = "daytona.interpreter.execute"


@dataclass(frozen=True)
class SandboxRecord:
    """One sandbox as the journal saw it."""

    id: str
    labels: dict[str, str]
    created: float
    deleted: float | None = None

    def creator(self, label: str) -> str | None:
        """The value of the label that names the creator (e.g. ``"test"`` or ``"instance_id"``)."""
        return self.labels.get(label)


@dataclass
class SandboxReport:
    """Sandboxes created, deleted, leaked, and the most alive at once (per the journal)."""

    sandboxes: list[SandboxRecord] = field(default_factory=list)

    @property
    def leaked(self) -> list[SandboxRecord]:
        """Created and never deleted through the API."""
        return [s for s in self.sandboxes if s.deleted is None]

    @property
    def max_alive(self) -> int:
        events: list[tuple[float, int]] = []
        for s in self.sandboxes:
            events.append((s.created, 1))
            if s.deleted is not None:
                events.append((s.deleted, -1))
        events.sort(key=lambda e: (e[0], e[1]))
        best = alive = 0
        for _, delta in events:
            alive += delta
            best = max(best, alive)
        return best

    def leaked_by(self, label: str) -> dict[str, list[str]]:
        """Leaked sandbox ids grouped by the value of ``label`` (``"<unlabelled>"`` when missing)."""
        groups: dict[str, list[str]] = {}
        for s in self.leaked:
            groups.setdefault(s.labels.get(label, "<unlabelled>"), []).append(s.id)
        return groups

    def describe(self, label: str) -> str:
        """A human-readable leak summary naming creators by ``label``."""
        if not self.leaked:
            return "no leaked sandboxes"
        lines = [f"{len(self.leaked)} leaked sandbox(es):"]
        for creator, ids in sorted(self.leaked_by(label).items()):
            lines.append(f"  {label}={creator}: {', '.join(ids)}")
        return "\n".join(lines)


def _get(entry: JournalEntry | Mapping[str, Any], key: str) -> Any:
    if isinstance(entry, JournalEntry):
        return getattr(entry, key)
    return entry.get(key)


def sandbox_report(entries: Iterable[JournalEntry | Mapping[str, Any]]) -> SandboxReport:
    """Build a :class:`SandboxReport` from journal entries (objects or their ``to_dict`` form)."""
    created: dict[str, SandboxRecord] = {}
    for entry in entries:
        route = _get(entry, "route")
        status = _get(entry, "status")
        detail = _get(entry, "detail") or {}
        sandbox_id = detail.get("sandbox_id")
        # A sandbox id in the detail means the real handler ran; the answer may still have been lost to an injected
        # reset or truncation (no status), which is exactly when a client leaks one.
        if not sandbox_id or (status is not None and status >= 400):
            continue
        finished = _get(entry, "finished")
        when = finished if finished is not None else _get(entry, "started")
        if route == CREATE:
            created[sandbox_id] = SandboxRecord(sandbox_id, dict(detail.get("labels") or {}), when)
        elif route == DELETE and sandbox_id in created:
            record = created[sandbox_id]
            if record.deleted is None:
                created[sandbox_id] = SandboxRecord(record.id, record.labels, record.created, when)
    return SandboxReport(sorted(created.values(), key=lambda s: s.created))


def code_digest(code: str) -> str:
    """Short fingerprint of a program, as interpreter entries record it in ``detail["code_digest"]``."""
    return hashlib.blake2b(code.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()  # a lone surrogate too


def interpreter_runs(entries: Iterable[JournalEntry | Mapping[str, Any]]) -> Counter[str]:
    """How many times each program (by :func:`code_digest`) ran in the interpreter, to its end or to its time limit.

    Injected faults, refused handshakes and runs cut off by the client are not counted, so "every completion ran
    exactly once" is a comparison of two counters.
    """
    runs: Counter[str] = Counter()
    for entry in entries:
        if _get(entry, "route") != INTERPRETER or _get(entry, "outcome") not in ("ok", "timeout"):
            continue
        digest = (_get(entry, "detail") or {}).get("code_digest")
        if digest:
            runs[digest] += 1
    return runs
