"""The client-compliance oracle: did the client react to faults the way a well-behaved client must?

It reads the journal only. Requests are grouped into *chains* by logical identity (route, path, key: a retry of the
same call has the same body, hence the same key), ordered by arrival; consecutive members of a chain are a try and
its retry. Four rules:

``retry-after``
    After an answer that named a wait (``Retry-After``, or Daytona's ``Retry-After-{throttler}``; the largest
    counts), the next try of the chain starts no earlier than that wait after the answer (within ``tolerance``).
``jitter``
    After a *burst* (failures of at least ``min_burst_keys`` chains ending within ``burst_window`` of each other),
    the retries must not form a synchronized wave: a wave is a group of retries whose delays (answer to next try)
    lie within ``wave_window`` of each other; it is a violation when the largest wave holds at least
    ``max(min_burst_keys, ceil(max_wave_fraction * retries))`` retries. A client with a fixed delay (or one that
    waits exactly ``Retry-After`` every time) makes one wave of all of them; full jitter spreads them.
``retry-budget``
    No chain has more than ``max_attempts`` tries; optionally, retries over first tries stays within
    ``max_retry_ratio`` for the whole run.
``blind-recreate``
    A Daytona sandbox create whose answer was lost (reset, truncation, timeout, 5xx) although the journal shows the
    sandbox was created must not be followed by another create for the same owner (``owner_label``) without a list
    or get of sandboxes in between: that leaks the first one.

Where the wait came from: the entry's ``detail["retry_after"]`` (Daytona's throttlers record it there), else the
engine's decision for the same (route, key, attempt), whose fault or limit headers carry it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from emulator.journal import JournalEntry, retry_after_detail
from harness.chaos.judges import Finding, JournalLike, JudgeReport, failed, journal_entries

CREATE_ROUTE = "daytona.sandbox.create"
LOOKUP_ROUTES = ("daytona.sandbox.list", "daytona.sandbox.get")

#: Statuses of a create whose answer is ambiguous: the sandbox may or may not exist.
AMBIGUOUS_STATUSES = frozenset({408, 500, 502, 504})

RULES = ("retry-after", "jitter", "retry-budget", "blind-recreate")


@dataclass(frozen=True)
class ComplianceRules:
    """What the client promised. ``routes``: only chains on these routes or prefixes (None: all)."""

    max_attempts: int | None = 4
    max_retry_ratio: float | None = None
    tolerance: float = 0.01
    burst_window: float = 0.05
    wave_window: float = 0.01
    min_burst_keys: int = 4
    max_wave_fraction: float = 0.5
    owner_label: str = "instance_id"
    routes: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()  # rule names not to check

    def __post_init__(self) -> None:
        unknown = sorted(set(self.skip) - set(RULES))
        if unknown:
            raise ValueError(f"unknown compliance rule(s) {unknown}; known: {list(RULES)}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 < self.max_wave_fraction <= 1:
            raise ValueError("max_wave_fraction must be in (0, 1]")
        if self.min_burst_keys < 2:
            raise ValueError("min_burst_keys must be at least 2")


@dataclass
class ComplianceReport(JudgeReport):
    """Findings per rule; ``waits`` lists (identity, attempt, required, waited) for every wait that was asked for."""

    waits: list[tuple[str, int, float, float]] = field(default_factory=list)
    largest_wave: int = 0

    def assert_compliant(self) -> None:
        self.assert_ok()


def identity(entry: JournalEntry) -> str:
    """A chain's name: route, path and the logical key (a retry of one call shares all three)."""
    return f"{entry.route} {entry.path} key={entry.key}"


def chains(entries: Iterable[JournalEntry]) -> dict[str, list[JournalEntry]]:
    """Calls and their retries: entries grouped by :func:`identity`, in arrival order, then cut where a new call
    begins. One identity can carry many calls: a WebSocket's key is its path (an upgrade has no body), so every
    interpreter run in one sandbox shares it, and so do HTTP calls with identical bodies. A try after one that did
    not fail is a new call (a client does not retry a success), and so is a try that ran another program than the
    one before (the interpreter's ``code_digest``). The first call keeps the identity as its name; the n-th is
    ``"<identity> call n"``.

    What the journal cannot tell: a handshake refused by a fault carries no program, so a failed try followed by a
    different program on the same sandbox still reads as a retry."""
    grouped: dict[str, list[JournalEntry]] = defaultdict(list)
    for e in sorted(entries, key=lambda e: e.seq):
        grouped[identity(e)].append(e)
    out: dict[str, list[JournalEntry]] = {}
    for name, tries in grouped.items():
        calls = [[tries[0]]]
        for before, after in pairwise(tries):
            if not failed(before) or _other_program(before, after):
                calls.append([after])
            else:
                calls[-1].append(after)
        for n, call in enumerate(calls, start=1):
            out[name if n == 1 else f"{name} call {n}"] = call
    return out


