"""The limiter's state machine, shared by the ``local`` backend and the Ray actor (the Redis backend runs the same
rules in Lua). Pure and synchronous: time comes in as ``now``; :class:`CoreDriver` adds asyncio waiting.

Rules: requests queue FIFO by arrival; the head is granted while ``held < cap`` and (with a rate) a token is in the
bucket; a grant is a lease of ``lease_s`` that the holder's heartbeats extend; expired leases are reclaimed, and
queued requests of a holder silent for ``lease_s`` (a dead waiter) are dropped as ``abandoned``. Every
request id ends in exactly one tombstone (released, withdrawn or reclaimed), so a second release, a release of a
never-granted id, or a late enqueue of a withdrawn id can be told apart and never adds capacity.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.ratelimit.base import LimiterConfig, LimiterError, LimiterStats

#: How many finished request ids are remembered to tell a double release from a late one.
TOMBSTONES = 100_000
#: How many grant/release events the journal keeps (oldest dropped first).
JOURNAL = 20_000


@dataclass
class _Lease:
    holder: str
    expires: float
    granted_at: float


class LimiterCore:
    """One named limiter's state; see the module docstring for the rules."""

    def __init__(self, config: LimiterConfig, *, leases: bool = True, backend: str = "local") -> None:
        self.config = config
        self.backend = backend
        self.leases = leases
        self.cap = config.limit
        self._queue: OrderedDict[str, str] = OrderedDict()  # request id -> holder, arrival order
        self._held: dict[str, _Lease] = {}
        self._tombs: OrderedDict[str, str] = OrderedDict()  # request id -> released | withdrawn | reclaimed | ...
        self._seen: dict[str, float] = {}  # holder -> last enqueue or heartbeat
        self.abandoned_ids: list[str] = []  # dropped by the last pump (the driver fails their waits)
        self._tokens = config.bucket_size
        self._token_time: float | None = None
        self._ok_streak = 0
        self._last_decrease = -math.inf
        self.journal: deque[tuple[float, str, str, int]] = deque(maxlen=JOURNAL)
        self.max_held = 0
        self.acquires = 0
        self.releases = 0
        self.withdrawn = 0
        self.reclaimed = 0
        self.late_releases = 0
        self.throttled = 0
        self.abandoned = 0

    # -- queries -----------------------------------------------------------------------------------------------
    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def status(self, rid: str) -> str:
        if rid in self._held:
            return "held"
        if rid in self._queue:
            return "waiting"
        return self._tombs.get(rid, "unknown")

    def held_ids(self) -> list[str]:
        return list(self._held)

    def queued_ids(self) -> list[str]:
        return list(self._queue)

    def stats(self) -> LimiterStats:
        return LimiterStats(
            name=self.config.name,
            backend=self.backend,
            limit=self.config.limit,
            cap=self.cap,
            held=self.held,
            waiting=self.waiting,
            max_held=self.max_held,
            acquires=self.acquires,
            releases=self.releases,
            withdrawn=self.withdrawn,
            reclaimed=self.reclaimed,
            late_releases=self.late_releases,
            throttled=self.throttled,
            extra={"abandoned": self.abandoned},
        )

    def next_wake(self, now: float) -> float | None:
        """The next time :meth:`pump` can change something without a call: a lease expiry or a token."""
        wakes: list[float] = []
        if self.leases and self._held:
            wakes.append(min(lease.expires for lease in self._held.values()))
        if self.leases and self._queue:
            wakes.append(min(self._seen.get(h, now) for h in set(self._queue.values())) + self.config.lease_s)
        rate = self.config.rate_per_second
        if rate is not None and self._queue and self.held < self.cap and self._tokens < 1.0:
            last = self._token_time if self._token_time is not None else now
            wakes.append(last + (1.0 - self._tokens) / rate)
        return min(wakes) if wakes else None

    # -- transitions -------------------------------------------------------------------------------------------
    def enqueue(self, rid: str, holder: str, now: float) -> str:
        """Queue a request; ``withdrawn`` if it was withdrawn before it arrived (then it never queues)."""
        tomb = self._tombs.get(rid)
        if tomb is not None:
            return tomb
        if rid in self._queue or rid in self._held:
            raise LimiterError(f"request id {rid!r} is already queued or held")
        self._queue[rid] = holder
        self._seen[holder] = now
        return "waiting"

    def pump(self, now: float) -> list[str]:
        """Reclaim expired leases, refill tokens, grant from the head of the queue; returns the granted ids."""
        self.reclaim(now)
        self._abandon(now)
        self._refill(now)
        granted: list[str] = []
        while self._queue and len(self._held) < self.cap and self._tokens >= 1.0:
            rid, holder = self._queue.popitem(last=False)
            if self.config.rate_per_second is not None:
                self._tokens -= 1.0
            # The lease runs from the holder's last sign of life, not from the grant: a request granted after its
            # holder went silent must not win a fresh lease.
            self._held[rid] = _Lease(holder, min(now, self._seen.get(holder, now)) + self.config.lease_s, now)
            self.acquires += 1
            self.max_held = max(self.max_held, len(self._held))
            self.journal.append((now, "grant", rid, len(self._held)))
            granted.append(rid)
        return granted

    def release(self, rid: str, now: float) -> str:
        """``released``, or ``expired`` for a lease already reclaimed; :class:`LimiterError` otherwise."""
        if rid in self._held:
            self._drop(rid, "released", now)
            self.releases += 1
            return "released"
        tomb = self._tombs.get(rid)
        if tomb == "reclaimed":
            self._tombs[rid] = "late"
            self.late_releases += 1
            return "expired"
        if tomb is None:
            raise LimiterError(f"release of request {rid!r}, which this limiter never granted")
        raise LimiterError(f"request {rid!r} released twice (it was {tomb})")

    def withdraw(self, rid: str, now: float) -> str:
        """Undo an acquire whose caller gave up: ``dequeued`` (was waiting), ``returned`` (was held), or
        ``none`` (already finished, or not arrived yet: then it is refused when it arrives)."""
        if rid in self._queue:
            del self._queue[rid]
            self._tomb(rid, "withdrawn")
            return "dequeued"
        if rid in self._held:
            self._drop(rid, "withdrawn", now)
            self.withdrawn += 1
            return "returned"
        if rid not in self._tombs:
            self._tomb(rid, "withdrawn")
        return "none"

    def heartbeat(self, holder: str, now: float) -> int:
        """Extend every lease of ``holder`` (leases already past their deadline stay lost); returns how many."""
        self.reclaim(now)
        self._seen[holder] = now
        count = 0
        for lease in self._held.values():
            if lease.holder == holder:
                lease.expires = now + self.config.lease_s
                count += 1
        return count

    def reclaim(self, now: float) -> list[str]:
        if not self.leases:
            return []
        expired = [rid for rid, lease in self._held.items() if lease.expires <= now]
        for rid in expired:
            self._drop(rid, "reclaimed", now)
            self.reclaimed += 1
        return expired

    def report(self, outcome: str, now: float) -> None:
        adaptive = self.config.adaptive
        if outcome == "throttled":
            self.throttled += 1
        if adaptive is None:
            return
        if outcome == "throttled":
            self._ok_streak = 0
            if now - self._last_decrease >= adaptive.cooldown_s:
                self._last_decrease = now
                self.cap = max(adaptive.min_limit, int(self.cap * adaptive.decrease_factor))
                self.journal.append((now, "shrink", "", self.cap))
        elif outcome == "ok":
            self._ok_streak += 1
            every = adaptive.increase_every or self.cap
            if self._ok_streak >= every and self.cap < self.config.limit:
                self._ok_streak = 0
                self.cap = min(self.config.limit, self.cap + adaptive.increase_step)
                self.journal.append((now, "grow", "", self.cap))

    # -- internals ---------------------------------------------------------------------------------------------
    def _abandon(self, now: float) -> None:
        self.abandoned_ids = []
        if not self.leases or not self._queue:
            return
        limit = now - self.config.lease_s
        for rid, holder in list(self._queue.items()):
            if self._seen.get(holder, now) <= limit:
                del self._queue[rid]
                self._tomb(rid, "abandoned")
                self.abandoned += 1
                self.abandoned_ids.append(rid)
        if len(self._seen) > 4 * (len(self._queue) + len(self._held)) + 1024:
            live = set(self._queue.values()) | {lease.holder for lease in self._held.values()}
            self._seen = {h: t for h, t in self._seen.items() if h in live}

    def _drop(self, rid: str, why: str, now: float) -> None:
        del self._held[rid]
        self._tomb(rid, why)
        self.journal.append((now, why, rid, len(self._held)))

    def _tomb(self, rid: str, why: str) -> None:
        self._tombs[rid] = why
        while len(self._tombs) > TOMBSTONES:
            self._tombs.popitem(last=False)

    def _refill(self, now: float) -> None:
        rate = self.config.rate_per_second
        if rate is None:
            return
        if self._token_time is not None:
            self._tokens = min(self.config.bucket_size, self._tokens + (now - self._token_time) * rate)
        self._token_time = now


