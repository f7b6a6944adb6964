"""Replay a recorded decision log: the same (route, key, attempt) gets exactly the logged decision.

A failing chaos run dumps its log (``engine.log.dump_jsonl``); feeding that file to
``ReplayEngine`` reproduces every fault, including limiter refusals and schedule hits that
depended on timing or arrival order in the original run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .clock import Clock, RealClock
from .decision import Admission, Decision
from .errors import FaultPlanError, ReplayMissError
from .log import DecisionLog, load_jsonl

__all__ = ["ReplayEngine"]


class ReplayEngine:
    """Drop-in for ``FaultEngine.decide``/``admit``/``release`` that answers from a log.

    Arrivals are counted per (route, key), and the nth gets the nth logged decision for it (its attempt, or attempt 1
    again where the engine had forgotten the key: see ``FaultEngine.max_keys``). An identity missing from
    the log raises ``ReplayMissError`` when ``strict``, otherwise it passes through untouched and
    is listed in ``misses``. Limits are not re-enforced: refusals come from the log.
    """

    def __init__(
        self,
        log: DecisionLog | Iterable[Mapping[str, Any]] | str | Path,
        *,
        strict: bool = False,
        clock: Clock | None = None,
    ) -> None:
        if isinstance(log, (str, Path)):
            records: list[dict[str, Any]] = load_jsonl(log)
        elif isinstance(log, DecisionLog):
            records = log.records
        else:
            records = [dict(r) for r in log]
        # Keyed by (route, key, arrival): the nth arrival of a (route, key) gets the nth logged decision for it. That
        # is its attempt, unless the engine evicted the key from its attempt counts (max_keys) and began again at 1;
        # a log that lost its oldest records starts a key's arrivals at its first logged attempt.
        self._decisions: dict[tuple[str, str, int], Decision] = {}
        last: dict[tuple[str, str], int] = {}
        for n, r in enumerate(records, start=1):
            try:
                d = Decision.from_record(r)
            except FaultPlanError as exc:  # which record: a log is read as a whole
                raise FaultPlanError(f"record {n}: {exc.path}", exc.message) from None
            before = last.get((d.route, d.key))
            arrival = d.attempt if before is None else before + 1
            last[(d.route, d.key)] = arrival
            self._decisions[(d.route, d.key, arrival)] = d
        self.strict = strict
        self.clock: Clock = clock if clock is not None else RealClock()
        self.log = DecisionLog()
        self.misses: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, str], int] = {}
        self._ordinals: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._decisions)

    def decide(self, route: str, key: str = "") -> Decision:
        """Return the logged decision for the next attempt of ``(route, key)``."""
        with self._lock:
            attempt = self._attempts.get((route, key), 0) + 1
            self._attempts[(route, key)] = attempt
            ordinal = self._ordinals.get(route, 0) + 1
            self._ordinals[route] = ordinal
            found = self._decisions.get((route, key, attempt))
            if found is None:
                if self.strict:
                    raise ReplayMissError(f"no logged decision for route={route!r} key={key!r} attempt={attempt}")
                self.misses.append((route, key, attempt))
                found = Decision(route=route, key=key, attempt=attempt, ordinal=ordinal)
            self.log.append(found.to_record())
            return found

    def attempts(self, route: str, key: str) -> int:
        """How many times ``(route, key)`` has arrived so far in this replay."""
        with self._lock:
            return self._attempts.get((route, key), 0)

    def admit(self, route: str, key: str = "") -> Admission | None:
        """Replays do not enforce limits (refusals come from the log)."""
        return None

    def release(self, admission: Admission | Decision | None) -> None:
        """No-op: replayed decisions hold no admission."""

    @property
    def outstanding(self) -> int:
        """Always 0: nothing is held during a replay."""
        return 0

    def reset(self) -> None:
        """Restart attempt counting and clear the replay's own log and misses."""
        with self._lock:
            self._attempts.clear()
            self._ordinals.clear()
            self.misses.clear()
            self.log.clear()