def _other_program(before: JournalEntry, after: JournalEntry) -> bool:
    """Both tries name the program they ran, and the programs differ."""
    first, second = before.detail.get("code_digest"), after.detail.get("code_digest")
    return bool(first) and bool(second) and first != second


def required_wait(
    entry: JournalEntry, decisions: Mapping[tuple[str, str, int], Mapping[str, Any]]
) -> tuple[float, list[str]] | None:
    """The wait the answer to ``entry`` asked for (largest of its Retry-After headers) and the header names."""
    waits: dict[str, float] = {}
    recorded = entry.detail.get("retry_after")
    if isinstance(recorded, Mapping):
        waits.update({str(k): float(v) for k, v in recorded.items()})
    record = decisions.get((entry.route, entry.key, entry.attempt))
    if record is not None and entry.status is not None:  # a dropped connection delivered no headers
        action = record.get("action") or {}
        headers = [(str(h[0]), str(h[1])) for h in (action.get("headers") or [])]
        headers += [(str(h[0]), str(h[1])) for h in (record.get("limit_headers") or [])]
        waits.update(retry_after_detail(headers))
    if not waits:
        return None
    return max(waits.values()), sorted(waits)


def _index(decisions: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, int], Mapping[str, Any]]:
    return {(str(r.get("route")), str(r.get("key")), int(r.get("attempt") or 0)): r for r in decisions}


def check_compliance(
    journal: JournalLike,
    rules: ComplianceRules | None = None,
    *,
    decisions: Iterable[Mapping[str, Any]] = (),
) -> ComplianceReport:
    """Judge the client behind ``journal``. ``decisions``: the fault engine's log records (``engine.log.records``
    or ``GET /_emulator/decisions``), which carry the ``Retry-After`` of injected faults and limits."""
    rules = rules or ComplianceRules()
    entries = journal_entries(journal)
    if rules.routes is not None:
        wanted = rules.routes
        entries = [e for e in entries if any(e.route == r or e.route.startswith(r + ".") for r in wanted)]
    report = ComplianceReport("client compliance")
    by_chain = chains(entries)
    index = _index(decisions)
    if "retry-after" not in rules.skip:
        _check_retry_after(report, by_chain, index, rules)
    if "jitter" not in rules.skip:
        _check_jitter(report, by_chain, rules)
    if "retry-budget" not in rules.skip:
        _check_budget(report, by_chain, rules)
    if "blind-recreate" not in rules.skip:
        _check_blind_recreate(report, entries, rules)
    return report


def _check_retry_after(
    report: ComplianceReport,
    by_chain: Mapping[str, Sequence[JournalEntry]],
    index: Mapping[tuple[str, str, int], Mapping[str, Any]],
    rules: ComplianceRules,
) -> None:
    for name, chain in by_chain.items():
        for told, nxt in pairwise(chain):
            asked = required_wait(told, index)
            if asked is None or told.finished is None:
                continue
            wait, headers = asked
            waited = nxt.started - told.finished
            report.count("retry-after")
            report.waits.append((name, nxt.attempt, wait, waited))
            if waited + rules.tolerance < wait:
                report.findings.append(
                    Finding(
                        "retry-after",
                        f"retried {waited:.3f}s after a {told.status} that asked for {wait:g}s ({', '.join(headers)})",
                        name,
                        nxt.attempt,
                        {"required": wait, "waited": waited, "headers": headers, "status": told.status},
                    )
                )


