"""In-process limiters: :class:`LocalLimiter` (the ``local`` backend of the limiter contract, on the same state
machine as the Ray actor) and :class:`ConcurrencyLimiter` (a minimal synchronous-release cap).

The in-process concurrency limiter with the guarantees verl 0.7.1's ``TokenBucketWorker`` lacked.

* FIFO: waiters are admitted in arrival order, so no caller starves.
* Bounded: a release needs the permit its acquire returned; releasing twice or releasing a foreign permit raises
  instead of silently creating capacity.
* Cancel-safe: a caller cancelled while waiting takes nothing; one cancelled just after being admitted gives its
  permit back exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from uuid import uuid4

from harness.ratelimit.base import AsyncLimiter, LimiterConfig, LimiterError, LimiterStats, Outcome, Ticket
from harness.ratelimit.core import CoreDriver, LimiterCore


@dataclass(frozen=True)
class Permit:
    """Proof of one admission; give it back with :meth:`ConcurrencyLimiter.release`."""

    limiter_id: int
    number: int


_ids = itertools.count(1)


class ConcurrencyLimiter:
    """At most ``limit`` holders at once; FIFO admission; one instance per event loop."""

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise LimiterError(f"limit must be a positive integer, got {limit!r}")
        self.limit = limit
        self._id = next(_ids)
        self._numbers = itertools.count(1)
        self._held: set[int] = set()
        self._waiters: deque[asyncio.Future[Permit]] = deque()
        self.max_held = 0

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def _grant(self) -> Permit:
        permit = Permit(self._id, next(self._numbers))
        self._held.add(permit.number)
        self.max_held = max(self.max_held, len(self._held))
        return permit

    async def acquire(self) -> Permit:
        if len(self._held) < self.limit and not self.waiting:
            return self._grant()
        future: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                # Admitted and cancelled in the same instant: hand the permit on, never keep or double it.
                self.release(future.result())
            raise
        finally:
            if future in self._waiters and future.done():
                self._waiters.remove(future)

    def release(self, permit: Permit) -> None:
        if permit.limiter_id != self._id or permit.number not in self._held:
            raise LimiterError(f"release of a permit this limiter does not hold: {permit}")
        self._held.discard(permit.number)
        while self._waiters and len(self._held) < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(self._grant())

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Permit]:
        permit = await self.acquire()
        try:
            yield permit
        finally:
            self.release(permit)


class LocalLimiter(AsyncLimiter):
    """The ``local`` backend: one process, one event loop; FIFO, bounded, cancel-safe, optional rate and AIMD.

    No leases (a holder cannot die apart from the limiter). Not shared between processes: each process (each
    rollout worker) gets its own cap, which is the documented fallback when no cluster backend is available.
    """

    backend = "local"

    def __init__(self, config: LimiterConfig) -> None:
        super().__init__(config)
        self._core = LimiterCore(config, leases=False, backend="local")
        self._driver = CoreDriver(self._core)
        self._holder = uuid4().hex

    async def acquire(self) -> Ticket:
        rid = uuid4().hex
        result = await self._driver.acquire(rid, self._holder)
        if result != "granted":  # pragma: no cover - only another caller's withdraw can do this
            raise LimiterError(f"acquire of {rid} was withdrawn")
        return Ticket(self.name, rid, self._holder)

    async def release(self, ticket: Ticket) -> None:
        if ticket.limiter != self.name or ticket.holder != self._holder:
            raise LimiterError(f"release of a ticket this limiter does not hold: {ticket}")
        self._driver.release(ticket.request_id)

    async def _report(self, outcome: Outcome) -> None:
        self._driver.report(outcome)

    @property
    def held(self) -> int:
        return self._core.held

    @property
    def waiting(self) -> int:
        return self._core.waiting

    @property
    def max_held(self) -> int:
        return self._core.max_held

    async def stats(self) -> LimiterStats:
        return self._core.stats()

    def journal(self) -> list[tuple[float, str, str, int]]:
        return self._driver.journal()

    async def aclose(self) -> None:
        self._driver.close()
