"""The reward-impact audit: no injected fault may reach the model as program output or change a reward.

Every injected fault is labelled in the journal (``fault`` kind, ``detail["rule"]``: the rule id or limit name).
The audit joins that with what the model saw:

``fault-as-output``
    A call whose requests (journal entries) ended in a failure, i.e. the fault was not retried to success, must
    show the model the infrastructure-fault observation (or report ``infra_fault``), never text that reads as the
    program's output (verl 0.7.1's ``"no stdout here"``). Per call when the call's entries are known
    (:class:`AuditedCall`); otherwise by count: execution chains in the journal that ended in a fault, against calls
    that reported an infrastructure fault (a rollout runs calls concurrently, so they cannot be told apart).
``fault-hidden``
    A call that reported ``infra_fault`` but whose observation is not the infrastructure-fault text.
``reward``
    A trajectory's score differs from its offline score (same policy, perfect sandbox), unless the test declares
    ``expect_reward_loss=True`` or names the trajectory in ``allow``.
``unlabelled``
    A faulted journal entry without a rule label (the fault cannot be traced to its cause).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emulator.journal import Journal, JournalEntry
from harness.chaos.compliance import chains
from harness.chaos.judges import Finding, JournalLike, JudgeReport, failed, journal_entries

#: Routes that run a program: a chain there is one tool call's tries.
EXECUTION_ROUTES = (
    "sandbox_fusion.run_code",
    "sandbox_fusion.run_jupyter",
    "daytona.interpreter.execute",
    "daytona.toolbox.code_run",
    "daytona.toolbox.execute",
    "daytona.toolbox.session.exec",  # a command in a session: a program too
)


@dataclass
class AuditedCall:
    """One tool call as the model saw it, with the journal entries it caused (when known)."""

    observation: str | None
    infra_fault: str | None = None
    entries: list[JournalEntry] = field(default_factory=list)
    trajectory: str = ""


@dataclass
class AuditReport(JudgeReport):
    """Audit findings plus the figures: faults injected, calls, unrecovered fault chains, reward lost."""

    faults_injected: int = 0
    calls: int = 0
    unrecovered: int = 0
    infra_shown: int = 0
    reward_lost: float = 0.0


def journal_mark(journal: Journal) -> int:
    """The last entry's ``seq`` now: pass it to :func:`entries_since` after a call to get that call's requests."""
    entries = journal.entries()
    return entries[-1].seq if entries else 0


def entries_since(journal: Journal, mark: int, routes: Sequence[str] = EXECUTION_ROUTES) -> list[JournalEntry]:
    """Entries after ``mark`` on ``routes`` (only meaningful when calls run one at a time)."""
    return [e for e in journal.entries() if e.seq > mark and _on(e, routes)]


def _on(entry: JournalEntry, routes: Sequence[str]) -> bool:
    return any(entry.route == r or entry.route.startswith(r + ".") for r in routes)


def infra_matcher(texts: Iterable[str] | None = None) -> Callable[[str | None], bool]:
    """A test for "this observation is an infrastructure-fault text". ``texts``: templates with ``{reason}``;
    default: the project's tools' (needs verl importable)."""
    if texts is None:
        from harness.validate.known import infra_templates

        parts = [(t.prefix, t.suffix) for t in infra_templates()]
    else:
        parts = []
        for text in texts:
            prefix, _, suffix = text.partition("{reason}")
            parts.append((prefix, suffix))

    def matches(observation: str | None) -> bool:
        if observation is None:
            return False
        return any(observation.startswith(p) and observation.endswith(s) for p, s in parts)

    return matches


def _label(entry: JournalEntry) -> str:
    status = "no answer" if entry.status is None else f"HTTP {entry.status}"
    return f"{entry.detail.get('rule') or '?'}/{entry.fault or entry.outcome} ({status})"


def _excerpt(text: str | None, n: int = 60) -> str:
    if text is None:
        return "None"
    return repr(text if len(text) <= n else text[:n] + "...")


def audit_calls(
    calls: Sequence[AuditedCall],
    journal: JournalLike | None = None,
    *,
    infra_texts: Iterable[str] | None = None,
    routes: Sequence[str] = EXECUTION_ROUTES,
) -> AuditReport:
    """Per-call audit (``fault-as-output``, ``fault-hidden``), plus the count-level check and labels when
    ``journal`` is given and the calls do not carry their entries."""
    is_infra = infra_matcher(infra_texts)
    report = AuditReport("reward-impact audit")
    report.calls = len(calls)
    for n, call in enumerate(calls):
        shown_infra = is_infra(call.observation)
        report.infra_shown += shown_infra
        who = call.trajectory or f"call {n}"
        if call.infra_fault is not None and not shown_infra:
            report.count("fault-hidden")
            report.findings.append(
                Finding(
                    "fault-hidden",
                    f"the tool reported {call.infra_fault!r} but the model saw {_excerpt(call.observation)}",
                    who,
                )
            )
        if call.entries:
            report.count("fault-as-output")
            last = call.entries[-1]
            if failed(last) and call.infra_fault is None and not shown_infra:
                faults = ", ".join(_label(e) for e in call.entries if failed(e))
                report.findings.append(
                    Finding(
                        "fault-as-output",
                        f"injected fault {faults} reached the model as program output {_excerpt(call.observation)}",
                        who,
                        last.attempt,
                        {"observation": call.observation, "faults": faults},
                    )
                )
    if journal is not None:
        entries = [e for e in journal_entries(journal) if _on(e, routes)]
        _labels(report, journal_entries(journal))
        if not any(c.entries for c in calls):
            _count_level(report, entries, sum(1 for c in calls if c.infra_fault is not None or is_infra(c.observation)))
    return report


def _labels(report: AuditReport, entries: Sequence[JournalEntry]) -> None:
    for e in entries:
        if e.fault is None:
            continue
        report.faults_injected += 1
        report.count("unlabelled")
        if not e.detail.get("rule"):
            report.findings.append(Finding("unlabelled", f"{e.fault} fault without a rule label", e.route, e.attempt))


def _count_level(report: AuditReport, entries: Sequence[JournalEntry], flagged: int) -> None:
    unrecovered = [chain for chain in chains(entries).values() if failed(chain[-1])]
    report.unrecovered = len(unrecovered)
    report.count("fault-as-output", len(unrecovered))
    if len(unrecovered) > flagged:
        shown = "; ".join(_label(c[-1]) for c in unrecovered[:5])
        report.findings.append(
            Finding(
                "fault-as-output",
                f"{len(unrecovered)} call(s) ended in an injected fault ({shown}) but only {flagged} told the model "
                f"the sandbox failed: {len(unrecovered) - flagged} fault(s) reached the model as program output",
                figures={"unrecovered": len(unrecovered), "flagged": flagged},
            )
        )


def audit_rewards(
    scores: Mapping[str, tuple[float, float | None]],
    *,
    expect_reward_loss: bool = False,
    allow: Iterable[str] = (),
    report: AuditReport | None = None,
) -> AuditReport:
    """``scores``: trajectory -> (score, offline score or None). A difference is a finding unless allowed."""
    report = report or AuditReport("reward-impact audit")
    allowed = set(allow)
    for who, (score, offline) in scores.items():
        if offline is None:
            continue
        report.count("reward")
        if score == offline:
            continue
        report.reward_lost += max(0.0, offline - score)
        if expect_reward_loss or who in allowed:
            report.notes.append(f"{who}: reward {score} instead of {offline} (declared expected)")
            continue
        report.findings.append(
            Finding("reward", f"reward {score} differs from the offline reward {offline}", who, None, {"score": score})
        )
    return report


def audit_rollout(
    rollout: Any,
    journal: JournalLike,
    *,
    expect_reward_loss: bool = False,
    allow: Iterable[str] = (),
    infra_texts: Iterable[str] | None = None,
) -> AuditReport:
    """Audit a ``harness.rollout.job.RolloutResult`` (or its ``trajectories``) against the run's journal."""
    trajectories = list(getattr(rollout, "trajectories", rollout))
    calls = [
        AuditedCall(c.observation, c.infra_fault, trajectory=t.request_id) for t in trajectories for c in t.tool_calls
    ]
    report = audit_calls(calls, journal, infra_texts=infra_texts)
    scores = {t.request_id: (float(t.score), t.offline_score) for t in trajectories}
    return audit_rewards(scores, expect_reward_loss=expect_reward_loss, allow=allow, report=report)
