"""The judges' common ground: findings, reports, journal input, and :class:`ChaosJudge`, all judges in one place.

A judge reads what the emulator saw (its journal, its decision log) rather than instrumenting the client, so the
same checks work on any client: a verl tool, a Ray worker, a user's own code. Each judge returns a report listing
findings (what rule, which request, the figures); ``assert_ok()`` raises an ``AssertionError`` whose message is the
readable report, so a failing chaos test says what the client did wrong without a debugger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from emulator.journal import Journal, JournalEntry

#: Statuses that mean "the service, not the program, failed": a client is expected to retry them.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

#: Journal outcomes of a request whose answer never arrived whole (dropped or truncated connection).
LOST_OUTCOMES = frozenset({"reset", "cancelled"})

#: What judges accept as a journal: the object, or its entries (objects or ``to_dict`` forms, e.g. over HTTP).
JournalLike = Journal | Iterable[JournalEntry | Mapping[str, Any]]


@dataclass(frozen=True)
class Finding:
    """One broken rule: which rule, which request (identity and attempt), and a sentence with the figures."""

    rule: str
    message: str
    identity: str = ""
    attempt: int | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        where = self.identity + (f" attempt {self.attempt}" if self.attempt is not None else "")
        return f"[{self.rule}] {where + ': ' if where else ''}{self.message}"


@dataclass
class JudgeReport:
    """Findings of one judge plus what it checked (so an empty report is not mistaken for "nothing to check")."""

    title: str
    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)  # rule -> how many cases it looked at
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def by_rule(self, rule: str) -> list[Finding]:
        return [f for f in self.findings if f.rule == rule]

    def count(self, rule: str, n: int = 1) -> None:
        self.checked[rule] = self.checked.get(rule, 0) + n

    def render(self, limit: int = 40) -> str:
        """The report as text: a verdict line, what was checked, then the findings (the first ``limit``)."""
        verdict = "OK" if self.ok else f"{len(self.findings)} violation(s)"
        checked = ", ".join(f"{rule}: {n}" for rule, n in sorted(self.checked.items())) or "nothing"
        lines = [f"{self.title}: {verdict} (checked {checked})"]
        lines += [f"  {f.line()}" for f in self.findings[:limit]]
        if len(self.findings) > limit:
            lines.append(f"  ... and {len(self.findings) - limit} more")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` with the rendered report when anything was found."""
        if self.findings:
            raise AssertionError(self.render())

    def __str__(self) -> str:
        return self.render()


def journal_entries(journal: JournalLike, route: str | None = None) -> list[JournalEntry]:
    """Entries in arrival order (``seq``), from a journal or a list of entries / their dict forms."""
    if isinstance(journal, Journal):
        return journal.entries(route)
    out: list[JournalEntry] = []
    for item in journal:
        entry = item if isinstance(item, JournalEntry) else JournalEntry.from_dict(item)
        if route is None or entry.route == route or entry.route.startswith(route + "."):
            out.append(entry)
    return sorted(out, key=lambda e: e.seq)


def failed(entry: JournalEntry) -> bool:
    """The service failed this request (a status a client should retry, or an answer lost on the wire)."""
    if entry.status is None:
        return entry.outcome != "pending"
    return entry.status in RETRYABLE_STATUSES or entry.fault is not None


class _SupportsEmulator(Protocol):
    journal: Journal

    def daytona_report(self) -> Any: ...


@dataclass
class ChaosJudge:
    """Every judge over one emulator's journal: ``judge.compliance(...)``, ``judge.invariants(...)``, ...

    Built by the pytest plugin per test (or by hand: ``ChaosJudge.of(emulator)``). Each method returns a report;
    ``assert_*`` raise with the readable report.
    """

    journal: JournalLike
    decisions: Sequence[Mapping[str, Any]] = ()
    emulator: Any = None

    @classmethod
    def of(cls, emulator: Any) -> ChaosJudge:
        """A judge reading ``emulator``'s journal and its engine's decision log (for ``Retry-After`` values)."""
        log = getattr(getattr(emulator, "engine", None), "log", None)
        return cls(emulator.journal, list(log.records) if log is not None else [], emulator)

    def _decisions(self) -> Sequence[Mapping[str, Any]]:
        log = getattr(getattr(self.emulator, "engine", None), "log", None)
        return list(log.records) if log is not None else self.decisions

    def compliance(self, **rules: Any) -> Any:
        """:func:`harness.chaos.compliance.check_compliance` with this journal; ``rules`` as keywords."""
        from harness.chaos.compliance import ComplianceRules, check_compliance

        return check_compliance(self.journal, ComplianceRules(**rules), decisions=self._decisions())

    def assert_compliant(self, **rules: Any) -> None:
        self.compliance(**rules).assert_compliant()

    def invariants(
        self,
        *,
        limits: Mapping[str, int] | None = None,
        limiter_stats: Any = None,
        leaks: bool = True,
        owner_label: str = "instance_id",
    ) -> JudgeReport:
        """In-flight caps per route (``limits``: route or prefix -> cap), permit balance, and leaked sandboxes."""
        import harness.chaos.invariants as inv

        reports = [inv.check_max_in_flight(self.journal, limits or {})]
        if limiter_stats is not None:
            reports.append(inv.check_permit_balance(limiter_stats))
        if leaks:
            reports.append(inv.check_no_leaks(self.journal, owner_label=owner_label))
        return inv.merge("invariants", reports)

    def assert_invariants(self, **kwargs: Any) -> None:
        self.invariants(**kwargs).assert_ok()

    def audit(self, calls: Any, **kwargs: Any) -> Any:
        """:func:`harness.chaos.audit.audit_rollout` (a ``RolloutResult`` or trajectories) against this journal."""
        from harness.chaos.audit import audit_rollout

        return audit_rollout(calls, self.journal, **kwargs)
