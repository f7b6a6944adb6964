"""The fault engine: seeded, keyed, replayable decisions plus admission control.

Identity model. The caller supplies ``route`` (a dotted name such as
``sandbox_fusion.run_code``) and a logical ``key`` (e.g. a hash of the request body or an
explicit header). The engine counts ``attempt`` per ``(route, key)`` (1 the first time a key
is seen, 2 for its retry, ...) and the per-route arrival ``ordinal`` (1, 2, ...).

Every random choice is ``keyed_uniform(seed, rule_index, route, key, attempt, purpose)``, so
concurrency and arrival order never change which logical request gets which fault. Only
``requests:`` schedules (over ordinals), limits (over time and in-flight counts), time windows
and ramps (over plan time) and ``overload`` rules (over the load in flight) depend on when a
request arrives, by nature; the log records the time and load each decision saw.

Load accounting. Routes covered by an ``overload`` rule get an admission ticket even without
a limit (``Decision.admission``, ``loaded``); the load a rule sees is the number of such
tickets issued on its routes and not yet released, the arriving request included.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .bodies import DAYTONA_429_BODY, JSON_CONTENT_TYPE, daytona_rate_limit_headers, default_status_response
from .clock import Clock, RealClock
from .decision import Admission, Decision, FaultAction, Headers, resolve_fault, retry_after_header
from .errors import AdmissionError
from .keyed import keyed_uniform
from .latency import MAX_DELAY_S
from .limits import BucketState, CapState, WindowState
from .log import DecisionLog
from .plan import ConcurrencyLimit, FaultPlan, FaultSpec, Rule, WindowLimit, route_matches

if TYPE_CHECKING:
    from .replay import ReplayEngine

__all__ = ["FaultEngine", "rule_matches"]


#: The fault an ``overload`` rule answers with when it names none: a plain 429 with the route's default body.
OVERLOAD_DEFAULT_FAULT = FaultSpec("status", status=429)

SpecState = CapState | BucketState | WindowState


def rule_matches(rule: Rule, route: str, key: str, attempt: int, ordinal: int, *, now: float = 0.0) -> bool:
    """Deterministic part of matching (everything except the probability roll); ``now`` is plan time."""
    if not route_matches(route, rule.route):
        return False
    if rule.window is not None and now not in rule.window:
        return False
    if rule.key is not None and not fnmatchcase(key, rule.key):
        return False
    if rule.attempts and not any(attempt in r for r in rule.attempts):
        return False
    return not (rule.requests and not any(ordinal in r for r in rule.requests))


#: Keys whose attempts are counted: a long training run sends millions of distinct programs, and retries come soon.
DEFAULT_MAX_KEYS = 200_000


class FaultEngine:
    """Decides, per arrival, the latency and fault to inject, and enforces the plan's limits.

    Thread-safe: one lock guards counters, limiter state and the log, so it can serve an ASGI
    app and a threaded server at once. Attempts are counted for the ``max_keys`` keys seen most
    recently; a key not seen since that many others arrived starts again at attempt 1.
    """

    def __init__(
        self, plan: FaultPlan | None = None, clock: Clock | None = None, max_keys: int = DEFAULT_MAX_KEYS
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys}")
        self.max_keys = max_keys
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
        self._windows: dict[str, WindowState] = {}
        self._load: Counter[str] = Counter()
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
            self._windows.clear()
            self._load.clear()
            self._build_limits(carry=False)

    def _build_limits(self, *, carry: bool) -> None:
        now = self.clock.monotonic()
        caps: dict[str, CapState] = {}
        buckets: dict[str, BucketState] = {}
        windows: dict[str, WindowState] = {}
        for lim in self._plan.limits:
            if isinstance(lim, ConcurrencyLimit):
                old_cap = self._caps.get(lim.name) if carry else None
                caps[lim.name] = CapState(
                    lim,
                    old_cap.in_flight if old_cap else 0,
                    old_cap.high_water if old_cap else 0,
                )
            elif isinstance(lim, WindowLimit):
                old_window = self._windows.get(lim.name) if carry else None
                windows[lim.name] = (
                    old_window if old_window is not None and old_window.spec == lim else WindowState(lim)
                )
            else:
                old_bucket = self._buckets.get(lim.name) if carry else None
                buckets[lim.name] = (
                    old_bucket if old_bucket is not None and old_bucket.spec == lim else BucketState.full(lim, now)
                )
        self._caps, self._buckets, self._windows = caps, buckets, windows

    # ------------------------------------------------------------------ introspection

    def in_flight(self, name: str) -> int:
        """Current admitted count for concurrency cap ``name``."""
        with self._lock:
            return self._caps[name].in_flight

    def high_water(self, name: str) -> int:
        """Highest in-flight count ever seen for cap ``name`` since the last reset."""
        with self._lock:
            return self._caps[name].high_water

    def load(self, route: str = "*") -> int:
        """Requests in flight that ``overload`` rules count, on routes matching the glob ``route``."""
        with self._lock:
            return self._load_locked(route)

    def _load_locked(self, pattern: str) -> int:
        return sum(n for r, n in self._load.items() if route_matches(r, pattern))

    def plan_time(self) -> float:
        """Seconds of the engine's clock since it started or was last reset: the time windows and ramps read."""
        return self.clock.monotonic() - self._start

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
            self._release_locked(admission)

    def _release_locked(self, admission: Admission) -> None:
        """``release`` under the lock (also for a decision that failed before it was handed out)."""
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
        if admission.loaded:
            self._load[admission.route] -= 1
            if self._load[admission.route] <= 0:
                del self._load[admission.route]

    def _admit_locked(self, route: str, key: str) -> Admission | None:
        caps = [c for c in self._caps.values() if route_matches(route, c.spec.route)]
        buckets = [b for b in self._buckets.values() if route_matches(route, b.spec.route)]
        windows = [w for w in self._windows.values() if route_matches(route, w.spec.route)]
        if not caps and not buckets and not windows:
            return None
        now = self.clock.monotonic()
        for b in buckets:
            b.refill(now)
        for w in windows:
            w.roll(now)
        ticket = next(self._tickets)
        refusal: tuple[str, float, Headers] | None = None
        for c in caps:
            if not c.has_room():
                refusal = (c.spec.name, c.spec.retry_after, self._refusal_headers(c, c.spec.retry_after, now))
                break
        if refusal is None:
            for b in buckets:
                if not b.has_token():
                    wait = b.wait_for_token()
                    refusal = (b.spec.name, wait, self._refusal_headers(b, wait, now))
                    break
        if refusal is None:
            for w in windows:
                if not w.has_room():
                    wait = w.seconds_to_reset(now)
                    refusal = (w.spec.name, wait, self._refusal_headers(w, wait, now))
                    break
        if refusal is not None:
            name, wait, headers = refusal
            adm = Admission(ticket, route, key, False, name, wait, headers, (), self._epoch)
        else:
            for c in caps:
                c.acquire()
            for b in buckets:
                b.take()
            for w in windows:
                w.take()
            info: list[tuple[str, str]] = []
            states: list[SpecState] = [*caps, *buckets, *windows]
            for state in states:
                info.extend(self._info_headers(state, None, now))
            held = tuple(c.spec.name for c in caps)
            adm = Admission(ticket, route, key, True, None, None, tuple(info), held, self._epoch)
        self._open[ticket] = adm
        return adm

    @staticmethod
    def _info_headers(state: SpecState, retry_after: float | None, now: float) -> Headers:
        spec = state.spec
        if spec.headers_style != "daytona":
            return ()
        ra = None if retry_after is None else int(retry_after_header(retry_after))
        if isinstance(state, CapState):
            reset = int(retry_after_header(state.spec.retry_after)) if state.remaining == 0 else 0
            return tuple(
                daytona_rate_limit_headers(spec.name, state.spec.max_in_flight, state.remaining, reset, ra).items()
            )
        if isinstance(state, WindowState):
            reset = int(retry_after_header(state.seconds_to_reset(now)))
            limit = state.spec.max_requests
            return tuple(daytona_rate_limit_headers(spec.name, limit, state.remaining, reset, ra).items())
        reset = int(retry_after_header(state.seconds_to_full()))
        return tuple(daytona_rate_limit_headers(spec.name, state.spec.burst, state.remaining, reset, ra).items())

    def _refusal_headers(self, state: SpecState, wait: float, now: float) -> Headers:
        style = state.spec.headers_style
        if style == "daytona":
            return self._info_headers(state, wait, now)
        if style == "retry-after":
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
        ``limited`` 429 decision with no latency and no rule evaluation. When any limit or
        ``overload`` rule covers the route, ``decision.admission`` is set and must be released
        (``release(decision)``) once the response is finished, refused or not.
        """
        with self._lock:
            ordinal = self._ordinals.get(route, 0) + 1
            self._ordinals[route] = ordinal
            attempts = self._attempts
            attempt = attempts.pop((route, key), 0) + 1  # re-inserted: the dict's order is the order of last arrival
            if len(attempts) >= self.max_keys:
                del attempts[next(iter(attempts))]
            attempts[(route, key)] = attempt
            now = self.plan_time()
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
                try:
                    if any(r.overload is not None and route_matches(route, r.route) for r in self._plan.rules):
                        adm = self._count_load(route, key, adm)
                    decision = self._evaluate(
                        route, key, attempt, ordinal, now, adm, lambda rule: self._load_locked(rule.route)
                    )
                except BaseException:
                    if adm is not None:  # nobody will release what the failed decision would have held
                        self._release_locked(adm)
                    raise
            self.log.append(decision.to_record())
            return decision

    def _count_load(self, route: str, key: str, adm: Admission | None) -> Admission:
        """Count a granted request in its route's load; routes without a limit get a ticket for it here."""
        if adm is None:
            adm = Admission(next(self._tickets), route, key, True, epoch=self._epoch, loaded=True)
        else:
            adm = replace(adm, loaded=True)
        self._open[adm.ticket] = adm
        self._load[route] += 1
        return adm

    def preview(
        self, route: str, key: str, attempt: int, ordinal: int, *, time: float = 0.0, in_flight: int = 0
    ) -> Decision:
        """What the rules would decide for this identity at plan time ``time`` with ``in_flight`` requests counted by
        every ``overload`` rule, without limits, counters or logging."""
        with self._lock:
            return self._evaluate(route, key, attempt, ordinal, time, None, lambda rule: in_flight)

    def _evaluate(
        self,
        route: str,
        key: str,
        attempt: int,
        ordinal: int,
        now: float,
        adm: Admission | None,
        load_of: Callable[[Rule], int],
    ) -> Decision:
        seed = self._plan.seed
        latency = 0.0
        fired: list[str] = []
        loads: list[tuple[str, int]] = []
        action: FaultAction | None = None
        rule_id: str | None = None
        for index, rule in enumerate(self._plan.rules):
            if not rule_matches(rule, route, key, attempt, ordinal, now=now):
                continue
            if rule.probability < 1.0 and keyed_uniform(seed, index, route, key, attempt, "fire") >= rule.probability:
                continue
            fired.append(rule.id)
            if rule.latency is not None:
                latency += rule.latency.sample(keyed_uniform(seed, index, route, key, attempt, "latency"), now)
            if rule.overload is not None:
                n = load_of(rule)
                loads.append((rule.id, n))
                latency += rule.overload.latency(n)
                p = rule.overload.probability(n)
                if p > 0.0 and keyed_uniform(seed, index, route, key, attempt, "overload") < p:
                    action = resolve_fault(rule.fault or OVERLOAD_DEFAULT_FAULT, route)
                    rule_id = rule.id
                    break
                continue
            if rule.fault is not None:
                action = resolve_fault(rule.fault, route)
                rule_id = rule.id
                break
        return Decision(
            route=route,
            key=key,
            attempt=attempt,
            ordinal=ordinal,
            latency=min(latency, MAX_DELAY_S),  # the sum of several rules, or a heavy tail's draw
            action=action,
            rule_id=rule_id,
            rules_fired=tuple(fired),
            limit_headers=adm.headers if adm is not None else (),
            time=now,
            load=tuple(loads),
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
