"""Invariant monitors: safety properties a limiter and a client must keep whatever the faults.

- ``max-in-flight``: requests in flight at the emulator on a route (or route prefix) never above its declared cap
  (computed from the journal's start and end times, so it holds across processes and Ray workers).
- ``fifo``: admission in request order, no waiter overtaken by more than ``max_overtaken`` later requests. The
  order callers *asked* is the test's to record; the order of *admission* comes from the limiter's own event log
  (the ``local`` backend's ``journal()`` of grants) or, for any limiter, from the order first tries reached the
  emulator (the journal), which matches admission up to the cap of granted holders racing to the wire.
- ``permit-balance``: from :class:`harness.ratelimit.LimiterStats`: at quiescence nothing is held or waiting,
  acquires equal releases plus withdrawn and reclaimed permits, the holders never exceeded the limit, and no late
  (over-)release happened.
- ``leaks``: no Daytona sandbox created and never deleted, no toolbox session or interpreter context left open in a
  sandbox that still exists.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from emulator.daytona.report import sandbox_report
from emulator.journal import JournalEntry
from harness.chaos.judges import Finding, JournalLike, JudgeReport, journal_entries


def max_overlap(entries: Iterable[JournalEntry], *, admitted_only: bool = False) -> tuple[int, float | None]:
    """Most requests in flight at once among ``entries`` and when that peak began (None when there were none).

    ``admitted_only`` leaves out requests the emulator's own limits refused (``fault == "limited"``)."""
    events: list[tuple[float, int]] = []
    for e in entries:
        if admitted_only and e.fault == "limited":
            continue
        events.append((e.started, 1))
        events.append((e.finished if e.finished is not None else float("inf"), -1))
    events.sort(key=lambda ev: (ev[0], ev[1]))  # an end before a start at the same instant
    best, current, when = 0, 0, None
    for t, delta in events:
        current += delta
        if current > best:
            best, when = current, t
    return best, when


def check_max_in_flight(journal: JournalLike, limits: Mapping[str, int], *, admitted_only: bool = False) -> JudgeReport:
    """``limits``: route or route prefix -> the most requests allowed in flight there at once. A route no request
    reached is a finding: a cap checked against nothing (a misspelled route) must not pass."""
    report = JudgeReport("in-flight limits")
    for route, cap in limits.items():
        entries = journal_entries(journal, route)
        peak, when = max_overlap(entries, admitted_only=admitted_only)
        report.count("max-in-flight")
        if not entries:
            report.findings.append(
                Finding("max-in-flight", "no request reached this route: nothing was checked (its name?)", route)
            )
        elif peak > cap:
            report.findings.append(
                Finding(
                    "max-in-flight",
                    f"{peak} requests in flight at t={when:.3f}s, limit {cap}",
                    route,
                    figures={"peak": peak, "limit": cap},
                )
            )
    return report


def arrival_order(journal: JournalLike) -> list[str]:
    """Keys in the order their first try reached the emulator (what a limiter in front of it admitted)."""
    seen: dict[str, None] = {}
    for e in journal_entries(journal):
        if e.attempt == 1:
            seen.setdefault(e.key, None)
    return list(seen)


def grant_order(events: Iterable[Sequence[Any]]) -> list[str]:
    """Request ids in the order a limiter granted them, from its event log (``(time, "grant", id, held)`` tuples,
    as the ``local`` limiter's ``journal()`` gives)."""
    return [str(ev[2]) for ev in events if len(ev) > 2 and ev[1] == "grant"]


def check_fifo(admitted: Sequence[str], requested: Sequence[str], *, max_overtaken: int = 0) -> JudgeReport:
    """Each id in ``requested`` (the order callers asked) is admitted after at most ``max_overtaken`` ids that asked
    later. ``admitted``: :func:`arrival_order` of the journal, or :func:`grant_order` of a limiter's event log. With
    the journal, set the bound to the limiter's cap minus one: granted holders race each other to the wire."""
    report = JudgeReport("FIFO admission")
    position = {k: n for n, k in reversed(list(enumerate(admitted)))}
    missing = [k for k in requested if k not in position]
    if missing:
        report.notes.append(f"{len(missing)} requested id(s) never admitted: {missing[:5]}")
    asked = [k for k in requested if k in position]
    if not asked:  # no order to compare: passing would claim an admission order nobody saw
        report.findings.append(
            Finding(
                "fifo",
                f"nothing to check: {len(requested)} id(s) requested, {len(admitted)} admitted, none in both",
                "",
            )
        )
    for i, key in enumerate(asked):
        report.count("fifo")
        overtaken_by = [k for k in asked[i + 1 :] if position[k] < position[key]]
        if len(overtaken_by) > max_overtaken:
            report.findings.append(
                Finding(
                    "fifo",
                    f"overtaken by {len(overtaken_by)} later request(s) (bound {max_overtaken}): {overtaken_by[:5]}",
                    key,
                    figures={"overtaken": len(overtaken_by)},
                )
            )
    return report


