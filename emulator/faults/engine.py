"""The fault engine: seeded, keyed, replayable decisions plus admission control.

Identity model. The caller supplies ``route`` (a dotted name such as
``sandbox_fusion.run_code``) and a logical ``key`` (e.g. a hash of the request body or an
explicit header). The engine counts ``attempt`` per ``(route, key)`` (1 the first time a key
is seen, 2 for its retry, ...) and the per-route arrival ``ordinal`` (1, 2, ...).

Every random choice is ``keyed_uniform(seed, rule_index, route, key, attempt, purpose)``, so
concurrency and arrival order never change which logical request gets which fault. Only
``requests:`` schedules (over ordinals) and limits (over time and in-flight counts) are
order-dependent, by nature.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .bodies import DAYTONA_429_BODY, JSON_CONTENT_TYPE, daytona_rate_limit_headers, default_status_response
from .clock import Clock, RealClock
from .decision import Admission, Decision, FaultAction, Headers, resolve_fault, retry_after_header
from .errors import AdmissionError
from .keyed import keyed_uniform
from .limits import BucketState, CapState
from .log import DecisionLog
from .plan import ConcurrencyLimit, FaultPlan, Rule, TokenBucketLimit

if TYPE_CHECKING:
    from .replay import ReplayEngine

__all__ = ["FaultEngine", "rule_matches"]


def rule_matches(rule: Rule, route: str, key: str, attempt: int, ordinal: int) -> bool:
    """Deterministic part of matching (everything except the probability roll)."""
    if not fnmatchcase(route, rule.route):
        return False
    if rule.key is not None and not fnmatchcase(key, rule.key):
        return False
    if rule.attempts and not any(attempt in r for r in rule.attempts):
        return False
    return not (rule.requests and not any(ordinal in r for r in rule.requests))


class FaultEngine:
    """Decides, per arrival, the latency and fault to inject, and enforces the plan's limits.

    Thread-safe: one lock guards counters, limiter state and the log, so it can serve an ASGI
    app and a threaded server at once.
    """

    def __init__(self, plan: FaultPlan | None = None, clock: Clock | None = None) -> None:
        self._plan = plan if plan is not None else FaultPlan()
        self.clock: Clock = clock if clock is not None else RealClock()
        self.log = DecisionLog()
        self._lock = threading.RLock()
        self._tickets = itertools.count(1)
        self._epoch = 0
        self._ordinals: dict[str, int] = {}
        self._attempts: dict[tuple[str, str], int] = {}
        self._open: dict[int, Admission] = {}
        self._start = self.clock.monotonic()
        self._caps: dict[str, CapState] = {}
        self._buckets: dict[str, BucketState] = {}
        self._build_limits(carry=False)

    # ------------------------------------------------------------------ plan management

    @property
    def plan(self) -> FaultPlan:
        """The plan in force."""
        return self._plan

    def set_plan(self, plan: FaultPlan) -> None:
        """Swap plans. Counters and the log are kept (use ``reset`` to clear them); in-flight
        counts carry over to caps of the same name, buckets carry over when unchanged."""
        with self._lock:
            self._plan = plan
            self._build_limits(carry=True)

    def reset(self) -> None:
        """Clear ordinals, attempts, the log and limiter state. Tickets issued before are void:
        releasing them later is a silent no-op."""
        with self._lock:
            self._epoch += 1
            self._ordinals.clear()
            self._attempts.clear()
            self._open.clear()
            self.log.clear()
            self._start = self.clock.monotonic()
            self._caps.clear()
            self._buckets.clear()
            self._build_limits(carry=False)

    def _build_limits(self, *, carry: bool) -> None:
        now = self.clock.monotonic()
        caps: dict[str, CapState] = {}
        buckets: dict[str, BucketState] = {}
        for lim in self._plan.limits:
            if isinstance(lim, ConcurrencyLimit):
                old_cap = self._caps.get(lim.name) if carry else None
                caps[lim.name] = CapState(
                    lim,
                    old_cap.in_flight if old_cap else 0,
                    old_cap.high_water if old_cap else 0,
                )
            else:
                old_bucket = self._buckets.get(lim.name) if carry else None
                buckets[lim.name] = (
                    old_bucket if old_bucket is not None and old_bucket.spec == lim else BucketState.full(lim, now)
                )
        self._caps, self._buckets = caps, buckets

    # ------------------------------------------------------------------ introspection

    def in_flight(self, name: str) -> int:
        """Current admitted count for concurrency cap ``name``."""
        with self._lock:
            return self._caps[name].in_flight

    def high_water(self, name: str) -> int:
        """Highest in-flight count ever seen for cap ``name`` since the last reset."""
        with self._lock:
            return self._caps[name].high_water

    @property
    def outstanding(self) -> int:
        """Admissions issued and not yet released (a leak if non-zero at quiescence)."""
        with self._lock:
            return len(self._open)

    def attempts(self, route: str, key: str) -> int:
        """How many times ``(route, key)`` has arrived so far."""
        with self._lock:
            return self._attempts.get((route, key), 0)

    # ------------------------------------------------------------------ admission

    def admit(self, route: str, key: str = "") -> Admission | None:
        """Run admission control alone (no rules, no counters, no log).

        Returns None when no limit covers ``route``; otherwise an ``Admission`` (granted or
        refused) that must be passed to ``release`` exactly once.
        """
        with self._lock:
            return self._admit_locked(route, key)

    def release(self, admission: Admission | Decision | None) -> None:
        """Give back what ``admission`` holds. None (or a decision without admission) is a no-op;
        releasing twice raises ``AdmissionError``; tickets voided by ``reset`` are ignored."""
        if isinstance(admission, Decision):
            admission = admission.admission
        if admission is None:
            return
        with self._lock:
            if admission.epoch != self._epoch:
                return
            if self._open.pop(admission.ticket, None) is None:
                raise AdmissionError(
                    f"admission ticket {admission.ticket} for {admission.route!r} was already released "
                    "or was not issued by this engine"
                )
            for name in admission.held:
                cap = self._caps.get(name)
                if cap is not None:
                    cap.release()

    def _admit_locked(self, route: str, key: str) -> Admission | None:
        caps = [c for c in self._caps.values() if fnmatchcase(route, c.spec.route)]
        buckets = [b for b in self._buckets.values() if fnmatchcase(route, b.spec.route)]
        if not caps and not buckets:
            return None
        now = self.clock.monotonic()
        for b in buckets:
            b.refill(now)
        ticket = next(self._tickets)
        refusal: tuple[str, float, Headers] | None = None
        for c in caps:
            if not c.has_room():
                refusal = (c.spec.name, c.spec.retry_after, self._refusal_headers(c.spec, c.spec.retry_after, c))
                break
        if refusal is None:
            for b in buckets:
                if not b.has_token():
                    wait = b.wait_for_token()
                    refusal = (b.spec.name, wait, self._refusal_headers(b.spec, wait, b))
                    break
        if refusal is not None:
            name, wait, headers = refusal
            adm = Admission(ticket, route, key, False, name, wait, headers, (), self._epoch)
        else:
            for c in caps:
                c.acquire()
            for b in buckets:
                b.take()
            info: list[tuple[str, str]] = []
            for c in caps:
                info.extend(self._info_headers(c.spec, c, None))
            for b in buckets:
                info.extend(self._info_headers(b.spec, b, None))
            held = tuple(c.spec.name for c in caps)
            adm = Admission(ticket, route, key, True, None, None, tuple(info), held, self._epoch)
        self._open[ticket] = adm
        return adm

    @staticmethod
    def _info_headers(
        spec: ConcurrencyLimit | TokenBucketLimit, state: CapState | BucketState, retry_after: float | None
    ) -> Headers:
        if spec.headers_style != "daytona":
            return ()
        ra = None if retry_after is None else int(retry_after_header(retry_after))
        if isinstance(state, CapState):
            assert isinstance(spec, ConcurrencyLimit)
            reset = int(retry_after_header(spec.retry_after)) if state.remaining == 0 else 0
            return tuple(daytona_rate_limit_headers(spec.name, spec.max_in_flight, state.remaining, reset, ra).items())
        assert isinstance(spec, TokenBucketLimit)
        reset = int(retry_after_header(state.seconds_to_full()))
        return tuple(daytona_rate_limit_headers(spec.name, spec.burst, state.remaining, reset, ra).items())

    def _refusal_headers(
        self, spec: ConcurrencyLimit | TokenBucketLimit, wait: float, state: CapState | BucketState
    ) -> Headers:
        if spec.headers_style == "daytona":
            return self._info_headers(spec, state, wait)
        if spec.headers_style == "retry-after":
            return (("Retry-After", retry_after_header(wait)),)
        return ()

    def _limited_action(self, route: str, adm: Admission) -> FaultAction:
        style = next(
            (lim.headers_style for lim in self._plan.limits if lim.name == adm.limit),
            "retry-after",
        )
        if style == "daytona":
            body, headers = DAYTONA_429_BODY, {"Content-Type": JSON_CONTENT_TYPE}
        else:
            body, headers = default_status_response(429, route)
        return FaultAction(
            "limited",
            status=429,
            headers=(*headers.items(), *adm.headers),
            body=body,
            retry_after=adm.retry_after,
            limit=adm.limit,
        )

    # ------------------------------------------------------------------ decisions

    def decide(self, route: str, key: str = "") -> Decision:
        """Decide latency and fault for one arrival of ``(route, key)`` and log it.

        Limits are checked first, like a gateway in front of the server: a refusal is a
        ``limited`` 429 decision with no latency and no rule evaluation. When any limit covers the
        route, ``decision.admission`` is set and must be released (``release(decision)``) once the
        response is finished, refused or not.
        """
        with self._lock:
            ordinal = self._ordinals.get(route, 0) + 1
            self._ordinals[route] = ordinal
            attempt = self._attempts.get((route, key), 0) + 1
            self._attempts[(route, key)] = attempt
            now = self.clock.monotonic() - self._start
            adm = self._admit_locked(route, key)
            if adm is not None and not adm.granted:
                decision = Decision(
                    route=route,
                    key=key,
                    attempt=attempt,
                    ordinal=ordinal,
                    action=self._limited_action(route, adm),
                    refused=True,
                    limit=adm.limit,
                    time=now,
                    admission=adm,
                )
            else:
                decision = self._evaluate(route, key, attempt, ordinal, now, adm)
            self.log.append(decision.to_record())
            return decision

    def preview(self, route: str, key: str, attempt: int, ordinal: int) -> Decision:
        """What the rules would decide for this identity, without limits, counters or logging."""
        with self._lock:
            return self._evaluate(route, key, attempt, ordinal, 0.0, None)

    def _evaluate(
        self, route: str, key: str, attempt: int, ordinal: int, now: float, adm: Admission | None
    ) -> Decision:
        seed = self._plan.seed
        latency = 0.0
        fired: list[str] = []
        action: FaultAction | None = None
        rule_id: str | None = None
        for index, rule in enumerate(self._plan.rules):
            if not rule_matches(rule, route, key, attempt, ordinal):
                continue
            if rule.probability < 1.0 and keyed_uniform(seed, index, route, key, attempt, "fire") >= rule.probability:
                continue
            fired.append(rule.id)
            if rule.latency is not None:
                latency += rule.latency.sample(keyed_uniform(seed, index, route, key, attempt, "latency"))
            if rule.fault is not None:
                action = resolve_fault(rule.fault, route)
                rule_id = rule.id
                break
        return Decision(
            route=route,
            key=key,
            attempt=attempt,
            ordinal=ordinal,
            latency=latency,
            action=action,
            rule_id=rule_id,
            rules_fired=tuple(fired),
            limit_headers=adm.headers if adm is not None else (),
            time=now,
            admission=adm,
        )

    # ------------------------------------------------------------------ replay

    @staticmethod
    def replaying(
        log: DecisionLog | Iterable[Mapping[str, Any]] | str | Path,
        *,
        strict: bool = False,
        clock: Clock | None = None,
    ) -> ReplayEngine:
        """A ``ReplayEngine`` that hands back the logged decisions (see ``replay.py``)."""
        from .replay import ReplayEngine

        return ReplayEngine(log, strict=strict, clock=clock)