class CoreDriver:
    """Asyncio around a :class:`LimiterCore`: waiting callers, lease expiry and token refill on a timer."""

    def __init__(self, core: LimiterCore, clock: Callable[[], float] = time.monotonic) -> None:
        self.core = core
        self.clock = clock
        self._futures: dict[str, asyncio.Future[str]] = {}
        self._poke: asyncio.Event | None = None
        self._ticker: asyncio.Task[None] | None = None

    async def acquire(self, rid: str, holder: str) -> str:
        """Wait until ``rid`` is granted (``granted``), withdrawn meanwhile (``withdrawn``), or dropped because its
        holder stopped heartbeating (``abandoned``)."""
        state = self.core.enqueue(rid, holder, self.clock())
        if state != "waiting":
            return state
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._futures[rid] = future
        self._pump()
        try:
            return await future
        except asyncio.CancelledError:
            self._futures.pop(rid, None)
            self.core.withdraw(rid, self.clock())
            self._pump()
            raise

    def release(self, rid: str) -> str:
        result = self.core.release(rid, self.clock())
        self._pump()
        return result

    def withdraw(self, rid: str) -> str:
        result = self.core.withdraw(rid, self.clock())
        future = self._futures.pop(rid, None)
        if future is not None and not future.done():
            future.set_result("withdrawn")
        self._pump()
        return result

    def heartbeat(self, holder: str) -> int:
        count = self.core.heartbeat(holder, self.clock())
        self._pump()
        return count

    def report(self, outcome: str) -> None:
        self.core.report(outcome, self.clock())
        self._pump()

    def journal(self) -> list[tuple[float, str, str, int]]:
        return list(self.core.journal)

    def _fail_abandoned(self) -> None:
        for rid in self.core.abandoned_ids:
            future = self._futures.pop(rid, None)
            if future is not None and not future.done():
                future.set_result("abandoned")

    def _pump(self) -> None:
        granted = self.core.pump(self.clock())
        self._fail_abandoned()
        for rid in granted:
            future = self._futures.pop(rid, None)
            if future is not None and not future.done():
                future.set_result("granted")
            elif future is None or future.cancelled():  # pragma: no cover - the waiter vanished without withdrawing
                self.core.withdraw(rid, self.clock())
        self._schedule()

    def _schedule(self) -> None:
        if self._poke is None:
            self._poke = asyncio.Event()
        self._poke.set()
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        assert self._poke is not None
        while self.core.held or self.core.waiting:
            self._poke.clear()
            wake = self.core.next_wake(self.clock())
            timeout = 1.0 if wake is None else min(1.0, max(0.0, wake - self.clock()))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout)
            granted = self.core.pump(self.clock())
            self._fail_abandoned()
            for rid in granted:
                future = self._futures.pop(rid, None)
                if future is not None and not future.done():
                    future.set_result("granted")
                else:  # pragma: no cover
                    self.core.withdraw(rid, self.clock())

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()


def stats_dict(core: LimiterCore) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(core.stats())