#: The figures permit balance is worked out from: stats without them would pass having checked nothing.
_BALANCE_FIELDS = ("acquires", "releases", "held", "waiting")


def _stats_dict(stats: Any) -> dict[str, Any]:
    """The figures of ``stats``; a TypeError for anything that is not stats (e.g. ``limiter.stats()`` not awaited,
    or the bound method itself), whose missing fields would all read as 0 and balance."""
    if isinstance(stats, Mapping):
        figures = dict(stats)
    elif inspect.isawaitable(stats) or callable(stats):
        raise TypeError(f"permit balance needs a LimiterStats or its dict, got {stats!r} (not awaited or not called?)")
    else:
        figures = {
            k: getattr(stats, k) for k in dir(stats) if not k.startswith("_") and not callable(getattr(stats, k))
        }
    missing = [k for k in _BALANCE_FIELDS if k not in figures]
    if missing:
        raise TypeError(f"permit balance needs a LimiterStats or its dict; {type(stats).__name__} lacks {missing}")
    return figures


def check_permit_balance(stats: Any, *, quiescent: bool = True) -> JudgeReport:
    """``stats``: a ``LimiterStats`` (or its dict). ``quiescent``: every caller has finished."""
    s = _stats_dict(stats)
    name = str(s.get("name", "limiter"))
    report = JudgeReport("permit balance")
    report.count("permit-balance")

    def bad(message: str, **figures: Any) -> None:
        report.findings.append(Finding("permit-balance", message, name, figures=figures))

    limit, max_held = int(s.get("limit", 0)), int(s.get("max_held", 0))
    if limit and max_held > max(limit, int(s.get("cap", limit))):
        bad(f"{max_held} permits held at once, limit {limit}", max_held=max_held, limit=limit)
    if int(s.get("late_releases", 0)):
        bad(f"{s['late_releases']} release(s) of permits already given back (over-release)")
    if int(s.get("held", 0)) < 0:
        bad(f"held count is negative ({s['held']})")
    if quiescent:
        acquires, releases = int(s.get("acquires", 0)), int(s.get("releases", 0))
        withdrawn, reclaimed = int(s.get("withdrawn", 0)), int(s.get("reclaimed", 0))
        if int(s.get("held", 0)) or int(s.get("waiting", 0)):
            bad(f"at quiescence {s.get('held')} permit(s) held and {s.get('waiting')} waiting")
        if acquires != releases + withdrawn + reclaimed:
            bad(
                f"acquires {acquires} != releases {releases} + withdrawn {withdrawn} + reclaimed {reclaimed}",
                acquires=acquires,
                releases=releases,
            )
    return report


def check_no_leaks(journal: JournalLike, *, owner_label: str = "instance_id") -> JudgeReport:
    """Daytona sandboxes created and never deleted; sessions and interpreter contexts left open in live sandboxes."""
    entries = journal_entries(journal)
    report = JudgeReport("leaks")
    sandboxes = sandbox_report(entries)
    report.count("leaks", len(sandboxes.sandboxes))
    for s in sandboxes.leaked:
        report.findings.append(
            Finding("leaks", f"sandbox {s.id} never deleted", f"{owner_label}={s.creator(owner_label)}")
        )
    live = {s.id for s in sandboxes.leaked}
    opened: Counter[tuple[str, str]] = Counter()
    for e in entries:
        if e.status is None or e.status >= 300:
            continue
        for kind, create, delete in (
            ("session", "daytona.toolbox.session.create", "daytona.toolbox.session.delete"),
            ("context", "daytona.interpreter.context.create", "daytona.interpreter.context.delete"),
        ):
            sid = _sandbox_of(e.path)
            if e.route == create:
                opened[(sid, kind)] += 1
            elif e.route == delete:
                opened[(sid, kind)] -= 1
    for (sid, kind), n in sorted(opened.items()):
        report.count("leaks")
        if n > 0 and sid in live:
            report.findings.append(Finding("leaks", f"{n} {kind}(s) left open in sandbox {sid}", sid))
    return report


def _sandbox_of(path: str) -> str:
    parts = path.strip("/").split("/")
    return parts[1] if len(parts) > 1 and parts[0] == "toolbox" else ""


def merge(title: str, reports: Iterable[JudgeReport]) -> JudgeReport:
    """One report from several (findings and counts added up)."""
    out = JudgeReport(title)
    for r in reports:
        out.findings += r.findings
        out.notes += r.notes
        for rule, n in r.checked.items():
            out.count(rule, n)
    return out
