"""The validator's result: what was read, what each check looked at, what failed and what is worth a look."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: Every check, in report order, with what it asserts (the CLI and docs/validate.md list them).
CHECKS: dict[str, str] = {
    "file": "the directory holds `<step>.jsonl` files and nothing half-written",
    "json": "each line is one JSON object",
    "truncated": "the last line of a file ends with a newline (no half-written line)",
    "schema": "input/output str, gts str or null, score number, step int; request_id, num_turns, tool_calls shaped",
    "step": "`step` equals the step in the file name",
    "error": "no entry is a trajectory that failed (our rollout's `error` field; verl's trainer stops instead)",
    "tool_call_format": "every <tool_call> block holds JSON with a string `name` and an object `arguments`",
    "tool_pairing": "every call answered by one <tool_response> before the next model turn; no response without call",
    "answer_format": "`#### <answer>` present wherever the score is positive",
    "score": "the score equals verl's GSM8K reward recomputed from output and gts (and `acc`, when present)",
    "num_turns": "`num_turns` equals verl's count: prompt + model turns + tool turns",
    "tool_calls": "calls in output match the dumped `tool_calls`: count, names, arguments",
    "observation": "each <tool_response> body is the dumped observation or verl's truncation of it",
    "infra_fault": "a call with `infra_fault` shows the infra-fault text; a call without one never does",
    "infra_mask": "no observation is a known mask of an infrastructure fault (`no stdout here`, tool exceptions)",
}


@dataclass(frozen=True)
class Finding:
    """One violation or note. ``line`` is 1-based; 0 for a finding about a whole file or the directory."""

    file: str
    line: int
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.check}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "check": self.check, "message": self.message}


@dataclass
class CheckCount:
    """How many items (entries, files) a check examined, and what it found."""

    checked: int = 0
    violations: int = 0
    notes: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"checked": self.checked, "violations": self.violations, "notes": self.notes}


@dataclass
class Report:
    """A validated dump directory. ``ok`` means no violations (notes do not count)."""

    directory: str
    reward: str
    files: list[str] = field(default_factory=list)
    lines: int = 0
    entries: int = 0
    checks: dict[str, CheckCount] = field(default_factory=lambda: {name: CheckCount() for name in CHECKS})
    violations: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def checked(self, check: str, count: int = 1) -> None:
        self.checks[check].checked += count

    def violation(self, file: str, line: int, check: str, message: str) -> None:
        self.checks[check].violations += 1
        self.violations.append(Finding(file, line, check, message))

    def note(self, file: str, line: int, check: str, message: str) -> None:
        self.checks[check].notes += 1
        self.notes.append(Finding(file, line, check, message))

    def by_check(self, check: str) -> list[Finding]:
        """The violations of one check."""
        return [finding for finding in self.violations if finding.check == check]

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "reward": self.reward,
            "ok": self.ok,
            "files": list(self.files),
            "lines": self.lines,
            "entries": self.entries,
            "checks": {name: count.to_dict() for name, count in self.checks.items()},
            "violations": [finding.to_dict() for finding in self.violations],
            "notes": [finding.to_dict() for finding in self.notes],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def summary_line(self) -> str:
        """Totals on one line: files, lines, entries, violations, notes."""
        return (
            f"{len(self.files)} file(s), {self.lines} line(s), {self.entries} entries; "
            f"{len(self.violations)} violation(s), {len(self.notes)} note(s)"
        )

    def shown_lines(self, limit: int) -> list[str]:
        """The first ``limit`` violations as ``file:line: check: message``."""
        return [str(finding) for finding in self.violations[: max(0, limit)]]

    def render(self, max_shown: int = 20) -> str:
        """The human report: totals, one line per check, then the first ``max_shown`` violations and notes."""
        verdict = "OK" if self.ok else "FAILED"
        out = [
            f"{verdict}: {self.directory}: {self.summary_line()} (reward: {self.reward})",
            "",
            f"  {'check':<18}{'checked':>9}{'violations':>12}{'notes':>7}",
        ]
        for name, count in self.checks.items():
            out.append(f"  {name:<18}{count.checked:>9}{count.violations:>12}{count.notes:>7}")
        for title, findings in (("violations", self.violations), ("notes", self.notes)):
            if not findings:
                continue
            shown = findings[: max(0, max_shown)]
            out += ["", f"{title} (first {len(shown)} of {len(findings)}):" if shown else f"{title}: {len(findings)}"]
            out += [f"  {finding}" for finding in shown]
        return "\n".join(out)