def _check_jitter(
    report: ComplianceReport, by_chain: Mapping[str, Sequence[JournalEntry]], rules: ComplianceRules
) -> None:
    # (failure's end, delay to the retry, chain, retry's attempt) for every failure that was retried
    retried: list[tuple[float, float, str, int]] = []
    for name, chain in by_chain.items():
        for fail, nxt in pairwise(chain):
            if failed(fail) and fail.finished is not None:
                retried.append((fail.finished, nxt.started - fail.finished, name, nxt.attempt))
    retried.sort()
    i = 0
    while i < len(retried):
        j = i
        while j + 1 < len(retried) and retried[j + 1][0] - retried[i][0] <= rules.burst_window:
            j += 1
        burst = retried[i : j + 1]
        i = j + 1
        if len({b[2] for b in burst}) < rules.min_burst_keys:
            continue
        report.count("jitter")
        delays = sorted(b[1] for b in burst)
        wave, lo = 0, 0
        for hi, d in enumerate(delays):
            while d - delays[lo] > rules.wave_window:
                lo += 1
            wave = max(wave, hi - lo + 1)
        report.largest_wave = max(report.largest_wave, wave)
        threshold = max(rules.min_burst_keys, math.ceil(rules.max_wave_fraction * len(burst)))
        if wave >= threshold:
            report.findings.append(
                Finding(
                    "jitter",
                    f"{wave} of {len(burst)} retries after a burst of failures at t={burst[0][0]:.3f}s waited the "
                    f"same delay (within {rules.wave_window}s): a synchronized retry wave; delays "
                    f"{[round(d, 3) for d in delays[:12]]}",
                    figures={"wave": wave, "retries": len(burst), "delays": delays},
                )
            )


def _check_budget(
    report: ComplianceReport, by_chain: Mapping[str, Sequence[JournalEntry]], rules: ComplianceRules
) -> None:
    firsts = retries = 0
    for name, chain in by_chain.items():
        report.count("retry-budget")
        firsts += 1
        retries += len(chain) - 1
        if rules.max_attempts is not None and len(chain) > rules.max_attempts:
            report.findings.append(
                Finding(
                    "retry-budget",
                    f"{len(chain)} tries, budget {rules.max_attempts}; statuses {[e.status for e in chain][:12]}",
                    name,
                    chain[rules.max_attempts].attempt,
                    {"tries": len(chain), "budget": rules.max_attempts},
                )
            )
    if rules.max_retry_ratio is not None and firsts and retries / firsts > rules.max_retry_ratio:
        report.findings.append(
            Finding(
                "retry-budget",
                f"{retries} retries for {firsts} calls: ratio {retries / firsts:.2f} over the budget "
                f"{rules.max_retry_ratio}",
                figures={"retries": retries, "calls": firsts},
            )
        )


def _ambiguous(entry: JournalEntry) -> bool:
    """A create that made a sandbox but whose answer the client could not read."""
    if not entry.detail.get("sandbox_id"):
        return False
    return entry.status is None or entry.status in AMBIGUOUS_STATUSES or entry.fault in ("hang", "truncate", "reset")


def _check_blind_recreate(report: ComplianceReport, entries: Sequence[JournalEntry], rules: ComplianceRules) -> None:
    creates = [e for e in entries if e.route == CREATE_ROUTE]
    lookups = sorted(e.started for e in entries if e.route in LOOKUP_ROUTES)
    for lost in (e for e in creates if _ambiguous(e)):
        report.count("blind-recreate")
        owner = (lost.detail.get("labels") or {}).get(rules.owner_label)
        if owner is None:
            report.notes.append(f"create seq {lost.seq}: no {rules.owner_label!r} label, owner unknown")
            continue
        end = lost.finished if lost.finished is not None else lost.started
        later = [
            e
            for e in creates
            if e.started >= end and e.seq > lost.seq and (e.detail.get("labels") or {}).get(rules.owner_label) == owner
        ]
        if not later:
            continue
        again = later[0]
        if any(end <= t <= again.started for t in lookups):
            continue
        report.findings.append(
            Finding(
                "blind-recreate",
                f"create for {rules.owner_label}={owner} lost its answer ({lost.fault or lost.outcome}, status "
                f"{lost.status}) after sandbox {lost.detail.get('sandbox_id')} was made; created again "
                f"{again.started - end:.3f}s later without listing or getting sandboxes",
                f"{rules.owner_label}={owner}",
                again.attempt,
                {"lost_sandbox": lost.detail.get("sandbox_id"), "recreated": again.detail.get("sandbox_id")},
            )
        )
